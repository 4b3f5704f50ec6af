//! The cost of posting alone: each post call (a postlist of WQEs and its doorbell, or the
//! provider's `ibv_post_send` / `ibv_wr_complete`) timed on its own, completions reaped outside
//! the timed region. On model0 the model executes only between timed calls (deferred mode).

use super::ScenarioError;
use crate::backend::{Backend, OpKind};
use crate::clock;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct PostCostParams {
    /// Message size (RDMA WRITE).
    pub size: u32,
    /// WQEs per post call (one doorbell).
    pub postlist: u32,
    /// Inline payload.
    pub inline: bool,
    /// A completion every this many WQEs (1 = every WQE).
    pub cq_mod: u32,
    /// Timed post calls.
    pub iters: u64,
    /// Longest wait for completions while reaping.
    pub stall: Duration,
}

/// Most WQEs kept outstanding.
const TX_DEPTH: u64 = 96;

/// Polls, advancing `completed` to the end of each signalled batch whose completion arrives,
/// until `enough(completed, signals pending)`; a stall of `stall` is an error at operation `index`.
fn reap<B: Backend>(
    b: &mut B,
    signals: &mut VecDeque<u64>,
    completed: &mut u64,
    stall: std::time::Duration,
    index: u64,
    what: &'static str,
    enough: impl Fn(u64, usize) -> bool,
) -> Result<(), ScenarioError> {
    let started = Instant::now();
    while !enough(*completed, signals.len()) {
        let q = b.poll().map_err(be(index))?;
        for _ in 0..q.sends {
            if let Some(upto) = signals.pop_front() {
                *completed = upto;
            }
        }
        if started.elapsed() > stall {
            return Err(ScenarioError::Stalled {
                side: "client",
                index,
                what,
                waited: stall,
            });
        }
    }
    Ok(())
}

/// A backend error at operation `index`.
fn be(index: u64) -> impl Fn(crate::backend::BackendError) -> ScenarioError {
    move |source| ScenarioError::Backend {
        side: "client",
        index,
        source,
    }
}

/// Times `p.iters` post calls of RDMA WRITEs from `b` (its peer only receives); returns the
/// ticks of each call.
pub fn run<B: Backend>(b: &mut B, p: &PostCostParams) -> Result<Vec<u64>, ScenarioError> {
    if p.iters == 0
        || p.postlist == 0
        || p.cq_mod == 0
        || u64::from(p.postlist) > TX_DEPTH / 2
        || u64::from(p.cq_mod) > TX_DEPTH / 2
    {
        return Err(ScenarioError::Invalid(format!(
            "iterations ({}) must be at least 1, postlist ({}) and cq_mod ({}) within 1..={}",
            p.iters,
            p.postlist,
            p.cq_mod,
            TX_DEPTH / 2
        )));
    }
    let mut out = Vec::with_capacity(p.iters as usize);
    let (mut posted, mut completed) = (0u64, 0u64);
    let mut signals: VecDeque<u64> = VecDeque::new();
    for i in 0..p.iters {
        // room for the next call, reaped outside the timed region
        let room = |completed: u64, _: usize| posted - completed + u64::from(p.postlist) <= TX_DEPTH;
        reap(b, &mut signals, &mut completed, p.stall, i, "completions", room)?;
        let end = posted + u64::from(p.postlist);
        let signal = end / u64::from(p.cq_mod) > posted / u64::from(p.cq_mod);
        let t0 = clock::start();
        let r = b.post(OpKind::Write, p.size, p.postlist, p.inline, signal);
        let t1 = clock::stop();
        r.map_err(be(i))?;
        out.push(t1 - t0);
        if signal {
            signals.push_back(end);
        }
        posted = end;
    }
    // drain
    let drained = |completed: u64, pending: usize| completed >= posted || pending == 0;
    reap(
        b,
        &mut signals,
        &mut completed,
        p.stall,
        p.iters,
        "the last completions",
        drained,
    )?;
    Ok(out)
}

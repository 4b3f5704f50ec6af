//! The cost of posting alone, as `cargo bench --bench post_cost` measures it: blocks of post
//! calls (each a postlist of WQEs and its doorbell, or the provider's `ibv_post_send` /
//! `ibv_wr_complete`) timed as a whole with one TSC pair, so the per-WQE figure resolves well
//! below the counter's step and the timer's own cost (taken off every block) is spread over the
//! block. The send queue is emptied between blocks, outside the timed region. On model0 the model
//! executes only between blocks (deferred mode). WRITE, SEND (the peer keeps receives posted)
//! and READ.

use super::ScenarioError;
use crate::backend::{Backend, OpKind};
use crate::clock;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct PostCostParams {
    /// Operation: WRITE, SEND or READ.
    pub op: OpKind,
    /// Message size.
    pub size: u32,
    /// WQEs per post call (one doorbell).
    pub postlist: u32,
    /// Inline payload (WRITE and SEND).
    pub inline: bool,
    /// A completion every this many WQEs (1 = every WQE); the last call of a block is always
    /// signalled, so the block can be reaped.
    pub cq_mod: u32,
    /// Timed blocks.
    pub blocks: u64,
    /// Longest wait for completions while reaping.
    pub stall: Duration,
}

/// WQEs of one timed block (at most): what the send queue holds with room to spare.
pub const BLOCK_WQES: u32 = 96;

/// What [`run`] measured.
#[derive(Debug, Clone, Default)]
pub struct PostCostSamples {
    /// Ticks of each timed block (the timer's own cost not yet taken off).
    pub block_ticks: Vec<u64>,
    /// Post calls per block.
    pub calls_per_block: u32,
    /// WQEs per block.
    pub wqes_per_block: u32,
}

/// Polls with `poll` (how many of the awaited completions one poll saw) until `n` came; a
/// stall of `stall` is an error naming `side`, the operation `index` and `what` was awaited.
fn await_n(
    stall: Duration,
    side: &'static str,
    index: u64,
    what: &'static str,
    n: u32,
    mut poll: impl FnMut() -> Result<u32, ScenarioError>,
) -> Result<(), ScenarioError> {
    let started = Instant::now();
    let mut got = 0u32;
    while got < n {
        got += poll()?;
        if started.elapsed() > stall {
            return Err(ScenarioError::Stalled {
                side,
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

/// Checks `p` and returns (calls per block, WQEs per block).
pub fn shape(p: &PostCostParams) -> Result<(u32, u32), ScenarioError> {
    if p.blocks == 0 || p.postlist == 0 || p.cq_mod == 0 || p.postlist > BLOCK_WQES / 2 || p.cq_mod > BLOCK_WQES / 2 {
        return Err(ScenarioError::Invalid(format!(
            "blocks ({}) must be at least 1, postlist ({}) and cq_mod ({}) within 1..={}",
            p.blocks,
            p.postlist,
            p.cq_mod,
            BLOCK_WQES / 2
        )));
    }
    if p.op.is_atomic() {
        return Err(ScenarioError::Invalid(format!(
            "post-cost runs write, send, read and their immediates, not {}",
            p.op.as_str()
        )));
    }
    if p.inline && p.op == OpKind::Read {
        return Err(ScenarioError::Invalid("a READ has no inline payload".into()));
    }
    let calls = BLOCK_WQES / p.postlist;
    Ok((calls, calls * p.postlist))
}

/// Times `p.blocks` blocks of post calls from `client` (`server` only takes SENDs and keeps
/// its memory registered).
pub fn run<B: Backend>(client: &mut B, server: &mut B, p: &PostCostParams) -> Result<PostCostSamples, ScenarioError> {
    let (calls, wqes) = shape(p)?;
    let mut out = PostCostSamples {
        block_ticks: Vec::with_capacity(p.blocks as usize),
        calls_per_block: calls,
        wqes_per_block: wqes,
    };
    let recv_len = (server.mem().len() - server.rx_offset()).min(u32::MAX as usize) as u32;
    let mut posted = 0u64;
    // which calls of a block are signalled: a completion every cq_mod WQEs, and the last call
    let signal: Vec<bool> = (0..calls)
        .map(|c| {
            let (before, after) = (u64::from(c * p.postlist), u64::from((c + 1) * p.postlist));
            after / u64::from(p.cq_mod) > before / u64::from(p.cq_mod) || c + 1 == calls
        })
        .collect();
    let signalled = signal.iter().filter(|&&s| s).count() as u32;
    // one untimed block first: the path's code and the ring's lines warm
    for blk in 0..=p.blocks {
        if p.op.needs_recv() {
            server.post_recv(recv_len, wqes).map_err(be(posted))?;
        }
        let t0 = clock::start();
        for &s in &signal {
            client.post(p.op, p.size, p.postlist, p.inline, s).map_err(be(posted))?;
        }
        let t1 = clock::stop();
        posted += u64::from(wqes);
        if blk > 0 {
            out.block_ticks.push(t1.wrapping_sub(t0));
        }
        // outside the timed region: the device executes (model0: now), completions reaped
        await_n(p.stall, "client", posted, "the block's completions", signalled, || {
            Ok(client.poll().map_err(be(posted))?.sends)
        })?;
        if p.op.needs_recv() {
            await_n(p.stall, "server", posted, "the block's receives", wqes, || {
                Ok(server.poll().map_err(be(posted))?.recvs)
            })?;
        }
    }
    Ok(out)
}

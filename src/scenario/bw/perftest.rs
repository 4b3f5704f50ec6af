//! The receiving side of perftest's SEND bandwidth test (`ib_send_bw`'s `run_iter_bw_server`),
//! for rdmaprobe as the server of an unmodified `ib_send_bw` client: receives posted on every QP
//! before the last key exchange (perftest's client posts as soon as it has it), `-n` messages
//! taken per QP, a receive posted again for each one taken while the QP's messages are not all
//! covered, and the times perftest's server takes for its report: the first poll that found
//! receives (its `set_on_first_rx_packet`) and the end of the loop. Each message's length is
//! checked: perftest 6.06 does not exchange `-s`.

use super::super::lat::{pin_from_end, recv_len};
use crate::backend::setup::AnyEnd;
use crate::backend::{Backend, BackendError};
use crate::clock;
use crate::scenario::ScenarioError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What the receiving side took.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Received {
    /// Messages taken, over all QPs.
    pub messages: u64,
    /// TSC at the first poll that found receives (perftest's server's `tposted[0]`).
    pub first: u64,
    /// TSC when the last message was taken (its `tcompleted[0]`).
    pub last: u64,
}

fn be(index: u64) -> impl Fn(BackendError) -> ScenarioError {
    move |source| ScenarioError::Backend {
        side: "server",
        index,
        source,
    }
}

/// Posts `min(depth, iters)` receives on each end (before the last key exchange); returns how
/// many on each.
pub fn prime(ends: &mut [AnyEnd], depth: u32, iters: u64) -> Result<Vec<u64>, ScenarioError> {
    fn one<B: Backend>(b: &mut B, n: u32) -> Result<(), ScenarioError> {
        b.post_recv(recv_len(b), n).map_err(be(0))
    }
    let n = u64::from(depth.max(1)).min(iters) as u32;
    for end in ends.iter_mut() {
        match end {
            AnyEnd::Verbs(b) => one(&mut **b, n)?,
            AnyEnd::Model(b) => one(&mut **b, n)?,
            AnyEnd::Mlx5(b) => one(&mut **b, n)?,
        }
    }
    Ok(vec![u64::from(n); ends.len()])
}

/// One QP's state in the loop.
struct Qp<'a, B> {
    b: &'a mut B,
    taken: u64,
    posted: u64,
}

impl<B: Backend> Qp<'_, B> {
    /// Polls once: the receives taken (each of `size` bytes, or an error naming both sizes),
    /// posted again while the QP's `iters` are not all covered.
    fn turn(&mut self, size: u32, iters: u64) -> Result<u32, ScenarioError> {
        let q = self.b.poll().map_err(be(self.taken))?;
        if q.recvs == 0 {
            return Ok(0);
        }
        if q.recv_len != size {
            return Err(ScenarioError::Invalid(format!(
                "the perftest client's SENDs {}..{} on QP {:#x} carried {} B (the last of them), this side's size \
                 is {size}: perftest 6.06 does not exchange -s or -a; give both sides the same",
                self.taken + 1,
                self.taken + u64::from(q.recvs),
                self.b.qpn(),
                q.recv_len
            )));
        }
        self.taken += u64::from(q.recvs);
        let again = u64::from(q.recvs).min(iters.saturating_sub(self.posted)) as u32;
        if again > 0 {
            self.b.post_recv(recv_len(self.b), again).map_err(be(self.taken))?;
            self.posted += u64::from(again);
        }
        Ok(q.recvs)
    }
}

/// Takes `iters` messages of `size` bytes on every end (receives already posted: `posted`,
/// from [`prime`]), pinned as rdmaprobe's server (the last CPU). No progress on any QP for
/// `stall` is an error naming what came (perftest does not exchange `-n`).
pub fn serve(
    ends: &mut [AnyEnd],
    posted: &[u64],
    (size, iters): (u32, u64),
    stall: Duration,
    interrupt: &AtomicBool,
) -> Result<Received, ScenarioError> {
    pin_from_end(0);
    fn run<B: Backend>(
        qps: &mut [Qp<'_, B>],
        (size, iters): (u32, u64),
        stall: Duration,
        interrupt: &AtomicBool,
    ) -> Result<Received, ScenarioError> {
        let mut out = Received::default();
        let mut last_move = Instant::now();
        while qps.iter().any(|q| q.taken < iters) {
            let mut moved = 0;
            for q in qps.iter_mut() {
                moved += q.turn(size, iters)?;
            }
            if moved == 0 {
                if interrupt.load(Ordering::Relaxed) {
                    return Err(ScenarioError::Interrupted);
                }
                if last_move.elapsed() >= stall {
                    let taken: Vec<String> = qps.iter().map(|q| q.taken.to_string()).collect();
                    return Err(ScenarioError::Invalid(format!(
                        "no SEND from the perftest client for {stall:?} after {} of {iters} per QP (-n; per QP: {}): \
                         perftest 6.06 does not exchange -n or -a; give both sides the same (or the client stopped)",
                        qps.iter().map(|q| q.taken).min().unwrap_or(0),
                        taken.join(", ")
                    )));
                }
                continue;
            }
            if out.first == 0 {
                out.first = clock::start();
            }
            last_move = Instant::now();
        }
        out.last = clock::stop();
        out.messages = qps.iter().map(|q| q.taken).sum();
        if out.messages > iters * qps.len() as u64 {
            return Err(ScenarioError::Invalid(format!(
                "the perftest client sent {} messages, this side was given {iters} per QP on {} QP(s): perftest \
                 does not exchange -n; give both sides the same",
                out.messages,
                qps.len()
            )));
        }
        Ok(out)
    }
    macro_rules! go {
        ($v:ident) => {{
            let mut qps = Vec::new();
            for (e, &posted) in ends.iter_mut().zip(posted) {
                match e {
                    AnyEnd::$v(b) => qps.push(Qp {
                        b: &mut **b,
                        taken: 0,
                        posted,
                    }),
                    _ => return Err(ScenarioError::Invalid("the ends differ in backend".into())),
                }
            }
            run(&mut qps, (size, iters), stall, interrupt)
        }};
    }
    match ends.first() {
        None => Err(ScenarioError::Invalid("no QP to receive on".into())),
        Some(AnyEnd::Verbs(_)) => go!(Verbs),
        Some(AnyEnd::Model(_)) => go!(Model),
        Some(AnyEnd::Mlx5(_)) => go!(Mlx5),
    }
}

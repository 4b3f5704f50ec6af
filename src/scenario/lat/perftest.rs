//! The ping-pongs against an unmodified perftest peer, on perftest's own data-path conventions
//! (its `run_iter_lat_write`, `run_iter_lat_send` and `run_iter_lat`):
//! - WRITE (`ib_write_lat`): the SERVER writes first; then each side waits for the peer's WRITE
//!   and answers it. The `i`-th WRITE (from 1) carries `i` as a byte (wrapping at 256, so 0 is
//!   a value too) in its last byte, `size - 1`; the receiver watches that byte of the address
//!   it gave the peer.
//! - SEND (`ib_send_lat`): the CLIENT sends first; each side waits for a receive completion and
//!   answers; receives are posted before the last key exchange (perftest's client sends its
//!   first message right after it) and one is posted again after each one taken.
//! - READ and atomics (`ib_read_lat`, `ib_atomic_lat`): the client posts, each one signalled,
//!   and waits for its completion; the server takes no part (the device answers) and only waits
//!   for the client's closing exchange.
//! - exactly `-n` messages each way, no warm-up.
//!
//! So in a ping-pong the side that goes first (the leader) times its post `i` to the peer's
//! message `i`, the other (the follower) its post `i` to the leader's message `i + 1` (its last
//! message has no answer). The leader does not time its first message: perftest's loop
//! (`run_iter_lat_*`) begins by measuring the CPU's clock (`get_cpu_mhz`, a busy wait), so the
//! answer waits for that, not for a round trip: about 110 ms measured on model0, whether
//! perftest is the WRITE client or the SEND server. Each side times `n - 1` round trips,
//! stamped as rdmaprobe's own ping-pong stamps them: the post call, then the wait.

use super::{await_write, be, reap, recv_len, signalled, Flags, LatParams, LatSamples, Outstanding, Spin};
use super::{client_loop, RECV_DEPTH};
use crate::backend::setup::AnyEnd;
use crate::backend::{Backend, OpKind};
use crate::clock;
use crate::scenario::ScenarioError;
use std::sync::atomic::{AtomicBool, Ordering};

/// The marker of perftest's `i`-th WRITE: `(char)i`.
fn marker(i: u64) -> u8 {
    (i & 0xff) as u8
}

/// Whether this side posts first in perftest's ping-pong of `op`: the WRITE server, the SEND
/// client.
pub fn leads(op: OpKind, server: bool) -> bool {
    server == (op == OpKind::Write)
}

/// How many round trips this side times in perftest's test of `op` with `iters` messages each
/// way (see the module's text).
pub fn timed(op: OpKind, server: bool, iters: u64) -> u64 {
    match op {
        OpKind::Write | OpKind::Send => iters - 1,
        _ if server => 0,
        _ => iters,
    }
}

/// Waits for the peer's `k`-th message: its WRITE's marker at byte `at`, or a receive
/// completion (a receive posted again after it, by the caller, outside the timed region) of
/// `size` bytes and `grh` more (UD: the 40-byte GRH area each receive's length counts): perftest
/// does not exchange -s, so a SEND of another length is the sign that the two sides were given
/// different sizes (an error naming both, not a figure).
#[inline(always)]
fn await_peer<B: Backend>(
    b: &mut B,
    (op, size, grh): (OpKind, u32, u32),
    spin: &Spin<'_>,
    outst: &mut Outstanding,
    (k, at): (u64, usize),
    what: &'static str,
) -> Result<(), ScenarioError> {
    if op == OpKind::Write {
        return await_write(b, spin, outst, k, what, at, marker(k));
    }
    let mut len = 0;
    spin.until(k, what, || {
        let q = b.poll().map_err(be(spin.side, k))?;
        outst.add(q);
        if q.recvs > 0 {
            len = q.recv_len;
        }
        Ok(q.recvs > 0)
    })?;
    if len != size + grh {
        return Err(ScenarioError::Invalid(format!(
            "{what} {k} carried {} B, this side's -s is {size}: perftest does not exchange -s; give both sides the same",
            len.saturating_sub(grh)
        )));
    }
    Ok(())
}

/// Runs this side of perftest's WRITE or SEND ping-pong of `p.iters` messages on `b`,
/// connected to the perftest peer (for WRITE, at the address the peer gave; for SEND, its
/// receives posted: [`prime`]); `grh`: 40 over UD (the GRH area a receive's length counts), else 0.
pub fn pingpong<B: Backend>(
    b: &mut B,
    p: &LatParams,
    (server, grh): (bool, u32),
    interrupt: &AtomicBool,
) -> Result<LatSamples, ScenarioError> {
    if !matches!(p.op, OpKind::Write | OpKind::Send) || p.size == 0 || p.iters < 2 {
        return Err(ScenarioError::Invalid(format!(
            "perftest's ping-pong takes a WRITE or SEND of at least 1 byte and 2 iterations (got {} of {} B, {})",
            p.op.as_str(),
            p.size,
            p.iters
        )));
    }
    let side = if server { "server" } else { "client" };
    let flags = Flags {
        failed: AtomicBool::new(false),
        interrupt,
    };
    let spin = Spin {
        side,
        flags: &flags,
        stall: p.stall,
    };
    let (op, len) = (p.op, p.size as usize);
    let at = b.rx_offset() + len - 1;
    let n = p.iters as usize;
    let mut out = LatSamples::with_capacity(n);
    let (cpu0, wall0) = (clock::thread_cpu_ns(), clock::start());
    let mut outst = Outstanding { n: 0 };
    let peer_msg = match (op, server) {
        (OpKind::Write, true) => "the perftest client's WRITE",
        (OpKind::Write, false) => "the perftest server's WRITE",
        (_, true) => "the perftest client's SEND",
        (_, false) => "the perftest server's SEND",
    };
    let leader = leads(op, server);
    let repost = |b: &mut B, k: u64| match op {
        OpKind::Send => b.post_recv(recv_len(b), 1).map_err(be(side, k)),
        _ => Ok(()),
    };
    if !leader {
        // the leader's first message opens the ping-pong (not timed: nothing of ours preceded it)
        await_peer(b, (op, p.size, grh), &spin, &mut outst, (1, at), peer_msg)?;
        repost(b, 1)?;
    }
    // the leader's first message: its answer waits for perftest's start
    let untimed = u64::from(leader);
    let mut last_t0 = 0u64;
    for i in 1..=p.iters {
        if flags.interrupt.load(Ordering::Relaxed) {
            return Err(ScenarioError::Interrupted);
        }
        if op == OpKind::Write {
            b.mem().store(len - 1, marker(i));
        }
        let signal = signalled(op, i - 1) || i == p.iters;
        let t0 = clock::start();
        b.post(op, p.size, 1, p.inline, signal).map_err(be(side, i))?;
        let t1 = clock::stop();
        b.after_post();
        outst.n += u32::from(signal);
        // the answer to message i: the follower's i, or the leader's i + 1 (the follower's
        // last has none)
        let answer = if leader {
            Some(i)
        } else {
            (i < p.iters).then_some(i + 1)
        };
        if let Some(a) = answer {
            await_peer(b, (op, p.size, grh), &spin, &mut outst, (a, at), peer_msg)?;
            let t2 = clock::stop();
            if i > untimed {
                if i > untimed + 1 {
                    out.period.push(t0.saturating_sub(last_t0));
                }
                out.rtt.push(t2 - t0);
                out.post.push(t1 - t0);
                out.wait.push(t2 - t1);
            }
            repost(b, a)?;
        }
        last_t0 = t0;
        reap(b, &spin, &mut outst, i, i - 1)?;
    }
    spin.until(p.iters + 1, "the last send completions", || {
        outst.add(b.poll().map_err(be(side, p.iters + 1))?);
        Ok(outst.n == 0)
    })?;
    out.cpu_ns = clock::thread_cpu_ns().saturating_sub(cpu0);
    out.wall_ticks = clock::stop().saturating_sub(wall0);
    Ok(out)
}

/// Posts the receives this side keeps for perftest's SEND ping-pong (before the last key
/// exchange: perftest's client sends as soon as it has it).
pub fn prime(end: &mut AnyEnd) -> Result<(), ScenarioError> {
    fn one<B: Backend>(b: &mut B) -> Result<(), ScenarioError> {
        b.post_recv(recv_len(b), RECV_DEPTH).map_err(be("this side", 0))
    }
    match end {
        AnyEnd::Verbs(b) => one(&mut **b),
        AnyEnd::Model(b) => one(&mut **b),
        AnyEnd::Mlx5(b) => one(&mut **b),
    }
}

/// This side of perftest's test of `p.op` on an end of any backend, the thread pinned as
/// rdmaprobe's own client (the first CPU) or server (the last): the WRITE or SEND ping-pong,
/// or as the client of READ and atomics, `p.iters` of them one at a time (perftest's
/// `run_iter_lat`: the same loop as rdmaprobe's own client, without warm-up). The server of
/// READ and atomics has nothing to run: not called for it. `grh`: 40 over UD, else 0.
pub fn side(
    end: &mut AnyEnd,
    (server, grh): (bool, u32),
    p: &LatParams,
    interrupt: &AtomicBool,
) -> Result<LatSamples, ScenarioError> {
    if server {
        super::pin_from_end(0);
    } else {
        super::pin(0);
    }
    fn run<B: Backend>(
        b: &mut B,
        (server, grh): (bool, u32),
        p: &LatParams,
        interrupt: &AtomicBool,
    ) -> Result<LatSamples, ScenarioError> {
        if matches!(p.op, OpKind::Write | OpKind::Send) {
            return pingpong(b, p, (server, grh), interrupt);
        }
        if server {
            return Err(ScenarioError::Invalid(format!(
                "the server of perftest's {} test runs nothing: the device answers",
                p.op.as_str()
            )));
        }
        let flags = Flags {
            failed: AtomicBool::new(false),
            interrupt,
        };
        client_loop(b, p, 0, p.iters, 0, false, &flags)
    }
    match end {
        AnyEnd::Verbs(b) => run(&mut **b, (server, grh), p, interrupt),
        AnyEnd::Model(b) => run(&mut **b, (server, grh), p, interrupt),
        AnyEnd::Mlx5(b) => run(&mut **b, (server, grh), p, interrupt),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_wrap_through_zero_as_perftests_char() {
        assert_eq!(marker(1), 1);
        assert_eq!(marker(255), 255);
        assert_eq!(marker(256), 0);
        assert_eq!(marker(257), 1);
    }

    #[test]
    fn the_write_server_and_the_send_client_lead_and_time_what_they_can() {
        assert!(leads(OpKind::Write, true) && !leads(OpKind::Write, false));
        assert!(leads(OpKind::Send, false) && !leads(OpKind::Send, true));
        assert_eq!(timed(OpKind::Write, true, 100), 99);
        assert_eq!(timed(OpKind::Write, false, 100), 99);
        assert_eq!(timed(OpKind::Send, false, 100), 99);
        assert_eq!(timed(OpKind::Send, true, 100), 99);
        assert_eq!(timed(OpKind::Read, false, 100), 100);
        assert_eq!(timed(OpKind::Read, true, 100), 0);
        assert_eq!(timed(OpKind::FetchAdd, false, 7), 7);
    }
}

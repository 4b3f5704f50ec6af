//! The WRITE ping-pong against an unmodified perftest peer (`ib_write_lat`), on perftest's own
//! data-path conventions (its `run_iter_lat_write`):
//! - the SERVER writes first; then each side waits for the peer's WRITE and answers it;
//! - the `i`-th WRITE (from 1) carries `i` as a byte (wrapping at 256, so 0 is a value too) in
//!   its last byte, `size - 1`; the receiver watches that byte of the address it gave the peer;
//! - exactly `-n` WRITEs each way, no warm-up, no closing exchange.
//!
//! So each side times `n - 1` round trips: the client its post `i` to the server's WRITE
//! `i + 1` (its last WRITE has no answer), the server its post `i` to the client's WRITE `i`
//! from `i = 2` on: the answer to the server's opening WRITE waits for the client to start its
//! loop after the last exchange (perftest prints its header first: about 100 ms measured on
//! model0), which is not a round trip. Each sample is stamped as rdmaprobe's own ping-pong
//! stamps it: the post call, then the wait.

use super::{await_write, be, reap, signalled, Flags, LatParams, LatSamples, Outstanding, Spin};
use crate::backend::{Backend, OpKind};
use crate::clock;
use crate::scenario::ScenarioError;
use std::sync::atomic::{AtomicBool, Ordering};

/// The marker of perftest's `i`-th WRITE: `(char)i`.
fn marker(i: u64) -> u8 {
    (i & 0xff) as u8
}

/// Runs this side of perftest's WRITE ping-pong of `p.iters` WRITEs on `b`, connected to the
/// perftest peer (whose buffer `b` writes into is the address the peer gave); `server`: this
/// side writes first.
pub fn write_pingpong<B: Backend>(
    b: &mut B,
    p: &LatParams,
    server: bool,
    interrupt: &AtomicBool,
) -> Result<LatSamples, ScenarioError> {
    if p.op != OpKind::Write || p.size == 0 || p.iters < 2 {
        return Err(ScenarioError::Invalid(format!(
            "perftest's WRITE ping-pong takes a WRITE of at least 1 byte and 2 iterations (got {} of {} B, {})",
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
    let len = p.size as usize;
    let at = b.rx_offset() + len - 1;
    let n = p.iters as usize;
    let mut out = LatSamples::with_capacity(n);
    let (cpu0, wall0) = (clock::thread_cpu_ns(), clock::start());
    let mut outst = Outstanding { n: 0 };
    let peer_write = if server {
        "the perftest client's WRITE"
    } else {
        "the perftest server's WRITE"
    };
    if !server {
        // the server's first WRITE opens the ping-pong (not timed: nothing of ours preceded it)
        await_write(b, &spin, &mut outst, 1, peer_write, at, marker(1))?;
    }
    let mut last_t0 = 0u64;
    for i in 1..=p.iters {
        if flags.interrupt.load(Ordering::Relaxed) {
            return Err(ScenarioError::Interrupted);
        }
        b.mem().store(len - 1, marker(i));
        let signal = signalled(p.op, i - 1) || i == p.iters;
        let t0 = clock::start();
        b.post(p.op, p.size, 1, p.inline, signal).map_err(be(side, i))?;
        let t1 = clock::stop();
        b.after_post();
        outst.n += u32::from(signal);
        // the answer to WRITE i: the server's WRITE i + 1 (the client's last has none), the
        // client's WRITE i
        let answer = if server {
            Some(i)
        } else {
            (i < p.iters).then_some(i + 1)
        };
        if let Some(a) = answer {
            await_write(b, &spin, &mut outst, i, peer_write, at, marker(a))?;
            let t2 = clock::stop();
            if server && i == 1 {
                // the opening WRITE's answer: the client's start, not a round trip
                last_t0 = t0;
                reap(b, &spin, &mut outst, i, i - 1)?;
                continue;
            }
            if i > 1 + u64::from(server) {
                out.period.push(t0.saturating_sub(last_t0));
            }
            out.rtt.push(t2 - t0);
            out.post.push(t1 - t0);
            out.wait.push(t2 - t1);
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

/// [`write_pingpong`] on an end of any backend, the thread pinned as rdmaprobe's own client
/// (the first CPU) or server (the last).
pub fn write_side(
    end: &mut crate::backend::setup::AnyEnd,
    server: bool,
    p: &LatParams,
    interrupt: &AtomicBool,
) -> Result<LatSamples, ScenarioError> {
    use crate::backend::setup::AnyEnd;
    if server {
        super::pin_from_end(0);
    } else {
        super::pin(0);
    }
    match end {
        AnyEnd::Verbs(b) => write_pingpong(&mut **b, p, server, interrupt),
        AnyEnd::Model(b) => write_pingpong(&mut **b, p, server, interrupt),
        AnyEnd::Mlx5(b) => write_pingpong(&mut **b, p, server, interrupt),
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
}

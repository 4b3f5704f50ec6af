//! Bandwidth and message rate, as perftest's `ib_*_bw` measure them: each thread drives its own
//! QPs (with their own CQs and buffers), keeps up to `tx_depth` operations outstanding per QP,
//! posts `postlist` operations per doorbell and asks for a completion every `cq_mod`. Reported:
//! average bandwidth and message rate over the whole run, the peak and the minimum over sliding
//! windows (a flapping link shows in the minimum).

use super::lat::pin;
use super::ScenarioError;
use crate::backend::{Backend, OpKind};
use crate::clock;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct BwParams {
    /// Operation.
    pub op: OpKind,
    /// Message size.
    pub size: u32,
    /// Messages per QP (and direction).
    pub iters: u64,
    /// Outstanding operations per QP.
    pub tx_depth: u32,
    /// Operations per doorbell.
    pub postlist: u32,
    /// A completion every this many operations.
    pub cq_mod: u32,
    /// Inline payloads.
    pub inline: bool,
    /// Both ends send.
    pub bidirectional: bool,
    /// Longest time without any completion before the run is declared stalled.
    pub stall: Duration,
}

/// What one thread measured.
#[derive(Debug, Clone, Default)]
pub struct ThreadResult {
    /// Messages completed (all its QPs and directions).
    pub messages: u64,
    /// First post (ticks).
    pub start: u64,
    /// Last completion (ticks).
    pub end: u64,
    /// (ticks, messages completed so far) at window boundaries.
    pub windows: Vec<(u64, u64)>,
}

struct Dir {
    posted: u64,
    completed: u64,
    /// Operation counts at which a signalled operation was posted, oldest first.
    signals: VecDeque<u64>,
}

/// Runs one thread's pairs; `side` 0 sends on the first end, and on both with `bidirectional`.
fn drive<B: Backend>(
    pairs: &mut [(B, B)],
    p: &BwParams,
    window: u64,
    intr: &AtomicBool,
) -> Result<ThreadResult, ScenarioError> {
    let dirs_per_pair = if p.bidirectional { 2 } else { 1 };
    let mut dirs: Vec<Dir> = (0..pairs.len() * dirs_per_pair)
        .map(|_| Dir {
            posted: 0,
            completed: 0,
            signals: VecDeque::new(),
        })
        .collect();
    let total = p.iters * dirs.len() as u64;
    let recv_batch = 16u32;
    if p.op == OpKind::Send {
        for (a, b) in pairs.iter_mut() {
            let depth = (p.tx_depth + 2 * recv_batch).min(crate::backend::setup::DEPTH);
            b.post_recv(p.size, depth).map_err(|e| be("receiver", 0, e))?;
            if p.bidirectional {
                a.post_recv(p.size, depth).map_err(|e| be("receiver", 0, e))?;
            }
        }
    }
    let mut pending_recvs = vec![0u32; pairs.len() * 2];
    let mut out = ThreadResult {
        start: clock::start(),
        ..Default::default()
    };
    let mut done = 0u64;
    let mut last_progress = Instant::now();
    let mut next_window = window;
    while done < total {
        for (pi, (a, b)) in pairs.iter_mut().enumerate() {
            // Each end has one CQ for its sends and its receives: poll each end once and give
            // each completion to what it belongs to (the end's own sending direction, or the
            // receives to replenish).
            for side in 0..2 {
                let end: &mut B = if side == 0 { &mut *a } else { &mut *b };
                let sends = side == 0 || p.bidirectional;
                if sends {
                    let d = &mut dirs[pi * dirs_per_pair + side];
                    while d.posted < p.iters
                        && d.posted - d.completed + u64::from(p.postlist.min((p.iters - d.posted) as u32))
                            <= u64::from(p.tx_depth)
                    {
                        let n = p.postlist.min((p.iters - d.posted) as u32);
                        let e = d.posted + u64::from(n);
                        let signal = e / u64::from(p.cq_mod) > d.posted / u64::from(p.cq_mod) || e == p.iters;
                        end.post(p.op, p.size, n, p.inline, signal)
                            .map_err(|x| be("sender", d.posted, x))?;
                        if signal {
                            d.signals.push_back(e);
                        }
                        d.posted = e;
                    }
                }
                let q = end
                    .poll()
                    .map_err(|x| be(if sends { "sender" } else { "receiver" }, done, x))?;
                if sends {
                    let d = &mut dirs[pi * dirs_per_pair + side];
                    for _ in 0..q.sends {
                        if let Some(upto) = d.signals.pop_front() {
                            done += upto - d.completed;
                            d.completed = upto;
                            last_progress = Instant::now();
                        }
                    }
                }
                if p.op == OpKind::Send && q.recvs > 0 {
                    let ri = pi * 2 + side;
                    pending_recvs[ri] += q.recvs;
                    if pending_recvs[ri] >= recv_batch {
                        end.post_recv(p.size, pending_recvs[ri])
                            .map_err(|x| be("receiver", done, x))?;
                        pending_recvs[ri] = 0;
                    }
                }
            }
        }
        if done >= next_window {
            out.windows.push((clock::stop(), done));
            next_window = done + window;
        }
        if last_progress.elapsed() > p.stall {
            return Err(ScenarioError::Stalled {
                side: "sender",
                index: done,
                what: "completions",
                waited: p.stall,
            });
        }
        if intr.load(Ordering::Relaxed) {
            return Err(ScenarioError::Interrupted);
        }
    }
    out.end = clock::stop();
    out.messages = done;
    Ok(out)
}

fn be(side: &'static str, index: u64, source: crate::backend::BackendError) -> ScenarioError {
    ScenarioError::Backend { side, index, source }
}

/// Runs every thread's pairs on its own pinned thread, started together.
pub fn run<B: Backend + Send>(
    threads: &mut [Vec<(B, B)>],
    p: &BwParams,
    intr: &AtomicBool,
) -> Result<Vec<ThreadResult>, ScenarioError> {
    if p.iters == 0 || p.tx_depth == 0 || p.postlist == 0 || p.cq_mod == 0 {
        return Err(ScenarioError::Invalid(
            "iterations, tx depth, postlist and cq_mod must be at least 1".into(),
        ));
    }
    if p.postlist > p.tx_depth || p.cq_mod > p.tx_depth {
        return Err(ScenarioError::Invalid(format!(
            "postlist ({}) and cq_mod ({}) must not exceed the tx depth ({})",
            p.postlist, p.cq_mod, p.tx_depth
        )));
    }
    let window = (p.iters / 50).max(u64::from(p.cq_mod));
    let barrier = Barrier::new(threads.len());
    let failed = AtomicBool::new(false);
    std::thread::scope(|s| {
        let handles: Vec<_> = threads
            .iter_mut()
            .enumerate()
            .map(|(i, pairs)| {
                let (barrier, failed) = (&barrier, &failed);
                s.spawn(move || {
                    pin(i);
                    barrier.wait();
                    let r = drive(pairs, p, window, intr);
                    if r.is_err() {
                        failed.store(true, Ordering::Relaxed);
                    }
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(ScenarioError::PeerFailed { side: "bw thread" })))
            .collect()
    })
}

/// Summary of a bandwidth run.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct BwSummary {
    /// Messages completed in all threads.
    pub messages: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// From the first post to the last completion, seconds.
    pub seconds: f64,
    /// Average message rate, millions per second.
    pub msg_rate_mpps: f64,
    /// Average bandwidth, MiB/s (perftest's MB/sec).
    pub bw_avg_mib_s: f64,
    /// Average bandwidth, Gb/s (10^9 bits).
    pub bw_avg_gbit_s: f64,
    /// Highest bandwidth over a window, MiB/s.
    pub bw_peak_mib_s: f64,
    /// Lowest bandwidth over a window, MiB/s.
    pub bw_min_window_mib_s: f64,
}

/// Aggregates the threads' results (windows: the sum over threads of each thread's rate in its
/// window sequence position).
pub fn summarize(rs: &[ThreadResult], size: u32, hz: f64) -> BwSummary {
    let messages: u64 = rs.iter().map(|r| r.messages).sum();
    let start = rs.iter().map(|r| r.start).min().unwrap_or(0);
    let end = rs.iter().map(|r| r.end).max().unwrap_or(0);
    let seconds = end.saturating_sub(start) as f64 / hz;
    let bytes = messages * u64::from(size);
    let mib = |b: f64, s: f64| if s > 0.0 { b / s / (1024.0 * 1024.0) } else { 0.0 };
    // per-thread window rates, summed across threads position by position
    let per: Vec<Vec<f64>> = rs
        .iter()
        .map(|r| {
            let mut prev = (r.start, 0u64);
            r.windows
                .iter()
                .map(|&(t, m)| {
                    let rate = mib(
                        ((m - prev.1) * u64::from(size)) as f64,
                        t.saturating_sub(prev.0) as f64 / hz,
                    );
                    prev = (t, m);
                    rate
                })
                .collect()
        })
        .collect();
    let n = per.iter().map(|v| v.len()).min().unwrap_or(0);
    let sums: Vec<f64> = (0..n).map(|i| per.iter().map(|v| v[i]).sum()).collect();
    // the first window includes the ramp-up: the minimum is taken over the others
    let steady = if sums.len() > 2 {
        &sums[1..sums.len() - 1]
    } else {
        &sums[..]
    };
    BwSummary {
        messages,
        bytes,
        seconds,
        msg_rate_mpps: if seconds > 0.0 {
            messages as f64 / seconds / 1e6
        } else {
            0.0
        },
        bw_avg_mib_s: mib(bytes as f64, seconds),
        bw_avg_gbit_s: if seconds > 0.0 {
            bytes as f64 * 8.0 / seconds / 1e9
        } else {
            0.0
        },
        bw_peak_mib_s: sums.iter().cloned().fold(0.0, f64::max),
        bw_min_window_mib_s: steady.iter().cloned().fold(f64::INFINITY, f64::min).min(f64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_arithmetic() {
        // one thread: 1000 messages of 1 KiB in 1 s (hz = 1000 ticks/s), windows every 250
        let r = ThreadResult {
            messages: 1000,
            start: 0,
            end: 1000,
            windows: vec![(250, 250), (500, 500), (800, 750), (1000, 1000)],
        };
        let s = summarize(&[r], 1024, 1000.0);
        assert_eq!(s.messages, 1000);
        assert!((s.seconds - 1.0).abs() < 1e-12);
        assert!((s.msg_rate_mpps - 0.001).abs() < 1e-12);
        assert!((s.bw_avg_mib_s - 1000.0 / 1024.0).abs() < 1e-9);
        assert!((s.bw_avg_gbit_s - 1000.0 * 1024.0 * 8.0 / 1e9).abs() < 1e-12);
        // window rates: 250/0.25, 250/0.25, 250/0.3, 250/0.2 messages/s of 1 KiB
        assert!((s.bw_peak_mib_s - 1250.0 / 1024.0).abs() < 1e-9);
        // the minimum skips the first and last window: min(1000, 833.3)
        assert!((s.bw_min_window_mib_s - (250.0 / 0.3) / 1024.0).abs() < 1e-9);
    }
}

//! Bandwidth and message rate, as perftest's `ib_*_bw` measure them: each thread drives its own
//! QPs (with their own CQs and buffers), keeps up to `tx_depth` operations outstanding per QP,
//! posts `postlist` operations per doorbell and asks for a completion every `cq_mod`. Reported:
//! average bandwidth and message rate over the whole run, the peak and the minimum over sliding
//! windows (a flapping link shows in the minimum).

use super::ScenarioError;
use crate::backend::{Backend, OpKind};
use crate::clock;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// What one end does in a run: send `iters` operations (`sends`), take `iters` SENDs
/// (`receives`: post and replenish receives), or both (bidirectional), or neither (the passive
/// side of a one-sided operation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Role {
    /// This end posts the operations.
    pub sends: bool,
    /// This end receives SENDs.
    pub receives: bool,
}

/// The roles of the two ends of a pair (first end, second end) for `p`.
pub fn roles(p: &BwParams) -> (Role, Role) {
    let recv = p.op == OpKind::Send;
    (
        Role {
            sends: true,
            receives: recv && p.bidirectional,
        },
        Role {
            sends: p.bidirectional,
            receives: recv,
        },
    )
}

struct Ctl<'a, B> {
    end: &'a mut B,
    role: Role,
    dir: Dir,
    received: u64,
    pending_recvs: u32,
}

/// Drives the ends of one thread until every sending end completed `p.iters` operations and
/// every receiving end took `p.iters` messages. Each end's CQ (sends and receives) is polled once
/// per turn and each completion given to what it belongs to.
pub fn drive_ends<B: Backend>(
    ends: &mut [(&mut B, Role)],
    p: &BwParams,
    window: u64,
    intr: &AtomicBool,
) -> Result<ThreadResult, ScenarioError> {
    let recv_batch = 16u32;
    let mut ctl: Vec<Ctl<'_, B>> = ends
        .iter_mut()
        .map(|(e, r)| Ctl {
            end: &mut **e,
            role: *r,
            dir: Dir {
                posted: 0,
                completed: 0,
                signals: VecDeque::new(),
            },
            received: 0,
            pending_recvs: 0,
        })
        .collect();
    for c in ctl.iter_mut().filter(|c| c.role.receives) {
        let depth = (p.tx_depth + 2 * recv_batch).min(crate::backend::setup::DEPTH);
        let l = recv_len(&*c.end);
        c.end.post_recv(l, depth).map_err(|e| be("receiver", 0, e))?;
    }
    let total: u64 = ctl.iter().map(|c| u64::from(c.role.sends) * p.iters).sum();
    let mut out = ThreadResult {
        start: clock::start(),
        ..Default::default()
    };
    let mut done = 0u64;
    let mut last_progress = Instant::now();
    let mut next_window = window;
    loop {
        let finished = ctl
            .iter()
            .all(|c| (!c.role.sends || c.dir.completed >= p.iters) && (!c.role.receives || c.received >= p.iters));
        if finished {
            break;
        }
        for c in ctl.iter_mut() {
            if c.role.sends {
                let d = &mut c.dir;
                while d.posted < p.iters
                    && d.posted - d.completed + u64::from(p.postlist.min((p.iters - d.posted) as u32))
                        <= u64::from(p.tx_depth)
                {
                    let n = p.postlist.min((p.iters - d.posted) as u32);
                    let e = d.posted + u64::from(n);
                    let signal = e / u64::from(p.cq_mod) > d.posted / u64::from(p.cq_mod) || e == p.iters;
                    c.end
                        .post(p.op, p.size, n, p.inline, signal)
                        .map_err(|x| be("sender", d.posted, x))?;
                    if signal {
                        d.signals.push_back(e);
                    }
                    d.posted = e;
                }
            }
            let q = c
                .end
                .poll()
                .map_err(|x| be(if c.role.sends { "sender" } else { "receiver" }, done, x))?;
            if c.role.sends {
                for _ in 0..q.sends {
                    if let Some(upto) = c.dir.signals.pop_front() {
                        done += upto - c.dir.completed;
                        c.dir.completed = upto;
                        last_progress = Instant::now();
                    }
                }
            }
            if c.role.receives && q.recvs > 0 {
                c.received += u64::from(q.recvs);
                last_progress = Instant::now();
                c.pending_recvs += q.recvs;
                let still = p.iters.saturating_sub(c.received);
                if c.pending_recvs >= recv_batch && still > 0 {
                    let l = recv_len(&*c.end);
                    c.end
                        .post_recv(l, c.pending_recvs)
                        .map_err(|x| be("receiver", done, x))?;
                    c.pending_recvs = 0;
                }
            }
        }
        if total > 0 && done >= next_window {
            out.windows.push((clock::stop(), done));
            next_window = done + window;
        }
        if last_progress.elapsed() > p.stall {
            return Err(ScenarioError::Stalled {
                side: "bw",
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
    out.messages = if total > 0 {
        done
    } else {
        ctl.iter().map(|c| c.received).sum()
    };
    Ok(out)
}

/// Drives one thread's in-process pairs.
fn drive<B: Backend>(
    pairs: &mut [(B, B)],
    p: &BwParams,
    window: u64,
    intr: &AtomicBool,
) -> Result<ThreadResult, ScenarioError> {
    let (ra, rb) = roles(p);
    let mut ends: Vec<(&mut B, Role)> = Vec::new();
    for (a, b) in pairs.iter_mut() {
        ends.push((a, ra));
        ends.push((b, rb));
    }
    drive_ends(&mut ends, p, window, intr)
}

/// Validates `p` and returns the window (messages) for peak and minimum bandwidth.
pub fn check(p: &BwParams) -> Result<u64, ScenarioError> {
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
    Ok((p.iters / 50).max(u64::from(p.cq_mod)))
}

/// Receives cover the whole incoming half of the buffer, so they fit every message size (the
/// sizes of a run change while receives posted for earlier ones are still outstanding).
fn recv_len<B: Backend>(b: &B) -> u32 {
    (b.mem().len() - b.rx_offset()).min(u32::MAX as usize) as u32
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
    let window = check(p)?;
    let mut out: Vec<Option<Result<ThreadResult, ScenarioError>>> = threads.iter().map(|_| None).collect();
    let jobs = threads
        .iter_mut()
        .zip(out.iter_mut())
        .enumerate()
        .map(|(i, (pairs, slot))| {
            // the workers start together (a spin barrier in `workers::run`)
            crate::workers::Placed {
                cpu: crate::workers::cpu_from_start(i),
                job: Box::new(move || {
                    *slot = Some(drive(pairs, p, window, intr));
                }),
            }
        })
        .collect();
    crate::workers::run(jobs, p.stall).map_err(|e| ScenarioError::Invalid(e.to_string()))?;
    out.into_iter()
        .map(|r| r.unwrap_or(Err(ScenarioError::PeerFailed { side: "bw thread" })))
        .collect()
}

/// Summary of a bandwidth run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
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
    /// Every window's bandwidth (summed over threads), MiB/s: the samples `compare` resamples.
    #[serde(default)]
    pub window_mib_s: Vec<f64>,
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
        window_mib_s: sums.clone(),
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

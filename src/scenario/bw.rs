//! Bandwidth and message rate, as perftest's `ib_*_bw` measure them: each thread drives its own
//! QPs (with their own CQs and buffers), keeps up to `tx_depth` operations outstanding per QP,
//! posts `postlist` operations per doorbell and asks for a completion every `cq_mod`. Reported:
//! average bandwidth and message rate over the whole run; the peak as perftest defines it (the
//! shortest time per message over any span from a post to a later completion,
//! `perftest_parameters.c`); and the best and the worst of fixed-length time windows that
//! partition the run (a flapping link shows in the worst). The windows are one grid shared by the
//! run's threads; the last, partial window is merged into the one before it when shorter than
//! half a window, so every window lasts at least half a window and the average is their
//! duration-weighted mean: the worst window never exceeds the average.

use super::ScenarioError;
use crate::backend::{Backend, OpKind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

mod drive;
pub mod perftest;

pub use drive::drive_ends;

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
    /// Receives kept posted on a receiving QP of a SEND run (perftest's -r); `None`: the sends
    /// in flight and two batches of reposts ([`recv_depth`]). At most the queue's depth.
    pub rx_depth: Option<u32>,
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
    /// Length of the bandwidth windows.
    pub window: Duration,
    /// In-process runs shorter than this are repeated with more iterations, sized by the first
    /// (zero: no minimum).
    pub min_duration: Duration,
    /// No perftest peak (perftest's -N): the post and completion times are not traced.
    pub no_peak: bool,
    /// An unreliable transport (UC): a message the receiver could not take is dropped, so the
    /// receivers take what arrives until the senders are done and nothing more comes.
    pub unreliable: bool,
}

/// The receives a receiving QP keeps posted: `rx_depth`, or `tx_depth` and two batches of
/// reposts; at least 1, at most the queue's depth.
pub fn recv_depth(rx_depth: Option<u32>, tx_depth: u32) -> u32 {
    rx_depth
        .unwrap_or(tx_depth.saturating_add(2 * drive::RECV_BATCH))
        .clamp(1, crate::backend::setup::DEPTH)
}

/// The receive depth of `p` when -r gave one (a run of SENDs or immediates): what a result
/// records, so `compare` keeps such a run apart from one at the default depth.
pub fn rx_depth_given(p: &BwParams) -> Option<u32> {
    p.rx_depth
        .filter(|_| p.op.needs_recv())
        .map(|r| recv_depth(Some(r), p.tx_depth))
}

/// The time grid of a run's windows: its origin (the first thread's first post) and the window
/// length, in ticks. Shared by the run's threads.
#[derive(Debug)]
pub struct Grid {
    origin: std::sync::atomic::AtomicU64,
    /// Window length, ticks.
    pub window_ticks: u64,
}

impl Grid {
    /// A grid of windows of `window_ticks` (at least 1), origin set by the first thread to start.
    pub fn new(window_ticks: u64) -> Self {
        Grid {
            origin: std::sync::atomic::AtomicU64::new(0),
            window_ticks: window_ticks.max(1),
        }
    }

    /// The origin: `now` when the caller is the first, else the first caller's.
    fn origin(&self, now: u64) -> u64 {
        match self
            .origin
            .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => now,
            Err(o) => o,
        }
    }
}

/// Most post calls traced for perftest's peak (a longer run reports none, as perftest's `-N`).
pub const MAX_TRACE: usize = 4_000_000;

/// Post and completion times of one sending end, for perftest's peak: (ticks before the post
/// call, messages posted before it) and (ticks at the poll that saw a completion, messages
/// completed up to it).
#[derive(Debug, Clone, Default)]
pub struct PeakTrace {
    /// One per post call.
    pub posts: Vec<(u64, u64)>,
    /// One per signalled completion.
    pub completions: Vec<(u64, u64)>,
}

/// What one thread measured.
#[derive(Debug, Clone, Default)]
pub struct ThreadResult {
    /// Messages completed (all its QPs and directions).
    pub messages: u64,
    /// Sending ends (QPs and directions that complete sends) in this thread.
    pub streams: u64,
    /// First post (ticks).
    pub start: u64,
    /// Last completion (ticks).
    pub end: u64,
    /// The grid's origin and window length (ticks).
    pub grid: (u64, u64),
    /// Messages completed so far at each grid boundary the thread passed (origin + k windows,
    /// k = 1, 2, ...).
    pub windows: Vec<u64>,
    /// The first sending end's post and completion times (when asked for: a run with one
    /// sending end).
    pub peak_trace: Option<PeakTrace>,
    /// The traced end made more than [`MAX_TRACE`] post calls: no perftest peak.
    pub peak_overflowed: bool,
    /// Messages the receiving ends took (SEND and its immediates; 0 otherwise).
    pub received: u64,
    /// -e: the times the thread blocked until a completion event came (`None`: it polled).
    pub event_waits: Option<u64>,
    /// The CPU time the thread used from its first post to its last completion, ns.
    pub cpu_ns: u64,
    /// The steal time of the run's CPUs (all of them, the same in every thread's result) from
    /// just before its threads started to just after they ended, ns ([`crate::workers::steal_ns`]).
    pub steal_ns: Option<u64>,
    /// The longest time between two turns of the thread's loop (ticks) and the tick it began
    /// at: a thread the kernel or the hypervisor took off its CPU, or a call that blocked.
    pub longest_turn: (u64, u64),
    /// The turns of the loop that passed two or more grid boundaries (the clock readings that
    /// end the turn before and this one): the thread counts its completions at each turn's
    /// end, so a window whose two boundaries fall within one such turn gets none of them. Not
    /// recorded with -e (a turn there holds a wait for an event).
    pub turns_over_a_window: Vec<(u64, u64)>,
    /// More such turns than were kept ([`Self::turns_over_a_window`] is then a prefix).
    pub long_turns_overflowed: bool,
    /// The last turn (as in [`Self::turns_over_a_window`]): the final counts are its.
    pub last_turn: (u64, u64),
    /// The times the kernel took the thread off its CPU during the run (involuntary context
    /// switches; `None`: not readable).
    pub involuntary_switches: Option<u64>,
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
    let recv = p.op.needs_recv();
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

/// Drives one thread's in-process pairs.
fn drive<B: Backend>(
    pairs: &mut [(B, B)],
    p: &BwParams,
    grid: &Grid,
    trace_peak: bool,
    intr: &AtomicBool,
) -> Result<ThreadResult, ScenarioError> {
    let (ra, rb) = roles(p);
    let mut ends: Vec<(&mut B, Role)> = Vec::new();
    for (a, b) in pairs.iter_mut() {
        ends.push((a, ra));
        ends.push((b, rb));
    }
    drive_ends(&mut ends, p, grid, trace_peak, intr)
}

/// Validates `p`.
pub fn check(p: &BwParams) -> Result<(), ScenarioError> {
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
    if p.window.is_zero() {
        return Err(ScenarioError::Invalid(
            "the bandwidth window must be longer than 0".into(),
        ));
    }
    Ok(())
}

/// Runs every thread's pairs on its own pinned thread, started together.
pub fn run<B: Backend + Send>(
    threads: &mut [Vec<(B, B)>],
    p: &BwParams,
    grid: &Grid,
    intr: &AtomicBool,
) -> Result<Vec<ThreadResult>, ScenarioError> {
    check(p)?;
    // perftest's peak is defined for one stream of posts and completions
    let trace_peak = threads.len() == 1 && threads[0].len() == 1 && !p.bidirectional && !p.no_peak;
    let mut out: Vec<Option<Result<ThreadResult, ScenarioError>>> = threads.iter().map(|_| None).collect();
    let ids = crate::workers::slot_ids(threads.len(), false);
    let jobs = threads
        .iter_mut()
        .zip(out.iter_mut())
        .enumerate()
        .map(|(i, (pairs, slot))| {
            // the workers start together (a spin barrier in `workers::run`)
            crate::workers::Placed {
                cpu: crate::workers::cpu_from_start(i),
                job: Box::new(move || {
                    *slot = Some(drive(pairs, p, grid, trace_peak, intr));
                }),
            }
        })
        .collect();
    let steal = crate::workers::run_with_steal(jobs, p.stall, &ids)?;
    out.into_iter()
        .map(|r| r.unwrap_or(Err(ScenarioError::PeerFailed { side: "bw thread" })))
        .map(|r| r.map(|t| ThreadResult { steal_ns: steal, ..t }))
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
    /// Peak bandwidth as perftest computes it: the message size over the shortest time per
    /// message of any span from a post call to a later completion, MiB/s. `None` where perftest's
    /// definition does not apply (several QPs, threads or directions).
    pub bw_peak_perftest_mib_s: Option<f64>,
    /// Why there is no perftest peak where one was traced or could have been: a run longer than
    /// [`MAX_TRACE`] post calls, or several sending ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bw_peak_perftest_missing: Option<String>,
    /// The best window, MiB/s.
    pub bw_peak_window_mib_s: f64,
    /// The worst window, MiB/s (never above the average).
    pub bw_min_window_mib_s: f64,
    /// Length of a window, ms (the last window may be up to 1.5 times as long): the requested
    /// length, or a whole multiple of it long enough for several completions per window.
    pub window_ms: f64,
    /// The step a window's bandwidth moves in, MiB/s: one completion's messages (`cq_mod` of
    /// them) over a window's length. A whole window's figure is a whole number of such steps (the
    /// last, longer window's are finer); the table prints the window columns to this resolution.
    #[serde(default)]
    pub window_step_mib_s: f64,
    /// The window length asked for, ms.
    #[serde(default)]
    pub window_requested_ms: f64,
    /// Every window's bandwidth (all threads together), MiB/s, in time order: `compare`'s samples.
    pub window_mib_s: Vec<f64>,
    /// Messages the receivers took (SEND: equal to `messages` on RC; fewer on UC when the
    /// receivers dropped some); absent for one-sided operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub messages_received: Option<u64>,
    /// -e: the times the threads blocked until a completion event came (a run that never had
    /// to wait says 0); absent when they polled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_waits: Option<u64>,
    /// This side's measuring threads' CPU time over their run, percent of the run's length
    /// summed over the threads (100: each was on a CPU throughout, as a polling thread should
    /// be; less: descheduled, or blocked for events); perftest's --cpu_util. In one process a
    /// thread drives both ends of its QPs, so the figure is both sides'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_pct: Option<f64>,
    /// The time the hypervisor ran something else on the run's CPUs while the run went on
    /// (`/proc/stat`'s steal, 10 ms ticks, from just before the threads started to just after
    /// they ended), ms: a window without completions in a run with steal may be the host's, not
    /// the device's. 0 on a machine that is not a VM; absent where the kernel does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal_ms: Option<f64>,
    /// The longest time one of this side's measuring threads went between two turns of its
    /// loop (each turn posts, polls and reads the clock), ms, and when it began, ms from the
    /// run's start: a window without completions falls within such a gap when the thread was
    /// off its CPU (or blocked for an event, with -e).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_turn_ms: Option<f64>,
    /// When [`Self::longest_turn_ms`] began, ms from the run's start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_turn_at_ms: Option<f64>,
    /// The times the kernel took this side's measuring threads off their CPUs during the run
    /// (involuntary context switches, summed over the threads; `getrusage`'s `ru_nivcsw`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub involuntary_switches: Option<u64>,
    /// Windows in which nothing completed.
    #[serde(default)]
    pub empty_windows: u64,
    /// Of those, the windows within one turn of every measuring thread's loop (a thread counts
    /// its completions at each turn's end, so such a window shows none whatever the device did:
    /// the thread was off its CPU, in a call that blocked, or, on model0, in the model's own
    /// execution); 0 with -e. A lower bound when more long turns came than were kept.
    #[serde(default)]
    pub empty_windows_within_a_turn: u64,
    /// A thread had more long turns than it kept: `empty_windows_within_a_turn` is a lower bound.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub long_turns_overflowed: bool,
}

/// The threads' CPU time over their runs, percent of the runs' length (`None`: no such thread).
fn cpu_pct<'a>(rs: impl Iterator<Item = &'a ThreadResult>, hz: f64) -> Option<f64> {
    let (cpu, wall) = rs.fold((0.0, 0.0), |(c, w), r| {
        (c + r.cpu_ns as f64, w + r.end.saturating_sub(r.start) as f64 / hz * 1e9)
    });
    (wall > 0.0).then(|| 100.0 * cpu / wall)
}

/// perftest's peak message rate (messages per tick) of one stream: the largest
/// (messages between) / (time between) over every post call `i` and later completion `j`
/// (messages posted from call `i` up to those completed at `j`), exactly as
/// `perftest_parameters.c` searches it, in O((posts + completions) log posts): the best post
/// for a completion lies on the lower convex hull of the (time, messages posted) points, where
/// the slope to the completion point is unimodal.
pub fn perftest_peak_rate(t: &PeakTrace) -> Option<f64> {
    // lower hull of post points (x = time, y = messages posted before), x strictly increasing
    let mut hull: Vec<(i128, i128)> = Vec::new();
    let cross =
        |o: (i128, i128), a: (i128, i128), b: (i128, i128)| (a.0 - o.0) * (b.1 - o.1) - (a.1 - o.1) * (b.0 - o.0);
    let mut next_post = 0usize;
    let mut best: Option<(i128, i128)> = None; // (messages, ticks)
    for &(ct, upto) in &t.completions {
        let q = (i128::from(ct), i128::from(upto));
        // posts whose first message is covered by this completion and that came before it
        while let Some(&(pt, first)) = t.posts.get(next_post) {
            if first >= upto || pt >= ct {
                break;
            }
            let a = (i128::from(pt), i128::from(first));
            if hull.last().is_some_and(|l| l.0 == a.0) {
                // same tick: the earlier post (fewer messages before it) is the lower point
            } else {
                while hull.len() >= 2 && cross(hull[hull.len() - 2], hull[hull.len() - 1], a) <= 0 {
                    hull.pop();
                }
                hull.push(a);
            }
            next_post += 1;
        }
        if hull.is_empty() {
            continue;
        }
        // the tangent from q: the first hull vertex whose next edge is at least as steep as the
        // line from the vertex to q
        let steeper = |k: usize| -> bool {
            let (a, b) = (hull[k], hull[k + 1]);
            // slope(a, b) >= slope(a, q)
            (b.1 - a.1) * (q.0 - a.0) >= (q.1 - a.1) * (b.0 - a.0)
        };
        let (mut lo, mut hi) = (0usize, hull.len() - 1);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if steeper(mid) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let a = hull[lo];
        let (n, dt) = (q.1 - a.1, q.0 - a.0);
        if n > 0 && dt > 0 && best.is_none_or(|(bn, bt)| n * bt > bn * dt) {
            best = Some((n, dt));
        }
    }
    best.map(|(n, dt)| n as f64 / dt as f64)
}

/// perftest's peak of a run (MiB/s; one thread with one sending end), or why there is none.
fn perftest_peak(rs: &[ThreadResult], size: u32, hz: f64) -> (Option<f64>, Option<String>) {
    let peak = match rs {
        [r] => r
            .peak_trace
            .as_ref()
            .and_then(perftest_peak_rate)
            .map(|per_tick| per_tick * hz * f64::from(size) / (1024.0 * 1024.0)),
        _ => None,
    };
    let missing = match rs {
        [r] if r.peak_overflowed => Some(format!(
            "not traced past {MAX_TRACE} post calls (16 B each): a shorter run (-n, -D) has it"
        )),
        [r] if r.streams <= 1 => None,
        _ => Some("several sending QPs, threads or directions: perftest's peak is one QP's".into()),
    };
    (peak, missing)
}

/// The empty windows of a run (its window boundaries after the origin, `bounds`, and the
/// cumulative messages at each, `cum`; the windows `m` grid windows long from `origin`), and how
/// many of them lie within one turn of every thread's loop: for each thread, both the counts
/// that bound the window are those of one turn's end (0 with -e).
fn empty_windows(rs: &[ThreadResult], (origin, m): (u64, u64), bounds: &[u64], cum: &[u64]) -> (u64, u64) {
    let events = rs.iter().any(|r| r.event_waits.is_some());
    let last_window = bounds.len().saturating_sub(1);
    let (mut empty, mut within) = (0u64, 0u64);
    let (mut prev_t, mut prev_m) = (origin, 0u64);
    for (j, (&t, &c)) in bounds.iter().zip(cum).enumerate() {
        if c == prev_m {
            empty += 1;
            // the thread's count at t: its own at grid boundary (j + 1) m, or its final one
            let is_final =
                |r: &ThreadResult| j == last_window || r.windows.get(((j as u64 + 1) * m - 1) as usize).is_none();
            let inside = |r: &ThreadResult| {
                if is_final(r) {
                    r.last_turn.0 < prev_t
                } else {
                    r.turns_over_a_window.iter().any(|&(a, b)| a < prev_t && b >= t)
                }
            };
            within += u64::from(!events && !rs.is_empty() && rs.iter().all(inside));
        }
        (prev_t, prev_m) = (t, c);
    }
    (empty, within)
}

/// Fewest completion periods (`cq_mod` messages) a bandwidth window holds on average: a window's
/// figure moves in steps of one completion, 1/16 of it (6 %) at this many.
pub const MIN_COMPLETIONS: f64 = 16.0;

/// Aggregates the threads' results: totals, perftest's peak (one stream only), and the windows
/// of the shared grid, each window's messages summed over the threads.
pub fn summarize(rs: &[ThreadResult], size: u32, cq_mod: u32, hz: f64) -> BwSummary {
    let messages: u64 = rs.iter().map(|r| r.messages).sum();
    // the run starts at the grid's origin (the first thread's first post)
    let start = rs
        .first()
        .map(|r| r.grid.0)
        .unwrap_or_else(|| rs.iter().map(|r| r.start).min().unwrap_or(0));
    let end = rs.iter().map(|r| r.end).max().unwrap_or(0);
    let seconds = end.saturating_sub(start) as f64 / hz;
    let bytes = messages * u64::from(size);
    let mib = |b: f64, s: f64| if s > 0.0 { b / s / (1024.0 * 1024.0) } else { 0.0 };
    let (origin, base) = rs.first().map(|r| r.grid).unwrap_or((start, 1));
    let base = base.max(1);
    let total = end.saturating_sub(origin);
    // Completions arrive every `cq_mod` messages of a QP: a window holding only a few of them
    // measures how completions fall, not bandwidth (0 in most windows, one huge one). Windows are
    // widened to whole multiples `m` of the grid's until they hold at least `MIN_COMPLETIONS`
    // completion periods of every sending QP on average (many QPs complete in bursts, a sweep
    // over them at a time); the result says the length used. A run too short for that is one
    // window: best and worst are then its average.
    let streams = rs.iter().map(|r| r.streams).sum::<u64>().max(1) as f64;
    let per_base = messages as f64 * base as f64 / total.max(1) as f64;
    let m = ((MIN_COMPLETIONS * f64::from(cq_mod.max(1)) * streams) / per_base.max(1e-9))
        .ceil()
        .max(1.0);
    let m = if m.is_finite() {
        (m as u64).min(total / base + 1).max(1)
    } else {
        1
    };
    let w = base * m;
    // boundaries: origin + k w for the whole windows before the run's end; the rest of the run
    // is the last window, merged into the one before when shorter than half a window
    let whole = total / w;
    let rest = total - whole * w;
    let n_bounds = if whole >= 1 && rest < w / 2 { whole - 1 } else { whole } as usize;
    // cumulative messages of the run at each boundary (the grid's boundary k m), then at the end
    let mut cum: Vec<u64> = (1..=n_bounds as u64)
        .map(|k| {
            let i = (k * m - 1) as usize;
            rs.iter().map(|r| r.windows.get(i).copied().unwrap_or(r.messages)).sum()
        })
        .collect();
    cum.push(messages);
    let mut bounds: Vec<u64> = (1..=n_bounds as u64).map(|k| origin + k * w).collect();
    bounds.push(end.max(origin));
    let mut rates = Vec::with_capacity(cum.len());
    let (mut prev_t, mut prev_m) = (origin, 0u64);
    let (empty, within) = empty_windows(rs, (origin, m), &bounds, &cum);
    for (&t, &m) in bounds.iter().zip(&cum) {
        rates.push(mib(
            (m.saturating_sub(prev_m) * u64::from(size)) as f64,
            t.saturating_sub(prev_t) as f64 / hz,
        ));
        (prev_t, prev_m) = (t, m);
    }
    let (peak, peak_missing) = perftest_peak(rs, size, hz);
    let received: u64 = rs.iter().map(|r| r.received).sum();
    let event_waits = rs.iter().filter_map(|r| r.event_waits).reduce(|a, b| a + b);
    let longest = rs.iter().map(|r| r.longest_turn).max_by_key(|&(len, _)| len);
    let ms = |t: u64| t as f64 / hz * 1e3;
    BwSummary {
        longest_turn_ms: longest.map(|(len, _)| ms(len)),
        longest_turn_at_ms: longest.map(|(_, at)| ms(at.saturating_sub(start))),
        involuntary_switches: rs.iter().map(|r| r.involuntary_switches).sum(),
        empty_windows: empty,
        empty_windows_within_a_turn: within,
        long_turns_overflowed: rs.iter().any(|r| r.long_turns_overflowed),
        cpu_pct: cpu_pct(rs.iter(), hz),
        steal_ms: rs.iter().filter_map(|r| r.steal_ns).max().map(|ns| ns as f64 / 1e6),
        messages_received: (received > 0).then_some(received),
        event_waits,
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
        bw_peak_perftest_mib_s: peak,
        bw_peak_perftest_missing: peak_missing,
        bw_peak_window_mib_s: rates.iter().cloned().fold(0.0, f64::max),
        bw_min_window_mib_s: rates.iter().cloned().fold(f64::INFINITY, f64::min).min(f64::MAX),
        window_ms: w as f64 / hz * 1e3,
        window_step_mib_s: mib(f64::from(cq_mod.max(1)) * f64::from(size), w as f64 / hz),
        window_requested_ms: base as f64 / hz * 1e3,
        window_mib_s: rates,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(messages: u64, start: u64, end: u64, w: u64, windows: Vec<u64>) -> ThreadResult {
        ThreadResult {
            messages,
            streams: 1,
            start,
            end,
            grid: (start, w),
            windows,
            peak_trace: None,
            peak_overflowed: false,
            received: 0,
            event_waits: None,
            cpu_ns: 0,
            steal_ns: None,
            longest_turn: (0, start),
            turns_over_a_window: Vec::new(),
            long_turns_overflowed: false,
            last_turn: (end.saturating_sub(1), end),
            involuntary_switches: None,
        }
    }

    #[test]
    fn a_runs_steal_is_in_its_summary_in_ms() {
        let r = |steal| ThreadResult {
            steal_ns: steal,
            ..thread(1000, 0, 1000, 250, vec![250, 500, 750])
        };
        assert_eq!(summarize(&[r(None)], 1024, 1, 1000.0).steal_ms, None);
        // every thread carries the run's one figure (its CPUs' steal): not summed
        let s = summarize(&[r(Some(30_000_000)), r(Some(30_000_000))], 1024, 1, 1000.0);
        assert_eq!(s.steal_ms, Some(30.0));
        assert!(serde_json::to_value(&s).unwrap()["steal_ms"] == 30.0);
    }

    #[test]
    fn the_longest_turn_and_the_switches_are_in_the_summary() {
        // hz 1000: a tick is 1 ms; the run starts at 100
        let r = |turn, sw| ThreadResult {
            longest_turn: turn,
            involuntary_switches: sw,
            ..thread(1000, 100, 1100, 250, vec![250, 500, 750])
        };
        let s = summarize(&[r((3, 400), Some(2)), r((7, 900), Some(5))], 1024, 1, 1000.0);
        assert_eq!((s.longest_turn_ms, s.longest_turn_at_ms), (Some(7.0), Some(800.0)));
        assert_eq!(s.involuntary_switches, Some(7));
        // one thread that could not read its switches: no sum
        let s = summarize(&[r((3, 400), Some(2)), r((1, 900), None)], 1024, 1, 1000.0);
        assert_eq!((s.longest_turn_ms, s.involuntary_switches), (Some(3.0), None));
    }

    #[test]
    fn an_empty_window_is_within_a_turn_only_when_every_threads_counts_come_from_one_turn() {
        // 1000 ticks in windows of 250; nothing completes in [250, 500)
        let r = |turns: Vec<(u64, u64)>| ThreadResult {
            turns_over_a_window: turns,
            ..thread(1000, 0, 1000, 250, vec![250, 250, 600])
        };
        let s = summarize(&[r(vec![])], 1024, 1, 1000.0);
        assert_eq!((s.empty_windows, s.empty_windows_within_a_turn), (1, 0));
        // one turn from before the window to after it: both counts from its end
        let s = summarize(&[r(vec![(240, 510)])], 1024, 1, 1000.0);
        assert_eq!((s.empty_windows, s.empty_windows_within_a_turn), (1, 1));
        // a turn ending at the window's start took that count itself; one thread's turn only
        assert_eq!(
            summarize(&[r(vec![(250, 510)])], 1024, 1, 1000.0).empty_windows_within_a_turn,
            0
        );
        assert_eq!(
            summarize(&[r(vec![(260, 510)])], 1024, 1, 1000.0).empty_windows_within_a_turn,
            0
        );
        let s = summarize(&[r(vec![(240, 510)]), r(vec![])], 1024, 1, 1000.0);
        assert_eq!(s.empty_windows_within_a_turn, 0);
        // -e: a turn holds a wait for an event: never this side's
        let e = ThreadResult {
            event_waits: Some(3),
            ..r(vec![(240, 510)])
        };
        assert_eq!(summarize(&[e], 1024, 1, 1000.0).empty_windows_within_a_turn, 0);
    }

    #[test]
    fn the_last_window_and_a_finished_thread_take_their_final_counts_from_the_last_turn() {
        // nothing completes after 600: the last window [750, 1000] is empty
        let r = |last: (u64, u64), end: u64| ThreadResult {
            last_turn: last,
            ..thread(600, 0, end, 250, vec![250, 500, 600])
        };
        // the last turn began before the window: its counts are that turn's end
        let s = summarize(&[r((700, 1000), 1000)], 1024, 1, 1000.0);
        assert_eq!((s.empty_windows, s.empty_windows_within_a_turn), (1, 1));
        // it began in the window: the thread turned there and found nothing
        assert_eq!(
            summarize(&[r((800, 1000), 1000)], 1024, 1, 1000.0).empty_windows_within_a_turn,
            0
        );
        // a thread that finished at 700 (no count past its third boundary) beside one whose
        // turn covers the window [750, 1000)... of a longer run: both counts of each are one turn's
        let long = |turns| ThreadResult {
            turns_over_a_window: turns,
            ..thread(1000, 0, 1250, 250, vec![250, 500, 700, 700])
        };
        let done = ThreadResult {
            last_turn: (690, 700),
            ..thread(300, 0, 700, 250, vec![100, 200])
        };
        let s = summarize(&[long(vec![(740, 1010)]), done.clone()], 1024, 1, 1000.0);
        assert_eq!((s.empty_windows, s.empty_windows_within_a_turn), (1, 1));
        let s = summarize(&[long(vec![]), done], 1024, 1, 1000.0);
        assert_eq!((s.empty_windows, s.empty_windows_within_a_turn), (1, 0));
    }

    #[test]
    fn summary_arithmetic() {
        // one thread: 1000 messages of 1 KiB in 1 s (hz = 1000 ticks/s), windows of 250 ticks;
        // cumulative 250, 500, 750 at the boundaries
        let r = thread(1000, 0, 1000, 250, vec![250, 500, 750]);
        let s = summarize(&[r], 1024, 1, 1000.0);
        assert_eq!(s.messages, 1000);
        assert!((s.seconds - 1.0).abs() < 1e-12);
        assert!((s.msg_rate_mpps - 0.001).abs() < 1e-12);
        assert!((s.bw_avg_mib_s - 1000.0 / 1024.0).abs() < 1e-9);
        assert!((s.bw_avg_gbit_s - 1000.0 * 1024.0 * 8.0 / 1e9).abs() < 1e-12);
        assert_eq!(s.window_mib_s.len(), 4);
        assert!((s.window_ms - 250.0).abs() < 1e-9);
        // a slow second window: 100 messages in it
        let r = thread(1000, 0, 1000, 250, vec![250, 350, 750]);
        let s = summarize(&[r], 1024, 1, 1000.0);
        assert!((s.bw_min_window_mib_s - 400.0 / 1024.0).abs() < 1e-9, "{s:?}");
        assert!((s.bw_peak_window_mib_s - 1600.0 / 1024.0).abs() < 1e-9, "{s:?}");
        assert_eq!(s.bw_peak_perftest_mib_s, None);
    }

    #[test]
    fn a_missing_perftest_peak_says_why() {
        let r = thread(1000, 0, 1000, 250, vec![250, 500, 750]);
        assert_eq!(
            summarize(std::slice::from_ref(&r), 1024, 1, 1000.0).bw_peak_perftest_missing,
            None
        );
        // the trace overflowed: no peak, and the summary (and the JSON) say so
        let long = ThreadResult {
            peak_overflowed: true,
            ..r.clone()
        };
        let s = summarize(&[long], 1024, 1, 1000.0);
        assert_eq!(s.bw_peak_perftest_mib_s, None);
        assert!(s
            .bw_peak_perftest_missing
            .as_deref()
            .unwrap()
            .contains(&format!("past {MAX_TRACE} post calls")));
        // two threads, or one thread with two sending QPs: perftest's peak is one QP's
        for rs in [vec![r.clone(), r.clone()], vec![ThreadResult { streams: 2, ..r }]] {
            let why = summarize(&rs, 1024, 1, 1000.0).bw_peak_perftest_missing.unwrap();
            assert!(why.starts_with("several sending QPs"), "{why}");
        }
    }

    #[test]
    fn the_last_partial_window_is_merged_and_the_minimum_never_exceeds_the_average() {
        // 1100 ticks with windows of 250: four whole windows and 100 ticks (< 125) merged into
        // the fourth, which lasts 350; the tail is slow (the last 100 messages)
        let r = thread(1000, 0, 1100, 250, vec![300, 600, 900, 1000]);
        let s = summarize(&[r], 1024, 1, 1000.0);
        assert_eq!(s.window_mib_s.len(), 4, "{s:?}");
        // the merged window: 100 messages in 350 ticks
        assert!((s.bw_min_window_mib_s - (100.0 / 0.35) / 1024.0).abs() < 1e-9, "{s:?}");
        assert!(s.bw_min_window_mib_s <= s.bw_avg_mib_s && s.bw_avg_mib_s <= s.bw_peak_window_mib_s);
        // randomised: the minimum window is never above the average, the best never below
        let mut x = 0x1234_5678_9abc_def1u64;
        let mut rnd = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for _ in 0..2000 {
            let w = 1 + rnd(300);
            let end = 1 + rnd(5000);
            let nb = (end / w) as usize;
            let mut cum = 0;
            let windows: Vec<u64> = (0..nb)
                .map(|_| {
                    cum += rnd(100);
                    cum
                })
                .collect();
            let total = cum + rnd(100) + 1;
            let s = summarize(&[thread(total, 0, end, w, windows)], 64, 1, 1e6);
            assert!(
                s.bw_min_window_mib_s <= s.bw_avg_mib_s * (1.0 + 1e-12)
                    && s.bw_avg_mib_s <= s.bw_peak_window_mib_s * (1.0 + 1e-12),
                "{s:?}"
            );
        }
    }

    #[test]
    fn windows_hold_several_completions() {
        // one message per tick, but completions only every 64 messages (cq_mod 64): a 10-tick
        // window would hold 0 or 64 messages (bandwidth 0 or 6.4x the average)
        let (end, base) = (6400u64, 10u64);
        let windows: Vec<u64> = (1..end / base).map(|k| (k * base) / 64 * 64).collect();
        let s = summarize(&[thread(end, 0, end, base, windows)], 1024, 64, 1e6);
        // widened to whole multiples of the grid holding at least 16 completion periods
        let w = s.window_ms * 1e-3 * 1e6;
        assert!(w >= MIN_COMPLETIONS * 64.0 && (w / base as f64).fract() == 0.0, "{s:?}");
        assert!((s.window_requested_ms - 0.01).abs() < 1e-12);
        assert!(s.bw_min_window_mib_s > 0.7 * s.bw_avg_mib_s, "{s:?}");
        assert!(s.bw_peak_window_mib_s < 1.3 * s.bw_avg_mib_s, "{s:?}");
    }

    #[test]
    fn windows_hold_several_completions_of_every_qp() {
        // 64 QPs, one message per tick in all, a completion every 64 messages of a QP, and the
        // QPs' completions in bursts (a sweep over them): 4096 messages every 4096 ticks. Windows
        // of 16 completion periods in all (1024 ticks) would be empty three times in four.
        let (end, base, burst) = (4096u64 * 64, 16u64, 4096u64);
        let windows: Vec<u64> = (1..end / base).map(|k| (k * base) / burst * burst).collect();
        let mut t = thread(end, 0, end, base, windows);
        t.streams = 64;
        let s = summarize(&[t], 1024, 64, 1e6);
        let w = s.window_ms * 1e-3 * 1e6;
        assert!(w >= MIN_COMPLETIONS * 64.0 * 64.0, "{s:?}");
        assert!(s.bw_min_window_mib_s > 0.7 * s.bw_avg_mib_s, "{s:?}");
        assert!(s.bw_peak_window_mib_s < 1.3 * s.bw_avg_mib_s, "{s:?}");
    }

    /// perftest's own search, O(n^2) over messages: min over i <= j of
    /// (tcompleted[j] - tposted[i]) / (j - i + 1).
    fn perftest_brute(t: &PeakTrace) -> Option<f64> {
        let mut best: Option<f64> = None;
        for &(pt, first) in &t.posts {
            for &(ct, upto) in &t.completions {
                if upto > first && ct > pt {
                    let rate = (upto - first) as f64 / (ct - pt) as f64;
                    if best.is_none_or(|b| rate > b) {
                        best = Some(rate);
                    }
                }
            }
        }
        best
    }

    #[test]
    fn perftest_peak_agrees_with_perftests_own_search() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        for case in 0..500 {
            let postlist = 1 + rnd(8);
            let cq_mod = postlist * (1 + rnd(4));
            let calls = 2 + rnd(200);
            let mut t = PeakTrace::default();
            let mut now = 0u64;
            let mut pending: Vec<(u64, u64)> = Vec::new(); // (ready tick, upto)
            for c in 0..calls {
                now += rnd(30) + if rnd(10) == 0 { 500 } else { 0 };
                t.posts.push((now, c * postlist));
                let upto = (c + 1) * postlist;
                if upto % cq_mod == 0 || c + 1 == calls {
                    pending.push((now + 20 + rnd(200), upto));
                }
            }
            // completions are seen in order, each no earlier than the one before
            let mut last = 0;
            for (ready, upto) in pending {
                last = last.max(ready);
                t.completions.push((last, upto));
            }
            let (fast, brute) = (perftest_peak_rate(&t), perftest_brute(&t));
            match (fast, brute) {
                (Some(a), Some(b)) => assert!((a - b).abs() <= 1e-12 * b, "case {case}: {a} vs {b}"),
                (a, b) => assert_eq!(a, b, "case {case}"),
            }
        }
    }
}

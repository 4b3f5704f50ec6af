//! The loop of one bandwidth thread: its ends posted up to their depth, their CQs polled and
//! each completion given to what it belongs to, the windows marked, until every message is done.

use super::{BwParams, Grid, PeakTrace, Role, ThreadResult, MAX_TRACE};
use crate::backend::Backend;
use crate::clock;
use crate::scenario::lat::recv_len;
use crate::scenario::ScenarioError;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Unreliable transports: after the last send completion, how long the receivers wait for what
/// is still on its way.
const UNRELIABLE_DRAIN: Duration = Duration::from_millis(5);

/// Receives taken before they are posted again, together.
pub(super) const RECV_BATCH: u32 = 16;

/// The sends of one end: posted, completed, and where the signalled ones are.
struct Dir {
    posted: u64,
    completed: u64,
    /// Operation counts at which a signalled operation was posted, oldest first.
    signals: VecDeque<u64>,
}

/// One end as the loop drives it: its role and what it has sent and received.
struct Ctl<'a, B> {
    end: &'a mut B,
    role: Role,
    dir: Dir,
    received: u64,
    pending_recvs: u32,
    /// Receives posted in this run: never more than its messages, so a run leaves none behind
    /// on a QP the next run uses again (between two processes the QPs stay).
    recvs_posted: u64,
    /// Receives taken before they are posted again: [`RECV_BATCH`], or the receive depth when
    /// smaller (set with the first receives, not worked out per completion).
    repost_batch: u32,
}

/// What the thread's ends have completed, and when the last completion came.
struct Progress {
    /// Messages the sending ends completed.
    done: u64,
    /// When the last completion (send or receive) came: stalls and the unreliable drain count
    /// from it.
    last: Instant,
    /// Its tick (an unreliable run ends there, not after its drain).
    last_tick: u64,
}

impl Progress {
    /// A completion came now.
    #[inline(always)]
    fn moved(&mut self) {
        self.last = Instant::now();
        self.last_tick = clock::stop();
    }
}

/// The post and completion times of the first sending end, for perftest's peak.
struct Tracer {
    /// The traced end's index (`None`: no peak traced).
    end: Option<usize>,
    trace: PeakTrace,
    /// More than [`MAX_TRACE`] post calls: the run gets no perftest peak.
    overflowed: bool,
}

impl Tracer {
    /// Traces the first sending end of `ctl` when `trace_peak`, its room taken now: at most
    /// [`MAX_TRACE`] post calls (16 B each); a longer run gets no perftest peak.
    #[inline(always)]
    fn new<B>(ctl: &[Ctl<'_, B>], p: &BwParams, trace_peak: bool) -> Self {
        let end = if trace_peak {
            ctl.iter().position(|c| c.role.sends)
        } else {
            None
        };
        let mut trace = PeakTrace::default();
        if end.is_some() {
            let calls = (p.iters / u64::from(p.postlist) + 1).min(MAX_TRACE as u64) as usize;
            trace.posts.reserve(calls);
            trace
                .completions
                .reserve(calls / (p.cq_mod / p.postlist).max(1) as usize + 2);
        }
        Tracer {
            end,
            trace,
            overflowed: false,
        }
    }

    /// A post call now, with `posted` messages posted before it.
    #[inline(always)]
    fn post(&mut self, posted: u64) {
        if self.trace.posts.len() < MAX_TRACE {
            self.trace.posts.push((clock::start(), posted));
        } else {
            self.overflowed = true;
        }
    }

    /// The trace, unless there was none or it overflowed.
    #[inline(always)]
    fn finish(self) -> Option<PeakTrace> {
        if self.overflowed {
            None
        } else {
            self.end.map(|_| self.trace)
        }
    }
}

/// The ends of `ends` as the loop drives them, nothing sent or received yet.
fn controls<'a, B>(ends: &'a mut [(&mut B, Role)]) -> Vec<Ctl<'a, B>> {
    ends.iter_mut()
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
            recvs_posted: 0,
            repost_batch: RECV_BATCH,
        })
        .collect()
}

impl<B: Backend> Ctl<'_, B> {
    /// A receiving end's first receives: as many as the queue takes beside the sends in flight
    /// (at most the run's messages).
    fn prime_receives(&mut self, p: &BwParams) -> Result<(), ScenarioError> {
        let depth = super::recv_depth(p.rx_depth, p.tx_depth);
        self.repost_batch = RECV_BATCH.min(depth);
        let n = u64::from(depth).min(p.iters) as u32;
        let l = recv_len(&*self.end);
        self.end.post_recv(l, n).map_err(|e| be("receiver", 0, e))?;
        self.recvs_posted = u64::from(n);
        Ok(())
    }

    /// Posts batches of `postlist` (the last one shorter) while the QP has room for the next
    /// within `tx_depth`, a completion asked for every `cq_mod` and on the last; the post calls
    /// traced when `traced`. Returns whether it posted any.
    #[inline(always)]
    fn post_sends(&mut self, p: &BwParams, traced: bool, tracer: &mut Tracer) -> Result<bool, ScenarioError> {
        let mut moved = false;
        let d = &mut self.dir;
        while d.posted < p.iters
            && d.posted - d.completed + u64::from(p.postlist.min((p.iters - d.posted) as u32)) <= u64::from(p.tx_depth)
        {
            let n = p.postlist.min((p.iters - d.posted) as u32);
            let e = d.posted + u64::from(n);
            let signal = e / u64::from(p.cq_mod) > d.posted / u64::from(p.cq_mod) || e == p.iters;
            if traced {
                tracer.post(d.posted);
            }
            self.end
                .post(p.op, p.size, n, p.inline, signal)
                .map_err(|x| be("sender", d.posted, x))?;
            moved = true;
            if signal {
                d.signals.push_back(e);
            }
            d.posted = e;
        }
        Ok(moved)
    }

    /// Polls the end's CQ and gives each completion to what it belongs to. An unreliable
    /// receiver empties its CQ every turn (a full poll is polled again): receives it left
    /// unreposted would drop messages the run itself caused to be lost. Returns whether any
    /// completion came.
    #[inline(always)]
    fn poll_completions(
        &mut self,
        p: &BwParams,
        (traced, tracer): (bool, &mut Tracer),
        prog: &mut Progress,
    ) -> Result<bool, ScenarioError> {
        let mut moved = false;
        loop {
            let q = self
                .end
                .poll()
                .map_err(|x| be(if self.role.sends { "sender" } else { "receiver" }, prog.done, x))?;
            moved |= q.sends + q.recvs > 0;
            if self.role.sends {
                self.take_sends(q.sends, (traced, tracer), prog);
            }
            if self.role.receives && q.recvs > 0 {
                self.take_receives(q.recvs, p, prog)?;
            }
            if !(p.unreliable && self.role.receives && q.sends + q.recvs >= 16) {
                break;
            }
        }
        Ok(moved)
    }

    /// `n` send completions: each retires the sends up to its signalled one (traced, at the
    /// time of the poll, when `traced`).
    #[inline(always)]
    fn take_sends(&mut self, n: u32, (traced, tracer): (bool, &mut Tracer), prog: &mut Progress) {
        let seen = if traced && n > 0 { clock::stop() } else { 0 };
        for _ in 0..n {
            if let Some(upto) = self.dir.signals.pop_front() {
                prog.done += upto - self.dir.completed;
                self.dir.completed = upto;
                prog.moved();
                if traced {
                    tracer.trace.completions.push((seen, upto));
                }
            }
        }
    }

    /// `n` messages received: counted, and their receives posted again in batches of
    /// [`RECV_BATCH`] (or of the receive depth, when smaller) while the run has messages not yet
    /// covered by one.
    #[inline(always)]
    fn take_receives(&mut self, n: u32, p: &BwParams, prog: &mut Progress) -> Result<(), ScenarioError> {
        self.received += u64::from(n);
        prog.moved();
        self.pending_recvs += n;
        // the receives still to post: the run's messages not yet covered by one
        let still = p.iters.saturating_sub(self.recvs_posted);
        if self.pending_recvs >= self.repost_batch && still > 0 {
            let n = u64::from(self.pending_recvs).min(still) as u32;
            let l = recv_len(&*self.end);
            self.end.post_recv(l, n).map_err(|x| be("receiver", prog.done, x))?;
            self.recvs_posted += u64::from(n);
            self.pending_recvs = 0;
        }
        Ok(())
    }
}

/// How long a wait for completion events blocks before the run's deadlines are checked.
const EVENT_SLICE: Duration = Duration::from_millis(50);

/// Blocks up to [`EVENT_SLICE`] until one of the ends' completion channels has an event, then
/// takes (and counts for acknowledgement) the events of every channel that has one. Kept out of
/// the loop's code (the compiler did not inline it there either): it runs only before a block.
#[inline(never)]
fn wait_events<B: Backend>(ctl: &mut [Ctl<'_, B>], done: u64) -> Result<bool, ScenarioError> {
    let fds: Vec<i32> = ctl.iter().filter_map(|c| c.end.event_fd()).collect();
    let ready = crate::verbs::cq::ready_channels(&fds, EVENT_SLICE);
    for c in ctl.iter_mut() {
        if c.end.event_fd().is_some_and(|fd| ready.contains(&fd)) {
            c.end.wait_event(Duration::ZERO).map_err(|x| be("bw", done, x))?;
        }
    }
    Ok(!ready.is_empty())
}

/// -e, a turn that moved nothing: the first time the ends' CQs are armed (the next turn polls
/// again before any wait: a completion that came before the arm raises no event); the next,
/// armed and polled once more since, the thread blocks until one of the CQs raises its event
/// (counted in `waits`).
fn wait_when_idle<B: Backend>(
    ctl: &mut [Ctl<'_, B>],
    armed: &mut bool,
    waits: &mut Option<u64>,
    done: u64,
) -> Result<(), ScenarioError> {
    if *armed {
        if wait_events(ctl, done)? {
            *waits.get_or_insert(0) += 1;
        }
        *armed = false;
    } else {
        for c in ctl.iter_mut() {
            c.end.arm().map_err(|x| be("bw", done, x))?;
        }
        *armed = true;
    }
    Ok(())
}

/// Stops a run that has had no completion for `p.stall`, or was interrupted.
#[inline(always)]
fn check_deadlines(prog: &Progress, p: &BwParams, intr: &AtomicBool) -> Result<(), ScenarioError> {
    if prog.last.elapsed() > p.stall {
        return Err(ScenarioError::Stalled {
            side: "bw",
            index: prog.done,
            what: "completions",
            waited: p.stall,
        });
    }
    if intr.load(Ordering::Relaxed) {
        return Err(ScenarioError::Interrupted);
    }
    Ok(())
}

/// The thread's messages: those its sending ends completed, or with none (the passive side)
/// those its receivers took.
#[inline(always)]
fn messages<B>(ctl: &[Ctl<'_, B>], total: u64, done: u64) -> u64 {
    if total > 0 {
        done
    } else {
        ctl.iter().map(|c| c.received).sum()
    }
}

/// Drives the ends of one thread until every sending end completed `p.iters` operations and
/// every receiving end took `p.iters` messages. Each end's CQ (sends and receives) is polled once
/// per turn and each completion given to what it belongs to.
pub fn drive_ends<B: Backend>(
    ends: &mut [(&mut B, Role)],
    p: &BwParams,
    grid: &Grid,
    trace_peak: bool,
    intr: &AtomicBool,
) -> Result<ThreadResult, ScenarioError> {
    let mut ctl = controls(ends);
    for c in ctl.iter_mut().filter(|c| c.role.receives) {
        c.prime_receives(p)?;
    }
    let total: u64 = ctl.iter().map(|c| u64::from(c.role.sends) * p.iters).sum();
    let mut tracer = Tracer::new(&ctl, p, trace_peak);
    let cpu0 = clock::thread_cpu_ns();
    let switches0 = clock::thread_involuntary_switches();
    let start = clock::start();
    let origin = grid.origin(start);
    let mut out = ThreadResult {
        start,
        grid: (origin, grid.window_ticks),
        streams: ctl.iter().filter(|c| c.role.sends).count() as u64,
        ..Default::default()
    };
    let mut prog = Progress {
        done: 0,
        last: Instant::now(),
        last_tick: start,
    };
    let mut next_boundary = origin.wrapping_add(grid.window_ticks);
    // -e: the thread waits for completion events when a turn moves nothing (its ends all have
    // a completion channel)
    let events = ctl.iter().all(|c| c.end.has_events());
    if events {
        out.event_waits = Some(0);
    }
    let mut armed = false;
    // the first turn from the grid's origin: its counts stand for every boundary from there (a
    // thread that started late)
    let (mut before, mut turn) = (start, origin.min(start));
    out.longest_turn = (0, turn);
    loop {
        let mut moved = false;
        let sent = ctl.iter().all(|c| !c.role.sends || c.dir.completed >= p.iters);
        if sent && ctl.iter().all(|c| !c.role.receives || c.received >= p.iters) {
            break;
        }
        // nothing acknowledged: what the receivers dropped never comes
        if p.unreliable && sent && prog.last.elapsed() >= UNRELIABLE_DRAIN {
            break;
        }
        for (ci, c) in ctl.iter_mut().enumerate() {
            let traced = tracer.end == Some(ci);
            if c.role.sends {
                moved |= c.post_sends(p, traced, &mut tracer)?;
            }
            moved |= c.poll_completions(p, (traced, &mut tracer), &mut prog)?;
        }
        let now = clock::stop();
        (before, turn) = (turn, now);
        let mut crossed = 0u32;
        while now >= next_boundary {
            out.windows.push(messages(&ctl, total, prog.done));
            next_boundary = next_boundary.wrapping_add(grid.window_ticks);
            crossed += 1;
        }
        note_turn(&mut out, (before, now), crossed, events);
        check_deadlines(&prog, p, intr)?;
        if events && !moved {
            wait_when_idle(&mut ctl, &mut armed, &mut out.event_waits, prog.done)?;
        }
    }
    // the final counts are this turn's
    out.last_turn = (before, turn);
    out.end = clock::stop();
    out.cpu_ns = clock::thread_cpu_ns().saturating_sub(cpu0);
    out.involuntary_switches =
        switches0.and_then(|a| clock::thread_involuntary_switches().map(|b| b.saturating_sub(a)));
    if p.unreliable {
        // the drain after the last completion is no part of the run: nor are its windows
        out.end = prog.last_tick;
        let whole = prog.last_tick.saturating_sub(origin) / grid.window_ticks.max(1);
        out.windows.truncate(whole as usize);
    }
    out.messages = messages(&ctl, total, prog.done);
    out.received = ctl.iter().map(|c| c.received).sum();
    out.peak_overflowed = tracer.overflowed;
    out.peak_trace = tracer.finish();
    Ok(out)
}

/// Notes the turn of the loop from `before` to `now`, which passed `crossed` grid boundaries:
/// the longest turn, and a turn past two boundaries, which holds a whole window whose counts
/// both come from this turn's end (rare; with -e, `events`, a turn holds a wait for an event:
/// not recorded).
#[inline(always)]
fn note_turn(out: &mut ThreadResult, (before, now): (u64, u64), crossed: u32, events: bool) {
    let len = now.wrapping_sub(before);
    if len > out.longest_turn.0 {
        out.longest_turn = (len, before);
    }
    if crossed >= 2 && !events {
        if out.turns_over_a_window.len() < MAX_LONG_TURNS {
            out.turns_over_a_window.push((before, now));
        } else {
            out.long_turns_overflowed = true;
        }
    }
}

/// Most turns over a whole window a thread records (each 16 bytes).
const MAX_LONG_TURNS: usize = 100_000;

fn be(side: &'static str, index: u64, source: crate::backend::BackendError) -> ScenarioError {
    ScenarioError::Backend { side, index, source }
}

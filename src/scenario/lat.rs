//! Latency ping-pong, as perftest's `ib_*_lat` measure it and where perftest is not right, right:
//! - `write`: the client WRITEs `size` bytes into the server's buffer, the server watches the
//!   last byte, then WRITEs back; the client's figure is half the round trip (one-way).
//! - `send`: the same with SEND/RECV, completion-driven; one-way.
//! - `read`, `atomic`: round trips by nature; the figure is the round trip.
//!
//! Every iteration's post (the provider call, or build + doorbell) and completion wait are
//! recorded separately; nothing is dropped; the two ends run on two pinned threads.

use super::ScenarioError;
use crate::backend::{Backend, OpKind, Polled};
use crate::clock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub mod perftest;

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct LatParams {
    /// Operation.
    pub op: OpKind,
    /// Message size in bytes (8 for atomics).
    pub size: u32,
    /// Measured iterations.
    pub iters: u64,
    /// Iterations run first and not recorded.
    pub warmup: u64,
    /// Copy the payload into the WQE (WRITE and SEND only).
    pub inline: bool,
    /// Longest wait for any single step before the run is declared stalled.
    pub stall: Duration,
    /// The server stamps each iteration's turnaround (`--anatomy`): from seeing the request to
    /// its reply's post returning, two more timestamps on its side of every round trip.
    pub anatomy: bool,
}

/// Whether the figure of an operation is one-way (half the round trip) or the round trip.
pub fn one_way(op: OpKind) -> bool {
    op.carries_payload()
}

/// Raw samples of one run, in TSC ticks.
#[derive(Debug, Default, Clone)]
pub struct LatSamples {
    /// Round trip of each measured iteration.
    pub rtt: Vec<u64>,
    /// The post call of each measured iteration.
    pub post: Vec<u64>,
    /// From the end of the post to the response.
    pub wait: Vec<u64>,
    /// From each measured post to the next one in the same block (the loop's whole turn: the
    /// round trip and the bookkeeping after it): perftest's latency sample (`ib_*_lat` takes
    /// `tposted[i + 1] - tposted[i]`), one fewer than `rtt` per block.
    pub period: Vec<u64>,
    /// With `--anatomy`: the server's turnaround of each measured iteration (from seeing the
    /// request to its reply's post returning), paired with `rtt` index by index, in ticks of
    /// this side's TSC (a server in another process sends its own, converted).
    pub turnaround: Vec<u64>,
    /// With `--anatomy`, the client: the TSC when each measured iteration's post call returned
    /// (its doorbell rung).
    pub posted: Vec<u64>,
    /// With `--anatomy` where the client's completions carry the NIC clock: the NIC clock
    /// (ticks) of each measured iteration's reply's receive completion.
    pub nic_reply: Vec<u64>,
    /// With `--anatomy`, the server: the TSC when each iteration's reply's post returned (t3).
    pub replied: Vec<u64>,
    /// With `--anatomy` where the server's completions carry the NIC clock: the NIC clock
    /// (ticks) of each iteration's request's receive completion.
    pub nic_request: Vec<u64>,
    /// The client thread's CPU time over its blocks (warm-up included), ns.
    pub cpu_ns: u64,
    /// Those blocks' length, TSC ticks.
    pub wall_ticks: u64,
}

impl LatSamples {
    /// No samples yet, room for `n` of each.
    pub fn with_capacity(n: usize) -> Self {
        LatSamples {
            rtt: Vec::with_capacity(n),
            post: Vec::with_capacity(n),
            wait: Vec::with_capacity(n),
            period: Vec::with_capacity(n),
            turnaround: Vec::new(),
            posted: Vec::new(),
            nic_reply: Vec::new(),
            replied: Vec::new(),
            nic_request: Vec::new(),
            cpu_ns: 0,
            wall_ticks: 0,
        }
    }

    /// Leaves out the first `n` of the server's series (its warm-up iterations).
    pub fn drop_server_warmup(&mut self, n: u64) {
        for v in [&mut self.turnaround, &mut self.replied, &mut self.nic_request] {
            v.drain(..(n as usize).min(v.len()));
        }
    }

    /// Adds another block's samples and CPU time.
    pub fn extend(&mut self, s: LatSamples) {
        self.rtt.extend(s.rtt);
        self.post.extend(s.post);
        self.wait.extend(s.wait);
        self.period.extend(s.period);
        self.turnaround.extend(s.turnaround);
        self.posted.extend(s.posted);
        self.nic_reply.extend(s.nic_reply);
        self.replied.extend(s.replied);
        self.nic_request.extend(s.nic_request);
        self.cpu_ns += s.cpu_ns;
        self.wall_ticks += s.wall_ticks;
    }
}

/// Continues marker numbering across blocks (the write ping-pong tells iterations apart by the
/// last byte of the message).
#[derive(Debug, Default, Clone, Copy)]
pub struct PingState {
    next: u64,
    /// Receives were posted by an earlier block (SEND keeps a constant number outstanding).
    primed: bool,
    /// The server: the next block's request, whose receive completion came in the poll that
    /// reaped this block's last send completions (the peer in another process may post its
    /// next block's first request before this end's last acknowledgement arrives), with its NIC
    /// clock where it carries one. The next block takes it as its first request.
    carried: Option<Option<u64>>,
}

impl PingState {
    /// The server's request carried to its next block (see the field).
    pub fn carried(&mut self) -> &mut Option<Option<u64>> {
        &mut self.carried
    }

    /// Reserves the numbering of a block of `total` iterations: its first number, and whether
    /// the receives must be primed (first block of a run).
    pub fn take(&mut self, total: u64) -> (u64, bool) {
        let first = self.next;
        self.next += total;
        let prime = !self.primed;
        self.primed = true;
        (first, prime)
    }

    /// Posts the receives a ping-pong of `op` keeps outstanding (if it takes any), once, ahead
    /// of its first block: between two processes before the barrier, so that on UC and UD, where
    /// nothing is retried, no message arrives before a receive for it.
    pub fn prime<B: Backend>(&mut self, b: &mut B, op: OpKind) -> Result<(), crate::backend::BackendError> {
        if op.needs_recv() && !self.primed {
            b.post_recv(recv_len(b), RECV_DEPTH)?;
            self.primed = true;
        }
        Ok(())
    }
}

fn marker(k: u64) -> u8 {
    (k % 255) as u8 + 1
}

/// Shared stop flags of one run.
pub struct Flags<'a> {
    /// Set by the side that fails, so the other stops too.
    pub failed: AtomicBool,
    /// Set from outside (SIGINT).
    pub interrupt: &'a AtomicBool,
}

struct Spin<'a> {
    side: &'static str,
    flags: &'a Flags<'a>,
    stall: Duration,
}

impl Spin<'_> {
    /// Spins until `ready()`; checks the flags and the stall deadline every 4096 turns.
    #[inline(always)]
    fn until(
        &self,
        index: u64,
        what: &'static str,
        mut ready: impl FnMut() -> Result<bool, ScenarioError>,
    ) -> Result<(), ScenarioError> {
        let mut turns = 0u32;
        let mut since: Option<Instant> = None;
        loop {
            if ready()? {
                return Ok(());
            }
            turns = turns.wrapping_add(1);
            if turns % 4096 == 0 {
                self.check(index, what, &mut since)?;
            }
            std::hint::spin_loop();
        }
    }

    /// Stops a wait: SIGINT, the peer failed, or no progress since `since` (set at the first
    /// check) for the stall deadline.
    fn check(&self, index: u64, what: &'static str, since: &mut Option<Instant>) -> Result<(), ScenarioError> {
        if self.flags.interrupt.load(Ordering::Relaxed) {
            return Err(ScenarioError::Interrupted);
        }
        if self.flags.failed.load(Ordering::Relaxed) {
            return Err(ScenarioError::PeerFailed { side: self.side });
        }
        let t = *since.get_or_insert_with(Instant::now);
        if t.elapsed() > self.stall {
            return Err(ScenarioError::Stalled {
                side: self.side,
                index,
                what,
                waited: self.stall,
            });
        }
        Ok(())
    }
}

/// Receives cover the whole incoming half of the buffer, so they fit every message size (the
/// sizes of a run change while receives posted for earlier ones are still outstanding).
pub(crate) fn recv_len<B: Backend>(b: &B) -> u32 {
    (b.mem().len() - b.rx_offset()).min(u32::MAX as usize) as u32
}

fn be(side: &'static str, index: u64) -> impl Fn(crate::backend::BackendError) -> ScenarioError {
    move |source| ScenarioError::Backend { side, index, source }
}

/// Waits for the peer's WRITE of marker `m` at byte `at` of our buffer, watching that byte; now
/// and then also the CQ, so an error CQE of our own WRITE stops the run instead of waiting for an
/// answer that cannot come.
#[inline(always)]
fn await_write<B: Backend>(
    b: &mut B,
    spin: &Spin<'_>,
    outst: &mut Outstanding,
    k: u64,
    what: &'static str,
    at: usize,
    m: u8,
) -> Result<(), ScenarioError> {
    let mut turn = 0u32;
    spin.until(k, what, || {
        if b.mem().load(at) == m {
            return Ok(true);
        }
        turn = turn.wrapping_add(1);
        if turn % CQ_CHECK_TURNS == 0 {
            outst.add(b.poll().map_err(be(spin.side, k))?);
        }
        Ok(false)
    })
}

/// Waits for the peer's SEND: polls the CQ until a receive completes (send completions seen on
/// the way are counted off); the NIC clock of that receive's completion where it carries one.
#[inline(always)]
fn await_send<B: Backend>(
    b: &mut B,
    spin: &Spin<'_>,
    outst: &mut Outstanding,
    k: u64,
    what: &'static str,
) -> Result<Option<u64>, ScenarioError> {
    let (mut got, mut ts) = (0, None);
    let mut seen = |q: Polled| {
        outst.add(q);
        got += q.recvs;
        ts = q.recv_ts;
        // one message is due: a second one would pair the wrong completion with this iteration
        if got > 1 {
            return Err(ScenarioError::Invalid(format!(
                "{}: {got} receive completions in iteration {k}, where the ping-pong had one message due",
                spin.side
            )));
        }
        Ok(got > 0)
    };
    if b.has_events() {
        until_event(b, spin, k, what, |b| seen(b.poll().map_err(be(spin.side, k))?))?;
    } else {
        spin.until(k, what, || seen(b.poll().map_err(be(spin.side, k))?))?;
    }
    Ok(ts)
}

/// How long one wait for a completion event blocks before the flags and the stall deadline
/// are checked.
const EVENT_SLICE: Duration = Duration::from_millis(50);

/// As [`Spin::until`], for an end that waits for completion events (`-e`): polls; when nothing
/// is there, arms the CQ and polls once more (a completion that came before the arm raises no
/// event), then blocks for the event (`ibv_get_cq_event`), and polls again.
fn until_event<B: Backend>(
    b: &mut B,
    spin: &Spin<'_>,
    index: u64,
    what: &'static str,
    mut ready: impl FnMut(&mut B) -> Result<bool, ScenarioError>,
) -> Result<(), ScenarioError> {
    let mut since: Option<Instant> = None;
    loop {
        if ready(b)? {
            return Ok(());
        }
        b.arm().map_err(be(spin.side, index))?;
        if ready(b)? {
            return Ok(());
        }
        if b.wait_event(EVENT_SLICE).map_err(be(spin.side, index))? {
            continue;
        }
        spin.check(index, what, &mut since)?;
    }
}

/// What a side waits for when it waits for a receive completion: the peer's message.
fn awaited(op: OpKind, peer: &str) -> &'static str {
    match (op, peer == "server") {
        (OpKind::SendImm, true) => "the server's SEND with immediate",
        (OpKind::SendImm, false) => "the client's SEND with immediate",
        (OpKind::WriteImm, true) => "the server's WRITE with immediate",
        (OpKind::WriteImm, false) => "the client's WRITE with immediate",
        (_, true) => "the server's SEND",
        (_, false) => "the client's SEND",
    }
}

/// Tracks signalled sends not yet completed, so the send queue never overflows.
struct Outstanding {
    n: u32,
}

impl Outstanding {
    fn add(&mut self, p: Polled) {
        self.n = self.n.saturating_sub(p.sends);
    }
}

/// WRITE and SEND ping-pongs signal one post in this many (selective signalling, as every
/// RDMA benchmark does): the CQ is then reaped once per this many iterations, right after the
/// signalled one, instead of after every post, where it would delay the peer's next message.
const SIGNAL_EVERY: u64 = 16;

/// Whether the `i`-th post of a run is signalled.
fn signalled(op: OpKind, i: u64) -> bool {
    !one_way(op) || i % SIGNAL_EVERY == SIGNAL_EVERY - 1
}

/// Reaps send completions after a signalled post (outside the timed region).
fn reap<B: Backend>(b: &mut B, spin: &Spin<'_>, outst: &mut Outstanding, k: u64, i: u64) -> Result<(), ScenarioError> {
    if outst.n == 0 || (outst.n < MAX_OUTSTANDING && i % SIGNAL_EVERY != SIGNAL_EVERY - 1) {
        return Ok(());
    }
    spin.until(k, "send completions", || {
        outst.add(b.poll().map_err(be(spin.side, k))?);
        Ok(outst.n == 0)
    })
}

const MAX_OUTSTANDING: u32 = 32;
/// While waiting for the peer's WRITE, the CQ is checked for errors once every this many turns
/// (a few microseconds): often enough to stop at once, rarely enough that a check almost never
/// coincides with the answer (a check at a fixed time after the post would bias short waits).
const CQ_CHECK_TURNS: u32 = 2048;
/// Receives kept posted in the SEND ping-pong.
const RECV_DEPTH: u32 = 16;

/// Pins the calling thread to the `i`-th CPU from the end of the process's set (a server process
/// keeps off the CPUs its client on the same machine takes from the start).
pub fn pin_from_end(i: usize) -> bool {
    crate::workers::pin_current(crate::workers::cpu_from_end(i))
}

/// Pins the calling thread to the `i`-th CPU of the process when it has more than one.
pub fn pin(i: usize) -> bool {
    crate::workers::pin_current(crate::workers::cpu_from_start(i))
}

/// Sets the run's failure flag when a side unwinds (a panic), so the other side stops at once.
struct FailOnUnwind<'a>(&'a Flags<'a>);

impl Drop for FailOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.failed.store(true, Ordering::Relaxed);
        }
    }
}

/// Runs `p.warmup` (only when `record_warmup` is false the first call is expected to carry it)
/// plus `iters` iterations between `client` and `server` on two pinned threads.
pub fn run<B: Backend + Send>(
    client: &mut B,
    server: &mut B,
    p: &LatParams,
    iters: u64,
    warmup: u64,
    st: &mut PingState,
    interrupt: &AtomicBool,
) -> Result<LatSamples, ScenarioError> {
    if iters == 0 {
        return Err(ScenarioError::Invalid("zero iterations".into()));
    }
    if p.size == 0 || (matches!(p.op, OpKind::FetchAdd | OpKind::CmpSwap) && p.size != 8) {
        return Err(ScenarioError::Invalid(format!(
            "size {} is not valid for {}",
            p.size,
            p.op.as_str()
        )));
    }
    // each end sends from the first half of its buffer and receives into the second
    let half = |b: &B| b.rx_offset().min(b.mem().len() - b.rx_offset());
    let room = half(client).min(half(server));
    if p.size as usize > room {
        return Err(ScenarioError::Invalid(format!(
            "size {} exceeds the buffers ({room} bytes each way)",
            p.size
        )));
    }
    let flags = Flags {
        failed: AtomicBool::new(false),
        interrupt,
    };
    let total = warmup + iters;
    let (first, prime) = st.take(total);
    let carry = st.carried();
    // both ends' receives are posted before either sends: an unreliable transport (UC) drops a
    // message that finds none (RC would retry it)
    if prime && p.op.needs_recv() {
        client
            .post_recv(recv_len(client), RECV_DEPTH)
            .map_err(be("client", first))?;
        server
            .post_recv(recv_len(server), RECV_DEPTH)
            .map_err(be("server", first))?;
    }
    let prime = false;
    // Client and server on the process's persistent workers for CPUs 0 and 1 (made once, pinned
    // before they ever run; both start together), never a thread spawned for this block.
    let (mut c, mut srv) = (None, None);
    let flags_ref = &flags;
    let started = crate::workers::run(
        vec![
            crate::workers::Placed {
                cpu: crate::workers::cpu_from_start(1),
                job: Box::new(|| {
                    let _fail = FailOnUnwind(flags_ref);
                    let r = server_loop(server, p, (first, total, prime), carry, flags_ref);
                    if r.is_err() {
                        flags_ref.failed.store(true, Ordering::Relaxed);
                    }
                    srv = Some(r);
                }),
            },
            crate::workers::Placed {
                cpu: crate::workers::cpu_from_start(0),
                job: Box::new(|| {
                    let _fail = FailOnUnwind(flags_ref);
                    let r = client_loop(client, p, first, total, warmup, prime, flags_ref);
                    if r.is_err() {
                        flags_ref.failed.store(true, Ordering::Relaxed);
                    }
                    c = Some(r);
                }),
            },
        ],
        p.stall,
    );
    if let Err(e) = started {
        return Err(e.into());
    }
    let res = (
        c.unwrap_or(Err(ScenarioError::PeerFailed { side: "client" })),
        srv.unwrap_or(Err(ScenarioError::PeerFailed { side: "server" })),
    );
    match res {
        (Ok(mut samples), Ok(mut srv)) => {
            srv.drop_server_warmup(warmup);
            (samples.turnaround, samples.replied, samples.nic_request) = (srv.turnaround, srv.replied, srv.nic_request);
            Ok(samples)
        }
        // The first real failure wins over the other side's "peer failed".
        (Err(e @ ScenarioError::PeerFailed { .. }), Err(s)) => Err(if matches!(s, ScenarioError::PeerFailed { .. }) {
            e
        } else {
            s
        }),
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(e),
    }
}

/// The client's side of one block: `total` iterations from `first` (marker numbering), the first
/// `warmup` not recorded; `prime` posts the initial receives (first block of a SEND run). For a
/// client in another process than its server, with [`server_loop`] run there.
pub fn client_loop<B: Backend>(
    b: &mut B,
    p: &LatParams,
    first: u64,
    total: u64,
    warmup: u64,
    prime: bool,
    flags: &Flags<'_>,
) -> Result<LatSamples, ScenarioError> {
    let side = "client";
    let spin = Spin {
        side,
        flags,
        stall: p.stall,
    };
    let len = p.size as usize;
    let rx = b.rx_offset();
    let n = (total - warmup) as usize;
    let (cpu0, wall0) = (clock::thread_cpu_ns(), clock::start());
    let mut out = LatSamples::with_capacity(n);
    if p.anatomy {
        out.posted.reserve_exact(n);
        out.nic_reply.reserve_exact(n);
    }
    let mut outst = Outstanding { n: 0 };
    let mut last_t0 = 0u64;
    if p.op.needs_recv() && prime {
        b.post_recv(recv_len(b), RECV_DEPTH).map_err(be(side, first))?;
    }
    for k in first..first + total {
        // SIGINT ends the run at the next iteration (outside the timed region): a wait it cut
        // short must not pass for a measurement
        if flags.interrupt.load(Ordering::Relaxed) {
            return Err(ScenarioError::Interrupted);
        }
        let m = marker(k);
        if p.op == OpKind::Write {
            b.mem().store(len - 1, m);
        }
        // the last post of a block is signalled too, so a block shorter than the signalling
        // period still leaves the send queue empty
        let signal = signalled(p.op, k - first) || k + 1 == first + total;
        let t0 = clock::start();
        b.post(p.op, p.size, 1, p.inline, signal).map_err(be(side, k))?;
        let t1 = clock::stop();
        // a device model executes the WQE here, after the post's timestamp (on hardware: nothing)
        b.after_post();
        outst.n += u32::from(signal);
        let mut nic = None;
        match p.op {
            OpKind::Write => await_write(b, &spin, &mut outst, k, "the server's WRITE", rx + len - 1, m)?,
            o if o.needs_recv() => nic = await_send(b, &spin, &mut outst, k, awaited(o, "server"))?,
            _ => {
                let before = outst.n;
                if b.has_events() {
                    until_event(b, &spin, k, "the completion", |b| {
                        let q = b.poll().map_err(be(side, k))?;
                        outst.add(q);
                        Ok(outst.n < before)
                    })?;
                } else {
                    spin.until(k, "the completion", || {
                        let q = b.poll().map_err(be(side, k))?;
                        outst.add(q);
                        Ok(outst.n < before)
                    })?;
                }
            }
        }
        let t2 = clock::stop();
        // perftest's sample, from the previous post to this one (outside the timed region);
        // saturating: a TSC read going backwards is a 0, not 2^64 ticks
        if k > first + warmup {
            out.period.push(t0.saturating_sub(last_t0));
        }
        last_t0 = t0;
        if k >= first + warmup {
            out.rtt.push(t2 - t0);
            out.post.push(t1 - t0);
            out.wait.push(t2 - t1);
            if p.anatomy {
                out.posted.push(t1);
                out.nic_reply.extend(nic);
            }
        }
        // Bookkeeping outside the timed region.
        if p.op.needs_recv() {
            b.post_recv(recv_len(b), 1).map_err(be(side, k))?;
        }
        reap(b, &spin, &mut outst, k, k - first)?;
    }
    spin.until(first + total, "the last send completions", || {
        outst.add(b.poll().map_err(be(side, first + total))?);
        Ok(outst.n == 0)
    })?;
    out.cpu_ns = clock::thread_cpu_ns().saturating_sub(cpu0);
    out.wall_ticks = clock::stop().saturating_sub(wall0);
    Ok(out)
}

/// The server's side of one block (see [`client_loop`]); with `p.anatomy` for each of its
/// `total` iterations (warm-up included) the turnaround, ticks: from the moment it saw the
/// request (the poll or the byte that showed it, its reaping after) to its reply's post
/// returning; the TSC of that return (t3), and where its completions carry the NIC clock, the
/// request's receive completion's.
pub fn server_loop<B: Backend>(
    b: &mut B,
    p: &LatParams,
    (first, total, prime): (u64, u64, bool),
    carry: &mut Option<Option<u64>>,
    flags: &Flags<'_>,
) -> Result<LatSamples, ScenarioError> {
    let side = "server";
    let spin = Spin {
        side,
        flags,
        stall: p.stall,
    };
    let len = p.size as usize;
    let rx = b.rx_offset();
    let mut outst = Outstanding { n: 0 };
    match p.op {
        o if o.carries_payload() => {}
        // Read and atomics are one-sided: the server only keeps its memory registered.
        _ => return Ok(LatSamples::default()),
    }
    let mut out = LatSamples::default();
    if p.anatomy {
        out.turnaround.reserve_exact(total as usize);
        out.replied.reserve_exact(total as usize);
        out.nic_request.reserve_exact(total as usize);
    }
    if p.op.needs_recv() && prime {
        b.post_recv(recv_len(b), RECV_DEPTH).map_err(be(side, first))?;
    }
    for k in first..first + total {
        // SIGINT ends the run at the next iteration (outside the timed region): a wait it cut
        // short must not pass for a measurement
        if flags.interrupt.load(Ordering::Relaxed) {
            return Err(ScenarioError::Interrupted);
        }
        let m = marker(k);
        let mut nic = None;
        if p.op == OpKind::Write {
            await_write(b, &spin, &mut outst, k, "the client's WRITE", rx + len - 1, m)?;
            b.mem().store(len - 1, m);
        } else if let Some(ts) = carry.take() {
            // the request came while the last block reaped its send completions
            nic = ts;
        } else {
            nic = await_send(b, &spin, &mut outst, k, awaited(p.op, "client"))?;
        }
        let t2 = if p.anatomy { clock::stop() } else { 0 };
        // The server reaps before answering: then the reaping is on the measured path in every
        // iteration alike, never hidden in one configuration and exposed in another (after the
        // answer it would delay the server's readiness for the next message only when that
        // message comes quickly).
        if k > first {
            reap(b, &spin, &mut outst, k, k - first - 1)?;
        }
        let signal = signalled(p.op, k - first) || k + 1 == first + total;
        b.post(p.op, p.size, 1, p.inline, signal).map_err(be(side, k))?;
        let t3 = if p.anatomy { clock::stop() } else { 0 };
        // a device model executes the reply here (on hardware: nothing): after t3, and the
        // sample kept after it
        b.after_post();
        if p.anatomy {
            out.turnaround.push(t3.saturating_sub(t2));
            out.replied.push(t3);
            out.nic_request.extend(nic);
        }
        outst.n += u32::from(signal);
        if p.op.needs_recv() {
            b.post_recv(recv_len(b), 1).map_err(be(side, k))?;
        }
    }
    spin.until(first + total, "the last send completions", || {
        let q = b.poll().map_err(be(side, first + total))?;
        outst.add(q);
        // the client's next block's request may come before this block's last acknowledgement:
        // kept for the next block, never dropped (one at most: the client then waits for a reply)
        if q.recvs > 0 {
            if q.recvs > 1 || carry.is_some() {
                return Err(ScenarioError::Invalid(format!(
                    "server: {} receive completions after its last reply of the block, where the client could \
                     have sent one request",
                    q.recvs + u32::from(carry.is_some())
                )));
            }
            *carry = Some(q.recv_ts);
        }
        Ok(outst.n == 0)
    })?;
    Ok(out)
}

//! A bandwidth measurement from plan to report: set-up, the peer, every thread's QPs, the sizes.

pub(in crate::probe) mod perftest;

use super::cm::CmLink;
use super::session;
use crate::backend::setup::{AnyEnd, Dev, HalfEnd, INLINE};
use crate::backend::BackendKind;
use crate::mlx5::sq::DbMode;
use crate::model::{ExecMode, ModelConfig};
use crate::oob::{Hello, Rendezvous};
use crate::probe::check::{counters, diag};
use crate::probe::report::{Report, Role, Runs};
use crate::probe::{BwPlan, Observer, PeerSpec, Plan, ProbeError, Sizes, INTERRUPTED};
use crate::scenario::bw::{summarize, BwParams, ThreadResult};
use crate::scenario::runner::{bw_resized, bw_side, run_bw_with, BwResult, BW_RESIZES, MAX_BW_ITERS};
use serde_json::json;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Every backend's threads' QPs, connected to the peer's.
type Ends = Vec<Vec<Vec<AnyEnd>>>;

/// Memory a QP takes besides its message buffer (queues, completion queue, model0's objects),
/// bytes: a bound above what model0 measured (about 220 KiB per verbs QP).
pub const QP_OVERHEAD_BYTES: u64 = 256 * 1024;

/// Runs a bandwidth plan (see [`crate::probe::run`]): the checks, the device and its limits, the
/// clock and the warnings, the peer's ends, the report's head, the rounds of sizes, the end.
pub(in crate::probe) fn run(
    plan: &Plan,
    b: &BwPlan,
    peer: Option<&mut (dyn Rendezvous + '_)>,
    obs: &mut dyn Observer,
) -> Result<Report, ProbeError> {
    check(plan, b)?;
    let mut set = Setup::open(plan, b, obs)?;
    let before = counters::sample(&set.dev);
    let (cal, env) = session::calibrate(&set.dev, true)?;
    let warnings = set.warnings(plan, b, env.warnings())?;
    let mut tcp = None;
    let mut sides = Sides::connect(plan, b, &set, peer, &mut tcp, obs)?;
    let mut report = new_report(plan, b, &set, &sides, env, cal, warnings);
    obs.started(&report);
    let mut run = Run::new(plan, b, &set, &before, &report);
    run.rounds(&mut sides, &mut report, obs)?;
    run.diag(&sides, obs);
    let unclean = run.unclean;
    report.counters = counters::CounterDelta::since(before, &set.dev);
    if let (Some((rdv, _)), false) = (sides.net, unclean) {
        // the figures were measured: a peer that fails or vanishes at the end is recorded, and
        // the caller still gets them
        report.end_error = session::end(rdv, plan, b.run_infinitely).err().map(|e| e.to_string());
    }
    Ok(report)
}

/// What the plan asks that cannot work, refused before anything is opened.
fn check(plan: &Plan, b: &BwPlan) -> Result<(), ProbeError> {
    if !(1..=crate::probe::MAX_THREADS).contains(&b.threads) {
        return Err(ProbeError::Usage(format!(
            "{} threads: 1 to {} (each thread drives its own QPs, CQs and buffers)",
            b.threads,
            crate::probe::MAX_THREADS
        )));
    }
    if b.postlist > b.tx_depth || b.cq_mod > b.tx_depth {
        return Err(ProbeError::Usage(format!(
            "--post-list ({}) and --cq-mod ({}) must not exceed --tx-depth ({})",
            b.postlist, b.cq_mod, b.tx_depth
        )));
    }
    if plan.peer != PeerSpec::Loopback && plan.transport == crate::backend::Transport::Uc && b.op.needs_recv() {
        return Err(ProbeError::Usage(
            "bw -c UC with a receiving operation runs with --loopback only in this version (the receiver cannot know \
             how many of the messages it did not drop will come)"
                .into(),
        ));
    }
    Ok(())
}

/// What the run is made of: the device, the backends and their rows (-e: each verbs backend
/// again, waiting for completion events), the doorbell mode, the sizes, the buffer, the inline
/// limit.
struct Setup {
    dev: Dev,
    kinds: Vec<BackendKind>,
    rows: Vec<(BackendKind, bool)>,
    mode: DbMode,
    sizes: Vec<u32>,
    buf_len: usize,
    inline_limit: u32,
}

impl Setup {
    /// The device (model0 executing after the post call, as suite runs it: the same figures in
    /// both), its backends and rows, then the sizes and the run's limits checked against it.
    fn open(plan: &Plan, b: &BwPlan, obs: &mut dyn Observer) -> Result<Self, ProbeError> {
        let sizes = b.sizes.list(b.op);
        let buf_len = session::buffer_len(&sizes);
        let model = ModelConfig {
            wire_delay_ns: None,
            exec: ExecMode::AfterPost,
            ..Default::default()
        };
        let dev = session::open_device(plan, model, obs)?;
        let kinds = session::backends(&dev, plan.backends)?;
        if b.events && plan.backends == crate::probe::Backends::Only(BackendKind::Direct) {
            return Err(ProbeError::Usage(
                "-e/--events: completion events are libibverbs' completion channel: --backend verbs, wr or all".into(),
            ));
        }
        let rows = session::event_rows(&dev, &kinds, b.events, plan.peer != PeerSpec::Loopback)?;
        let mode = session::direct_mode(plan.db_mode);
        let mut set = Setup {
            dev,
            kinds,
            rows,
            mode,
            sizes,
            buf_len,
            inline_limit: INLINE,
        };
        set.inline_limit = set.check_limits(b, obs)?;
        Ok(set)
    }

    /// The sizes, the memory and (model0) the open files the run needs, checked against the
    /// device and the process's limits; the inline limit, checked against the QPs'.
    fn check_limits(&self, b: &BwPlan, obs: &mut dyn Observer) -> Result<u32, ProbeError> {
        for s in &self.sizes {
            self.dev.check_size(*s)?;
        }
        check_memory(b.iters, b.threads, b.qps, b.bidirectional, self.buf_len)?;
        if let Some(n) = session::check_open_files(&self.dev, b.threads.saturating_mul(b.qps), || {
            format!("-q {} x --threads {}", b.qps, b.threads)
        })? {
            obs.note(&n);
        }
        let inline_limit = b.inline_size.unwrap_or(INLINE);
        if inline_limit > INLINE && b.op.carries_payload() {
            return Err(ProbeError::Usage(format!(
                "-I {inline_limit} exceeds the QPs' max_inline_data {INLINE} (what bandwidth QPs are made with)"
            )));
        }
        Ok(inline_limit)
    }

    /// The environment's warnings, then UD's limits (sizes over the MTU refused, or with -a
    /// left out, said so) and -e on model0.
    fn warnings(&mut self, plan: &Plan, b: &BwPlan, mut warnings: Vec<String>) -> Result<Vec<String>, ProbeError> {
        if let Some(n) = session::ud_checks(&self.dev, plan, &mut self.sizes, matches!(b.sizes, Sizes::All))? {
            warnings.push(n);
        }
        if let Some(w) = crate::workers::oversubscription(b.threads as usize) {
            warnings.push(w);
        }
        if b.events && self.dev.is_model() {
            warnings.push(
                "-e on model0: the model executes each WQE in the poster's thread right after the post, so completions \
                 are mostly there before any wait (the JSON's summary.event_waits counts the waits); on a NIC or rxe \
                 the threads block for the events"
                    .into(),
            );
        }
        Ok(warnings)
    }
}

/// The peer's side of the run: none in one process; else the peer and every backend's threads'
/// QPs connected to its.
struct Sides<'a> {
    net: Option<(&'a mut dyn Rendezvous, Ends)>,
    /// -R: the connections through the CM, kept until the run ends.
    cm: Option<CmLink>,
    /// Client/server: every QP's address and the peer's, the JSON's `qps` (in one process the
    /// QPs are made anew for each run: none here).
    qps: Vec<serde_json::Value>,
}

impl<'a> Sides<'a> {
    /// Client and server: the peer reached (`peer`, else TCP as the plan says, kept in `tcp`),
    /// the handshake, then every thread's QPs of every backend connected.
    fn connect(
        plan: &Plan,
        b: &BwPlan,
        set: &Setup,
        peer: Option<&'a mut (dyn Rendezvous + '_)>,
        tcp: &'a mut Option<crate::oob::Peer>,
        obs: &mut dyn Observer,
    ) -> Result<Self, ProbeError> {
        if plan.peer == PeerSpec::Loopback {
            return Ok(Sides {
                net: None,
                cm: None,
                qps: Vec::new(),
            });
        }
        let rdv: &'a mut dyn Rendezvous = match peer {
            Some(p) => p,
            None => tcp.insert(session::tcp_peer(plan, obs)?.ok_or_else(|| ProbeError::Invalid("no peer".into()))?),
        };
        let mut hello = hello(b, set);
        session::connection_params(&mut hello, plan);
        let mut phase = session::Phase::new(rdv, plan.oob_timeout);
        let (ends, cm, qps) = connect(&mut phase, &hello, (plan, b), set)?;
        Ok(Sides {
            net: Some((rdv, ends)),
            cm,
            qps,
        })
    }

    /// This side's role: in one process, or the peer's client or server.
    fn role(&self, plan: &Plan) -> Role {
        match (&self.net, &plan.peer) {
            (None, _) => Role::Loopback,
            (Some((p, _)), PeerSpec::Listen { .. }) => Role::Server(p.peer_name()),
            (Some((p, _)), _) => Role::Client(p.peer_name()),
        }
    }

    /// Where this side's buffers connected to the peer sit, named `{row}.t{i}.q{j}` (none in one
    /// process: each run makes its own, in its result).
    fn regions(&self, rows: &[(BackendKind, bool)]) -> Vec<crate::probe::Region> {
        let mut v = Vec::new();
        for (threads, (k, ev)) in self.net.iter().flat_map(|(_, all)| all.iter()).zip(rows) {
            for (i, qps) in threads.iter().enumerate() {
                for (j, e) in qps.iter().enumerate() {
                    v.push(crate::probe::Region {
                        name: format!("{}{}.t{i}.q{j}", k.as_str(), if *ev { "-e" } else { "" }),
                        placement: e.placement(),
                    });
                }
            }
        }
        v
    }

    /// The connected QPs' states as the device reads them back (none in one process).
    fn describe(&self) -> Vec<String> {
        self.net
            .iter()
            .flat_map(|(_, all)| all.iter().flatten().flatten().map(|e| e.describe()))
            .collect()
    }
}

/// The report before the runs: what runs, on what, against whom.
fn new_report(
    plan: &Plan,
    b: &BwPlan,
    set: &Setup,
    sides: &Sides<'_>,
    env: crate::report::env::Fingerprint,
    clock: crate::clock::Calibration,
    warnings: Vec<String>,
) -> Report {
    let role = sides.role(plan);
    let params = json!({
        "scenario": "bw", "window_ms": b.window.as_micros() as f64 / 1e3, "min_duration_ms": b.min_duration.as_millis() as u64,
        "inline_limit": set.inline_limit, "port_active_mtu_bytes": session::active_mtu(&set.dev), "model_exec": set.dev.is_model().then_some("after_post"), "op": b.op.as_str(), "iters": b.iters,
        "tx_depth": b.tx_depth, "rx_depth": rx_depth(b), "postlist": b.postlist, "cq_mod": b.cq_mod, "qps_per_thread": b.qps, "threads": b.threads,
        "bidirectional": b.bidirectional, "backends": set.kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
        "db_mode": set.mode.as_str(), "loopback": sides.net.is_none(), "path": crate::probe::report::path_json(&plan.path),
        "huge_pages": plan.huge_pages, "mr_per_qp": true, "run_infinitely": b.run_infinitely,
        "duration_s": b.duration.map(|d| d.as_secs_f64()), "events": b.events,
        "transport": plan.transport.as_str(),
        "rdma_cm": sides.cm.as_ref().map(|c| c.json()),
        "qps": sides.qps,
        "role": role.as_str(),
        "peer": match &role { Role::Loopback => None, Role::Client(p) | Role::Server(p) => Some(p.clone()) },
    });
    Report {
        plan: plan.clone(),
        role,
        device: set.dev.name(),
        provider: set.dev.provider(),
        is_model: set.dev.is_model(),
        backends: set.kinds.clone(),
        env,
        clock,
        warnings,
        params,
        runs: Runs::Bw(Vec::new()),
        intervals: Vec::new(),
        short_runs: Vec::new(),
        end_error: None,
        counters: None,
        regions: sides.regions(&set.rows),
    }
}

/// What one size on one backend row came to.
// one per run, moved once into the report: not worth a box
#[allow(clippy::large_enum_variant)]
enum Outcome {
    /// A result, for the report.
    Measured(BwResult),
    /// Run, with nothing to report on this side (the server).
    Served,
    /// The measurement ends here: stopped (the runs measured stand).
    Ended,
}

/// One bandwidth measurement under way: the rounds of sizes and backend rows, each row's count
/// of messages, and how the rounds end.
struct Run<'r> {
    plan: &'r Plan,
    b: &'r BwPlan,
    set: &'r Setup,
    before: &'r Option<(&'static str, crate::model::Counters)>,
    /// Client/server (else both ends in this process).
    network: bool,
    /// This side reports the results (in one process, or the client).
    client: bool,
    /// Client/server with -D or --run-infinitely: the runs are sized by the client.
    sized: bool,
    /// Each row's messages per QP: -n, or with --run-infinitely carried from its last round.
    iters: Vec<u64>,
    /// --run-infinitely between two processes: a stop agreed after a run.
    stopping: bool,
    /// A second stop cut the exchange short: the end is then not clean.
    unclean: bool,
    /// What a client/server --run-infinitely's runs watch instead of [`INTERRUPTED`]: a stop
    /// ends the run under way first (the peer would wait for messages that do not come), then
    /// both ends.
    never: AtomicBool,
}

impl<'r> Run<'r> {
    fn new(
        plan: &'r Plan,
        b: &'r BwPlan,
        set: &'r Setup,
        before: &'r Option<(&'static str, crate::model::Counters)>,
        report: &Report,
    ) -> Self {
        let network = plan.peer != PeerSpec::Loopback;
        Run {
            plan,
            b,
            set,
            before,
            network,
            client: !matches!(report.role, Role::Server(_)),
            sized: network && (b.duration.is_some() || b.run_infinitely),
            iters: vec![b.iters; set.rows.len()],
            stopping: false,
            unclean: false,
            never: AtomicBool::new(false),
        }
    }

    /// Every size on every row, in rounds until stopped with --run-infinitely, each result into
    /// the report as it comes.
    fn rounds(&mut self, sides: &mut Sides<'_>, report: &mut Report, obs: &mut dyn Observer) -> Result<(), ProbeError> {
        let set = self.set;
        loop {
            for &size in &set.sizes {
                // a count sized for one size is not another's: each size starts from -n (only
                // --run-infinitely's rounds, of one size, carry theirs)
                if !self.b.run_infinitely {
                    self.iters = vec![self.b.iters; set.rows.len()];
                }
                for ki in 0..set.rows.len() {
                    if self.row(size, ki, sides, report, obs)?.is_break() {
                        return Ok(());
                    }
                }
            }
            // between two processes a stop is agreed after a run (in `sized`): a side that ended
            // the round on its own stop would leave the other in the next
            if !self.b.run_infinitely || (!self.network && INTERRUPTED.load(Ordering::Relaxed)) {
                return Ok(());
            }
        }
    }

    /// One size on row `ki`: measured, its result recorded; whether the rounds go on.
    fn row(
        &mut self,
        size: u32,
        ki: usize,
        sides: &mut Sides<'_>,
        report: &mut Report,
        obs: &mut dyn Observer,
    ) -> Result<ControlFlow<()>, ProbeError> {
        let p = self.params(size, self.iters[ki]);
        let outcome = match sides.net.as_mut() {
            None => self.in_process(ki, &p, report)?,
            Some((rdv, all)) => self.against_peer(&mut **rdv, all, ki, p, report)?,
        };
        match outcome {
            Outcome::Measured(r) => self.record(size, ki, r, report, obs),
            Outcome::Served => {}
            Outcome::Ended => return Ok(ControlFlow::Break(())),
        }
        Ok(if self.stopping {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        })
    }

    /// The parameters of one run of `size` with `iters` messages per QP.
    fn params(&self, size: u32, iters: u64) -> BwParams {
        let b = self.b;
        BwParams {
            op: b.op,
            size,
            iters,
            tx_depth: b.tx_depth,
            rx_depth: b.rx_depth,
            postlist: b.postlist,
            cq_mod: b.cq_mod,
            inline: b.op.carries_payload() && size <= self.set.inline_limit,
            bidirectional: b.bidirectional,
            stall: self.plan.stall,
            window: b.window,
            // both ends of a client/server run must agree on the iterations: no resizing
            min_duration: if self.network { Duration::ZERO } else { b.min_duration },
            no_peak: b.no_peak,
            unreliable: self.plan.transport != crate::backend::Transport::Rc,
        }
    }

    /// Both ends in this process: the run (repeated with more messages while shorter than the
    /// minimum). A failure writes the diagnostics bundle; a stop ends an endless run (the
    /// rounds measured stand, none when it is stopped during its first run).
    fn in_process(&self, ki: usize, p: &BwParams, report: &Report) -> Result<Outcome, ProbeError> {
        let (b, set) = (self.b, self.set);
        let shape = (b.threads as usize, b.qps as usize);
        match run_bw_with(
            &set.dev,
            set.rows[ki],
            p,
            shape,
            set.buf_len,
            set.mode,
            &report.clock,
            &INTERRUPTED,
        ) {
            Ok(r) => Ok(Outcome::Measured(r)),
            Err(_) if b.run_infinitely && INTERRUPTED.load(Ordering::Relaxed) => Ok(Outcome::Ended),
            Err(e) => Err(diag::failed(self.bundle(Vec::new()), e.into())),
        }
    }

    /// Against the peer: the run, sized by the client when it must be; the row's count kept for
    /// its next round; the client's result from its threads' summaries.
    fn against_peer(
        &mut self,
        rdv: &mut dyn Rendezvous,
        all: &mut Ends,
        ki: usize,
        mut p: BwParams,
        report: &mut Report,
    ) -> Result<Outcome, ProbeError> {
        let Some(out) = self.sized(rdv, all, ki, &mut p, report)? else {
            return Ok(Outcome::Ended);
        };
        self.iters[ki] = p.iters;
        if !self.client {
            return Ok(Outcome::Served);
        }
        let (k, ev) = self.set.rows[ki];
        let mut r = client_result(self.b, k, &p, summarize(&out, p.size, self.b.cq_mod, report.clock.hz));
        r.completion = ev.then(|| "events".into());
        Ok(Outcome::Measured(r))
    }

    /// Row `ki`'s run against the peer, until it stands. -D, --run-infinitely: the client sizes
    /// the runs to last at least D (a run too short is run again with more messages, as in one
    /// process) and tells the server (both ends run the same messages); with --run-infinitely a
    /// stop on either side is agreed after the run. `None`: the run ends without this row: a
    /// second stop while the peer's word was awaited (what was measured stands, said as its
    /// unclean end), or the stop found this run shorter than -D (a warning says so).
    fn sized(
        &mut self,
        rdv: &mut dyn Rendezvous,
        all: &mut Ends,
        ki: usize,
        p: &mut BwParams,
        report: &mut Report,
    ) -> Result<Option<Vec<ThreadResult>>, ProbeError> {
        let mut resizes = 0;
        loop {
            let out = self.one_side(rdv, all, ki, p, report)?;
            if !self.sized {
                return Ok(Some(out));
            }
            let took = summarize(&out, p.size, self.b.cq_mod, report.clock.hz).seconds;
            let word = (self.client, p.iters, took, resizes);
            match resize(rdv, word, (self.plan, self.b), self.set.buf_len) {
                Ok(Next::Again(n)) => {
                    p.iters = n;
                    resizes += 1;
                }
                Ok(Next::Stands) => return Ok(Some(out)),
                Ok(Next::Stop { short }) => {
                    self.stopping = true;
                    if short {
                        // a round the stop cut before it was sized to -D is not a measurement
                        // of -D: left out, and said
                        report.warnings.push(format!(
                            "the round under way at the stop ran {:.0} ms, shorter than -D ({:.0} ms), \
                             and was about to be run again: not reported",
                            took * 1e3,
                            self.b.min_duration.as_secs_f64() * 1e3
                        ));
                        return Ok(None);
                    }
                    return Ok(Some(out));
                }
                Err(e) if self.b.run_infinitely && INTERRUPTED.load(Ordering::Relaxed) => {
                    report.end_error = Some(e.to_string());
                    self.unclean = true;
                    return Ok(None);
                }
                Err(e) => return Err(session::fail(rdv, e)),
            }
        }
    }

    /// This side's threads of row `ki` run once against the peer's. A failure is told to the
    /// peer and writes the diagnostics bundle with every connected QP's state.
    fn one_side(
        &self,
        rdv: &mut dyn Rendezvous,
        all: &mut Ends,
        ki: usize,
        p: &BwParams,
        report: &Report,
    ) -> Result<Vec<ThreadResult>, ProbeError> {
        let intr = if self.network && self.b.run_infinitely {
            &self.never
        } else {
            &INTERRUPTED
        };
        match bw_side(&mut all[ki], p, self.client, &report.clock, intr) {
            Ok(out) => Ok(out),
            Err(e) => {
                let e = session::fail(rdv, e.into());
                let states = all.iter().flatten().flatten().map(|e| e.describe()).collect();
                Err(diag::failed(self.bundle(states), e))
            }
        }
    }

    /// A result into the report (a run shorter than the minimum named among the short runs),
    /// its count kept for the row's next round; the observer hears it.
    fn record(&mut self, size: u32, ki: usize, r: BwResult, report: &mut Report, obs: &mut dyn Observer) {
        let s = &r.summary;
        if s.seconds * 1e3 < self.b.min_duration.as_millis() as f64 {
            let k = self.set.rows[ki].0;
            report
                .short_runs
                .push(format!("{size} B {} ({:.1} ms)", k.as_str(), s.seconds * 1e3));
        }
        self.iters[ki] = r.iters;
        if let Runs::Bw(v) = &mut report.runs {
            v.push(r);
        }
        obs.finished(report, report.runs.len() - 1);
    }

    /// The diagnostics bundle of this run, with the QPs' states given.
    fn bundle(&self, qp_states: Vec<String>) -> diag::Bundle<'r> {
        diag::Bundle::of(self.plan, &self.set.dev, self.before, qp_states)
    }

    /// The bundle of a good run, when asked for.
    fn diag(&self, sides: &Sides<'_>, obs: &mut dyn Observer) {
        if let Some(dir) = &self.plan.diag {
            diag::write_noted(dir, &self.bundle(sides.describe()), obs);
        }
    }
}

/// Refuses (exit 2, naming -n and -q) a bandwidth run whose samples, and per QP pair its two
/// buffers and its queues (measured on model0: about 220 KiB per verbs QP, 70 KiB per direct QP,
/// with 4 KiB messages), would not fit in memory.
pub(in crate::probe) fn check_memory(
    iters: u64,
    threads: u64,
    qps: u64,
    bidirectional: bool,
    buf_len: usize,
) -> Result<(), ProbeError> {
    let (need, per_pair) = memory_need(iters, threads, qps, bidirectional, buf_len);
    session::check_memory(need, || {
        format!(
            "-n {iters} x {threads} thread(s) x {qps} QP(s) ({} B per message; {} KiB of buffers and queues per QP pair)",
            session::BW_SAMPLE_BYTES,
            per_pair / 1024
        )
    })
}

/// The bytes a bandwidth run takes: its samples (`iters` messages per QP, both ways when
/// `bidirectional`) and its QP pairs' buffers and queues; and the latter per pair.
pub(in crate::probe) fn memory_need(
    iters: u64,
    threads: u64,
    qps: u64,
    bidirectional: bool,
    buf_len: usize,
) -> (u64, u64) {
    let pairs = threads.saturating_mul(qps);
    let per_pair = (2 * buf_len as u64).saturating_add(2 * QP_OVERHEAD_BYTES);
    let need = iters
        .saturating_mul(pairs)
        .saturating_mul(if bidirectional { 2 } else { 1 })
        .saturating_mul(session::BW_SAMPLE_BYTES)
        .saturating_add(pairs.saturating_mul(per_pair));
    (need, per_pair)
}

/// A client's result of one size and backend, from its threads' summaries.
fn client_result(b: &BwPlan, k: BackendKind, p: &BwParams, summary: crate::scenario::bw::BwSummary) -> BwResult {
    BwResult {
        scenario: "bw".into(),
        backend: k.as_str().into(),
        op: b.op.cli_name().into(),
        verb: b.op.as_str().into(),
        size: p.size,
        threads: b.threads as usize,
        qps_per_thread: b.qps as usize,
        tx_depth: b.tx_depth,
        rx_depth: crate::scenario::bw::rx_depth_given(p),
        postlist: b.postlist,
        cq_mod: b.cq_mod,
        bidirectional: b.bidirectional,
        inline: p.inline,
        iters: p.iters,
        min_duration_ms: 0.0,
        summary,
        completion: None,
        memory_regions: Vec::new(),
    }
}

/// Each side's word after a run sized by the client (-D, --run-infinitely between two
/// processes): the client's, run again with `iters` messages per QP (`again`) or the run stands;
/// both sides', whether this side stops (--run-infinitely: a stop ends both after the run).
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Resize {
    again: bool,
    iters: u64,
    stop: bool,
}

/// What follows a sized run.
enum Next {
    /// It is run again with this many messages per QP.
    Again(u64),
    /// It stands.
    Stands,
    /// The run ends (--run-infinitely: a stop on either side); `short`: this run was shorter
    /// than -D and would have been run again (the client's word): it does not stand.
    Stop {
        /// Shorter than -D.
        short: bool,
    },
}

/// After a run of `iters` that took `took` s (the `resizes`-th resize): the client decides
/// whether it is run again with more messages (-D's minimum not reached) and tells the server,
/// which checks what it is told; both check the memory the new count needs. The server waits
/// while the client's run goes on (a one-sided operation's server has nothing to do): its
/// deadline covers a run of twice the minimum. With --run-infinitely each side also says
/// whether it stops (a stop ends both after this run), and a stop does not cut this wait short.
fn resize(
    rdv: &mut dyn Rendezvous,
    (client, iters, took, resizes): (bool, u64, f64, u32),
    (plan, b): (&Plan, &BwPlan),
    buf_len: usize,
) -> Result<Next, ProbeError> {
    let next = match client && resizes < BW_RESIZES {
        true => bw_resized(iters, took, b.min_duration.as_secs_f64()),
        false => None,
    };
    let stop = b.run_infinitely && INTERRUPTED.load(Ordering::Relaxed);
    let mine = Resize {
        again: next.is_some() && !stop,
        iters: next.unwrap_or(iters),
        stop,
    };
    let _hold = b.run_infinitely.then(crate::signals::hold);
    rdv.set_timeout(plan.oob_timeout + plan.stall + b.min_duration.mul_f64(2.0))?;
    let theirs: Resize = session::exchange_checked(rdv, &mine)?;
    rdv.set_timeout(plan.oob_timeout)?;
    if b.run_infinitely && (mine.stop || theirs.stop) {
        return Ok(Next::Stop {
            short: client && next.is_some(),
        });
    }
    let word = if client { mine } else { theirs };
    if !word.again {
        return Ok(Next::Stands);
    }
    if !client && (word.iters <= iters || word.iters > MAX_BW_ITERS || resizes >= BW_RESIZES) {
        return Err(ProbeError::Invalid(format!(
            "the client {} asked for a run of {} messages per QP after one of {iters} (resize {}): refused \
             (a resize grows the run, up to {MAX_BW_ITERS} messages, at most {BW_RESIZES} times)",
            rdv.peer_name(),
            word.iters,
            resizes + 1
        )));
    }
    check_memory(word.iters, b.threads, b.qps, b.bidirectional, buf_len)?;
    Ok(Next::Again(word.iters))
}

/// The receives each receiving QP keeps posted (a run of SENDs or immediates; `None` for the
/// others, which consume none).
pub(crate) fn rx_depth(b: &BwPlan) -> Option<u32> {
    b.op.needs_recv()
        .then(|| crate::scenario::bw::recv_depth(b.rx_depth, b.tx_depth))
}

/// The parameters both ends of a bandwidth run must share.
fn hello(b: &BwPlan, set: &Setup) -> Hello {
    let own = [
        ("iters", b.iters.to_string()),
        ("tx_depth", b.tx_depth.to_string()),
        (
            "rx_depth",
            rx_depth(b).map_or_else(|| "none (no receives)".into(), |r| r.to_string()),
        ),
        ("postlist", b.postlist.to_string()),
        ("cq_mod", b.cq_mod.to_string()),
        ("qps", b.qps.to_string()),
        ("threads", b.threads.to_string()),
        ("bidirectional", b.bidirectional.to_string()),
        (
            "duration_s",
            b.duration.map_or("none".into(), |d| d.as_secs_f64().to_string()),
        ),
        ("run_infinitely", b.run_infinitely.to_string()),
        ("events", b.events.to_string()),
    ];
    let (kinds, mode) = (&set.kinds, set.mode);
    session::hello("bw", b.op, &set.sizes, own, kinds, mode, set.inline_limit, set.buf_len)
}

/// The handshake, then every thread's QPs of every backend exchanged and connected (-R: through
/// the connection manager), then the barrier.
fn connect(
    rdv: &mut dyn Rendezvous,
    hello: &Hello,
    (plan, b): (&Plan, &BwPlan),
    set: &Setup,
) -> Result<(Ends, Option<CmLink>, Vec<serde_json::Value>), ProbeError> {
    let (dev, buf_len, mode) = (&set.dev, set.buf_len, set.mode);
    rdv.agree(hello)?;
    let mut cm = if plan.rdma_cm {
        Some(CmLink::open(rdv, plan, dev)?)
    } else {
        None
    };
    let (mut all, mut qps) = (Vec::new(), Vec::new());
    for &(k, ev) in &set.rows {
        let mut threads = Vec::new();
        for _ in 0..b.threads {
            let mut ends = Vec::new();
            for _ in 0..b.qps {
                let half = if ev {
                    HalfEnd::with_events(dev, k, b.op, buf_len)?
                } else {
                    HalfEnd::new(dev, k, b.op, buf_len, mode)?
                };
                let mine = half.info(dev)?;
                let theirs = session::exchange_qp(rdv, &mine)?;
                let label = format!("{}{}", k.as_str(), if ev { "-e" } else { "" });
                let unused = session::psn_lid_gid_unused(cm.is_some(), dev, k);
                qps.push(session::qp_addrs_json(&label, &mine, &theirs, unused));
                ends.push(match &mut cm {
                    Some(link) => link.connect(rdv, half, (dev, b.op), &theirs, plan.device.gid_index)?,
                    None => half.connect(dev, b.op, &theirs)?,
                });
            }
            threads.push(ends);
        }
        all.push(threads);
    }
    // neither side posts before the other's QPs are connected
    let connected: usize = all.iter().flatten().map(|t| t.len()).sum();
    rdv.barrier(connected as u32)?;
    Ok((all, cm, qps))
}

//! A suite from its plan to its report, in steps: the matrix and the device checked and opened,
//! the heading; per transport the latency and the bandwidth points; the post cost and the
//! key-value points each on a handle of its own; the results document with the device's
//! counters over the whole suite.

use super::{op_name, overhead_line, Matrix, MatrixSpec, Part, SuitePlan, SuiteReport, POSTLISTS};
use crate::backend::setup::{Dev, INLINE};
use crate::backend::{BackendKind, OpKind, Transport};
use crate::clock::Calibration;
use crate::mlx5::sq::DbMode;
use crate::model::{Counters, ExecMode, ModelConfig};
use crate::probe::check::counters::{self, CounterDelta};
use crate::probe::measure::{bw, kv, lat, post_cost, session};
use crate::probe::report::result_doc;
use crate::probe::{Backends, KvThreads, LatPlan, Observer, Plan, ProbeError, Quiet, Scenario, INTERRUPTED};
use crate::report::env::Fingerprint;
use crate::report::{Hist, Interval};
use crate::scenario::bw::BwParams;
use crate::scenario::lat::LatParams;
use crate::scenario::post_cost::PostCostParams;
use crate::scenario::runner::{run_blocks, run_bw, run_post_cost_interleaved, AnyPair, LatPair, LatResult, Length};
use serde_json::json;
use std::time::{Duration, Instant};

/// The device's counters before a part of the suite, where they come from.
type Before = Option<(&'static str, Counters)>;

/// A part's own device handle and its counters before it (model0's other handles only: a
/// NIC's counters are the port's, counted once by the suite's own handle).
pub(super) type OwnDev = Option<(Dev, Before)>;

/// A suite under way: the matrix, the device and its backends, the clock; the report, the
/// runs' records as they come and the steps told so far.
pub(super) struct Suite {
    m: Matrix,
    /// The plan the device is opened with (the suite's device, every backend).
    plan: Plan,
    dev: Dev,
    kinds: Vec<BackendKind>,
    cal: Calibration,
    env: Fingerprint,
    warnings: Vec<String>,
    before: Before,
    r: SuiteReport,
    runs: Vec<serde_json::Value>,
    step: usize,
    total: usize,
}

/// model0 as the suite's latency and bandwidth parts run it: executing after the post call.
fn after_post() -> ModelConfig {
    ModelConfig {
        wire_delay_ns: None,
        exec: ExecMode::AfterPost,
        ..Default::default()
    }
}

impl Suite {
    /// The matrix checked, the device opened (its notes kept, first among the warnings), the
    /// backends, the points checked against the device, the counters sampled, the clock
    /// calibrated; `obs` hears the heading.
    pub(super) fn open(sp: &SuitePlan, obs: &mut dyn Observer) -> Result<Self, ProbeError> {
        sp.matrix.check().map_err(ProbeError::Usage)?;
        let mut m = Matrix::of(sp);
        let plan = Plan {
            device: sp.device.clone(),
            backends: Backends::All,
            ..Plan::loopback(Scenario::Lat(LatPlan::new(OpKind::Write, 8)))
        };
        let mut notes = Vec::new();
        let dev = session::open_device(&plan, after_post(), &mut Notes(&mut notes))?;
        let kinds = suite_backends(&dev, sp.matrix.backends.as_deref())?;
        m.ud_mtu = session::ud_mtu(&dev);
        check_points(&m, &dev)?;
        check_memory(&m, kinds.len() as u64)?;
        notes.extend(kv_checks(&m, &dev)?);
        let before = counters::sample(&dev);
        let (cal, env) = session::calibrate(&dev, true)?;
        let mut warnings = env.warnings();
        warnings.splice(0..0, notes);
        if m.parts.contains(&Part::Bw) {
            warnings.extend(crate::workers::oversubscription(m.threads as usize));
        }
        let kv_threads = m.kv_points().iter().map(|k| u64::from(k.clients + k.workers)).max();
        warnings.extend(
            kv_threads
                .filter(|_| m.kv_threads == KvThreads::PerRole)
                .and_then(kv_sharing),
        );
        obs.heading(&heading(sp, &m, &dev, &kinds, &warnings));
        let r = SuiteReport {
            doc: json!(null),
            intervals: Vec::new(),
            summary: Vec::new(),
            bw_summary: Vec::new(),
            pc_summary: Vec::new(),
            kv_summary: Vec::new(),
            kv_threads: m.kv_threads,
            backends: kinds.clone(),
            device_backends: dev.backends(),
            no_direct: dev.supports(BackendKind::Direct).err().map(|e| e.to_string()),
            device: (dev.name(), dev.provider()),
            started: Instant::now(),
        };
        let total = m.steps();
        Ok(Suite {
            m,
            plan,
            dev,
            kinds,
            cal,
            env,
            warnings,
            before,
            r,
            runs: Vec::new(),
            step: 0,
            total,
        })
    }

    /// Step `what` starts: `obs` hears its number.
    fn next(&mut self, obs: &mut dyn Observer, what: &str) {
        self.step += 1;
        obs.step(self.step, self.total, what);
    }

    /// The latency and bandwidth points, transport by transport (the device's QPs made for
    /// each in turn, then RC again).
    pub(super) fn points(&mut self, obs: &mut dyn Observer) -> Result<(), ProbeError> {
        for t in self.m.transports.clone() {
            self.dev.opts_mut().transport = t;
            if self.m.parts.contains(&Part::Lat) {
                for op in self.m.lat_ops.clone().into_iter().filter(|o| t.allows(*o)) {
                    self.lat_op(op, t, obs)?;
                }
            }
            if self.m.parts.contains(&Part::Bw) {
                for op in self.m.bw_ops.clone().into_iter().filter(|o| t.allows(*o)) {
                    for size in self.m.sizes_on(op, false, t) {
                        self.next(obs, &format!("bw {} {size} B{}", op_name(op), suffix(t)));
                        self.bw_point(op, size, t)?;
                    }
                }
            }
        }
        self.dev.opts_mut().transport = Transport::Rc;
        Ok(())
    }

    /// One latency operation on transport `t`: a pair per backend, made once for its sizes,
    /// then each size's point with its summary line.
    fn lat_op(&mut self, op: OpKind, t: Transport, obs: &mut dyn Observer) -> Result<(), ProbeError> {
        let sizes = self.m.sizes_on(op, true, t);
        let buf = session::buffer_len(&sizes);
        let mut pairs = Vec::new();
        for k in &self.kinds {
            pairs.push(LatPair::new(*k, AnyPair::new(&self.dev, *k, op, buf, DbMode::Bf)?));
        }
        let max_inline = pairs.iter().map(|p| p.pair.max_inline()).min().unwrap_or(0);
        for size in sizes {
            let what = format!("lat {} {size} B{}", op_name(op), suffix(t));
            self.next(obs, &what);
            let p = LatParams {
                op,
                size,
                iters: self.m.iters,
                warmup: 100.min(self.m.iters),
                inline: op.carries_payload() && size <= max_inline,
                stall: Duration::from_secs(10),
                anatomy: false,
            };
            let rs = self.lat_point(&mut pairs, &p, t)?;
            self.r.summary.push(overhead_line(&what, &rs));
            for x in rs {
                self.runs.push(on(tagged(&x, "lat")?, t));
            }
        }
        Ok(())
    }

    /// One latency point: interleaved blocks on every backend's pair, an interval per block and
    /// backend (its time from the suite's start).
    fn lat_point(&mut self, pairs: &mut [LatPair], p: &LatParams, t: Transport) -> Result<Vec<LatResult>, ProbeError> {
        let (name, size, tn) = (op_name(p.op), p.size, suffix(t));
        let t_base = self.r.started.elapsed().as_secs_f64();
        let intervals = &mut self.r.intervals;
        let mut on_block = |k: &str, v: &[f64], t0: f64, t1: f64| {
            let mut h = Hist::new();
            v.iter().for_each(|&x| h.record(x));
            intervals.push(Interval {
                tag: format!("lat-{name}-{size}-{k}{}", tn.replace(' ', "-")),
                start_s: t_base + t0,
                duration_s: t1 - t0,
                hist: h,
            });
        };
        let len = match self.m.duration {
            Some(time) => Length::Duration { time, block: 1000 },
            None => Length::Iterations {
                iters: self.m.iters,
                blocks: 10,
            },
        };
        Ok(run_blocks(pairs, p, len, &self.cal, &INTERRUPTED, &mut on_block)?)
    }

    /// One bandwidth point: each backend in turn, at least the matrix's minimum duration.
    fn bw_point(&mut self, op: OpKind, size: u32, t: Transport) -> Result<(), ProbeError> {
        let buf = session::buffer_len(&[size]);
        let p = BwParams {
            op,
            size,
            iters: self.m.bw_messages_at(size),
            tx_depth: 128,
            rx_depth: None,
            postlist: 1,
            cq_mod: 64,
            inline: op.carries_payload() && size <= INLINE,
            bidirectional: false,
            stall: Duration::from_secs(10),
            window: Duration::from_millis(1),
            // long enough for 50 (quick) or 200 one-millisecond windows, or -D
            min_duration: Duration::from_millis(self.m.bw_min_ms),
            no_peak: false,
            unreliable: t != Transport::Rc,
        };
        let (threads, qps) = (self.m.threads as usize, self.m.qps as usize);
        let mut line = format!("  {:<22}", format!("bw {} {size} B{}", op_name(op), suffix(t)));
        for k in &self.kinds {
            let x = run_bw(
                &self.dev,
                *k,
                &p,
                threads,
                qps,
                buf,
                DbMode::Bf,
                &self.cal,
                &INTERRUPTED,
            )?;
            line += &format!(
                " {}: {:.0} (worst {:.0})",
                k.as_str(),
                x.summary.bw_avg_mib_s,
                x.summary.bw_min_window_mib_s
            );
            self.runs.push(on(tagged(&x, "bw")?, t));
        }
        self.r.bw_summary.push(line);
        Ok(())
    }

    /// The post cost at each postlist, on a device handle of its own: model0's in deferred mode
    /// (so only the post is timed), a NIC opened again; with its counters before (model0).
    pub(super) fn post_cost(&mut self, obs: &mut dyn Observer) -> Result<OwnDev, ProbeError> {
        if !self.m.parts.contains(&Part::PostCost) {
            return Ok(None);
        }
        let d = if self.dev.is_model() {
            let deferred = ModelConfig {
                exec: ExecMode::Deferred,
                ..after_post()
            };
            Dev::open(Some("model0"), 1, None, deferred)?.0
        } else {
            session::open_device(&self.plan, after_post(), &mut Quiet)?
        };
        let pc_before = counters::sample(&d).filter(|_| self.dev.is_model());
        for postlist in POSTLISTS {
            self.next(obs, &format!("post-cost postlist {postlist}"));
            let mut line = format!("  {:<22}", format!("post-cost postlist {postlist}"));
            let p = PostCostParams {
                op: OpKind::Write,
                size: 8,
                postlist,
                inline: true,
                cq_mod: 32,
                blocks: self.m.pc_blocks,
                stall: Duration::from_secs(10),
            };
            // every backend on this postlist, interleaved
            let members: Vec<_> = self.kinds.iter().map(|&k| (k, DbMode::Bf)).collect();
            for x in run_post_cost_interleaved(&d, &members, &p, &self.cal)? {
                line += &format!(" {}: {:.2}", x.backend, x.per_wqe_ns.p50);
                self.runs.push(tagged(&x, "post_cost")?);
            }
            self.r.pc_summary.push(line);
        }
        Ok(Some((d, pc_before)))
    }

    /// The key-value points on a device handle of their own (model0's executing a WQE in the
    /// thread that rings its doorbell, as `kv` runs it; a NIC opened again): at each point every
    /// backend the workload runs, one after the other, a record and a summary line.
    pub(super) fn kv(&mut self, obs: &mut dyn Observer) -> Result<OwnDev, ProbeError> {
        let points = self.m.kv_points();
        if points.is_empty() {
            return Ok(None);
        }
        let d = if self.dev.is_model() {
            Dev::open(Some("model0"), 1, None, ModelConfig::default())?.0
        } else {
            session::open_device(&self.plan, ModelConfig::default(), &mut Quiet)?
        };
        let before = counters::sample(&d).filter(|_| self.dev.is_model());
        let kinds = self.kinds.clone();
        for kp in points {
            let what = format!("kv {} client(s) window {}", kp.clients, kp.window);
            self.next(obs, &what);
            let mut line = format!("  {what:<28}");
            for k in &kinds {
                let x = kv::suite_point(&d, *k, &kp, &self.cal)?;
                line += &format!(" {}: {:.3} Mops (p99 {:.0} ns)", k.as_str(), x.mops, x.latency.p99);
                self.runs.push(serde_json::to_value(&x)?);
            }
            self.r.kv_summary.push(line);
        }
        Ok(Some((d, before)))
    }

    /// The results document: the parameters, every run, and the device's counters over the
    /// suite (model0: every handle's, the post cost's and the key-value part's own).
    pub(super) fn document(self, sp: &SuitePlan, own: [OwnDev; 2]) -> Result<SuiteReport, ProbeError> {
        let (m, kinds) = (&self.m, &self.kinds);
        let mut params = json!({ "scenario": "suite", "quick": sp.quick, "backends": kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
                "lat_iters": m.duration.is_none().then_some(m.iters), "bw_min_duration_ms": m.bw_min_ms, "bw_window_ms": 1.0, "post_cost_blocks": m.pc_blocks });
        params["matrix"] = m.to_json(kinds);
        let mut r = self.r;
        r.doc = result_doc(
            &self.env,
            &self.cal,
            &self.warnings,
            params,
            serde_json::Value::from(self.runs),
        )?;
        let mut counters = CounterDelta::since(self.before, &self.dev);
        for part in own {
            if let (Some(c), Some(o)) = (counters.as_mut(), part.and_then(|(d, b)| CounterDelta::since(b, &d))) {
                for (k, v) in o.delta {
                    *c.delta.entry(k).or_default() += v;
                }
            }
        }
        if let Some(c) = counters {
            r.doc["counters"] = serde_json::to_value(c)?;
        }
        Ok(r)
    }
}

/// Refused before anything runs: a matrix with no latency or bandwidth point left on its
/// transports, a size the device cannot carry.
fn check_points(m: &Matrix, dev: &Dev) -> Result<(), ProbeError> {
    let pc_steps = if m.parts.contains(&Part::PostCost) {
        POSTLISTS.len()
    } else {
        0
    };
    if (m.parts.contains(&Part::Lat) || m.parts.contains(&Part::Bw)) && m.steps() == pc_steps + m.kv_points().len() {
        return Err(ProbeError::Usage(format!(
            "--transports/--ops/--sizes: no latency or bandwidth point to run (UC carries send and write, UD send up to \
             the MTU, {} bytes on {})",
            m.ud_mtu,
            dev.name()
        )));
    }
    for s in m.lat_sizes.iter().chain(&m.bw_sizes) {
        dev.check_size(*s)?;
    }
    Ok(())
}

/// Refused before the first point, each naming what to lower: a part whose memory is not there
/// (every latency sample of a point, on every backend; a bandwidth point's samples, QPs and
/// buffers; the post cost's blocks), as `lat`, `bw` and `post-cost` refuse theirs alone. The
/// points run one after the other and give their memory back, so the largest of each part counts.
fn check_memory(m: &Matrix, backends: u64) -> Result<(), ProbeError> {
    if m.parts.contains(&Part::Lat) {
        let b = session::LAT_SAMPLE_BYTES;
        session::check_memory(lat::samples_bytes(m.iters, m.duration, backends), || match m.duration {
            None => format!(
                "suite lat: -n/iters {} ({backends} backend(s), {b} B per iteration and backend)",
                m.iters
            ),
            Some(d) => format!(
                "suite lat: -D/duration_s {} (up to one iteration per {} ns, {b} B each)",
                d.as_secs_f64(),
                session::FASTEST_ITERATION_NS
            ),
        })?;
    }
    if m.parts.contains(&Part::Bw) {
        for op in &m.bw_ops {
            for size in m.sizes(*op, false) {
                let buf = session::buffer_len(&[size]);
                let n = m.bw_messages_at(size);
                let (need, per_pair) = bw::memory_need(n, m.threads, m.qps, false, buf);
                session::check_memory(need, || {
                    format!(
                        "suite bw at {size} B: --bw-messages/bw_messages {n} x --threads {} x -q/qps {} ({} B per \
                         message; {} KiB of buffers and queues per QP pair)",
                        m.threads,
                        m.qps,
                        session::BW_SAMPLE_BYTES,
                        per_pair / 1024
                    )
                })?;
            }
        }
    }
    if m.parts.contains(&Part::PostCost) {
        let configs = (POSTLISTS.len() as u64).saturating_mul(backends);
        let b = post_cost::BLOCK_BYTES;
        session::check_memory(m.pc_blocks.saturating_mul(configs).saturating_mul(b), || {
            format!(
                "suite post-cost: --post-cost-blocks/post_cost_blocks {} x {configs} configurations ({b} B per block)",
                m.pc_blocks
            )
        })?;
    }
    Ok(())
}

/// The key-value points checked before the first point runs ([`kv::suite_check`]); the notes:
/// model0's open-files limit raised.
fn kv_checks(m: &Matrix, dev: &Dev) -> Result<Vec<String>, ProbeError> {
    let mut notes = Vec::new();
    for kp in m.kv_points() {
        notes.extend(kv::suite_check(dev, &kp)?);
    }
    Ok(notes)
}

/// The warning when a per-role key-value point's `n` threads outnumber the CPUs.
fn kv_sharing(n: u64) -> Option<String> {
    let cpus = std::thread::available_parallelism().map_or(1, |c| c.get()) as u64;
    (n > cpus).then(|| {
        format!(
            "kv --kv-threads per-role: up to {n} threads (one per client and worker) on {cpus} CPUs: they take turns, so the kv figures include their scheduling"
        )
    })
}

/// The suite's heading: what runs on what, the matrix when the user changed it, the warnings.
fn heading(sp: &SuitePlan, m: &Matrix, dev: &Dev, kinds: &[BackendKind], warnings: &[String]) -> String {
    let mut heading = format!(
        "rdmaprobe suite{} on {} ({}), backends {}\n",
        if sp.quick { " --quick" } else { "" },
        dev.name(),
        dev.provider(),
        kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
    );
    if sp.matrix != MatrixSpec::default() {
        heading += &format!("matrix: {}\n", m.describe());
    }
    for w in warnings {
        heading += &format!("WARNING: {w}\n");
    }
    heading
}

/// A transport's name as it follows a step's, except RC's (the default).
fn suffix(t: Transport) -> String {
    if t == Transport::Rc {
        String::new()
    } else {
        format!(" {}", t.as_str())
    }
}

/// The backends the suite runs: every one the device runs, or those asked for (each must run).
fn suite_backends(dev: &Dev, asked: Option<&[BackendKind]>) -> Result<Vec<BackendKind>, ProbeError> {
    match asked {
        None => Ok(dev.backends()),
        Some(v) => {
            for k in v {
                dev.supports(*k)
                    .map_err(|e| ProbeError::Usage(format!("--backends {}: {e}", k.as_str())))?;
            }
            Ok(v.to_vec())
        }
    }
}

/// An observer that keeps the notes (the suite puts them first among its warnings).
struct Notes<'a>(&'a mut Vec<String>);

impl Observer for Notes<'_> {
    fn note(&mut self, msg: &str) {
        self.0.push(msg.to_string());
    }
}

/// A run's record with its transport.
fn on(mut v: serde_json::Value, t: Transport) -> serde_json::Value {
    v["transport"] = json!(t.as_str());
    v
}

/// A run's record tagged with its scenario.
fn tagged(run: &impl serde::Serialize, scenario: &str) -> Result<serde_json::Value, ProbeError> {
    let mut v = serde_json::to_value(run).map_err(|e| ProbeError::Render(e.to_string()))?;
    v["scenario"] = json!(scenario);
    Ok(v)
}

//! The standard matrix in one run: latency (send, write, read, atomic), bandwidth (write, send)
//! and post cost, on every backend the device runs, as plans; the results document, the
//! interval log, the plots and the driver-overhead summary.

use super::measure::bw;
use super::measure::session;
use super::report::result_doc;
use super::{Backends, DeviceSpec, Observer, Plan, ProbeError, INTERRUPTED};
use crate::backend::setup::{Dev, INLINE};
pub use matrix::{MatrixSpec, Part};

pub mod matrix;
use crate::backend::{BackendKind, OpKind, Transport};
use crate::mlx5::sq::DbMode;
use crate::model::{ExecMode, ModelConfig};
use crate::report::{Hist, Interval};
use crate::scenario::bw::BwParams;
use crate::scenario::lat::LatParams;
use crate::scenario::post_cost::PostCostParams;
use crate::scenario::runner::{run_blocks, run_bw, run_post_cost, AnyPair, LatPair, LatResult, Length};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};

/// The suite's knobs: the device, the full or the quick matrix, and what the user changed of it.
#[derive(Debug, Clone, Default)]
pub struct SuitePlan {
    /// The device.
    pub device: DeviceSpec,
    /// The small matrix.
    pub quick: bool,
    /// The user's matrix (flags or a file; what it does not name keeps the default).
    pub matrix: MatrixSpec,
}

/// What a suite measured.
pub struct SuiteReport {
    /// The results document (every run, tagged with its scenario).
    pub doc: serde_json::Value,
    /// One latency interval per block and backend.
    pub intervals: Vec<Interval>,
    /// The summary: per latency point each backend's p50/p99 and the driver's overhead.
    pub summary: Vec<String>,
    /// The backends that ran.
    pub backends: Vec<BackendKind>,
    /// The device's name and provider.
    pub device: (String, String),
    /// When it started.
    pub started: Instant,
}

/// The matrix that runs: the user's, and the full or the quick one's defaults for the rest.
struct Matrix {
    parts: Vec<Part>,
    lat_ops: Vec<OpKind>,
    bw_ops: Vec<OpKind>,
    lat_sizes: Vec<u32>,
    bw_sizes: Vec<u32>,
    iters: u64,
    duration: Option<Duration>,
    bw_iters: u64,
    bw_messages: Option<u64>,
    pc_blocks: u64,
    bw_min_ms: u64,
    qps: u64,
    threads: u64,
    transports: Vec<Transport>,
    /// The largest UD message on the device (set once it is open).
    ud_mtu: u32,
}

impl Matrix {
    fn of(p: &SuitePlan) -> Self {
        let u = &p.matrix;
        let (lat_sizes, bw_sizes, iters, bw_iters, pc_blocks) = if p.quick {
            (vec![8, 4096, 65536], vec![64, 65536], 2000, 20000, 300)
        } else {
            (
                (3..=20).map(|e| 1u32 << e).collect(),
                (6..=22).map(|e| 1u32 << e).collect(),
                10000,
                100000,
                1000,
            )
        };
        Matrix {
            parts: u
                .parts
                .clone()
                .unwrap_or_else(|| vec![Part::Lat, Part::Bw, Part::PostCost]),
            lat_ops: u
                .lat_ops
                .clone()
                .unwrap_or_else(|| vec![OpKind::Send, OpKind::Write, OpKind::Read, OpKind::FetchAdd]),
            bw_ops: u.bw_ops.clone().unwrap_or_else(|| vec![OpKind::Write, OpKind::Send]),
            lat_sizes: u.lat_sizes.clone().unwrap_or(lat_sizes),
            bw_sizes: u.bw_sizes.clone().unwrap_or(bw_sizes),
            iters: u.iters.unwrap_or(iters),
            duration: u.duration,
            bw_iters,
            bw_messages: u.bw_messages,
            pc_blocks: u.post_cost_blocks.unwrap_or(pc_blocks),
            bw_min_ms: match u.duration {
                Some(d) => d.as_millis() as u64,
                None => u.bw_min_ms.unwrap_or(if p.quick { 50 } else { 200 }),
            },
            qps: u.qps.unwrap_or(1),
            threads: u.threads.unwrap_or(1),
            transports: u.transports.clone().unwrap_or_else(|| vec![Transport::Rc]),
            ud_mtu: u32::MAX,
        }
    }

    /// The sizes `op` runs at (atomics: 8).
    fn sizes(&self, op: OpKind, lat: bool) -> Vec<u32> {
        match op {
            OpKind::FetchAdd | OpKind::CmpSwap => vec![8],
            _ if lat => self.lat_sizes.clone(),
            _ => self.bw_sizes.clone(),
        }
    }

    /// Bandwidth messages per QP at `size` before the run is sized to the minimum duration.
    fn bw_messages_at(&self, size: u32) -> u64 {
        self.bw_messages
            .unwrap_or((self.bw_iters * 64 / u64::from(size).max(64)).max(500))
    }

    /// One line for the heading.
    fn describe(&self) -> String {
        let ops = |v: &[OpKind]| v.iter().map(|o| op_name(*o)).collect::<Vec<_>>().join(",");
        let sizes = |v: &[u32]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",");
        let mut parts = Vec::new();
        if self.parts.contains(&Part::Lat) {
            parts.push(format!(
                "lat {} at {} B, {}",
                ops(&self.lat_ops),
                sizes(&self.lat_sizes),
                match self.duration {
                    Some(d) => format!("{} s per point", d.as_secs_f64()),
                    None => format!("{} iterations", self.iters),
                }
            ));
        }
        if self.parts.contains(&Part::Bw) {
            parts.push(format!(
                "bw {} at {} B, {} thread(s) x {} QP(s), at least {} ms",
                ops(&self.bw_ops),
                sizes(&self.bw_sizes),
                self.threads,
                self.qps,
                self.bw_min_ms
            ));
        }
        if self.parts.contains(&Part::PostCost) {
            parts.push(format!("post-cost {} blocks", self.pc_blocks));
        }
        if self.transports.contains(&Transport::Ud) {
            let over: Vec<String> = self
                .lat_sizes
                .iter()
                .chain(&self.bw_sizes)
                .filter(|s| **s > self.ud_mtu)
                .map(|s| s.to_string())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            if !over.is_empty() {
                parts.push(format!(
                    "UD leaves out sizes above the MTU ({} B): {}",
                    self.ud_mtu,
                    over.join(",")
                ));
            }
        }
        if self.transports != [Transport::Rc] {
            let ts: Vec<&str> = self.transports.iter().map(|t| t.as_str()).collect();
            parts.push(format!(
                "transports {} (UC: send and write only; UD: send up to the MTU; post cost on RC)",
                ts.join(",")
            ));
        }
        parts.join("; ")
    }

    /// The sizes `op` runs at on transport `t` (UD: up to the MTU).
    fn sizes_on(&self, op: OpKind, lat: bool, t: Transport) -> Vec<u32> {
        let v = self.sizes(op, lat);
        if t == Transport::Ud {
            v.into_iter().filter(|s| *s <= self.ud_mtu).collect()
        } else {
            v
        }
    }

    /// How many steps the observer hears of.
    fn steps(&self) -> usize {
        let mut n = 0;
        for t in &self.transports {
            if self.parts.contains(&Part::Lat) {
                n += self
                    .lat_ops
                    .iter()
                    .filter(|o| t.allows(**o))
                    .map(|o| self.sizes_on(*o, true, *t).len())
                    .sum::<usize>();
            }
            if self.parts.contains(&Part::Bw) {
                n += self
                    .bw_ops
                    .iter()
                    .filter(|o| t.allows(**o))
                    .map(|o| self.sizes_on(*o, false, *t).len())
                    .sum::<usize>();
            }
        }
        if self.parts.contains(&Part::PostCost) {
            n += POSTLISTS.len();
        }
        n
    }

    /// As recorded in the results' params.
    fn to_json(&self, kinds: &[BackendKind]) -> serde_json::Value {
        let ops = |v: &[OpKind]| v.iter().map(|o| op_name(*o)).collect::<Vec<_>>();
        json!({
            "parts": self.parts.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
            "lat_ops": ops(&self.lat_ops), "bw_ops": ops(&self.bw_ops),
            "lat_sizes": self.lat_sizes, "bw_sizes": self.bw_sizes,
            "lat_iters": self.duration.is_none().then_some(self.iters),
            "duration_s": self.duration.map(|d| d.as_secs_f64()),
            "backends": kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
            "qps_per_thread": self.qps, "threads": self.threads,
            "transports": self.transports.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
        })
    }
}

/// The post-cost part's postlists.
const POSTLISTS: [u32; 3] = [1, 8, 32];

/// An operation as the suite's steps and interval tags name it.
fn op_name(op: OpKind) -> &'static str {
    match op {
        OpKind::FetchAdd => "atomic",
        o => o.as_str(),
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

/// Runs the suite; `obs` hears the heading and every step.
pub fn run(sp: &SuitePlan, obs: &mut dyn Observer) -> Result<SuiteReport, ProbeError> {
    sp.matrix.check().map_err(ProbeError::Usage)?;
    let mut m = Matrix::of(sp);
    let model = ModelConfig {
        wire_delay_ns: None,
        exec: ExecMode::AfterPost,
        ..Default::default()
    };
    let plan = Plan {
        device: sp.device.clone(),
        backends: Backends::All,
        ..Plan::loopback(super::Scenario::Lat(super::LatPlan::new(OpKind::Write, 8)))
    };
    let mut notes = Vec::new();
    let mut dev = session::open_device(&plan, model, &mut Notes(&mut notes))?;
    let kinds = suite_backends(&dev, sp.matrix.backends.as_deref())?;
    m.ud_mtu = session::ud_mtu(&dev);
    let pc_steps = if m.parts.contains(&Part::PostCost) {
        POSTLISTS.len()
    } else {
        0
    };
    if (m.parts.contains(&Part::Lat) || m.parts.contains(&Part::Bw)) && m.steps() == pc_steps {
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
    if m.parts.contains(&Part::Bw) {
        for op in &m.bw_ops {
            for size in m.sizes(*op, false) {
                let buf = session::buffer_len(&[size]);
                bw::check_memory(m.bw_messages_at(size), m.threads, m.qps, false, buf)?;
            }
        }
    }
    let before = super::check::counters::sample(&dev);
    let (cal, env) = session::calibrate(&dev, true)?;
    let mut warnings = env.warnings();
    warnings.splice(0..0, notes);
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
    for w in &warnings {
        heading += &format!("WARNING: {w}\n");
    }
    obs.heading(&heading);
    let mut r = SuiteReport {
        doc: json!(null),
        intervals: Vec::new(),
        summary: Vec::new(),
        backends: kinds.clone(),
        device: (dev.name(), dev.provider()),
        started: Instant::now(),
    };
    let total = m.steps();
    let mut step = 0;
    let mut runs = Vec::new();
    let mut next = |obs: &mut dyn Observer, what: String| {
        step += 1;
        obs.step(step, total, &what);
    };
    for &t in &m.transports {
        dev.opts_mut().transport = t;
        // a transport's name follows the step's, except RC's (the default)
        let tn = if t == Transport::Rc {
            String::new()
        } else {
            format!(" {}", t.as_str())
        };
        let lat_ops = if m.parts.contains(&Part::Lat) {
            m.lat_ops.iter().copied().filter(|o| t.allows(*o)).collect()
        } else {
            Vec::new()
        };
        for op in lat_ops {
            let name = op_name(op);
            let sizes = m.sizes_on(op, true, t);
            let buf = session::buffer_len(&sizes);
            let mut pairs = Vec::new();
            for k in &kinds {
                pairs.push(LatPair::new(*k, AnyPair::new(&dev, *k, op, buf, DbMode::Bf)?));
            }
            let max_inline = pairs.iter().map(|p| p.pair.max_inline()).min().unwrap_or(0);
            for size in sizes {
                next(obs, format!("lat {name} {size} B{tn}"));
                let p = LatParams {
                    op,
                    size,
                    iters: m.iters,
                    warmup: 100.min(m.iters),
                    inline: op.carries_payload() && size <= max_inline,
                    stall: Duration::from_secs(10),
                };
                let t_base = r.started.elapsed().as_secs_f64();
                let intervals = &mut r.intervals;
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
                let len = match m.duration {
                    Some(time) => Length::Duration { time, block: 1000 },
                    None => Length::Iterations {
                        iters: m.iters,
                        blocks: 10,
                    },
                };
                let rs = run_blocks(&mut pairs, &p, len, &cal, &INTERRUPTED, &mut on_block)?;
                r.summary.push(overhead_line(&format!("lat {name} {size} B{tn}"), &rs));
                for x in rs {
                    runs.push(on(tagged(&x, "lat")?, t));
                }
            }
        }
        let bw_ops = if m.parts.contains(&Part::Bw) {
            m.bw_ops.iter().copied().filter(|o| t.allows(*o)).collect()
        } else {
            Vec::new()
        };
        for op in bw_ops {
            let name = op_name(op);
            for size in m.sizes_on(op, false, t) {
                next(obs, format!("bw {name} {size} B{tn}"));
                let buf = session::buffer_len(&[size]);
                for k in &kinds {
                    let p = BwParams {
                        op,
                        size,
                        iters: m.bw_messages_at(size),
                        tx_depth: 128,
                        postlist: 1,
                        cq_mod: 64,
                        inline: op.carries_payload() && size <= INLINE,
                        bidirectional: false,
                        stall: Duration::from_secs(10),
                        window: Duration::from_millis(1),
                        // long enough for 50 (quick) or 200 one-millisecond windows, or -D
                        min_duration: Duration::from_millis(m.bw_min_ms),
                        no_peak: false,
                        unreliable: t != Transport::Rc,
                    };
                    let x = run_bw(
                        &dev,
                        *k,
                        &p,
                        m.threads as usize,
                        m.qps as usize,
                        buf,
                        DbMode::Bf,
                        &cal,
                        &INTERRUPTED,
                    )?;
                    runs.push(on(tagged(&x, "bw")?, t));
                }
            }
        }
    }
    dev.opts_mut().transport = Transport::Rc;
    let mut pc_dev = None;
    if m.parts.contains(&Part::PostCost) {
        // model0: its own handle in deferred mode, so only the post is timed
        let pc_model = ModelConfig {
            exec: ExecMode::Deferred,
            ..model
        };
        let d = if dev.is_model() {
            Dev::open(Some("model0"), 1, None, pc_model)?.0
        } else {
            session::open_device(&plan, model, &mut super::Quiet)?
        };
        let pc_before = super::check::counters::sample(&d).filter(|_| dev.is_model());
        for postlist in POSTLISTS {
            next(obs, format!("post-cost postlist {postlist}"));
            for k in &kinds {
                let p = PostCostParams {
                    op: OpKind::Write,
                    size: 8,
                    postlist,
                    inline: true,
                    cq_mod: 32,
                    blocks: m.pc_blocks,
                    stall: Duration::from_secs(10),
                };
                let x = run_post_cost(&d, *k, &p, DbMode::Bf, &cal)?;
                runs.push(tagged(&x, "post_cost")?);
            }
        }
        pc_dev = Some((d, pc_before));
    }
    let mut params = json!({ "scenario": "suite", "quick": sp.quick, "backends": kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
                "lat_iters": m.duration.is_none().then_some(m.iters), "bw_min_duration_ms": m.bw_min_ms, "bw_window_ms": 1.0, "post_cost_blocks": m.pc_blocks });
    params["matrix"] = m.to_json(&kinds);
    r.doc = result_doc(&env, &cal, &warnings, params, serde_json::Value::from(runs))?;
    // the device's counters over the suite (model0: both handles', the post cost's own)
    let mut counters = super::check::counters::CounterDelta::since(before, &dev);
    if let (Some(c), Some(pc)) = (
        counters.as_mut(),
        pc_dev.and_then(|(d, b)| super::check::counters::CounterDelta::since(b, &d)),
    ) {
        for (k, v) in pc.delta {
            *c.delta.entry(k).or_default() += v;
        }
    }
    if let Some(c) = counters {
        r.doc["counters"] = serde_json::to_value(c)?;
    }
    Ok(r)
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

fn tagged(run: &impl serde::Serialize, scenario: &str) -> Result<serde_json::Value, ProbeError> {
    let mut v = serde_json::to_value(run).map_err(|e| ProbeError::Render(e.to_string()))?;
    v["scenario"] = json!(scenario);
    Ok(v)
}

/// One summary line: each backend's p50/p99, and verbs - direct, wr - direct with a bootstrap
/// interval over the per-block medians.
pub fn overhead_line(what: &str, rs: &[LatResult]) -> String {
    let mut s = format!("  {what:<22}");
    for r in rs {
        s.push_str(&format!(" {}: {:.0}/{:.0}", r.backend, r.latency.p50, r.latency.p99));
    }
    if let Some(d) = rs.iter().find(|r| r.backend == "direct") {
        for r in rs.iter().filter(|r| r.backend != "direct") {
            let diff = r.latency.p50 - d.latency.p50;
            let iv = crate::report::compare::bootstrap(&d.block_medians_ns, &r.block_medians_ns, 1000)
                .map(|(lo, hi)| format!(" [{:+.0}, {:+.0}]", lo * d.latency.p50, hi * d.latency.p50))
                .unwrap_or_default();
            s.push_str(&format!("  {}-direct: {diff:+.0}{iv}", r.backend));
        }
    }
    s
}

impl SuiteReport {
    /// The summary as printed: what the figures are, then a line per latency point.
    pub fn summary_text(&self) -> String {
        let has_direct = self.backends.contains(&BackendKind::Direct);
        let mut s = format!(
            "summary: latency p50 / p99 in ns per backend; {}\n",
            match (has_direct, self.backends.len() > 1) {
                (true, true) => "the driver's overhead = backend - direct (p50, 95 % interval)",
                (true, false) => "only the direct backend runs here, so no driver overhead to show",
                (false, _) =>
                    "no direct backend on this device (it needs an mlx5 device or model0), so no driver overhead to show",
            }
        );
        for line in &self.summary {
            s += line;
            s.push('\n');
        }
        s
    }

    /// Writes results.json, latency.hlog, the plots and report.html into `out` (created);
    /// returns the plots' file names, and the warnings of the writing (no font for PNGs).
    pub fn write(&self, out: &Path) -> Result<(Vec<String>, Vec<String>), ProbeError> {
        let w = |e: crate::report::output::OutputError| ProbeError::Render(e.to_string());
        crate::report::output::make_dir(out).map_err(ProbeError::Render)?;
        let json = serde_json::to_vec_pretty(&self.doc).map_err(|e| ProbeError::Render(e.to_string()))?;
        crate::report::output::write(&out.join("results.json"), &json).map_err(w)?;
        let mut hlog = Vec::new();
        crate::report::write_interval_log(
            &mut hlog,
            &format!(
                "rdmaprobe suite on {} ({}), latency in ns",
                self.device.0, self.device.1
            ),
            &self.intervals,
        )
        .map_err(|e| ProbeError::Render(format!("writing the interval log: {e}")))?;
        crate::report::output::write(&out.join("latency.hlog"), &hlog).map_err(w)?;
        crate::report::plot::write_all(&self.doc, out).map_err(ProbeError::Render)
    }
}

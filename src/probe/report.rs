//! The result of a measurement and its three renderings: the table the command line prints
//! (header, one row per run, footer), the JSON result document, the HdrHistogram interval log.

use super::{Plan, ProbeError, Scenario};
use crate::backend::{BackendKind, OpKind};
use crate::clock::Calibration;
use crate::report::env::Fingerprint;
use crate::report::Interval;
use crate::scenario::runner::{tsc_step, BwResult, LatResult, PostCostResult};
use std::fmt::Write;

mod anatomy;
mod kv;
mod perftest;
mod qps;
mod regions;
mod steal;

use regions::bw_region_lines;
pub use regions::region_lines;
use steal::{stall_warning, steal_warning};

/// Which side of a measurement this report is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// Both ends in this process.
    Loopback,
    /// The client of the peer named (it reports the results).
    Client(String),
    /// The server of the client named (it measures nothing it reports).
    Server(String),
}

impl Role {
    /// `loopback`, `client` or `server` (the JSON's `params.role`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Role::Loopback => "loopback",
            Role::Client(_) => "client",
            Role::Server(_) => "server",
        }
    }
}

/// The runs of a report, by scenario.
#[derive(Debug, Clone)]
pub enum Runs {
    /// Latency, one per size and backend.
    Lat(Vec<LatResult>),
    /// Bandwidth, one per size and backend.
    Bw(Vec<BwResult>),
    /// Post cost, one per configuration.
    PostCost(Vec<PostCostResult>),
    /// The key-value workload, one per backend.
    Kv(Vec<crate::scenario::kv::result::KvResult>),
}

impl Runs {
    /// How many.
    pub fn len(&self) -> usize {
        match self {
            Runs::Lat(r) => r.len(),
            Runs::Bw(r) => r.len(),
            Runs::PostCost(r) => r.len(),
            Runs::Kv(r) => r.len(),
        }
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A measurement's results with what they were measured on and with.
pub struct Report {
    /// The plan, as run (with what the run settled: e.g. fewer blocks).
    pub plan: Plan,
    /// This side.
    pub role: Role,
    /// The device's name.
    pub device: String,
    /// Its provider (`mlx5`, `rxe`, `model0 (software model)`, ...).
    pub provider: String,
    /// Whether it is model0.
    pub is_model: bool,
    /// The backends that ran.
    pub backends: Vec<BackendKind>,
    /// The environment.
    pub env: Fingerprint,
    /// The clock.
    pub clock: Calibration,
    /// Warnings about the figures.
    pub warnings: Vec<String>,
    /// The parameters as the JSON document records them.
    pub params: serde_json::Value,
    /// The runs.
    pub runs: Runs,
    /// Latency intervals (one per block and backend) when the plan asked for them.
    pub intervals: Vec<Interval>,
    /// Runs shorter than the bandwidth plan's minimum duration, named.
    pub short_runs: Vec<String>,
    /// Why the end of a client/server run was not clean (the peer failed, vanished or answered
    /// nonsense after the measurement); the figures stand, the run is not clean.
    pub end_error: Option<String>,
    /// The device's counters' change over the run (sysfs or model0's own).
    pub counters: Option<super::check::counters::CounterDelta>,
    /// This side's registered buffers the runs use, and where they sit.
    pub regions: Vec<Region>,
}

pub use crate::scenario::runner::Region;

/// The operation's name in perftest's banner style.
pub fn title(op: OpKind) -> &'static str {
    match op {
        OpKind::Write => "RDMA WRITE",
        OpKind::Send => "SEND",
        OpKind::Read => "RDMA READ",
        OpKind::FetchAdd => "ATOMIC FETCH-AND-ADD",
        OpKind::CmpSwap => "ATOMIC COMPARE-AND-SWAP",
        OpKind::WriteImm => "RDMA WRITE WITH IMMEDIATE",
        OpKind::SendImm => "SEND WITH IMMEDIATE",
    }
}

/// What a latency figure holds on model0: each WQE's execution (its data copied once, in the
/// poster's thread right after its post call) and the wire delay, if one is set. So with no delay a READ's round
/// trip is about a WRITE's one-way figure (measured at 64 KiB: 2.66-2.86 us each, three runs
/// each), which on a NIC, whose round trip crosses the wire twice, it is not.
pub(crate) fn model0_timing_line(delay_ns: Option<u64>) -> String {
    match delay_ns {
        None => " model0 timing: no wire (--model-delay-ns): an operation costs its execution, its data copied once in the \
              poster's thread after the post; a READ or atomic round trip is one execution, as is a WRITE or SEND one-way figure (half \
              of two), so here READ's round trip is about WRITE's one-way (a NIC's round trip crosses the wire twice)\n"
            .to_string(),
        Some(d) => format!(
            " model0 timing: an operation costs its execution (its data copied once, in the poster's thread after the post) plus {d} ns \
             per wire crossing: a READ or atomic round trip one execution + {} ns, a WRITE or SEND one-way figure one \
             execution + {d} ns\n",
            2 * d
        ),
    }
}

fn rule(n: usize) -> String {
    "-".repeat(n) + "\n"
}

impl Report {
    /// The table's head: what ran, on what, with which clock, the warnings, the columns. A
    /// latency server has none (it reports nothing).
    pub fn header(&self) -> String {
        match &self.plan.scenario {
            Scenario::Lat(l) => self.lat_header(l),
            Scenario::Bw(b) => self.bw_header(b),
            Scenario::PostCost(p) => self.post_cost_header(p),
            Scenario::Kv(k) => self.kv_header(k),
        }
    }

    /// -R: how the connection manager connected the QPs.
    fn cm_line(&self, s: &mut String) {
        if let Some(l) = super::measure::cm::describe(&self.params["rdma_cm"]) {
            let _ = writeln!(s, "{l}");
        }
    }

    /// `device NAME`, with the provider in parentheses when it says more than the name.
    fn device_label(&self) -> String {
        if self.provider == self.device {
            format!("device {}", self.device)
        } else {
            format!("device {} ({})", self.device, self.provider)
        }
    }

    /// The QPs' transport, path MTU and inline limit, as the run set them, then their numbers.
    fn qp_line(&self, s: &mut String) {
        let p = &self.params;
        let mtu = match (p["path"]["mtu_bytes"].as_u64(), p["port_active_mtu_bytes"].as_u64()) {
            (Some(m), _) => format!("path MTU {m} B (-m)"),
            (None, Some(m)) => format!("path MTU {m} B (the port's active MTU)"),
            (None, None) => "path MTU the port's active MTU".to_string(),
        };
        let inline = match p["inline_limit"].as_u64() {
            Some(0) => "no inline".to_string(),
            Some(n) => format!("inline up to {n} B"),
            None => "inline unknown".to_string(),
        };
        let t = p["transport"].as_str().unwrap_or("RC");
        let _ = writeln!(s, " QPs: {t}, {mtu}, {inline}");
        self.qp_numbers(s);
    }

    fn warnings_lines(&self, s: &mut String) {
        for w in &self.warnings {
            let _ = writeln!(s, " WARNING: {w}");
        }
    }

    /// " over UC" / " over UD" for the table heading (nothing for RC, the default), as perftest
    /// prints its connection type.
    fn transport_label(&self) -> String {
        match self.params["transport"].as_str() {
            Some(t) if t != "RC" => format!(" over {t}"),
            _ => String::new(),
        }
    }

    fn lat_header(&self, l: &super::LatPlan) -> String {
        let mut s = String::new();
        let names = self.backends.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ");
        s += &rule(118);
        let _ = writeln!(
            s,
            " {}{} latency, {}, backends {names}, {}",
            title(l.op),
            self.transport_label(),
            self.device_label(),
            match l.duration {
                Some(d) => format!(
                    "{} s per size, blocks of 1000 iterations per backend, interleaved",
                    d.as_secs_f64()
                ),
                None => format!(
                    "{} iterations per size and backend in {} interleaved blocks",
                    l.iters, l.blocks
                ),
            }
        );
        let _ = writeln!(
            s,
            " figure: {}; TSC {:.3} MHz ({}); timer overhead {:.1} ns (median)",
            if crate::scenario::lat::one_way(l.op) {
                "one-way latency = round trip / 2"
            } else {
                "round trip"
            },
            self.clock.hz / 1e6,
            self.clock.source.as_str(),
            self.clock.overhead_ns()
        );
        if self.is_model {
            s += " post p50: the post call alone; model0 executes each WQE after it returns (in the completion wait)\n";
            s += &model0_timing_line(l.model_delay_ns);
        }
        if let Some(d) = self.params["peer_tool"]["describe"].as_str() {
            s += &format!(" peer: {d}\n");
        }
        if matches!(self.role, Role::Server(_)) && self.params["rows_from"] == "client" {
            s += " server: the rows are the client's measurement (it times the round trips), sent over as the run ends\n";
        }
        self.qp_line(&mut s);
        self.regions_lines(&mut s);
        self.cm_line(&mut s);
        self.warnings_lines(&mut s);
        s += &rule(118);
        // the server of perftest's READ or atomic test times nothing: no columns for no rows
        if self.params["peer_tool"]["timed"] != 0 {
            s += &lat_columns();
        }
        s
    }

    fn bw_header(&self, b: &super::BwPlan) -> String {
        let mut s = String::new();
        s += &rule(118);
        let _ = writeln!(
            s,
            " {}{} bandwidth, {}, {} thread(s) x {} QP(s), tx depth {}{}, postlist {}, CQE every {}{}",
            title(b.op),
            self.transport_label(),
            self.device_label(),
            b.threads,
            b.qps,
            b.tx_depth,
            crate::probe::measure::bw::rx_depth(b)
                .map(|r| format!(", rx depth {r}"))
                .unwrap_or_default(),
            b.postlist,
            b.cq_mod,
            if b.bidirectional { ", bidirectional" } else { "" }
        );
        let _ = writeln!(
            s,
            " {}; TSC {:.3} MHz ({})",
            if b.gbits {
                "Gb/sec = 10^9 bits per second (--report-gbits)"
            } else {
                "MB/sec = 2^20 bytes per second (MiB/s), as perftest"
            },
            self.clock.hz / 1e6,
            self.clock.source.as_str()
        );
        if let Some(d) = self.params["peer_tool"]["describe"].as_str() {
            s += &format!(" peer: {d}\n");
        }
        self.qp_line(&mut s);
        self.regions_lines(&mut s);
        self.cm_line(&mut s);
        s += self.bidirectional_note(b);
        self.warnings_lines(&mut s);
        s += &rule(118);
        // the server of perftest's bandwidth test measures nothing: no columns for no rows
        if self.params["peer_tool"]["timed"] != 0 {
            s += &self.bw_columns(b);
        }
        s
    }

    /// What a bandwidth table's windows and lengths are, and its columns.
    fn bw_columns(&self, b: &super::BwPlan) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            " windows of {:.3} ms, or the multiple that holds at least 16 completions of every sending QP (win[ms]: the length used; a window moves in steps of one completion, window_step_mib_s in the JSON: the window columns are printed to it), partition each run (the last up to 1.5 windows); peak: perftest's (shortest time per message from a post to a later completion; one QP, one direction only); {}",
            b.window.as_micros() as f64 / 1e3,
            self.bw_lengths(b)
        );
        let unit = if b.gbits { "Gb/sec" } else { "MB/sec" };
        let _ = writeln!(
            s,
            " {:>8} {:>7} {:>12} {:>10} {:>8} {:>16} {:>16} {:>16} {:>16} {:>12}",
            "#bytes",
            "backend",
            "#messages",
            "time[ms]",
            "win[ms]",
            format!("peak[{unit}]"),
            format!("average[{unit}]"),
            format!("best win[{unit}]"),
            format!("worst win[{unit}]"),
            "MsgRate[Mpps]"
        );

        s
    }

    /// What -b's figures count, in one process or between two (nothing without -b).
    fn bidirectional_note(&self, b: &super::BwPlan) -> &'static str {
        match (b.bidirectional, self.role == Role::Loopback) {
            (false, _) => "",
            (true, false) => {
                " -b between two processes: the figures are this side's own direction (perftest's -b adds both)\n"
            }
            (true, true) => {
                " -b: both ends send -n messages per QP; #messages and the figures count both directions (as perftest's -b)\n"
            }
        }
    }

    /// How long a bandwidth run is, as the header says it: by -n, -D, --run-infinitely or the
    /// minimum duration, in one process or between two.
    fn bw_lengths(&self, b: &super::BwPlan) -> String {
        let min_ms = b.min_duration.as_millis();
        if self.role != Role::Loopback && b.run_infinitely {
            format!(
                "--run-infinitely: a row per backend every {min_ms} ms or a little more (the client sizes the runs \
                 and gives the server the count), until stopped on either side (after the run under way)"
            )
        } else if self.role != Role::Loopback && b.duration.is_some() {
            format!(
                "-D: every run lasts at least {min_ms} ms (the client sizes it from a short first run and gives the \
                 server the count)"
            )
        } else if self.params["peer_tool"]["name"] == "perftest" {
            "runs are -n messages per QP (as perftest was given)".to_string()
        } else if self.role != Role::Loopback && min_ms == 0 {
            "runs are -n messages per QP (client and server agree on them)".to_string()
        } else if self.role != Role::Loopback {
            format!("runs are -n messages per QP (client and server agree on them); runs under {min_ms} ms are flagged")
        } else if b.run_infinitely {
            format!("--run-infinitely: a row per backend every {min_ms} ms or a little more, until stopped (Ctrl-C)")
        } else if min_ms == 0 {
            "runs are exactly -n messages per QP (--min-ms MS repeats a run shorter than MS with more)".to_string()
        } else {
            format!("runs shorter than {min_ms} ms are repeated with more messages (--min-ms; -n alone is exact)")
        }
    }

    fn post_cost_header(&self, p: &super::PostCostPlan) -> String {
        let mut s = String::new();
        s += &rule(112);
        let _ = writeln!(
            s,
            " post cost, {} B, {}; {} blocks of up to {} WQEs per configuration, each timed as a whole",
            p.size,
            self.device_label(),
            p.blocks,
            crate::scenario::post_cost::BLOCK_WQES
        );
        let _ = writeln!(
            s,
            " TSC {:.3} MHz, step {:.1} ns ({} ticks); timer overhead {:.1} ns (median, taken off every block); ticks are TSC ticks, not core cycles",
            self.clock.hz / 1e6,
            self.clock.to_ns(tsc_step()),
            tsc_step(),
            self.clock.overhead_ns()
        );
        if self.is_model {
            s += " model0 executes the WQEs between blocks, outside the timed region\n";
        }
        self.warnings_lines(&mut s);
        s += &rule(112);
        let _ = writeln!(
            s,
            " {:>5} {:>7} {:>10} {:>8} {:>6} {:>7} {:>7} {:>14} {:>12} {:>12} {:>13}",
            "op",
            "backend",
            "doorbell",
            "postlist",
            "inline",
            "CQE/N",
            "blocks",
            "ticks/WQE p50",
            "ns/WQE p50",
            "ns/WQE p99",
            "ns/call p50"
        );

        s
    }

    /// Run `i` as a table row (with its newline); empty when there is no such run.
    pub fn row(&self, i: usize) -> String {
        match &self.runs {
            Runs::Lat(rs) => rs.get(i).map(lat_row).unwrap_or_default(),
            Runs::Bw(rs) => match (&self.plan.scenario, rs.get(i)) {
                (Scenario::Bw(b), Some(r)) => bw_row(r, b.gbits),
                _ => String::new(),
            },
            Runs::PostCost(rs) => rs.get(i).map(post_cost_row).unwrap_or_default(),
            Runs::Kv(rs) => {
                let batching = matches!(&self.plan.scenario, Scenario::Kv(k) if k.batching);
                rs.get(i).map(|r| kv::row(r, batching)).unwrap_or_default()
            }
        }
    }

    /// The latency table's foot: notes on the figures, --cpu_util, the device's counters.
    fn lat_footer(&self, s: &mut String, rs: &[LatResult]) {
        if rs.iter().any(|r| r.post_below_overhead) {
            *s += " * post time at or below the timer's own overhead: not a real measurement\n";
        }
        // nearest rank: below 1/(1-q) samples the percentile is the largest sample
        if let Some(n) = rs.iter().map(|r| r.latency.count).min().filter(|n| *n < 10_000) {
            let _ = writeln!(
                s,
                " p99.99 is the max below 10000 samples{} (nearest rank; {n} in the smallest run): raise -n or -D for a tail",
                if n < 1000 { ", p99.9 below 1000" } else { "" }
            );
        }
        *s += &perftest::perftest_lat_lines(rs);
        *s += &anatomy::anatomy_lines(rs);
        if let Scenario::Lat(l) = &self.plan.scenario {
            lat_cpu_lines(s, l, rs);
        }
        *s += &self
            .counters
            .as_ref()
            .map(|c| c.rnr_warning() + &c.line())
            .unwrap_or_default();
        *s += &rule(118);
    }

    /// The table's foot: the footnotes the rows call for, the closing rule. A server without
    /// rows has none.
    pub fn footer(&self) -> String {
        let mut s = perftest::perftest_bw_report_lines(&self.params["peer_tool"], &self.plan.scenario);
        if matches!(self.role, Role::Server(_)) && self.runs.is_empty() {
            return s;
        }
        match &self.runs {
            Runs::Lat(rs) => self.lat_footer(&mut s, rs),
            Runs::Bw(rs) => {
                if let Scenario::Bw(b) = &self.plan.scenario {
                    cpu_lines(&mut s, b, self);
                }
                bw_region_lines(rs, &mut s);
                if let (false, Scenario::Bw(b)) = (self.short_runs.is_empty(), &self.plan.scenario) {
                    let _ = writeln!(
                        s,
                        " WARNING: shorter than {} ms, too short for a steady figure (raise -n): {}",
                        b.min_duration.as_millis(),
                        self.short_runs.join(", ")
                    );
                }
                s += &steal_warning(rs);
                s += &stall_warning(rs);
                s += &self
                    .counters
                    .as_ref()
                    .map(|c| c.rnr_warning() + &c.line())
                    .unwrap_or_default();
                s += &rule(118);
            }
            Runs::PostCost(rs) => {
                if rs.iter().any(|r| r.below_overhead) {
                    s += " * block within 4 TSC steps of the timer's own overhead: not a resolved measurement\n";
                }
                s += &self
                    .counters
                    .as_ref()
                    .map(|c| c.rnr_warning() + &c.line())
                    .unwrap_or_default();
                s += &rule(112);
            }
            Runs::Kv(rs) => self.kv_footer(&mut s, rs),
        }
        s
    }

    /// The whole table.
    pub fn table(&self) -> String {
        let mut s = self.header();
        for i in 0..self.runs.len() {
            s += &self.row(i);
        }
        s + &self.footer()
    }

    /// The JSON result document (schema [`crate::report::SCHEMA_VERSION`]).
    pub fn json(&self) -> Result<serde_json::Value, ProbeError> {
        let runs = match &self.runs {
            Runs::Lat(r) => serde_json::to_value(r),
            Runs::Bw(r) => serde_json::to_value(r),
            Runs::Kv(r) => serde_json::to_value(r),
            Runs::PostCost(r) => r
                .iter()
                .map(|r| {
                    let mut v = serde_json::to_value(r)?;
                    v["scenario"] = "post_cost".into();
                    Ok(v)
                })
                .collect::<Result<Vec<_>, serde_json::Error>>()
                .map(serde_json::Value::from),
        }
        .map_err(|e| ProbeError::Render(e.to_string()))?;
        let mut warnings = self.warnings.clone();
        if let Some(e) = &self.end_error {
            warnings.push(format!("the run did not end cleanly: {e}"));
        }
        let mut doc = result_doc(&self.env, &self.clock, &warnings, self.params.clone(), runs)?;
        if let Some(c) = &self.counters {
            doc["counters"] = serde_json::to_value(c)?;
        }
        if !self.regions.is_empty() {
            doc["memory_regions"] = serde_json::to_value(&self.regions)?;
        }
        Ok(doc)
    }

    /// The HdrHistogram interval log of the latency intervals (empty when none were kept).
    pub fn interval_log(&self) -> Result<Vec<u8>, ProbeError> {
        let op = match &self.plan.scenario {
            Scenario::Lat(l) => l.op.as_str(),
            _ => "",
        };
        let mut buf = Vec::new();
        crate::report::write_interval_log(
            &mut buf,
            &format!(
                "rdmaprobe {} lat {op} on {} ({}), ns",
                env!("CARGO_PKG_VERSION"),
                self.device,
                self.provider
            ),
            &self.intervals,
        )
        .map_err(|e| ProbeError::Render(format!("writing the interval log: {e}")))?;
        Ok(buf)
    }
}

/// One --cpu_util line: a run's size, its row's label (`-e` for a row waiting for events), its
/// CPU use (`-` when unknown) and whose CPU time it is.
fn cpu_line(s: &mut String, size: u32, backend: &str, completion: Option<&str>, pct: Option<f64>, whose: &str) {
    let e = if completion == Some("events") { "-e" } else { "" };
    let _ = writeln!(
        s,
        " cpu_util {size} B {backend}{e}: {} ({whose}; 100 % = on a CPU throughout)",
        pct.map_or("-".to_string(), |v| format!("{v:.1} %")),
    );
}

/// --cpu_util: each latency run's CPU use, its client thread's.
fn lat_cpu_lines(s: &mut String, l: &super::LatPlan, rs: &[LatResult]) {
    if !l.cpu_util {
        return;
    }
    for x in rs {
        let whose = "the client thread's CPU time over its blocks";
        cpu_line(s, x.size, &x.backend, x.completion.as_deref(), x.cpu_pct, whose);
    }
}

/// --cpu_util: each bandwidth run's CPU use, its measuring threads'.
fn cpu_lines(s: &mut String, b: &super::BwPlan, r: &Report) {
    let Runs::Bw(rs) = &r.runs else { return };
    if !b.cpu_util {
        return;
    }
    for x in rs {
        let whose = "the measuring threads' CPU time over their run";
        cpu_line(s, x.size, &x.backend, x.completion.as_deref(), x.summary.cpu_pct, whose);
    }
}

/// The latency table's column heads.
fn lat_columns() -> String {
    format!(
        " {:>8} {:>7} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}\n",
        "#bytes",
        "backend",
        "#iter",
        "min[ns]",
        "p50[ns]",
        "p90[ns]",
        "p99[ns]",
        "p99.9[ns]",
        "p99.99[ns]",
        "max[ns]",
        "avg[ns]",
        "stdev[ns]",
        "post p50[ns]"
    )
}

fn lat_row(r: &LatResult) -> String {
    let l = &r.latency;
    let backend = match r.completion.as_deref() {
        Some("events") => format!("{}-e", r.backend),
        _ => r.backend.clone(),
    };
    format!(
        " {:>8} {:>7} {:>9} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>11.1}{}\n",
        r.size,
        backend,
        r.iterations,
        l.min,
        l.p50,
        l.p90,
        l.p99,
        l.p99_9,
        l.p99_99,
        l.max,
        l.mean,
        l.stdev,
        r.post.p50,
        if r.post_below_overhead { "*" } else { "" }
    )
}

fn bw_row(r: &BwResult, gbits: bool) -> String {
    let conv = |mib: f64| if gbits { mib * 1024.0 * 1024.0 * 8.0 / 1e9 } else { mib };
    let s = &r.summary;
    let backend = match r.completion.as_deref() {
        Some("events") => format!("{}-e", r.backend),
        _ => r.backend.clone(),
    };
    // the window columns to their resolution: 48000 where a window moves in steps of 2000
    let wd = window_decimals(conv(s.window_step_mib_s));
    format!(
        " {:>8} {:>7} {:>12} {:>10.1} {:>8.2} {:>16} {:>16.2} {:>16.wd$} {:>16.wd$} {:>12.4}{}\n",
        r.size,
        backend,
        s.messages,
        s.seconds * 1e3,
        s.window_ms,
        s.bw_peak_perftest_mib_s
            .map(|v| format!("{:.2}", conv(v)))
            .unwrap_or_else(|| "-".into()),
        conv(s.bw_avg_mib_s),
        conv(s.bw_peak_window_mib_s),
        conv(s.bw_min_window_mib_s),
        s.msg_rate_mpps,
        // an unreliable transport: the figures are the senders'; what the receivers took is said
        match s.messages_received {
            Some(n) if n < s.messages => format!(
                "  received {n} ({:.1} % dropped)",
                100.0 * (s.messages - n) as f64 / s.messages as f64
            ),
            _ => String::new(),
        } + &match (&s.bw_peak_perftest_mib_s, &s.bw_peak_perftest_missing) {
            (None, Some(why)) if why.starts_with("not traced") => format!("  peak {why}"),
            _ => String::new(),
        }
    )
}

/// Decimals that show a figure moving in steps of `step`: one digit below the step's first
/// (2000: none; 5.3: one), at most two (perftest's); two when the step is unknown (0: a result
/// written before it was recorded).
fn window_decimals(step: f64) -> usize {
    if !(step.is_finite() && step > 0.0) {
        return 2;
    }
    (1 - step.log10().floor() as i64).clamp(0, 2) as usize
}

fn post_cost_row(r: &PostCostResult) -> String {
    format!(
        " {:>5} {:>7} {:>10} {:>8} {:>6} {:>7} {:>7} {:>14.2} {:>12.2} {:>12.2} {:>12.2}{}\n",
        r.verb,
        r.backend,
        r.db_mode.as_deref().unwrap_or("-"),
        r.postlist,
        if r.inline { "yes" } else { "no" },
        r.cq_mod,
        r.block_per_wqe_ns.len(),
        r.per_wqe_ticks_p50,
        r.per_wqe_ns.p50,
        r.per_wqe_ns.p99,
        r.call_ns.p50,
        if r.below_overhead { "*" } else { "" }
    )
}

/// A results document: what every rdmaprobe result file carries (schema, tool, time, command,
/// environment, clock, timer overhead, warnings), then the parameters and the runs.
pub fn result_doc(
    env: &Fingerprint,
    cal: &Calibration,
    warnings: &[String],
    params: serde_json::Value,
    runs: serde_json::Value,
) -> Result<serde_json::Value, ProbeError> {
    Ok(serde_json::json!({
        "schema_version": crate::report::SCHEMA_VERSION,
        "tool": { "name": "rdmaprobe", "version": env!("CARGO_PKG_VERSION"), "source": env!("RDMAPROBE_SOURCE_ID") },
        "created_unix": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "command": std::env::args().collect::<Vec<_>>(),
        "environment": env,
        "clock": cal,
        "timer_overhead_ns": cal.overhead_ns(),
        "warnings": warnings,
        "params": params,
        "runs": runs,
    }))
}

/// The path and QP options as the result's `params.path` records them (the verbs QPs').
pub fn path_json(p: &crate::backend::setup::PathOpts) -> serde_json::Value {
    serde_json::json!({
        "mtu_bytes": p.mtu, "sl": p.sl, "traffic_class": p.traffic_class, "timeout": p.timeout,
        "retry_count": p.retry_count, "pkey_index": p.pkey_index,
    })
}

#[cfg(test)]
mod tests {
    use super::window_decimals;

    #[test]
    fn window_columns_are_printed_to_their_step() {
        // issue 29 item 3: steps of 2000-4000 MB/s printed as 48000.00
        assert_eq!(window_decimals(2000.0), 0);
        assert_eq!(format!("{:.*}", window_decimals(3125.0), 96000.0123), "96000");
        assert_eq!(window_decimals(390.6), 0);
        assert_eq!(window_decimals(12.0), 0);
        assert_eq!(window_decimals(5.3), 1);
        assert_eq!(window_decimals(0.4), 2);
        assert_eq!(window_decimals(0.0001), 2);
        // unknown (an old result): perftest's two
        assert_eq!(window_decimals(0.0), 2);
        assert_eq!(window_decimals(f64::NAN), 2);
    }
}

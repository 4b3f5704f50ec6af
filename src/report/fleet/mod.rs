//! `fleet-report`: one verdict over a fleet acceptance run (issue 13 point 5). The playbook in
//! `harness/fleet/` leaves a directory:
//!
//! ```text
//! DIR/fleet.json                      {"nodes": [..], "pairing": "..", "reference": ..,
//!                                      "reachable": [..], "doctor_rc": {node: rc}}
//! DIR/nodes/NODE/doctor.json          `rdmaprobe doctor --json` of each reachable node
//! DIR/pairs/SERVER--CLIENT/status.json {"server", "client", "skipped", "ping_rc", "lat_rc", "bw_rc"}
//! DIR/pairs/SERVER--CLIENT/ping-server.json, ping-client.json, lat.json, bw.json
//! ```
//!
//! Per node and per pair: pass or fail per layer (1 device, 2 connection, 3 performance), the
//! latency p50 and the average bandwidth. A node's figure is the median over its pairs, so a
//! slow node stands out against the fleet even when each of its pairs also holds a good node.
//! A node is an outlier when its figure is worse than the fleet's median by more than `k`
//! robust standard deviations (1.4826 x the median absolute deviation) and by more than a
//! minimum relative deviation (with few nodes the MAD can be 0). A node fails when it is
//! unreachable, its doctor finds a failing check, its device layer fails, every one of its
//! pairs fails to connect or to perform, or it is an outlier. No unsafe code here.

mod input;
mod render;
#[cfg(test)]
mod tests;

pub use input::{load, planned_pairs, FleetError, FleetIn, PairIn};
use render::fig;

use serde_json::{json, Value};
use std::fmt::Write;

/// How outliers are judged.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    /// Robust standard deviations (1.4826 x MAD) beyond the median that make an outlier.
    pub mad_k: f64,
    /// The smallest relative deviation from the median (fraction) that makes an outlier.
    pub min_deviation: f64,
}

impl Default for Rules {
    fn default() -> Self {
        Rules {
            mad_k: 3.5,
            min_deviation: 0.20,
        }
    }
}

/// A layer's outcome in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mark {
    /// Passed.
    Pass,
    /// Failed.
    Fail,
    /// Not run (an earlier layer failed, or the pair was skipped).
    NotRun,
}

impl Mark {
    fn as_str(self) -> &'static str {
        match self {
            Mark::Pass => "pass",
            Mark::Fail => "FAIL",
            Mark::NotRun => "-",
        }
    }
}

/// One pair in the report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PairOut {
    /// Server node.
    pub server: String,
    /// Client node.
    pub client: String,
    /// Layers 1 (both ends' devices), 2 (connection), 3 (performance).
    pub layers: [Mark; 3],
    /// Latency p50 of the 8-byte WRITE, one way, ns.
    pub lat_p50_ns: Option<f64>,
    /// Average bandwidth of the 64 KiB WRITE, MiB/s.
    pub bw_avg_mib_s: Option<f64>,
    /// What went wrong, line by line (a skipped pair says why).
    pub findings: Vec<String>,
    /// The device counters' non-zero change over the lat and bw runs (the client's device).
    pub counters: Vec<String>,
}

/// One node in the report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct NodeOut {
    /// Its inventory name.
    pub node: String,
    /// Whether it answered.
    pub reachable: bool,
    /// Whether a doctor report came back.
    pub doctor_ran: bool,
    /// Doctor's failing checks (`id: evidence`).
    pub doctor_fail: Vec<String>,
    /// Doctor's warnings (`id: evidence`).
    pub doctor_warn: Vec<String>,
    /// Layers over its pairs: 1 its device, 2 any pair connected, 3 any pair performed.
    pub layers: [Mark; 3],
    /// Median over its pairs of the latency p50, ns.
    pub lat_p50_ns: Option<f64>,
    /// Median over its pairs of the average bandwidth, MiB/s.
    pub bw_avg_mib_s: Option<f64>,
    /// The figures that made it an outlier (`lat_p50_ns`, `bw_avg_mib_s`).
    pub outliers: Vec<&'static str>,
    /// Whether it failed, and why (line by line).
    pub failed: bool,
    /// Why it failed; empty when it passed.
    pub reasons: Vec<String>,
    /// Evidence behind a flag: doctor's findings and the counters of its failing pairs.
    pub evidence: Vec<String>,
}

/// The fleet's summary of one figure.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Spread {
    /// Median over the nodes' figures.
    pub median: f64,
    /// Median absolute deviation.
    pub mad: f64,
    /// Nodes with a figure.
    pub nodes: usize,
}

/// The report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FleetReport {
    /// `reference`, `ring` or `all`.
    pub pairing: String,
    /// Per node.
    pub nodes: Vec<NodeOut>,
    /// Per pair.
    pub pairs: Vec<PairOut>,
    /// Latency over the nodes.
    pub lat_p50_ns: Option<Spread>,
    /// Bandwidth over the nodes.
    pub bw_avg_mib_s: Option<Spread>,
    /// The rules applied.
    pub rules: Value,
    /// The failed nodes.
    pub failed: Vec<String>,
    /// Pairs of the plan that left no result (an interrupted run): the run does not pass.
    pub missing_pairs: Vec<String>,
    /// Remarks (too few nodes to judge outliers, ...).
    pub notes: Vec<String>,
}

fn median(v: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The ping layer `i` (0-based) of a ping report.
fn ping_layer(doc: &Option<Value>, i: usize) -> Option<(Mark, String)> {
    let l = &doc.as_ref()?["layers"][i];
    let m = match l["status"].as_str()? {
        "pass" => Mark::Pass,
        "fail" => Mark::Fail,
        _ => Mark::NotRun,
    };
    let mut why = l["findings"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("; "))
        .unwrap_or_default();
    if let Some(c) = l["cause"].as_str() {
        let _ = write!(why, " (likely cause: {c})");
    }
    Some((m, why))
}

fn first_figure(doc: &Option<Value>, f: impl Fn(&Value) -> Option<f64>) -> Option<f64> {
    doc.as_ref()?["runs"]
        .as_array()?
        .iter()
        .find_map(f)
        .filter(|x| x.is_finite() && *x > 0.0)
}

fn pair_out(p: &PairIn) -> PairOut {
    let mut o = PairOut {
        server: p.server.clone(),
        client: p.client.clone(),
        layers: [Mark::NotRun; 3],
        lat_p50_ns: first_figure(&p.lat, |r| r["latency_ns"]["p50"].as_f64()),
        bw_avg_mib_s: first_figure(&p.bw, |r| r["summary"]["bw_avg_mib_s"].as_f64()),
        findings: Vec::new(),
        counters: [("lat", &p.lat), ("bw", &p.bw)]
            .into_iter()
            .filter_map(|(name, doc)| counters(name, doc.as_ref()?))
            .collect(),
    };
    if let Some(s) = &p.skipped {
        o.findings.push(format!("not run: {s}"));
        return o;
    }
    // layer 1: both ends' devices (each side's own ladder)
    let ends = [(&p.server, &p.ping[0]), (&p.client, &p.ping[1])];
    let mut l1 = Mark::Pass;
    for (node, doc) in ends {
        match ping_layer(doc, 0) {
            Some((Mark::Pass, _)) => {}
            Some((Mark::Fail, why)) => {
                l1 = Mark::Fail;
                o.findings.push(format!("layer 1 on {node}: {why}"));
            }
            _ => {
                l1 = Mark::Fail;
                o.findings.push(format!(
                    "layer 1 on {node}: no ping report (the command did not run or died)"
                ));
            }
        }
    }
    o.layers[0] = l1;
    if l1 == Mark::Fail {
        return o;
    }
    // layers 2 and 3: the client's view
    for i in 1..3 {
        match ping_layer(&p.ping[1], i) {
            Some((m, why)) => {
                o.layers[i] = m;
                if m == Mark::Fail {
                    o.findings.push(format!("layer {}: {why}", i + 1));
                }
            }
            None => o.layers[i] = Mark::NotRun,
        }
    }
    // the servers' side: a server that failed is said, and fails layer 3 of a pair that
    // otherwise passed
    for (i, name) in ["ping", "lat", "bw"].iter().enumerate() {
        if let Some(c) = p.server_rc[i].filter(|c| *c != 0) {
            o.findings.push(format!("the {name} server on {} exited {c}", p.server));
            if o.layers[1] == Mark::Pass && o.layers[2] == Mark::Pass {
                o.layers[2] = Mark::Fail;
            }
        }
    }
    // the short lat and bw runs: a failed one fails layer 3 (or 2 when nothing connected)
    for (name, rc, fig) in [
        ("lat", p.rc[1], o.lat_p50_ns.is_some()),
        ("bw", p.rc[2], o.bw_avg_mib_s.is_some()),
    ] {
        if rc != Some(0) || !fig {
            let what = match rc {
                Some(c) => format!("{name} exited {c}"),
                None => format!("{name} did not run"),
            };
            let what = if fig { what } else { format!("{what}, no figure") };
            o.findings.push(what);
            if o.layers[1] == Mark::Pass {
                o.layers[2] = Mark::Fail;
            }
        }
    }
    o
}

/// `lat counters (model0): cqes 1257, doorbells 20100` from a result's `counters` (non-zero
/// deltas), or `None` when it has none.
fn counters(name: &str, doc: &Value) -> Option<String> {
    let c = &doc["counters"];
    let d = c["delta"].as_object()?;
    let items: Vec<String> = d
        .iter()
        .filter(|(_, v)| v.as_f64().is_some_and(|x| x != 0.0))
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    (!items.is_empty()).then(|| {
        format!(
            "{name} counters ({}): {}",
            c["source"].as_str().unwrap_or("?"),
            items.join(", ")
        )
    })
}

fn spread(vals: &[f64]) -> Option<Spread> {
    let m = median(vals)?;
    let dev: Vec<f64> = vals.iter().map(|v| (v - m).abs()).collect();
    Some(Spread {
        median: m,
        mad: median(&dev).unwrap_or(0.0),
        nodes: vals.len(),
    })
}

/// Whether `v` is worse than the fleet by the rules; `larger_is_worse` for latency.
fn outlier(v: f64, s: &Spread, larger_is_worse: bool, r: &Rules) -> Option<f64> {
    let worse = if larger_is_worse { v - s.median } else { s.median - v };
    let limit = (r.mad_k * 1.4826 * s.mad).max(r.min_deviation * s.median.abs());
    (worse > limit).then_some(worse)
}

/// Builds the report.
pub fn judge(f: &FleetIn, rules: &Rules) -> FleetReport {
    let pairs: Vec<PairOut> = f.pairs.iter().map(pair_out).collect();
    let mut nodes = Vec::new();
    for n in &f.nodes {
        let reachable = f.reachable.contains(n);
        let mut o = NodeOut {
            node: n.clone(),
            reachable,
            doctor_ran: false,
            doctor_fail: Vec::new(),
            doctor_warn: Vec::new(),
            layers: [Mark::NotRun; 3],
            lat_p50_ns: None,
            bw_avg_mib_s: None,
            outliers: Vec::new(),
            failed: false,
            reasons: Vec::new(),
            evidence: Vec::new(),
        };
        if !reachable {
            o.reasons.push(
                "unreachable: it did not answer the controller (ssh, the host down, or its first task failed)".into(),
            );
        }
        if let Some((doc, rc)) = f.doctor.get(n) {
            if let Some(checks) = doc.as_ref().and_then(|d| d["checks"].as_array()) {
                o.doctor_ran = true;
                for c in checks {
                    let line = format!(
                        "{}: {}",
                        c["id"].as_str().unwrap_or("?"),
                        c["evidence"].as_str().unwrap_or("")
                    );
                    match c["status"].as_str() {
                        Some("fail") => o.doctor_fail.push(line),
                        Some("warn") => o.doctor_warn.push(line),
                        _ => {}
                    }
                }
            } else if reachable {
                let why = f.doctor_error.get(n).map_or(String::new(), |e| format!(": {e}"));
                o.reasons.push(format!(
                    "no doctor report (doctor exited {}{why})",
                    rc.map_or("?".into(), |c| c.to_string())
                ));
            }
        }
        if !o.doctor_fail.is_empty() {
            o.reasons.push(format!("doctor: {}", o.doctor_fail.join("; ")));
        }
        let mine: Vec<(&PairIn, &PairOut)> = f
            .pairs
            .iter()
            .zip(&pairs)
            .filter(|(p, _)| (p.server == *n || p.client == *n) && p.skipped.is_none())
            .collect();
        if !mine.is_empty() {
            // layer 1: this node's own device, from its own ladder in every pair
            let dev_fail: Vec<String> = mine
                .iter()
                .filter_map(|(p, _)| match ping_layer(&p.ping[usize::from(p.server != *n)], 0) {
                    Some((Mark::Pass, _)) => None,
                    Some((_, why)) => Some(why),
                    None => Some("no ping report".into()),
                })
                .collect();
            o.layers[0] = if dev_fail.is_empty() { Mark::Pass } else { Mark::Fail };
            if let Some(w) = dev_fail.first() {
                o.reasons.push(format!("device layer fails: {w}"));
            }
            // layers 2 and 3: a node fails one when every pair it is in fails it
            for i in 1..3 {
                let marks: Vec<Mark> = mine.iter().map(|(_, q)| q.layers[i]).collect();
                o.layers[i] = if marks.contains(&Mark::Pass) {
                    Mark::Pass
                } else if marks.contains(&Mark::Fail) {
                    Mark::Fail
                } else {
                    Mark::NotRun
                };
            }
            if o.layers[0] == Mark::Pass && o.layers[1] == Mark::Fail {
                o.reasons.push("no pair it is in connects (layer 2)".into());
            } else if o.layers[0] == Mark::Pass && o.layers[1] == Mark::Pass && o.layers[2] == Mark::Fail {
                o.reasons.push("no pair it is in performs (layer 3)".into());
            }
            for (_, q) in &mine {
                for line in &q.findings {
                    o.evidence.push(format!("{}--{}: {line}", q.server, q.client));
                }
            }
            // its best pair: a node is as slow as its best link shows, so the neighbours of a
            // slow node, which also have a good link, are not blamed for it
            o.lat_p50_ns = mine.iter().filter_map(|(_, q)| q.lat_p50_ns).reduce(f64::min);
            o.bw_avg_mib_s = mine.iter().filter_map(|(_, q)| q.bw_avg_mib_s).reduce(f64::max);
        } else if reachable {
            let partners: Vec<&str> = f
                .pairs
                .iter()
                .filter(|p| p.server == *n || p.client == *n)
                .map(|p| {
                    if p.server == *n {
                        p.client.as_str()
                    } else {
                        p.server.as_str()
                    }
                })
                .filter(|m| !f.reachable.iter().any(|r| r == m))
                .collect();
            o.reasons.push(if partners.is_empty() {
                "in no pair that ran".into()
            } else {
                format!(
                    "in no pair that ran: its partners did not answer ({})",
                    partners.join(", ")
                )
            });
        }
        nodes.push(o);
    }
    let lat_vals: Vec<f64> = nodes.iter().filter_map(|n| n.lat_p50_ns).collect();
    let bw_vals: Vec<f64> = nodes.iter().filter_map(|n| n.bw_avg_mib_s).collect();
    let (lat_s, bw_s) = (spread(&lat_vals), spread(&bw_vals));
    let mut notes = Vec::new();
    // the plan's pairs that left no result: an interrupted or partial run does not pass
    let missing: Vec<String> = planned_pairs(f)
        .into_iter()
        .filter(|(a, b)| {
            !f.pairs
                .iter()
                .any(|p| (p.server == *a && p.client == *b) || (p.server == *b && p.client == *a))
        })
        .map(|(a, b)| format!("{a}--{b}"))
        .collect();
    if f.pairing == "reference" {
        if let Some(r) = &f.reference {
            if f.reachable.contains(r) {
                notes.push(format!(
                    "reference plan: every pair holds {r}, so its own speed cannot be judged against the fleet \
                     (a slow {r} slows every pair alike): give ping's layer 3 limits (fleet_max_lat_ns, fleet_min_bw) to judge it"
                ));
            } else {
                notes.push(format!("the reference node {r} did not answer: no pair could run"));
            }
        }
    }
    for (name, s) in [("latency", &lat_s), ("bandwidth", &bw_s)] {
        match s {
            Some(s) if s.nodes < 3 => notes.push(format!(
                "{name}: {} node(s) with a figure: too few to judge outliers (3 or more needed)",
                s.nodes
            )),
            None => notes.push(format!("{name}: no node has a figure")),
            _ => {}
        }
    }
    for o in &mut nodes {
        let checks = [
            ("latency p50", o.lat_p50_ns, &lat_s, true, "ns", "lat_p50_ns"),
            ("bandwidth", o.bw_avg_mib_s, &bw_s, false, "MiB/s", "bw_avg_mib_s"),
        ];
        for (name, v, s, up, unit, field) in checks {
            let (Some(v), Some(s)) = (v, s) else { continue };
            if s.nodes < 3 {
                continue;
            }
            if outlier(v, s, up, rules).is_some() {
                o.outliers.push(field);
                o.reasons.push(format!(
                    "{name} {v:.0} {unit}: an outlier (fleet median {:.0} {unit}, MAD {:.0}, {:+.1} %)",
                    s.median,
                    s.mad,
                    (v / s.median - 1.0) * 100.0
                ));
            }
        }
        o.failed = !o.reasons.is_empty();
    }
    // evidence of a failed node: its doctor warnings (said when the rest of the fleet has
    // them too, so what sets the node apart stands out) and its pairs' counters
    let warned = |id: &str| {
        nodes
            .iter()
            .filter(|m| m.doctor_warn.iter().any(|w| w.split(':').next() == Some(id)))
            .count()
    };
    let with_doctor = nodes.iter().filter(|m| m.doctor_ran).count();
    let mut extra: Vec<(usize, String)> = Vec::new();
    for (i, o) in nodes.iter().enumerate().filter(|(_, o)| o.failed) {
        for w in &o.doctor_warn {
            let k = warned(w.split(':').next().unwrap_or(""));
            let share = if k == 1 && with_doctor > 1 {
                "only this node".to_string()
            } else {
                format!("{k} of {with_doctor} nodes")
            };
            extra.push((i, format!("doctor warns ({share}): {w}")));
        }
        if !o.outliers.is_empty() {
            let figs: Vec<String> = pairs
                .iter()
                .filter(|q| (q.server == o.node || q.client == o.node) && q.lat_p50_ns.is_some())
                .map(|q| {
                    format!(
                        "{}--{} {} ns, {} MiB/s",
                        q.server,
                        q.client,
                        fig(q.lat_p50_ns),
                        fig(q.bw_avg_mib_s)
                    )
                })
                .collect();
            extra.push((i, format!("its pairs: {}", figs.join("; "))));
        }
        for q in pairs.iter().filter(|q| q.server == o.node || q.client == o.node) {
            for c in &q.counters {
                extra.push((i, format!("{}--{}: {c}", q.server, q.client)));
            }
        }
    }
    for (i, e) in extra {
        nodes[i].evidence.push(e);
    }
    let failed = nodes.iter().filter(|n| n.failed).map(|n| n.node.clone()).collect();
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    FleetReport {
        pairing: f.pairing.clone(),
        nodes,
        pairs,
        lat_p50_ns: lat_s,
        bw_avg_mib_s: bw_s,
        rules: json!({"mad_k": round(rules.mad_k), "min_deviation_pct": round(rules.min_deviation * 100.0)}),
        failed,
        missing_pairs: missing,
        notes,
    }
}

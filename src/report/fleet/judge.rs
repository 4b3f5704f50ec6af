//! The verdict over a fleet run: each pair's layers and figures, each node's from the pairs it
//! is in and its doctor, the fleet's spread of the figures, its outliers and the evidence behind
//! each failed node.

use super::render::fig;
use super::{planned_pairs, FleetIn, FleetReport, Mark, NodeOut, PairIn, PairOut, Rules, Spread};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

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
    let mut nodes: Vec<NodeOut> = f.nodes.iter().map(|n| node_out(f, &pairs, n)).collect();
    let lat_vals: Vec<f64> = nodes.iter().filter_map(|n| n.lat_p50_ns).collect();
    let bw_vals: Vec<f64> = nodes.iter().filter_map(|n| n.bw_avg_mib_s).collect();
    let (lat_s, bw_s) = (spread(&lat_vals), spread(&bw_vals));
    let missing = missing_pairs(f);
    let notes = notes(f, &lat_s, &bw_s);
    for o in &mut nodes {
        o.flag_outliers(&lat_s, &bw_s, rules);
        o.failed = !o.reasons.is_empty();
    }
    add_evidence(&mut nodes, &pairs);
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
        measured_unix: measured(f),
    }
}

/// The earliest and the latest `created_unix` of the pairs' lat and bw documents.
fn measured(f: &FleetIn) -> Option<[u64; 2]> {
    let t: Vec<u64> = f
        .pairs
        .iter()
        .flat_map(|p| [&p.lat, &p.bw])
        .filter_map(|d| d.as_ref()?["created_unix"].as_u64().filter(|t| *t > 0))
        .collect();
    Some([*t.iter().min()?, *t.iter().max()?])
}

/// A node judged on what is its own: whether it answered, its doctor, the pairs it is in
/// (`pairs`: every pair's outcome, in `f.pairs`' order). Its outliers come later, against the
/// fleet.
fn node_out(f: &FleetIn, pairs: &[PairOut], n: &String) -> NodeOut {
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
    o.read_doctor(f);
    let mine: Vec<(&PairIn, &PairOut)> = f
        .pairs
        .iter()
        .zip(pairs)
        .filter(|(p, _)| (p.server == *n || p.client == *n) && p.skipped.is_none())
        .collect();
    if !mine.is_empty() {
        o.judge_pairs(&mine);
    } else if reachable {
        o.reasons.push(no_pair_ran(f, n));
    }
    o
}

impl NodeOut {
    /// Its doctor's failing checks and warnings; a failing check, or a reachable node whose
    /// doctor left no report, is a reason it fails.
    fn read_doctor(&mut self, f: &FleetIn) {
        if let Some((doc, rc)) = f.doctor.get(&self.node) {
            if let Some(checks) = doc.as_ref().and_then(|d| d["checks"].as_array()) {
                self.doctor_ran = true;
                for c in checks {
                    let line = format!(
                        "{}: {}",
                        c["id"].as_str().unwrap_or("?"),
                        c["evidence"].as_str().unwrap_or("")
                    );
                    match c["status"].as_str() {
                        Some("fail") => self.doctor_fail.push(line),
                        Some("warn") => self.doctor_warn.push(line),
                        _ => {}
                    }
                }
            } else if self.reachable {
                let why = f
                    .doctor_error
                    .get(&self.node)
                    .map_or(String::new(), |e| format!(": {e}"));
                self.reasons.push(format!(
                    "no doctor report (doctor exited {}{why})",
                    rc.map_or("?".into(), |c| c.to_string())
                ));
            }
        }
        if !self.doctor_fail.is_empty() {
            self.reasons.push(format!("doctor: {}", self.doctor_fail.join("; ")));
        }
    }

    /// Its layers, the findings of its pairs as evidence and its figures, from the pairs it is
    /// in that ran (`mine`).
    fn judge_pairs(&mut self, mine: &[(&PairIn, &PairOut)]) {
        self.device_layer(mine);
        self.pair_layers(mine);
        for (_, q) in mine {
            for line in &q.findings {
                self.evidence.push(format!("{}--{}: {line}", q.server, q.client));
            }
        }
        // its best pair: a node is as slow as its best link shows, so the neighbours of a
        // slow node, which also have a good link, are not blamed for it
        self.lat_p50_ns = mine.iter().filter_map(|(_, q)| q.lat_p50_ns).reduce(f64::min);
        self.bw_avg_mib_s = mine.iter().filter_map(|(_, q)| q.bw_avg_mib_s).reduce(f64::max);
    }

    /// Layer 1: this node's own device, from its own ladder in every pair; the first failure
    /// is the reason.
    fn device_layer(&mut self, mine: &[(&PairIn, &PairOut)]) {
        let n = &self.node;
        let dev_fail: Vec<String> = mine
            .iter()
            .filter_map(|(p, _)| match ping_layer(&p.ping[usize::from(p.server != *n)], 0) {
                Some((Mark::Pass, _)) => None,
                Some((_, why)) => Some(why),
                None => Some("no ping report".into()),
            })
            .collect();
        self.layers[0] = if dev_fail.is_empty() { Mark::Pass } else { Mark::Fail };
        if let Some(w) = dev_fail.first() {
            self.reasons.push(format!("device layer fails: {w}"));
        }
    }

    /// Layers 2 and 3: a node fails one when every pair it is in fails it; the first of them
    /// failed (over a passing device) is the reason.
    fn pair_layers(&mut self, mine: &[(&PairIn, &PairOut)]) {
        for i in 1..3 {
            let marks: Vec<Mark> = mine.iter().map(|(_, q)| q.layers[i]).collect();
            self.layers[i] = if marks.contains(&Mark::Pass) {
                Mark::Pass
            } else if marks.contains(&Mark::Fail) {
                Mark::Fail
            } else {
                Mark::NotRun
            };
        }
        if self.layers[0] == Mark::Pass && self.layers[1] == Mark::Fail {
            self.reasons.push("no pair it is in connects (layer 2)".into());
        } else if self.layers[0] == Mark::Pass && self.layers[1] == Mark::Pass && self.layers[2] == Mark::Fail {
            self.reasons.push("no pair it is in performs (layer 3)".into());
        }
    }

    /// Its figures against the fleet's (judged with 3 or more nodes): each outlier is a reason.
    fn flag_outliers(&mut self, lat_s: &Option<Spread>, bw_s: &Option<Spread>, rules: &Rules) {
        let checks = [
            ("latency p50", self.lat_p50_ns, lat_s, true, "ns", "lat_p50_ns"),
            ("bandwidth", self.bw_avg_mib_s, bw_s, false, "MiB/s", "bw_avg_mib_s"),
        ];
        for (name, v, s, up, unit, field) in checks {
            let (Some(v), Some(s)) = (v, s) else { continue };
            if s.nodes < 3 {
                continue;
            }
            if outlier(v, s, up, rules).is_some() {
                self.outliers.push(field);
                self.reasons.push(format!(
                    "{name} {v:.0} {unit}: an outlier (fleet median {:.0} {unit}, MAD {:.0}, {:+.1} %)",
                    s.median,
                    s.mad,
                    (v / s.median - 1.0) * 100.0
                ));
            }
        }
    }
}

/// Why a reachable node is in no pair that ran: its partners that did not answer, when some
/// did not.
fn no_pair_ran(f: &FleetIn, n: &String) -> String {
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
    if partners.is_empty() {
        "in no pair that ran".into()
    } else {
        format!(
            "in no pair that ran: its partners did not answer ({})",
            partners.join(", ")
        )
    }
}

/// The plan's pairs that left no result: an interrupted or partial run does not pass.
fn missing_pairs(f: &FleetIn) -> Vec<String> {
    planned_pairs(f)
        .into_iter()
        .filter(|(a, b)| {
            !f.pairs
                .iter()
                .any(|p| (p.server == *a && p.client == *b) || (p.server == *b && p.client == *a))
        })
        .map(|(a, b)| format!("{a}--{b}"))
        .collect()
}

/// The report's remarks: what a reference plan cannot judge, and a figure too few nodes have.
fn notes(f: &FleetIn, lat_s: &Option<Spread>, bw_s: &Option<Spread>) -> Vec<String> {
    let mut notes = Vec::new();
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
    for (name, s) in [("latency", lat_s), ("bandwidth", bw_s)] {
        match s {
            Some(s) if s.nodes < 3 => notes.push(format!(
                "{name}: {} node(s) with a figure: too few to judge outliers (3 or more needed)",
                s.nodes
            )),
            None => notes.push(format!("{name}: no node has a figure")),
            _ => {}
        }
    }
    notes
}

/// The id of a doctor line (`id: evidence`).
fn check_id(line: &str) -> &str {
    line.split(':').next().unwrap_or("")
}

/// How many of the nodes whose doctor ran warn of each check.
struct WarningShares<'a> {
    /// Nodes that warn, by check id.
    warned: BTreeMap<&'a str, usize>,
    /// Nodes whose doctor ran.
    with_doctor: usize,
}

impl<'a> WarningShares<'a> {
    fn of(nodes: &'a [NodeOut]) -> Self {
        let mut warned = BTreeMap::new();
        for m in nodes {
            let ids: BTreeSet<&str> = m.doctor_warn.iter().map(|w| check_id(w)).collect();
            for id in ids {
                *warned.entry(id).or_insert(0) += 1;
            }
        }
        WarningShares {
            warned,
            with_doctor: nodes.iter().filter(|m| m.doctor_ran).count(),
        }
    }

    /// `only this node`, or `K of N nodes`.
    fn share(&self, id: &str) -> String {
        let k = self.warned.get(id).copied().unwrap_or(0);
        if k == 1 && self.with_doctor > 1 {
            "only this node".to_string()
        } else {
            format!("{k} of {} nodes", self.with_doctor)
        }
    }
}

/// Adds the evidence of each failed node: its doctor warnings (said when the rest of the fleet
/// has them too, so what sets the node apart stands out) and its pairs' figures and counters.
fn add_evidence(nodes: &mut [NodeOut], pairs: &[PairOut]) {
    let extra: Vec<(usize, Vec<String>)> = {
        let shares = WarningShares::of(nodes);
        nodes
            .iter()
            .enumerate()
            .filter(|(_, o)| o.failed)
            .map(|(i, o)| (i, failure_evidence(o, pairs, &shares)))
            .collect()
    };
    for (i, e) in extra {
        nodes[i].evidence.extend(e);
    }
}

/// The evidence behind a failed node: its doctor's warnings with their share of the fleet, its
/// pairs' figures when it is an outlier, its pairs' counters.
fn failure_evidence(o: &NodeOut, pairs: &[PairOut], shares: &WarningShares) -> Vec<String> {
    let mut extra = Vec::new();
    for w in &o.doctor_warn {
        extra.push(format!("doctor warns ({}): {w}", shares.share(check_id(w))));
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
        extra.push(format!("its pairs: {}", figs.join("; ")));
    }
    for q in pairs.iter().filter(|q| q.server == o.node || q.client == o.node) {
        for c in &q.counters {
            extra.push(format!("{}--{}: {c}", q.server, q.client));
        }
    }
    extra
}

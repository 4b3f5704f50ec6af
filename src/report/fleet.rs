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

use super::html::esc;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

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

/// A fleet directory that cannot be read as one.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// A file could not be read or parsed.
    #[error("{path}: {why}")]
    Bad {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
}

/// One pair's run, as read.
#[derive(Debug, Clone, Default)]
pub struct PairIn {
    /// The node that ran the servers.
    pub server: String,
    /// The node that ran the clients.
    pub client: String,
    /// Why the pair did not run (a node unreachable), when it did not.
    pub skipped: Option<String>,
    /// Exit statuses of the client's ping, lat and bw (`None`: not run or unreachable).
    pub rc: [Option<i64>; 3],
    /// Exit statuses of the server's ping, lat and bw.
    pub server_rc: [Option<i64>; 3],
    /// The server's and the client's ping reports.
    pub ping: [Option<Value>; 2],
    /// The client's lat and bw result documents.
    pub lat: Option<Value>,
    /// See `lat`.
    pub bw: Option<Value>,
}

/// A fleet run, as read.
#[derive(Debug, Clone, Default)]
pub struct FleetIn {
    /// Every node of the inventory, in its order.
    pub nodes: Vec<String>,
    /// `reference`, `ring` or `all`.
    pub pairing: String,
    /// The reference node of a `reference` plan.
    pub reference: Option<String>,
    /// The nodes that answered (the others were unreachable or failed before the doctor ran).
    pub reachable: Vec<String>,
    /// Each reachable node's doctor report and exit status.
    pub doctor: BTreeMap<String, (Option<Value>, Option<i64>)>,
    /// What doctor said on standard error, per node (why a report is missing).
    pub doctor_error: BTreeMap<String, String>,
    /// The pairs.
    pub pairs: Vec<PairIn>,
}

fn read_json(path: &Path) -> Result<Option<Value>, FleetError> {
    match std::fs::read_to_string(path) {
        Ok(t) => serde_json::from_str(&t).map(Some).map_err(|e| FleetError::Bad {
            path: path.display().to_string(),
            why: format!("not JSON: {e}"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FleetError::Bad {
            path: path.display().to_string(),
            why: e.to_string(),
        }),
    }
}

fn names(v: &Value, field: &str, path: &Path) -> Result<Vec<String>, FleetError> {
    let bad = |why: String| FleetError::Bad {
        path: path.display().to_string(),
        why,
    };
    let a = v[field]
        .as_array()
        .ok_or_else(|| bad(format!("'{field}' must be a list of node names")))?;
    a.iter()
        .map(|n| {
            n.as_str()
                .filter(|s| {
                    !s.is_empty()
                        && s.len() <= 255
                        && !s.contains(['/', '\\'])
                        && !s.chars().any(|c| c.is_control() || crate::oob::invisible(c))
                        && *s != "."
                        && *s != ".."
                })
                .map(str::to_string)
                .ok_or_else(|| bad(format!("'{field}' holds {n}, not a node name")))
        })
        .collect()
}

/// Reads a fleet directory (see the module's documentation).
pub fn load(dir: &Path) -> Result<FleetIn, FleetError> {
    let top = dir.join("fleet.json");
    let plan = read_json(&top)?.ok_or_else(|| FleetError::Bad {
        path: top.display().to_string(),
        why: "missing: not a fleet run's directory (the playbook writes it first)".into(),
    })?;
    let nodes = names(&plan, "nodes", &top)?;
    if nodes.is_empty() {
        return Err(FleetError::Bad {
            path: top.display().to_string(),
            why: "no nodes".into(),
        });
    }
    let reachable = names(&plan, "reachable", &top)?;
    let bad = |why: String| FleetError::Bad {
        path: top.display().to_string(),
        why,
    };
    if let Some(n) = reachable.iter().find(|n| !nodes.contains(n)) {
        return Err(bad(format!("'reachable' names '{n}', which is not in 'nodes'")));
    }
    let pairing = plan["pairing"].as_str().unwrap_or("").to_string();
    if !["reference", "ring", "all"].contains(&pairing.as_str()) {
        return Err(bad(format!("'pairing' is '{pairing}', not reference, ring or all")));
    }
    let reference = plan["reference"].as_str().map(str::to_string);
    if pairing == "reference" && !reference.as_ref().is_some_and(|r| nodes.contains(r)) {
        return Err(bad("a reference plan needs 'reference', one of 'nodes'".into()));
    }
    let mut f = FleetIn {
        pairing,
        reference,
        reachable,
        ..Default::default()
    };
    for n in &nodes {
        let doc = read_json(&dir.join("nodes").join(n).join("doctor.json"))?;
        let rc = plan["doctor_rc"][n].as_i64();
        f.doctor.insert(n.clone(), (doc, rc));
        if let Some(e) = plan["doctor_error"][n].as_str().filter(|e| !e.trim().is_empty()) {
            f.doctor_error.insert(n.clone(), e.trim().to_string());
        }
    }
    f.nodes = nodes;
    let pairs = dir.join("pairs");
    let mut entries: Vec<_> = match std::fs::read_dir(&pairs) {
        Ok(rd) => rd.filter_map(Result::ok).map(|e| e.path()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            return Err(FleetError::Bad {
                path: pairs.display().to_string(),
                why: e.to_string(),
            })
        }
    };
    entries.sort();
    for p in entries {
        // a pair is a directory; anything else there (a README, a stray file) is not one
        if !p.is_dir() {
            continue;
        }
        let sp = p.join("status.json");
        let Some(st) = read_json(&sp)? else { continue };
        let (Some(server), Some(client)) = (st["server"].as_str(), st["client"].as_str()) else {
            return Err(FleetError::Bad {
                path: sp.display().to_string(),
                why: "needs 'server' and 'client'".into(),
            });
        };
        for n in [server, client] {
            if !f.nodes.iter().any(|m| m == n) {
                return Err(FleetError::Bad {
                    path: sp.display().to_string(),
                    why: format!("node '{n}' is not in fleet.json's nodes"),
                });
            }
        }
        if server == client {
            return Err(FleetError::Bad {
                path: sp.display().to_string(),
                why: format!("server and client are the same node '{server}'"),
            });
        }
        if f.pairs
            .iter()
            .any(|q| (q.server == server && q.client == client) || (q.server == client && q.client == server))
        {
            return Err(FleetError::Bad {
                path: sp.display().to_string(),
                why: format!("the pair {server}--{client} appears twice (a copied directory?)"),
            });
        }
        let skipped = st["skipped"].as_str().filter(|s| !s.is_empty()).map(str::to_string);
        let rc = |k: &str| st[k].as_i64();
        let src = |k: &str| st["server_rc"][k].as_i64();
        f.pairs.push(PairIn {
            server: server.into(),
            client: client.into(),
            skipped,
            rc: [rc("ping_rc"), rc("lat_rc"), rc("bw_rc")],
            server_rc: [src("ping"), src("lat"), src("bw")],
            ping: [
                read_json(&p.join("ping-server.json"))?,
                read_json(&p.join("ping-client.json"))?,
            ],
            lat: read_json(&p.join("lat.json"))?,
            bw: read_json(&p.join("bw.json"))?,
        });
    }
    Ok(f)
}

/// The pairs a plan runs (server, client), as the playbook makes them.
pub fn planned_pairs(f: &FleetIn) -> Vec<(String, String)> {
    let n = &f.nodes;
    match f.pairing.as_str() {
        "reference" => {
            let r = f.reference.clone().unwrap_or_default();
            n.iter().filter(|x| **x != r).map(|x| (r.clone(), x.clone())).collect()
        }
        "ring" => {
            let mut out: Vec<(String, String)> = Vec::new();
            for i in 0..n.len() {
                let (a, b) = (n[i].clone(), n[(i + 1) % n.len()].clone());
                // two nodes make one pair, not the same pair twice
                if a != b && !out.contains(&(b.clone(), a.clone())) {
                    out.push((a, b));
                }
            }
            out
        }
        "all" => (0..n.len())
            .flat_map(|i| (i + 1..n.len()).map(move |j| (i, j)))
            .map(|(i, j)| (n[i].clone(), n[j].clone()))
            .collect(),
        _ => Vec::new(),
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

fn fig(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(x) if x.abs() >= 1e12 => format!("{x:.3e}"),
        Some(x) => format!("{x:.0}"),
    }
}

/// Text for a terminal: control and invisible characters (from the files read) shown as `?`.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c != '\n' && (c.is_control() || crate::oob::invisible(c)) {
                '?'
            } else {
                c
            }
        })
        .collect()
}

impl FleetReport {
    /// The exit status: 0 when no node failed and every planned pair left a result, else 1.
    pub fn exit_code(&self) -> u8 {
        u8::from(!self.failed.is_empty() || !self.missing_pairs.is_empty())
    }

    /// As JSON.
    pub fn json(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        v["tool"] = json!("rdmaprobe fleet-report");
        v
    }

    /// As text: the nodes' table, the pairs' table, the verdict.
    pub fn text(&self) -> String {
        let mut s = format!(
            "rdmaprobe fleet-report: {} nodes, {} pairs (pairing: {})\n",
            self.nodes.len(),
            self.pairs.len(),
            self.pairing
        );
        let _ = writeln!(
            s,
            "{:<16} {:<9} {:<6} {:<5} {:<5} {:<5} {:>12} {:>12}  verdict",
            "node", "reachable", "doctor", "L1", "L2", "L3", "lat p50 ns", "bw MiB/s"
        );
        for n in &self.nodes {
            let doctor = if !n.doctor_ran {
                if n.reachable {
                    "none"
                } else {
                    "-"
                }
            } else if n.doctor_fail.is_empty() {
                "pass"
            } else {
                "FAIL"
            };
            let _ = writeln!(
                s,
                "{:<16} {:<9} {:<6} {:<5} {:<5} {:<5} {:>12} {:>12}  {}",
                n.node,
                if n.reachable { "yes" } else { "NO" },
                doctor,
                n.layers[0].as_str(),
                n.layers[1].as_str(),
                n.layers[2].as_str(),
                fig(n.lat_p50_ns),
                fig(n.bw_avg_mib_s),
                if n.failed { "FAIL" } else { "pass" }
            );
        }
        for (name, sp, unit) in [
            ("latency p50", &self.lat_p50_ns, "ns"),
            ("bandwidth", &self.bw_avg_mib_s, "MiB/s"),
        ] {
            if let Some(x) = sp {
                let _ = writeln!(
                    s,
                    "fleet {name}: median {:.0} {unit}, MAD {:.0} {unit} over {} node(s)",
                    x.median, x.mad, x.nodes
                );
            }
        }
        let _ = writeln!(s, "pairs (server--client):");
        for p in &self.pairs {
            let _ = writeln!(
                s,
                "  {:<30} L1 {:<5} L2 {:<5} L3 {:<5} lat {:>8} ns  bw {:>8} MiB/s",
                format!("{}--{}", p.server, p.client),
                p.layers[0].as_str(),
                p.layers[1].as_str(),
                p.layers[2].as_str(),
                fig(p.lat_p50_ns),
                fig(p.bw_avg_mib_s)
            );
            for f in &p.findings {
                let _ = writeln!(s, "      {f}");
            }
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        if !self.missing_pairs.is_empty() {
            let _ = writeln!(
                s,
                "INCOMPLETE: the plan's pairs {} left no result (an interrupted run?)",
                self.missing_pairs.join(", ")
            );
        }
        if self.failed.is_empty() {
            s.push_str("no node failed\n");
        } else {
            let _ = writeln!(s, "FAILED nodes: {}", self.failed.join(", "));
            for n in self.nodes.iter().filter(|n| n.failed) {
                for r in &n.reasons {
                    let _ = writeln!(s, "  {}: {r}", n.node);
                }
                for e in &n.evidence {
                    let _ = writeln!(s, "  {}:   evidence: {e}", n.node);
                }
            }
        }
        clean(&s)
    }

    /// One self-contained HTML page (inline CSS, nothing fetched).
    pub fn html(&self) -> String {
        const CSS: &str = "body{font-family:sans-serif;margin:2em;color:#222;max-width:1100px}\
            table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}\
            th{background:#eee}td.l,th.l{text-align:left}td.fail{background:#f8d7da}td.pass{background:#d4edda}\
            td{vertical-align:top}ul{margin:.2em 0;padding-left:1.2em}";
        let mark = |m: Mark| {
            let c = match m {
                Mark::Pass => "pass",
                Mark::Fail => "fail",
                Mark::NotRun => "l",
            };
            format!("<td class=\"{c}\">{}</td>", m.as_str())
        };
        let mut h = String::new();
        let _ = write!(
            h,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>rdmaprobe fleet report</title>\
             <style>{CSS}</style></head><body>\n<h1>rdmaprobe fleet report</h1>\n<p>{} nodes, {} pairs, pairing {}. \
             Outlier: worse than the fleet median by more than {} robust standard deviations (1.4826 x MAD) and \
             by more than {} %.</p>\n",
            self.nodes.len(),
            self.pairs.len(),
            esc(&self.pairing),
            self.rules["mad_k"],
            self.rules["min_deviation_pct"]
        );
        if !self.missing_pairs.is_empty() {
            let _ = writeln!(
                h,
                "<p><b>Incomplete: the plan's pairs {} left no result.</b></p>",
                esc(&self.missing_pairs.join(", "))
            );
        }
        if self.failed.is_empty() {
            h.push_str("<p><b>No node failed.</b></p>\n");
        } else {
            let _ = writeln!(h, "<p><b>Failed nodes: {}</b></p>", esc(&self.failed.join(", ")));
        }
        h.push_str(
            "<h2>Nodes</h2>\n<table><tr><th class=\"l\">node</th><th>reachable</th><th>doctor</th><th>L1 device</th>\
             <th>L2 connection</th><th>L3 performance</th><th>lat p50 (ns)</th><th>bw (MiB/s)</th><th>verdict</th>\
             <th class=\"l\">why</th></tr>\n",
        );
        for n in &self.nodes {
            let doctor = if !n.doctor_ran {
                if n.reachable {
                    Mark::Fail
                } else {
                    Mark::NotRun
                }
            } else if n.doctor_fail.is_empty() {
                Mark::Pass
            } else {
                Mark::Fail
            };
            let why: String = n.reasons.iter().map(|r| format!("<li>{}</li>", esc(r))).collect();
            let figure = |field: &str, v: Option<f64>| {
                let c = if n.outliers.contains(&field) {
                    " class=\"fail\""
                } else {
                    ""
                };
                format!("<td{c}>{}</td>", fig(v))
            };
            let _ = writeln!(
                h,
                "<tr><td class=\"l\">{}</td><td>{}</td>{}{}{}{}{}{}{}<td class=\"l\"><ul>{why}</ul></td></tr>",
                esc(&n.node),
                if n.reachable { "yes" } else { "NO" },
                mark(doctor),
                mark(n.layers[0]),
                mark(n.layers[1]),
                mark(n.layers[2]),
                figure("lat_p50_ns", n.lat_p50_ns),
                figure("bw_avg_mib_s", n.bw_avg_mib_s),
                mark(if n.failed { Mark::Fail } else { Mark::Pass }),
            );
        }
        h.push_str("</table>\n");
        for n in self.nodes.iter().filter(|n| n.failed && !n.evidence.is_empty()) {
            let ev: String = n.evidence.iter().map(|e| format!("<li>{}</li>", esc(e))).collect();
            let _ = writeln!(h, "<h3>Evidence: {}</h3>\n<ul>{ev}</ul>", esc(&n.node));
        }
        for (name, sp, unit) in [
            ("Latency p50", &self.lat_p50_ns, "ns"),
            ("Bandwidth", &self.bw_avg_mib_s, "MiB/s"),
        ] {
            if let Some(x) = sp {
                let _ = writeln!(
                    h,
                    "<p>{name}: fleet median {:.0} {unit}, MAD {:.0} {unit}, over {} node(s).</p>",
                    x.median, x.mad, x.nodes
                );
            }
        }
        h.push_str(
            "<h2>Pairs</h2>\n<table><tr><th class=\"l\">server</th><th class=\"l\">client</th><th>L1</th><th>L2</th>\
             <th>L3</th><th>lat p50 (ns)</th><th>bw (MiB/s)</th><th class=\"l\">findings</th></tr>\n",
        );
        for p in &self.pairs {
            let f: String = p.findings.iter().map(|x| format!("<li>{}</li>", esc(x))).collect();
            let _ = writeln!(
                h,
                "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td>{}{}{}<td>{}</td><td>{}</td><td class=\"l\"><ul>{f}</ul></td></tr>",
                esc(&p.server),
                esc(&p.client),
                mark(p.layers[0]),
                mark(p.layers[1]),
                mark(p.layers[2]),
                fig(p.lat_p50_ns),
                fig(p.bw_avg_mib_s)
            );
        }
        h.push_str("</table>\n");
        for n in &self.notes {
            let _ = writeln!(h, "<p>Note: {}</p>", esc(n));
        }
        h.push_str("</body></html>\n");
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ladder(l1: &str, l2: &str, l3: &str) -> Option<Value> {
        Some(json!({"role": "client", "layers": [
            {"layer": 1, "name": "device", "status": l1, "findings": ["port ACTIVE"], "cause": null},
            {"layer": 2, "name": "connection", "status": l2, "findings": [], "cause": if l2 == "fail" { json!("peer unreachable") } else { Value::Null }},
            {"layer": 3, "name": "performance", "status": l3, "findings": [], "cause": null},
        ]}))
    }

    fn pair(s: &str, c: &str, lat: f64, bw: f64) -> PairIn {
        PairIn {
            server: s.into(),
            client: c.into(),
            skipped: None,
            rc: [Some(0), Some(0), Some(0)],
            server_rc: [Some(0), Some(0), Some(0)],
            ping: [ladder("pass", "pass", "pass"), ladder("pass", "pass", "pass")],
            lat: Some(json!({"runs": [{"latency_ns": {"p50": lat}}],
                             "counters": {"source": "sysfs", "delta": {"port_rcv_errors": 0, "rnr_nak_retry_err": 3}}})),
            bw: Some(json!({"runs": [{"summary": {"bw_avg_mib_s": bw}}]})),
        }
    }

    fn fleet(nodes: &[&str], reachable: &[&str], pairs: Vec<PairIn>) -> FleetIn {
        let doctor = nodes
            .iter()
            .map(|n| {
                let d = reachable.contains(n).then(|| {
                    json!({"checks": [{"id": "thp", "status": "warn", "evidence": "always"},
                                      {"id": "memlock", "status": "pass", "evidence": "ok"}]})
                });
                (n.to_string(), (d, Some(0)))
            })
            .collect();
        FleetIn {
            nodes: nodes.iter().map(|s| s.to_string()).collect(),
            pairing: "all".into(),
            reference: None,
            reachable: reachable.iter().map(|s| s.to_string()).collect(),
            doctor,
            doctor_error: BTreeMap::new(),
            pairs,
        }
    }

    fn skipped(s: &str, c: &str) -> PairIn {
        PairIn {
            server: s.into(),
            client: c.into(),
            skipped: Some("n4 unreachable".into()),
            ..Default::default()
        }
    }

    #[test]
    fn a_slow_node_and_an_unreachable_one_are_flagged_and_no_other() {
        // all pairs of four nodes; n3 adds latency to every pair it is in; n4 never answered
        let f = fleet(
            &["n1", "n2", "n3", "n4"],
            &["n1", "n2", "n3"],
            vec![
                pair("n1", "n2", 600.0, 9000.0),
                pair("n1", "n3", 2600.0, 8800.0),
                skipped("n1", "n4"),
                pair("n2", "n3", 2650.0, 9100.0),
                skipped("n2", "n4"),
                skipped("n3", "n4"),
            ],
        );
        let r = judge(&f, &Rules::default());
        assert_eq!(r.failed, vec!["n3", "n4"], "{}", r.text());
        assert_eq!(r.exit_code(), 1);
        let n3 = &r.nodes[2];
        assert!(
            n3.reasons
                .iter()
                .any(|x| x.contains("latency p50") && x.contains("outlier")),
            "{n3:?}"
        );
        assert!(
            n3.evidence
                .iter()
                .any(|e| e.contains("doctor warns (3 of 3 nodes): thp")),
            "{n3:?}"
        );
        assert!(r.nodes[3].reasons[0].starts_with("unreachable"));
        // the counters of its pairs, non-zero deltas only
        assert!(
            n3.evidence
                .iter()
                .any(|e| e == "n1--n3: lat counters (sysfs): rnr_nak_retry_err 3"),
            "{n3:?}"
        );
        let t = r.text();
        assert!(t.contains("FAILED nodes: n3, n4"), "{t}");
        let h = r.html();
        assert!(h.contains("Failed nodes: n3, n4") && h.starts_with("<!DOCTYPE html>"));
        assert_eq!(r.json()["failed"], json!(["n3", "n4"]));
        assert_eq!(n3.outliers, vec!["lat_p50_ns"]);
        assert!(
            h.contains("<h3>Evidence: n3</h3>") && h.contains("<td class=\"fail\">2600</td>"),
            "{h}"
        );
        assert!(
            n3.evidence
                .iter()
                .any(|e| e == "its pairs: n1--n3 2600 ns, 8800 MiB/s; n2--n3 2650 ns, 9100 MiB/s"),
            "{n3:?}"
        );
        assert!(r.missing_pairs.is_empty());
    }

    /// A fleet of `n` nodes `n00`.. with the pairs of `pairing`, every pair 600 ns and 9000 MiB/s
    /// (+-3 %, deterministic), plus `slow_ns` on every pair that holds `slow`.
    fn planned(n: usize, pairing: &str, slow: &str, slow_ns: f64) -> FleetIn {
        let names: Vec<String> = (0..n).map(|i| format!("n{i:02}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let mut f = fleet(&refs, &refs, Vec::new());
        f.pairing = pairing.into();
        f.reference = Some("n00".into());
        for (k, (a, b)) in planned_pairs(&f).into_iter().enumerate() {
            let wobble = 1.0 + 0.03 * ((k * 7 % 5) as f64 - 2.0) / 2.0;
            let extra = if a == slow || b == slow { slow_ns } else { 0.0 };
            f.pairs.push(pair(&a, &b, 600.0 * wobble + extra, 9000.0 * wobble));
        }
        f
    }

    #[test]
    fn ring_and_reference_plans_blame_the_slow_node_alone() {
        for pairing in ["ring", "reference", "all"] {
            for n in [3, 4, 10] {
                let r = judge(&planned(n, pairing, "n02", 1500.0), &Rules::default());
                assert_eq!(r.failed, vec!["n02"], "{pairing} of {n}: {}", r.text());
                assert!(r.missing_pairs.is_empty());
                assert_eq!(r.exit_code(), 1);
            }
        }
        // a slow reference slows every pair alike: it cannot be judged against the fleet, and
        // the report says so (ping's layer 3 limits judge it)
        let r = judge(&planned(10, "reference", "n00", 1500.0), &Rules::default());
        assert!(r.failed.is_empty(), "{}", r.text());
        assert!(
            r.notes.iter().any(|x| x.contains("every pair holds n00")),
            "{:?}",
            r.notes
        );
    }

    #[test]
    fn a_partial_run_does_not_pass_and_an_absent_reference_is_said() {
        let mut f = planned(5, "all", "", 0.0);
        f.pairs.remove(3);
        let r = judge(&f, &Rules::default());
        assert!(r.failed.is_empty());
        assert_eq!(r.missing_pairs.len(), 1, "{:?}", r.missing_pairs);
        assert_eq!(r.exit_code(), 1);
        assert!(r.text().contains("INCOMPLETE: the plan's pairs"), "{}", r.text());
        assert!(r.html().contains("Incomplete: the plan's pairs"));
        // the reference did not answer: its pairs were skipped, and every node says why
        let mut f = planned(4, "reference", "", 0.0);
        f.reachable.retain(|n| n != "n00");
        for p in &mut f.pairs {
            p.skipped = Some("n00 did not answer".into());
        }
        let r = judge(&f, &Rules::default());
        assert!(r
            .notes
            .iter()
            .any(|x| x == "the reference node n00 did not answer: no pair could run"));
        assert!(
            r.nodes[1]
                .reasons
                .iter()
                .any(|x| x.contains("its partners did not answer (n00)")),
            "{:?}",
            r.nodes[1]
        );
        // a server that failed is said, and fails the pair's layer 3
        let mut f = planned(3, "all", "", 0.0);
        f.pairs[0].server_rc[1] = Some(1);
        let r = judge(&f, &Rules::default());
        assert_eq!(r.pairs[0].layers[2], Mark::Fail);
        assert!(
            r.pairs[0]
                .findings
                .iter()
                .any(|x| x == "the lat server on n00 exited 1"),
            "{:?}",
            r.pairs[0]
        );
        // no doctor report: not shown as a pass
        let mut f = planned(3, "all", "", 0.0);
        f.doctor.insert("n01".into(), (None, Some(2)));
        let r = judge(&f, &Rules::default());
        assert!(!r.nodes[1].doctor_ran && r.nodes[1].failed);
        assert!(
            r.text().lines().any(|l| l.starts_with("n01") && l.contains(" none ")),
            "{}",
            r.text()
        );
    }

    #[test]
    fn a_healthy_fleet_passes_with_its_noise() {
        let f = fleet(
            &["a", "b", "c", "d"],
            &["a", "b", "c", "d"],
            vec![
                pair("a", "b", 600.0, 9000.0),
                pair("a", "c", 640.0, 8700.0),
                pair("a", "d", 580.0, 9300.0),
                pair("b", "c", 610.0, 9050.0),
                pair("b", "d", 620.0, 8900.0),
                pair("c", "d", 650.0, 9150.0),
            ],
        );
        let r = judge(&f, &Rules::default());
        assert!(r.failed.is_empty(), "{}", r.text());
        assert_eq!(r.exit_code(), 0);
        assert!(r.text().contains("no node failed"));
    }

    #[test]
    fn low_bandwidth_is_worse_and_high_bandwidth_is_not() {
        let mut pairs = vec![
            pair("a", "b", 600.0, 9000.0),
            pair("a", "c", 600.0, 9000.0),
            pair("b", "c", 600.0, 9000.0),
        ];
        for p in ["a", "b", "c"] {
            pairs.push(pair(p, "slow", 600.0, 3000.0));
            pairs.push(pair(p, "fast", 600.0, 30000.0));
        }
        let f = fleet(
            &["a", "b", "c", "slow", "fast"],
            &["a", "b", "c", "slow", "fast"],
            pairs,
        );
        let r = judge(&f, &Rules::default());
        assert_eq!(r.failed, vec!["slow"], "{}", r.text());
    }

    #[test]
    fn device_and_connection_failures_are_attributed() {
        let mut bad_dev = pair("a", "b", 600.0, 9000.0);
        bad_dev.ping[1] = ladder("fail", "not_run", "not_run");
        bad_dev.rc = [Some(11), Some(1), Some(1)];
        bad_dev.lat = None;
        bad_dev.bw = None;
        let mut no_conn = pair("a", "c", 600.0, 9000.0);
        no_conn.ping[1] = ladder("pass", "fail", "not_run");
        no_conn.rc = [Some(12), Some(1), Some(1)];
        no_conn.lat = None;
        no_conn.bw = None;
        let f = fleet(&["a", "b", "c"], &["a", "b", "c"], vec![bad_dev, no_conn]);
        let r = judge(&f, &Rules::default());
        // b's own device fails; c connects with nobody; a has no pair that connects either
        assert!(
            r.nodes[1].reasons.iter().any(|x| x.starts_with("device layer fails")),
            "{:?}",
            r.nodes[1]
        );
        assert!(
            r.nodes[2].reasons.iter().any(|x| x.contains("layer 2")),
            "{:?}",
            r.nodes[2]
        );
        assert_eq!(r.pairs[1].layers, [Mark::Pass, Mark::Fail, Mark::NotRun]);
        assert!(r.pairs[1].findings.iter().any(|x| x.contains("peer unreachable")));
        assert!(r.notes.iter().any(|n| n.contains("no node has a figure")));
    }

    #[test]
    fn a_doctor_failure_fails_the_node_and_a_missing_figure_is_said() {
        let mut f = fleet(&["a", "b", "c"], &["a", "b", "c"], vec![pair("a", "b", 600.0, 9000.0)]);
        f.doctor.insert(
            "c".into(),
            (
                Some(json!({"checks": [{"id": "port.state", "status": "fail", "evidence": "port 1: DOWN"}]})),
                Some(1),
            ),
        );
        f.doctor.insert("b".into(), (None, Some(1)));
        f.doctor_error
            .insert("b".into(), "rdmaprobe: error: no device mlx5_9".into());
        let r = judge(&f, &Rules::default());
        assert!(r.nodes[2]
            .reasons
            .iter()
            .any(|x| x.contains("port.state: port 1: DOWN")));
        assert!(
            r.nodes[1]
                .reasons
                .iter()
                .any(|x| x == "no doctor report (doctor exited 1: rdmaprobe: error: no device mlx5_9)"),
            "{:?}",
            r.nodes[1]
        );
        assert!(
            r.notes.iter().any(|n| n.contains("too few to judge outliers")),
            "{:?}",
            r.notes
        );
    }

    #[test]
    fn load_reads_a_directory_and_refuses_what_is_not_one() {
        let d = std::env::temp_dir().join(format!("rdmaprobe-fleet-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("pairs/n1--n2")).unwrap();
        assert!(load(&d).unwrap_err().to_string().contains("fleet.json"));
        std::fs::write(d.join("fleet.json"), r#"{"nodes": ["n1", "../x"], "reachable": []}"#).unwrap();
        assert!(load(&d).unwrap_err().to_string().contains("not a node name"));
        std::fs::write(
            d.join("fleet.json"),
            "{\"nodes\": [\"n1\", \"c\\u001b[31m\"], \"reachable\": []}",
        )
        .unwrap();
        assert!(load(&d).unwrap_err().to_string().contains("not a node name"));
        std::fs::write(
            d.join("fleet.json"),
            r#"{"nodes": ["n1"], "reachable": ["n9"], "pairing": "all"}"#,
        )
        .unwrap();
        assert!(load(&d)
            .unwrap_err()
            .to_string()
            .contains("'n9', which is not in 'nodes'"));
        std::fs::write(
            d.join("fleet.json"),
            r#"{"nodes": ["n1"], "reachable": [], "pairing": "star"}"#,
        )
        .unwrap();
        assert!(load(&d).unwrap_err().to_string().contains("not reference, ring or all"));
        std::fs::write(
            d.join("fleet.json"),
            r#"{"nodes": ["n1", "n2"], "reachable": ["n1", "n2"], "pairing": "ring", "doctor_rc": {"n1": 0}}"#,
        )
        .unwrap();
        std::fs::write(
            d.join("pairs/n1--n2/status.json"),
            r#"{"server": "n1", "client": "n3"}"#,
        )
        .unwrap();
        assert!(load(&d).unwrap_err().to_string().contains("'n3' is not in"));
        std::fs::write(
            d.join("pairs/n1--n2/status.json"),
            r#"{"server": "n1", "client": "n1"}"#,
        )
        .unwrap();
        assert!(load(&d).unwrap_err().to_string().contains("the same node"));
        std::fs::create_dir_all(d.join("pairs/copy")).unwrap();
        std::fs::write(
            d.join("pairs/n1--n2/status.json"),
            r#"{"server": "n1", "client": "n2"}"#,
        )
        .unwrap();
        std::fs::write(d.join("pairs/copy/status.json"), r#"{"server": "n2", "client": "n1"}"#).unwrap();
        assert!(load(&d).unwrap_err().to_string().contains("appears twice"));
        std::fs::remove_dir_all(d.join("pairs/copy")).unwrap();
        // a stray file among the pairs is not a pair
        std::fs::write(d.join("pairs/README"), "notes").unwrap();
        std::fs::write(
            d.join("pairs/n1--n2/status.json"),
            r#"{"server": "n1", "client": "n2", "ping_rc": 0, "lat_rc": 0, "bw_rc": 0}"#,
        )
        .unwrap();
        std::fs::write(
            d.join("pairs/n1--n2/lat.json"),
            r#"{"runs": [{"latency_ns": {"p50": 700.5}}]}"#,
        )
        .unwrap();
        std::fs::write(d.join("pairs/n1--n2/bw.json"), "{not json").unwrap();
        assert!(load(&d).unwrap_err().to_string().contains("not JSON"));
        std::fs::remove_file(d.join("pairs/n1--n2/bw.json")).unwrap();
        let f = load(&d).unwrap();
        assert_eq!(f.pairing, "ring");
        assert_eq!(f.pairs.len(), 1);
        assert_eq!(f.doctor["n1"].1, Some(0));
        let r = judge(&f, &Rules::default());
        assert_eq!(r.pairs[0].lat_p50_ns, Some(700.5));
        // no ladder fetched: layer 1 cannot be shown to pass, and says why
        assert_eq!(r.pairs[0].layers[0], Mark::Fail);
        assert!(r.pairs[0].findings[0].contains("no ping report"), "{:?}", r.pairs[0]);
        assert_eq!(r.pairs[0].bw_avg_mib_s, None);
        let _ = std::fs::remove_dir_all(&d);
    }
}

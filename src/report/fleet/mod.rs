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
mod judge;
mod render;
#[cfg(test)]
mod tests;

pub use input::{load, planned_pairs, FleetError, FleetIn, PairIn};
pub use judge::judge;

use serde_json::Value;

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
    /// When the pairs' results were measured: the earliest and the latest `created_unix` of
    /// their lat and bw documents (`None`: none says).
    pub measured_unix: Option<[u64; 2]>,
}

impl FleetReport {
    /// When the results were measured (the documents are stamped as a run ends), in words:
    /// `measured from A to B`, `measured A`, or not recorded.
    pub fn measured(&self) -> String {
        use crate::report::html::utc;
        match self.measured_unix {
            Some([a, b]) if a == b => format!("measured {}", utc(a)),
            Some([a, b]) => format!("measured from {} to {}", utc(a), utc(b)),
            None => "measured at a time the results do not record".into(),
        }
    }
}

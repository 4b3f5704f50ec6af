//! The key-value table: its heading (the workload's shape, the device, the clock), a row per
//! backend (throughput, latency percentiles, the doorbell batching, the checked counts) and a
//! footer with each client's and worker's throughput.

use super::{rule, Report};
use crate::probe::KvPlan;
use crate::scenario::kv::result::KvResult;
use std::fmt::Write as _;

const WIDTH: usize = 120;

impl Report {
    /// The heading of a key-value run.
    pub(super) fn kv_header(&self, k: &KvPlan) -> String {
        let mut s = rule(WIDTH);
        let _ = writeln!(
            s,
            " key-value (HERD over MICA stores), {}: {} workers, {} clients, window {}, postlist {}, {} % PUT, {} B values, {} keys{}; {} requests per client",
            self.device_label(),
            k.workers,
            k.clients,
            k.window,
            if k.batching {
                format!("{} and 1 (--batching: each backend at both, one after the other; a row's backend/postlist)", k.postlist)
            } else {
                k.postlist.to_string()
            },
            k.update_pct,
            k.value_size,
            k.keys,
            k.zipf.map(|t| format!(" (Zipf {})", theta(t))).unwrap_or_else(|| " (uniform)".into()),
            k.requests
        );
        s += " requests: inline RDMA WRITE over UC into the request region; responses: inline SEND_WITH_IMM over UD, a batch per post\n";
        let threads = crate::probe::measure::kv_threads_said(k.threads, &self.role);
        s += &match &self.role {
            super::Role::Loopback => format!(" in one process; threads: {threads}; every GET's value checked by its client\n"),
            super::Role::Client(p) => {
                format!(" client of the server {p}; threads: {threads}; every GET's value checked by its client\n")
            }
            super::Role::Server(p) => format!(
                " server of the clients at {p}; threads: {threads}; the rows are the clients' measurement (they time the requests), sent over as each run ends\n"
            ),
        };
        if self.is_model {
            s += " figures are model0's (a software model executing in this thread), not a NIC's\n";
        }
        let _ = writeln!(
            s,
            " latency: a request's post to its response's completion, TSC {:.3} MHz (timer overhead {:.1} ns, not taken off)",
            self.clock.hz / 1e6,
            self.clock.overhead_ns()
        );
        s += " Mops: requests answered per microsecond over the run (first write to last response), all clients; per post: responses a worker posts with one doorbell (its batch); GET miss: answered with no value\n";
        self.warnings_lines(&mut s);
        s += &rule(WIDTH);
        let _ = writeln!(
            s,
            " {:>9} {:>8} {:>10} {:>10} {:>10} {:>10} {:>9} {:>10} {:>9} {:>9}",
            "backend",
            "Mops",
            "p50 [ns]",
            "p99 [ns]",
            "p99.9 [ns]",
            "max [ns]",
            "per post",
            "GET hits",
            "GET miss",
            "PUTs"
        );
        s
    }

    /// Each client's and worker's throughput, and the counters.
    pub(super) fn kv_footer(&self, s: &mut String, rs: &[KvResult]) {
        let list = |v: &[f64]| v.iter().map(|m| format!("{m:.3}")).collect::<Vec<_>>().join(" ");
        let batching = matches!(&self.plan.scenario, crate::probe::Scenario::Kv(k) if k.batching);
        for r in rs {
            let name = label(r, batching);
            let _ = writeln!(
                s,
                " {}: Mops per client (each over its own first write to last response) {}; per worker (over the run) {}; over the {} stores: {} PUTs in place, {} inserted, {} index evictions, {} keys lost to a key of their tag (populate's included)",
                name,
                list(&r.client_mops),
                list(&r.worker_mops),
                r.workers,
                r.put_hits,
                r.put_inserts,
                r.evictions,
                r.collisions
            );
            if r.torn_reads > 0 {
                let _ = writeln!(
                    s,
                    " {}: {} PUTs were read before all their value's bytes were visible to the worker, and read again until they were (the writer's copy lands in two stores; see docs/kv.md)",
                    name, r.torn_reads
                );
            }
        }
        let gains = batching_gains(rs);
        if let (false, Some(r)) = (gains.is_empty(), rs.iter().find(|r| r.postlist > 1)) {
            let _ = writeln!(
                s,
                " doorbell batching, this run: Mops at postlist {} over postlist 1 (a post per response): {}",
                r.postlist,
                gains.join(", ")
            );
        }
        *s += &self
            .counters
            .as_ref()
            .map(|c| c.rnr_warning() + &c.line())
            .unwrap_or_default();
        *s += &rule(WIDTH);
    }
}

/// A backend's row (with --batching, the backend and its postlist: `verbs/32`).
pub(super) fn row(r: &KvResult, batching: bool) -> String {
    let l = &r.latency;
    let name = label(r, batching);
    format!(
        " {:>9} {:>8.3} {:>10.0} {:>10.0} {:>10.0} {:>10.0} {:>9.2} {:>10} {:>9} {:>9}\n",
        name, r.mops, l.p50, l.p99, l.p99_9, l.max, r.mean_batch, r.get_hits, r.get_misses, r.puts
    )
}

/// A run's name in the table: its backend, and with --batching its postlist (`verbs/32`).
fn label(r: &KvResult, batching: bool) -> String {
    if batching {
        format!("{}/{}", r.backend, r.postlist)
    } else {
        r.backend.clone()
    }
}

/// The doorbell batching's gain of each backend run at a postlist above 1 and at 1 in `rs`: its
/// Mops at the larger over its Mops at 1, as `verbs 1.93x (0.912 / 0.472 Mops)`.
pub(super) fn batching_gains(rs: &[KvResult]) -> Vec<String> {
    let mut v = Vec::new();
    for r in rs.iter().filter(|r| r.postlist > 1) {
        let one = rs.iter().find(|o| o.backend == r.backend && o.postlist == 1);
        if let Some(o) = one.filter(|o| o.mops > 0.0) {
            v.push(format!(
                "{} {:.2}x ({:.3} / {:.3} Mops)",
                r.backend,
                r.mops / o.mops,
                r.mops,
                o.mops
            ));
        }
    }
    v
}

/// A Zipf exponent as the header prints it: three decimals, or in scientific notation when that
/// would print 0.000 for a positive one.
fn theta(t: f64) -> String {
    if t > 0.0 && t < 0.0005 {
        format!("{t:.2e}")
    } else {
        format!("{t:.3}")
    }
}

//! The latency table's perftest line: perftest's figures of the same runs, as `ib_*_lat`
//! computes them, to set beside its report; and against a perftest peer of a bandwidth test,
//! the report the two ends exchanged.

use crate::scenario::runner::LatResult;
use std::fmt::Write as _;

/// perftest's figures of each latency run (`t_typical`/`t_avg`, from each post to the next),
/// one line per size: what to set beside `ib_*_lat`'s report, with how it differs from the
/// table's. Empty when no run has them.
pub(super) fn perftest_lat_lines(rs: &[LatResult]) -> String {
    let sizes: std::collections::BTreeSet<u32> =
        rs.iter().filter(|r| r.perftest_ns.is_some()).map(|r| r.size).collect();
    if sizes.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        " perftest's t_typical/t_avg [ns] of the same runs (as ib_*_lat: from each post to the next, so the round \
         trip plus the loop's bookkeeping after it (receive reposts, reaping), which the table leaves out; \
         the two largest left out, halved for write and send):\n",
    );
    for size in sizes {
        let cells: Vec<String> = rs
            .iter()
            .filter(|r| r.size == size)
            .filter_map(|r| {
                let p = r.perftest_ns?;
                let e = if r.completion.as_deref() == Some("events") {
                    "-e"
                } else {
                    ""
                };
                Some(format!("{}{e} {:.1}/{:.1}", r.backend, p.typical, p.avg))
            })
            .collect();
        let _ = writeln!(s, "  {size} B: {}", cells.join(", "));
    }
    s
}

/// Against a perftest peer of a bandwidth test (`peer_tool`): the report perftest's client sent
/// (this side the server), or the one this side sent (the client), in the units both used.
/// Empty otherwise.
pub(super) fn perftest_bw_report_lines(peer_tool: &serde_json::Value, scenario: &crate::probe::Scenario) -> String {
    let crate::probe::Scenario::Bw(b) = scenario else {
        return String::new();
    };
    let ours = if b.gbits { "Gb/sec" } else { "MB/sec" };
    let line = |r: &serde_json::Value, whose: &str| {
        let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
        // perftest does not exchange --report_gbits: the unit as the report's own figures say
        let rep = crate::oob::perftest::BwReport {
            size: r["size"].as_u64().unwrap_or(0),
            iters: r["iters"].as_u64().unwrap_or(0),
            bw_peak: f("bw_peak"),
            bw_avg: f("bw_avg"),
            msg_rate: f("msg_rate"),
        };
        let unit = rep.unit().unwrap_or(ours);
        let note = if unit == ours {
            String::new()
        } else {
            format!(" (in {unit}, where this side's are in {ours}: give both sides the same --report_gbits)")
        };
        format!(
            " {whose}: {} B x {} messages, peak {:.2} {unit}, average {:.2} {unit}, message rate {:.6} Mpps{note}\n",
            rep.size, rep.iters, rep.bw_peak, rep.bw_avg, rep.msg_rate
        )
    };
    let mut s = String::new();
    if peer_tool["report"].is_object() {
        s += &line(
            &peer_tool["report"],
            "perftest's report (its client's run, as it printed it; this side measured nothing)",
        );
    }
    if let Some(all) = peer_tool["received"].as_array() {
        s += " this side received (as perftest's ib_send_bw server computes its own figures: from the first poll that \
               found receives to the last message):\n";
        for r in all {
            let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
            s += &format!(
                "  {} B x {} messages, average {:.2} {ours}, message rate {:.6} Mpps\n",
                r["size"].as_u64().unwrap_or(0),
                r["iters"].as_u64().unwrap_or(0),
                f("bw_avg"),
                f("msg_rate")
            );
        }
    }
    if peer_tool["report_sent"].is_object() {
        s += &line(
            &peer_tool["report_sent"],
            "sent to perftest as this run's report (its server prints it; the table's figures, as perftest computes them)",
        );
    }
    s
}

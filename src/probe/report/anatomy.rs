//! The latency table's second table with `--anatomy`: each round trip split at the server's
//! turnaround.

use crate::scenario::runner::LatResult;
use std::fmt::Write as _;

/// One row per run that has an anatomy (round trips, never halved): the round trip, the
/// server's turnaround and the rest, p50 and p99 each, the client's post call, and the
/// turnaround's share of the median round trip. Empty when no run has one.
pub(super) fn anatomy_lines(rs: &[LatResult]) -> String {
    let rows: Vec<(&LatResult, &crate::scenario::runner::Anatomy)> =
        rs.iter().filter_map(|r| r.anatomy.as_ref().map(|a| (r, a))).collect();
    let Some((_, first)) = rows.first() else {
        return String::new();
    };
    let mut s = format!(
        " anatomy [ns], round trips (not halved): t1 the client posts, t2 the server sees the request, t3 its reply's \
         post returned, t4 the client sees the reply; turn = t3 - t2 (the server's software, on its clock), rest = \
         (t4 - t1) - (t3 - t2) per sample (the client's post, both messages through the NICs and the wire, each \
         end's polling until it saw its message); the server's stamps lie on every round trip (t2's on a NIC; t2's \
         and t3's on model0, which executes the reply in the server's thread after its post), {:.1} ns each by the \
         calibration: set a run without --anatomy beside it for the figures (on model0 the round trip measured \
         50-80 ns longer, docs/anatomy.md):\n",
        first.stamp_overhead_ns
    );
    let _ = writeln!(
        s,
        " {:>9} {:<9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9}",
        "#bytes",
        "backend",
        "rtt p50",
        "rtt p99",
        "turn p50",
        "turn p99",
        "rest p50",
        "rest p99",
        "post p50",
        "turn/rtt"
    );
    for (r, a) in &rows {
        let e = if r.completion.as_deref() == Some("events") {
            "-e"
        } else {
            ""
        };
        let share = if a.round_trip_ns.p50 > 0.0 {
            format!("{:.0} %", 100.0 * a.turnaround_ns.p50 / a.round_trip_ns.p50)
        } else {
            "-".into()
        };
        let _ = writeln!(
            s,
            " {:>9} {:<9} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>9}",
            r.size,
            format!("{}{e}", r.backend),
            a.round_trip_ns.p50,
            a.round_trip_ns.p99,
            a.turnaround_ns.p50,
            a.turnaround_ns.p99,
            a.rest_ns.p50,
            a.rest_ns.p99,
            r.post.p50,
            share
        );
        if a.turnaround_over_round_trip > 0 {
            let _ = writeln!(
                s,
                "   {} sample(s) of {} {} B had a turnaround longer than their round trip (impossible on one clock: the two \
                 ends' timestamps did not share one, two hosts or an emulated guest's CPUs): their rest counted as 0",
                a.turnaround_over_round_trip, r.backend, r.size
            );
        }
    }
    s
}

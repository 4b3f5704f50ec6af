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
        if let Some(why) = &a.nic_absent {
            let _ = writeln!(s, "   {}{e} {} B: no NIC split: {why}", r.backend, r.size);
        }
        if a.turnaround_over_round_trip > 0 {
            let _ = writeln!(
                s,
                "   {} sample(s) of {} {} B had a turnaround longer than their round trip (impossible on one clock: the two \
                 ends' timestamps did not share one, two hosts or an emulated guest's CPUs): their rest counted as 0",
                a.turnaround_over_round_trip, r.backend, r.size
            );
        }
    }
    s + &nic_lines(&rows)
}

/// The NIC split's table: the rows that have one (see `scenario::runner::NicAnatomy`), each
/// with its stated error; then the map of each size (all backends of a size share it).
fn nic_lines(rows: &[(&LatResult, &crate::scenario::runner::Anatomy)]) -> String {
    let nic: Vec<_> = rows
        .iter()
        .filter_map(|(r, a)| a.nic.as_ref().map(|n| (*r, n)))
        .collect();
    if nic.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        " NIC split [ns], p50 (p99) per component, from the NICs' completion timestamps: post = the client's post \
         call; wire/NIC = its doorbell to its NIC completing the reply, less the responder (both messages through \
         the NICs and the wire); responder = the server's NIC completing the request to its reply's post returned \
         (its polling, then its turnaround); poll = the client's NIC completing the reply to the client seeing it. \
         They add up to the round trip sample by sample; +- is a component's stated error (one mapped timestamp: \
         the map's error and a NIC tick; wire/NIC the client's and the server's together):\n",
    );
    let _ = writeln!(
        s,
        " {:>9} {:<9} {:>18} {:>18} {:>18} {:>18} {:>18} {:>6} {:>8}",
        "#bytes", "backend", "post", "wire/NIC", "responder", "(its polling)", "poll", "+-", "outside"
    );
    let c = |st: &crate::report::Stats| format!("{:.1} ({:.1})", st.p50, st.p99);
    for (r, n) in &nic {
        let e = if r.completion.as_deref() == Some("events") {
            "-e"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            " {:>9} {:<9} {:>18} {:>18} {:>18} {:>18} {:>18} {:>6.0} {:>8}",
            r.size,
            format!("{}{e}", r.backend),
            c(&n.post_ns),
            c(&n.wire_ns),
            c(&n.responder_ns),
            c(&n.server_poll_ns),
            c(&n.poll_ns),
            n.error_ns.max(n.server_error_ns),
            n.outside_window
        );
    }
    let mut last = None;
    for (r, n) in &nic {
        if last == Some(r.size) {
            continue;
        }
        last = Some(r.size);
        let m = &n.map;
        let _ = write!(
            s,
            "   {} B: NIC clock {:.1} kHz measured against the TSC ({} stated, {:+.1} ppm), {} pairs over the run, \
             residual {:.1} ns, a read {:.1} ns wide",
            r.size,
            m.measured_khz,
            m.stated_khz,
            m.ppm_shown(),
            m.pairs,
            m.residual_max_ns,
            m.read_span_ns
        );
        match &n.server_map {
            Some(m) => {
                let _ = writeln!(
                    s,
                    "; the server's, on its own (its responders came in its ticks): {:.1} kHz ({:+.1} ppm), {} pairs, \
                     residual {:.1} ns, a read {:.1} ns wide",
                    m.measured_khz,
                    m.ppm_shown(),
                    m.pairs,
                    m.residual_max_ns,
                    m.read_span_ns
                );
            }
            None => s.push('\n'),
        }
    }
    if nic.iter().any(|(_, n)| n.outside_window > 0) {
        s += "   outside: samples with a component below minus its stated error (a NIC timestamp mapped outside the \
              window causality puts it in; more than one in 1000 and no split is shown)\n";
    }
    s
}

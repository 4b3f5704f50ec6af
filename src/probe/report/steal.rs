//! The bandwidth table's host warnings: the runs during which the hypervisor ran something else
//! on their CPUs (steal), and the runs with windows in which nothing completed, with what the
//! measuring threads did meanwhile.

use crate::scenario::runner::BwResult;

/// A warning naming the bandwidth runs during which the hypervisor ran something else on their
/// CPUs (steal), with how long: their worst windows may be the host's, not the device's. Empty
/// when none had any.
pub(super) fn steal_warning(rs: &[BwResult]) -> String {
    let runs: Vec<(String, f64, f64)> = rs
        .iter()
        .filter_map(|x| {
            let e = if x.completion.as_deref() == Some("events") {
                "-e"
            } else {
                ""
            };
            let label = format!("{} B {}{e}", x.size, x.backend);
            Some((label, x.summary.steal_ms?, x.summary.seconds * 1e3))
        })
        .collect();
    steal_text(&runs)
}

/// A warning naming the bandwidth runs with windows in which nothing completed, how many, and
/// what was measured of this side meanwhile: how many of those windows lay within one turn of
/// every measuring thread's loop (which counts completions at each turn's end), the longest turn, the
/// kernel's involuntary context switches and the steal over the run. Empty when no run had an
/// empty window.
pub(super) fn stall_warning(rs: &[BwResult]) -> String {
    let lines: Vec<String> = rs
        .iter()
        .filter(|x| x.summary.empty_windows > 0)
        .map(|x| {
            let events = x.completion.as_deref() == Some("events");
            let label = format!("{} B {}{}", x.size, x.backend, if events { "-e" } else { "" });
            // "run": a line of its own must not read as a table row (which starts with the size)
            format!("  run {label}: {}", stall_cause(&x.summary, events))
        })
        .collect();
    if lines.is_empty() {
        return String::new();
    }
    format!(
        " WARNING: nothing completed in some windows of {} run(s) (a worst window of 0):\n{}\n",
        lines.len(),
        lines.join("\n")
    )
}

/// What was measured of a run with empty windows.
fn stall_cause(s: &crate::scenario::bw::BwSummary, events: bool) -> String {
    let (empty, within) = (s.empty_windows, s.empty_windows_within_a_turn);
    let switches = s
        .involuntary_switches
        .map(|n| format!("{n} involuntary context switch(es)"))
        .unwrap_or_else(|| "involuntary context switches unreadable".into());
    let steal = s
        .steal_ms
        .map(|ms| format!("steal {ms:.0} ms"))
        .unwrap_or_else(|| "steal unknown".into());
    let longest = match (s.longest_turn_ms, s.longest_turn_at_ms) {
        (Some(len), Some(at)) => {
            format!("the longest turn of a measuring thread's loop {len:.2} ms from {at:.1} ms; ")
        }
        _ => String::new(),
    };
    let mut out = format!("{empty} of {} windows empty", s.window_mib_s.len());
    let bound = if s.long_turns_overflowed {
        " (at least: more long turns than were kept)"
    } else {
        ""
    };
    if events {
        // a thread blocked for an event because nothing had completed: its turns say nothing
        out += " (-e: the threads block for a completion event when nothing moves, so a window without a \
                completion is the device's, the wire's or the peer's, or the thread's wake-up)";
    } else if within == empty {
        out += ", each within one turn of every measuring thread's loop (a thread counts its completions at each \
                turn's end, so the window shows none whatever the device did; the thread was off its CPU, in a call \
                that blocked or, on model0, in the model's own execution): this side's, not the device's";
    } else {
        out += &format!(
            "; {} with a turn of a measuring thread ending in it without a new completion (nothing completed \
             by then: the device, the wire or the peer, or a thread's own long turn before it){}",
            empty - within,
            if within > 0 {
                format!(", {within} within one turn of every thread's loop (this side's)")
            } else {
                String::new()
            }
        );
    }
    format!("{out}{bound} ({longest}over the run: {switches}, {steal})")
}

/// The steal a run must show to be named: two of `/proc/stat`'s 10 ms ticks. A difference of
/// two readings of a truncated tick counter of 1 tick is anything from just over 0 to 20 ms (a
/// steady 1 % of steal shows as one tick in about a fifth of 250 ms runs); 2 ticks is at least
/// 10 ms.
const MIN_STEAL_MS: f64 = 20.0;

/// [`steal_warning`]'s text from each run's label, steal (ms) and length (ms).
fn steal_text(runs: &[(String, f64, f64)]) -> String {
    let stolen: Vec<String> = runs
        .iter()
        .filter(|(_, ms, _)| *ms >= MIN_STEAL_MS)
        .map(|(label, ms, len)| format!("{label} {ms:.0} ms (run {len:.0} ms)"))
        .collect();
    if stolen.is_empty() {
        return String::new();
    }
    format!(
        " WARNING: the hypervisor ran something else on this side's measuring CPUs during {} run(s) (steal, \
         /proc/stat in 10 ms ticks, from just before the run's threads started to just after they ended): {}; \
         a slow or empty window there may be the host's, not the device's\n",
        stolen.len(),
        stolen.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::{stall_cause, steal_text};
    use crate::scenario::bw::{summarize, ThreadResult};

    /// A run of 1000 ticks (hz 1000: 1 ms each) in windows of 250 with nothing completed in
    /// the second, whose thread's loop had the long turns `gaps`.
    fn stalled(gaps: Vec<(u64, u64)>) -> crate::scenario::bw::BwSummary {
        let r = ThreadResult {
            messages: 1000,
            streams: 1,
            end: 1000,
            grid: (0, 250),
            windows: vec![250, 250, 600],
            longest_turn: gaps.iter().map(|&(a, b)| (b - a, a)).max().unwrap_or((1, 0)),
            turns_over_a_window: gaps,
            last_turn: (999, 1000),
            involuntary_switches: Some(4),
            steal_ns: Some(0),
            ..Default::default()
        };
        summarize(&[r], 1024, 1, 1000.0)
    }

    #[test]
    fn an_empty_window_says_what_was_measured_of_this_side() {
        // the window within one turn of the loop: both its counts are that turn's end
        let c = stall_cause(&stalled(vec![(240, 500)]), false);
        assert!(
            c.starts_with("1 of 4 windows empty, each within one turn of every measuring thread's loop")
                && c.contains("this side's, not the device's")
                && c.ends_with("(the longest turn of a measuring thread's loop 260.00 ms from 240.0 ms; over the run: 4 involuntary context switch(es), steal 0 ms)"),
            "{c}"
        );
        // a turn ended in the window without a completion: the device's, the wire's or the peer's
        let c = stall_cause(&stalled(vec![]), false);
        assert!(
            c.contains("1 with a turn of a measuring thread ending in it without a new completion")
                && !c.contains("this side's"),
            "{c}"
        );
        // -e: a long turn is a wait for an event, never put on this side
        let c = stall_cause(&stalled(vec![(240, 500)]), true);
        assert!(
            c.contains("-e: the threads block for a completion event") && !c.contains("this side's"),
            "{c}"
        );
    }

    #[test]
    fn runs_with_steal_are_named_with_how_long() {
        let r = |l: &str, ms: f64| (l.to_string(), ms, 250.0);
        // none, or one tick (0-20 ms): not named
        assert_eq!(steal_text(&[r("64 B verbs", 0.0), r("64 B direct", 10.0)]), "");
        let w = steal_text(&[r("64 B verbs", 10.0), r("65536 B direct", 30.0), r("8 B wr-e", 20.0)]);
        assert!(w.starts_with(" WARNING: the hypervisor ran something else"), "{w}");
        assert!(
            w.contains("during 2 run(s)")
                && w.contains("65536 B direct 30 ms (run 250 ms), 8 B wr-e 20 ms (run 250 ms);"),
            "{w}"
        );
        assert!(!w.contains("64 B verbs") && w.ends_with("not the device's\n"), "{w}");
    }
}

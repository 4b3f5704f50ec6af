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
/// what this side's measuring threads did: the longest time one went between two turns of its
/// loop (off its CPU, or blocked), the kernel's involuntary context switches, the steal. Empty
/// when no run had an empty window.
pub(super) fn stall_warning(rs: &[BwResult]) -> String {
    let lines: Vec<String> = rs
        .iter()
        .filter_map(|x| {
            let s = &x.summary;
            let empty = s.window_mib_s.iter().filter(|&&w| w <= 0.0).count();
            if empty == 0 {
                return None;
            }
            let events = x.completion.as_deref() == Some("events");
            let label = format!("{} B {}{}", x.size, x.backend, if events { "-e" } else { "" });
            Some(format!(
                "  {label}: {empty} of {} windows; {}",
                s.window_mib_s.len(),
                stall_cause(s, events)
            ))
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

/// What the measuring threads did in a run with an empty window, from what was measured.
fn stall_cause(s: &crate::scenario::bw::BwSummary, events: bool) -> String {
    let switches = s
        .involuntary_switches
        .map(|n| format!("{n} involuntary context switch(es)"))
        .unwrap_or_else(|| "involuntary context switches unreadable".into());
    let steal = s
        .steal_ms
        .map(|ms| format!("steal {ms:.0} ms"))
        .unwrap_or_else(|| "steal unknown".into());
    match (s.longest_turn_ms, s.longest_turn_at_ms) {
        (Some(len), Some(at)) if len >= s.window_ms / 2.0 => format!(
            "a measuring thread went {len:.2} ms without a turn of its loop from {at:.1} ms into the run \
             ({}; {switches}, {steal}): the window is this side's, not the device's",
            if events {
                "blocked for a completion event, or off its CPU"
            } else {
                "off its CPU, or in a call that blocked"
            }
        ),
        (Some(len), _) => format!(
            "the measuring threads kept turning (longest gap {len:.3} ms; {switches}, {steal}): \
             the device completed nothing"
        ),
        _ => format!("{switches}, {steal}"),
    }
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
    /// the second, whose thread's longest turn was `turn` (ticks, from tick 0).
    fn stalled(turn: (u64, u64)) -> crate::scenario::bw::BwSummary {
        let r = ThreadResult {
            messages: 1000,
            streams: 1,
            end: 1000,
            grid: (0, 250),
            windows: vec![250, 250, 600],
            longest_turn: turn,
            involuntary_switches: Some(4),
            steal_ns: Some(0),
            ..Default::default()
        };
        summarize(&[r], 1024, 1, 1000.0)
    }

    #[test]
    fn an_empty_window_says_what_the_measuring_thread_did() {
        let s = stalled((260, 240));
        assert_eq!(s.window_mib_s.iter().filter(|&&w| w == 0.0).count(), 1);
        let c = stall_cause(&s, false);
        assert!(
            c.contains("went 260.00 ms without a turn of its loop from 240.0 ms into the run")
                && c.contains("off its CPU, or in a call that blocked; 4 involuntary context switch(es), steal 0 ms")
                && c.ends_with("this side's, not the device's"),
            "{c}"
        );
        assert!(stall_cause(&s, true).contains("blocked for a completion event"));
        // a thread that kept turning: the device's
        let c = stall_cause(&stalled((2, 500)), false);
        assert!(
            c.contains("kept turning (longest gap 2.000 ms") && c.ends_with("the device completed nothing"),
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

//! The bandwidth table's steal warning: the runs during which the hypervisor ran something else
//! on their CPUs.

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
    use super::steal_text;

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

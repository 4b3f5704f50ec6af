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

/// [`steal_warning`]'s text from each run's label, steal (ms) and length (ms).
fn steal_text(runs: &[(String, f64, f64)]) -> String {
    let stolen: Vec<String> = runs
        .iter()
        .filter(|(_, ms, _)| *ms > 0.0)
        .map(|(label, ms, len)| format!("{label} {ms:.0} ms of {len:.0}"))
        .collect();
    if stolen.is_empty() {
        return String::new();
    }
    format!(
        " WARNING: the hypervisor ran something else on the measuring CPUs during {} run(s) (steal, /proc/stat, \
         10 ms ticks): {}; a slow or empty window there is the host's, not the device's\n",
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
        assert_eq!(steal_text(&[r("64 B verbs", 0.0), r("64 B direct", 0.0)]), "");
        let w = steal_text(&[r("64 B verbs", 0.0), r("65536 B direct", 30.0), r("8 B wr-e", 10.0)]);
        assert!(w.starts_with(" WARNING: the hypervisor ran something else"), "{w}");
        assert!(
            w.contains("during 2 run(s)") && w.contains("65536 B direct 30 ms of 250, 8 B wr-e 10 ms of 250;"),
            "{w}"
        );
        assert!(!w.contains("64 B verbs") && w.ends_with("not the device's\n"), "{w}");
    }
}

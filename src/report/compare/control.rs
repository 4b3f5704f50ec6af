//! The in-run control: whether it can be used between the two sides, each row's part in the
//! verdict, and the notes that say what the control did.

use super::input::Controls;
use super::{ControlUse, Report, Role, Row, Verdict, MIN_RUNS_FOR_T};
use serde_json::Value;

/// What the control's own speed depends on besides the library under test: the sides must
/// agree on every one (in every file) for a backend's ratio to its control to mean the same on
/// both.
const DEPENDS_ON: [(&str, &str); 9] = [
    ("environment", "kernel"),
    ("environment", "cpu_model"),
    ("environment", "device"),
    ("environment", "firmware"),
    ("environment", "software_model"),
    ("environment", "virtualized"),
    ("environment", "clocksource"),
    ("environment", "governor"),
    ("tool", "source"),
];

/// Thresholds (percent, by scenario and metric) of the control's own rows with one run on a
/// side, where they stand above the own rows' ([`super::DEFAULT_THRESHOLDS_PCT`]; elsewhere a
/// control row takes its own row's): the host's states move direct's latency p50 further than
/// the other backends' (the same time added is a larger share of a shorter figure), and one run
/// per side cannot tell such a state from a change. Measured on model0, every ordered pair of
/// identical runs, the largest rise (`docs/ci-recipe.md`): on 2026-12-04, four sets of 9 `lat
/// write --loopback -d model0 -s 8 -n 20000` and 6 `suite --quick -d model0` runs (408 pairs,
/// the thresholds chosen on all four): direct's latency p50 up to +216 % (a `suite --quick`
/// point in the host's slowest state, 3.2 times slower), its p99 up to +450 % (the own rows'
/// 500 %), its post-cost p50 up to +218 % (the own rows' 300 %); on 2026-12-03, p50 up to +95 %,
/// p99 up to +112 %. A change of the device itself larger than these (model0's wire delay of
/// 2 us: p50 about ten times) is still found.
pub const CONTROL_ONE_RUN_THRESHOLDS_PCT: [(&str, &str, f64); 1] = [("lat", "p50", 300.0)];

/// What the library under test is: the control is for a change of these, which the direct
/// path does not go through.
const LIBRARY: [&str; 4] = [
    "rdma_core_built",
    "libibverbs_version",
    "libibverbs_loaded",
    "provider_library",
];

/// How `compare` uses the in-run control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlMode {
    /// Wherever the sides agree on everything the control depends on (the
    /// rdmaprobe source, kernel, CPU, device ...), whether or not they differ in the library
    /// under test; otherwise every backend's own rows, and why.
    Auto,
    /// As auto, but required: a compare where it cannot be used is refused (exit 2), so a CI
    /// lane that rests on it learns when it does not.
    On,
    /// Never.
    Off,
}

/// Whether the control can be used between `base` and `new`, given that some row has one
/// (`any`) and the mode.
pub(super) fn usable(base: &[(String, Value)], new: &[(String, Value)], any: bool, mode: ControlMode) -> ControlUse {
    if !any {
        return ControlUse::Absent;
    }
    if mode == ControlMode::Off {
        return ControlUse::Off;
    }
    let Some(first) = base.first() else {
        return ControlUse::Absent;
    };
    for (obj, f) in DEPENDS_ON {
        let v0 = &first.1[obj][f];
        if (obj, f) == ("tool", "source") {
            if let Some((p, _)) = base.iter().chain(new).find(|(_, d)| d[obj][f].is_null()) {
                return ControlUse::Unusable(format!(
                    "{p} does not say which source of rdmaprobe wrote it (tool.source, recorded since this rdmaprobe): \
                     the direct path may differ between the sides"
                ));
            }
        }
        if let Some((p, d)) = base.iter().chain(new).find(|(_, d)| &d[obj][f] != v0) {
            let what = match f {
                "source" => "another source of rdmaprobe (another direct path)".to_string(),
                "cpu_model" => "another CPU".to_string(),
                _ => format!("another {f}"),
            };
            return ControlUse::Unusable(format!(
                "{p} was run with {what} than {}: {obj}.{f} {} against {}; the control's own speed may differ",
                first.0, d[obj][f], v0
            ));
        }
    }
    let library_differs = LIBRARY.iter().any(|f| {
        base.iter()
            .chain(new)
            .any(|(_, d)| d["environment"][f] != first.1["environment"][f])
    });
    if library_differs {
        ControlUse::Used
    } else {
        ControlUse::SameLibrary
    }
}

/// Each row's role and whether it counts. With the control used, a contrast with an interval
/// counts and its backend's own row is shown beside it; the control's own row, while it serves
/// a counting contrast with one run on a side, is judged against
/// [`CONTROL_ONE_RUN_THRESHOLDS_PCT`] unless a threshold was given (`given`). Otherwise every
/// own row counts and the contrasts are shown.
pub(super) fn assign(rows: &mut [Row], controls: &Controls, used: bool, given: bool) {
    let counting: Vec<(String, String, String)> = rows
        .iter()
        .filter(|r| r.role == Role::Contrast && used && r.p.is_some())
        .filter_map(|r| {
            controls
                .get(&r.key)
                .map(|(own, ctl)| (r.metric.clone(), own.clone(), ctl.clone()))
        })
        .collect();
    for r in rows.iter_mut() {
        if r.role == Role::Contrast {
            r.counts = used && r.p.is_some();
            continue;
        }
        let by_contrast = counting.iter().any(|(m, own, _)| *m == r.metric && *own == r.key);
        let serves = counting.iter().any(|(m, _, ctl)| *m == r.metric && *ctl == r.key);
        let one_run = r.runs_base.min(r.runs_new) < MIN_RUNS_FOR_T;
        (r.role, r.counts) = if by_contrast {
            (Role::ByContrast, false)
        } else if serves && one_run {
            let scenario = r.key.split(' ').next().unwrap_or("");
            if let Some(&(_, _, t)) = CONTROL_ONE_RUN_THRESHOLDS_PCT
                .iter()
                .find(|(s, m, _)| *s == scenario && *m == r.metric)
                .filter(|_| !given)
            {
                r.threshold = r.threshold.max(t / 100.0);
            }
            (Role::Control, true)
        } else {
            (Role::Own, true)
        };
    }
}

/// Whether a control row's change passes the threshold its own row would have without the
/// control, in the worse direction (never with a threshold given: every row was judged against
/// it, the control's too).
pub(super) fn own_threshold_passed(r: &Row, given: bool) -> bool {
    if given {
        return false;
    }
    let scenario = r.key.split(' ').next().unwrap_or("");
    let own = super::default_threshold_pct(scenario, &r.metric, false) / 100.0;
    let worse = if r.larger_is_worse { r.change } else { -r.change };
    worse > own
}

/// The control's notes: whether it was used and why not; the rows of the controls, whether
/// they held or moved; how the pairs were formed.
pub(super) fn notes(r: &Report) -> Vec<String> {
    let mut n = Vec::new();
    match &r.control {
        ControlUse::Absent => return n,
        ControlUse::Off => n.push("in-run control: off (--control off): every backend's own rows judged".into()),
        ControlUse::Unusable(why) => n.push(format!(
            "in-run control NOT used: {why}; every backend's own rows judged, the contrasts shown beside them"
        )),
        ControlUse::Used | ControlUse::SameLibrary => {
            n.push(format!(
                "in-run control: used (the sides agree on the rdmaprobe source, kernel, CPU and device{}): verbs \
                 and wr are judged by their contrast to direct in the same run (rows verbs-direct, wr-direct; runs \
                 waiting for completion events have none): the backend's figure minus the control's, its change told \
                 as a share of the backend's own figure in its fastest rounds in BASE (column over: the lower quartile \
                 of its blocks). Latency runs pair block i of a backend with block i of its \
                 control (the same round: one block of each backend, the order rotated; a block is the run's \
                 iterations over its blocks, e.g. 2000 of -n 20000 in the default 10), and a run's contrast is the \
                 median over its rounds, so a level change of the host that lasts some blocks falls on both members \
                 of a round. Post-cost runs (since they record `rounds`) measure each configuration in rounds, \
                 a turn of blocks of every backend and doorbell mode per round (the order rotated), and pair block i \
                 of each in the same way, against direct's BlueFlame doorbell (libmlx5's); bandwidth runs measure \
                 one backend after the other, so their contrast is of whole runs in one process, with no interval \
                 from one run per side (their own rows count then)",
                if r.control == ControlUse::Used {
                    ", and differ in the library under test"
                } else {
                    "; they do not differ in the library under test either: a change of something not recorded \
                     that moves every backend alike is judged by the control's own rows alone"
                }
            ));
            let ctl: Vec<&Row> = r.rows.iter().filter(|x| x.role == Role::Control).collect();
            if !ctl.is_empty() {
                let moved: Vec<&&Row> = ctl
                    .iter()
                    .filter(|x| matches!(x.verdict, Verdict::Regression | Verdict::Improvement))
                    .collect();
                let widest = ctl
                    .iter()
                    .map(|x| x.change)
                    .fold(0.0_f64, |a, c| if c.abs() > a.abs() { c } else { a });
                let t = CONTROL_ONE_RUN_THRESHOLDS_PCT
                    .iter()
                    .map(|(s, m, t)| format!("{s} {m} {t} %"))
                    .collect::<Vec<_>>()
                    .join(", ");
                n.push(format!(
                    "the control's own rows (role control), with one run on a side: judged against {t} (wider than \
                     the own rows'; the others against the own rows' thresholds, unless --threshold is given): \
                     between identical runs the host's states move them far more than the contrasts (measured on \
                     model0 between identical runs: direct's latency p50 up to +216 %, its p99 up to +450 %, its \
                     post-cost p50 up to +218 %, docs/ci-recipe.md); give 3 or more runs per side for their own \
                     thresholds"
                ));
                // beyond the row's own threshold (what it would be judged against without the
                // control) but within the control's: a shared change one file per side cannot judge
                let unjudged: Vec<&&Row> = ctl
                    .iter()
                    .filter(|x| x.verdict == Verdict::Same && own_threshold_passed(x, r.threshold_pct.is_some()))
                    .collect();
                n.push(if moved.is_empty() && unjudged.is_empty() {
                    format!(
                        "the control held: none of its {} rows changed beyond its own threshold (largest change {:+.1} %)",
                        ctl.len(),
                        widest * 100.0
                    )
                } else if moved.is_empty() {
                    format!(
                        "the control NOT JUDGED: {} of its {} rows changed beyond their own thresholds (largest {:+.1} %, \
                         e.g. {} {}) but within the control's: a change of that size moves every backend alike and the \
                         host's states make it too, so one file per side cannot judge it, and the contrasts do not see \
                         it; give 3 or more runs per side",
                        unjudged.len(),
                        ctl.len(),
                        widest * 100.0,
                        unjudged[0].key,
                        unjudged[0].metric
                    )
                } else {
                    format!(
                        "the control MOVED: {} of its {} rows changed beyond their thresholds (largest {:+.1} %, e.g. \
                         {} {}) with the same source, CPU, kernel and device on both sides: the device itself changed \
                         (model0's wire delay, a NIC's firmware setting), or the library under test changed what the \
                         control uses too (the queue buffers it allocates); the contrasts of the other backends hold \
                         neither",
                        moved.len(),
                        ctl.len(),
                        widest * 100.0,
                        moved[0].key,
                        moved[0].metric
                    )
                });
            }
        }
    }
    n
}

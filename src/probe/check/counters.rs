//! Counters sampled before and after a run (issue 13 point 3): a NIC's port counters and
//! `hw_counters` from sysfs (retransmissions, out-of-sequence, RNR NAKs, ECN/CNP, symbol errors,
//! link downed, ...), or model0's own (WQEs, doorbells, BlueFlame writes, CQEs, errors by
//! syndrome, RNR events); the non-zero differences go into the result document and the report.

use crate::backend::setup::Dev;
use crate::model::Counters;

/// The counters of `dev` now, and where they come from (`sysfs` or `model0`); `None` when there
/// are none to read.
pub fn sample(dev: &Dev) -> Option<(&'static str, Counters)> {
    match dev {
        Dev::Model(m) => Some(("model0", m.model.counters())),
        Dev::Verbs { ctx, port, .. } => {
            let base = std::path::Path::new("/sys/class/infiniband")
                .join(ctx.name())
                .join("ports")
                .join(port.port.to_string());
            let mut c = Counters::new();
            for dir in ["counters", "hw_counters"] {
                let Ok(rd) = std::fs::read_dir(base.join(dir)) else {
                    continue;
                };
                for e in rd.flatten() {
                    let v = std::fs::read_to_string(e.path())
                        .ok()
                        .and_then(|t| t.trim().parse::<u64>().ok());
                    if let Some(v) = v {
                        c.insert(format!("{dir}/{}", e.file_name().to_string_lossy()), v);
                    }
                }
            }
            (!c.is_empty()).then_some(("sysfs", c))
        }
    }
}

/// What changed between two samples: the counters that grew, by how much (a counter that went
/// down, reset or wrapped, is reported as its new value).
pub fn delta(before: &Counters, after: &Counters) -> Counters {
    after
        .iter()
        .filter_map(|(k, &a)| {
            let b = before.get(k).copied().unwrap_or(0);
            let d = if a >= b { a - b } else { a };
            (d > 0).then(|| (k.clone(), d))
        })
        .collect()
}

/// The change over a run, as the result document records it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CounterDelta {
    /// `sysfs` (a NIC's port) or `model0`.
    pub source: &'static str,
    /// The non-zero differences.
    pub delta: Counters,
}

impl CounterDelta {
    /// From a sample before the run and `dev` now.
    pub fn since(before: Option<(&'static str, Counters)>, dev: &Dev) -> Option<Self> {
        let (source, b) = before?;
        let (_, a) = sample(dev)?;
        Some(CounterDelta {
            source,
            delta: delta(&b, &a),
        })
    }

    /// A warning line when receivers were not ready (model0's `rnr_events`, a NIC's RNR NAK
    /// counters): each such SEND waited for the RNR timer and was sent again, inside the figures.
    pub fn rnr_warning(&self) -> String {
        let n: u64 = self
            .delta
            .iter()
            .filter(|(k, _)| k.to_ascii_lowercase().contains("rnr"))
            .map(|(_, v)| v)
            .sum();
        if n == 0 {
            return String::new();
        }
        format!(
            " WARNING: {n} RNR events (receiver not ready): SENDs that found no receive posted waited to be sent again \
             (a NIC waits out the RNR timer each time); the figures include those waits\n"
        )
    }

    /// One line for the table's foot.
    pub fn line(&self) -> String {
        if self.delta.is_empty() {
            return format!(" counters ({}): no change\n", self.source);
        }
        let items: Vec<String> = self.delta.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let mut s = format!(
            " counters ({}), change over the run: {}\n",
            self.source,
            items.join(", ")
        );
        if self.delta.contains_key("doorbell_record_moves_seen") {
            s +=
                "  (doorbells: counted one by one where model0 sees each, on the direct backend's QPs; libmlx5's (verbs, \
                  wr) ring a register nothing watches, so model0 counts the moves of their doorbell record it sees \
                  when polled, several doorbells between two polls as one)\n";
        }
        if self.delta.contains_key("blueflame_writes_checked") {
            s += "  (blueflame_writes_checked: the BlueFlame writes model0 compared byte for byte with their WQE, \
                  those that were the only doorbell since it last ran the QP; after several (as in bw) it checks the \
                  last one's first 8 bytes alone, so this counts fewer than the BlueFlame writes made)\n";
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libmlx5s_doorbell_record_moves_are_told_from_doorbells() {
        let mut d = CounterDelta {
            source: "model0",
            delta: [
                ("doorbells".to_string(), 12500u64),
                ("wqes_executed".to_string(), 300000),
            ]
            .into(),
        };
        assert!(!d.line().contains("one by one"), "{}", d.line());
        assert!(!d.line().contains("(blueflame_writes_checked:"), "{}", d.line());
        d.delta.insert("blueflame_writes_checked".into(), 7);
        assert!(
            d.line()
                .contains("(blueflame_writes_checked: the BlueFlame writes model0 compared"),
            "{}",
            d.line()
        );
        d.delta.remove("blueflame_writes_checked");
        d.delta.insert("doorbell_record_moves_seen".into(), 2000);
        let l = d.line();
        assert!(
            l.starts_with(" counters (model0), change over the run: doorbell_record_moves_seen 2000, doorbells 12500"),
            "{l}"
        );
        assert!(l.contains("several doorbells between two polls as one"), "{l}");
    }

    #[test]
    fn rnr_events_are_warned_about() {
        let quiet = CounterDelta {
            source: "model0",
            delta: [("cqes".to_string(), 5)].into(),
        };
        assert_eq!(quiet.rnr_warning(), "");
        let rnr = CounterDelta {
            source: "sysfs",
            delta: [
                ("model_rnr_events".to_string(), 3),
                ("hw_counters/rnr_nak_retry_err".to_string(), 4),
                ("cqes".to_string(), 9),
            ]
            .into(),
        };
        assert!(
            rnr.rnr_warning()
                .starts_with(" WARNING: 7 RNR events (receiver not ready)"),
            "{}",
            rnr.rnr_warning()
        );
    }

    #[test]
    fn deltas_keep_what_grew() {
        let b: Counters = [("a".to_string(), 5), ("b".to_string(), 7), ("c".to_string(), 9)].into();
        let a: Counters = [
            ("a".to_string(), 5),
            ("b".to_string(), 10),
            ("c".to_string(), 2),
            ("d".to_string(), 1),
        ]
        .into();
        let d = delta(&b, &a);
        assert_eq!(
            d,
            [("b".to_string(), 3), ("c".to_string(), 2), ("d".to_string(), 1)].into()
        );
    }
}

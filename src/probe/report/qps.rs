//! The header's QP numbers and addresses (perftest's "local address" / "remote address") and
//! the memory regions' placement.

use super::{region_lines, Report};
use std::fmt::Write;

/// Client/server QPs whose addresses the header prints (the rest are counted).
const QP_LINES: usize = 4;

impl Report {
    /// The QPs' numbers: in one process both ends' per backend on one line; client/server each
    /// QP's address and the peer's as exchanged, perftest's "local address" / "remote address"
    /// (the first [`QP_LINES`], the rest counted: the JSON's `qps` has every one).
    pub(super) fn qp_numbers(&self, s: &mut String) {
        let Some(qps) = self.params["qps"].as_array().filter(|q| !q.is_empty()) else {
            return;
        };
        let pairs: Vec<String> = qps
            .iter()
            .filter_map(|q| {
                let n = q["qpns"].as_array()?;
                Some(format!(
                    "{}: {:#08x} <-> {:#08x}",
                    q["backend"].as_str()?,
                    n.first()?.as_u64()?,
                    n.get(1)?.as_u64()?
                ))
            })
            .collect();
        if !pairs.is_empty() {
            let _ = writeln!(s, " QP numbers: {}", pairs.join(", "));
        }
        let addr = |b: &str, side: &str, a: &serde_json::Value, why: Option<&str>| -> Option<String> {
            let pad = 6usize.saturating_sub(b.len());
            if let Some(why) = why {
                return Some(format!(
                    "  {side:<6} address ({b}):{:pad$} QPN {:#08x} RKey {:#010x} VAddr {:#018x} (PSN, LID, GID: {why})",
                    "",
                    a["qpn"].as_u64()?,
                    a["rkey"].as_u64()?,
                    a["vaddr"].as_u64()?
                ));
            }
            Some(format!(
                "  {side:<6} address ({b}):{:pad$} QPN {:#08x} PSN {:#08x} LID {:#06x} GID {} RKey {:#010x} VAddr {:#018x}",
                "",
                a["qpn"].as_u64()?,
                a["psn"].as_u64()?,
                a["lid"].as_u64()?,
                a["gid"].as_str()?,
                a["rkey"].as_u64()?,
                a["vaddr"].as_u64()?
            ))
        };
        let net: Vec<&serde_json::Value> = qps.iter().filter(|q| q.get("local").is_some()).collect();
        for q in net.iter().take(QP_LINES) {
            let b = q["backend"].as_str().unwrap_or("?");
            for (side, key) in [("local", "local"), ("remote", "remote")] {
                if let Some(l) = addr(b, side, &q[key], q["psn_lid_gid"].as_str()) {
                    let _ = writeln!(s, "{l}");
                }
            }
        }
        if net.len() > QP_LINES {
            let _ = writeln!(
                s,
                "  ... and {} more QPs (the JSON's params.qps lists every one)",
                net.len() - QP_LINES
            );
        }
    }

    /// A line per registered buffer: where it sits (the physical address needs root).
    pub(super) fn regions_lines(&self, s: &mut String) {
        region_lines(&self.regions, s);
    }
}

//! The latency table's perftest line: perftest's figures of the same runs, as `ib_*_lat`
//! computes them, to set beside its report.

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

//! Where a run's registered buffers sat, as the table lists them: a line per region, or the
//! first two and one line for the rest; for bandwidth, each backend's first run's.

use super::Region;
use std::fmt::Write as _;

/// The most regions listed one per line; beyond it the first two are and the rest summed up.
const REGIONS_LISTED: usize = 6;

/// A line per region (` MR NAME: addr ..., page offset ..., aligned ..., huge pages ..., phys
/// ...`); more than `REGIONS_LISTED`: the first two, then one line for the rest.
pub fn region_lines(regions: &[Region], s: &mut String) {
    let listed = if regions.len() <= REGIONS_LISTED {
        regions.len()
    } else {
        2
    };
    for r in &regions[..listed] {
        let _ = writeln!(s, " MR {}: {}", r.name, r.placement.line());
    }
    let rest = &regions[listed..];
    let (Some(first), Some(last)) = (rest.first(), rest.last()) else {
        return;
    };
    let mut offsets: Vec<u64> = rest.iter().map(|r| r.placement.page_offset).collect();
    offsets.sort_unstable();
    offsets.dedup();
    let align = rest.iter().map(|r| r.placement.align).min().unwrap_or(0);
    let huge = rest.iter().filter(|r| r.placement.huge).count();
    let phys = rest.iter().filter(|r| r.placement.phys_addr.is_some()).count();
    let mut why: Vec<&str> = rest
        .iter()
        .filter_map(|r| r.placement.phys_unreadable.as_deref())
        .collect();
    why.sort_unstable();
    why.dedup();
    let _ = writeln!(
        s,
        " MR {} .. {} ({} more): page offset {}, aligned {} or more, huge pages {}, phys {} of {} read{} (the JSON lists each)",
        first.name,
        last.name,
        rest.len(),
        offsets.iter().map(|o| o.to_string()).collect::<Vec<_>>().join("/"),
        crate::backend::MrPlacement::size_label(align),
        match huge {
            0 => "no".to_string(),
            h if h == rest.len() => "yes".to_string(),
            h => format!("in {h}"),
        },
        phys,
        rest.len(),
        if why.is_empty() { String::new() } else { format!(", unreadable: {}", why.join("; ")) }
    );
}

/// In one process a bandwidth run makes its buffers afresh: where those of each backend's first
/// run sat.
pub(super) fn bw_region_lines(rs: &[crate::scenario::runner::BwResult], s: &mut String) {
    let mut seen = Vec::new();
    for r in rs.iter().filter(|r| !r.memory_regions.is_empty()) {
        let label = (r.backend.as_str(), r.completion.is_some());
        if seen.contains(&label) {
            continue;
        }
        if seen.is_empty() {
            s.push_str(
                " memory regions of each backend's first run (every run makes its own; the JSON has each run's):\n",
            );
        }
        seen.push(label);
        region_lines(&r.memory_regions, s);
    }
}

//! The pages this process's registered regions pinned. model0 pins a page by mapping a region's
//! file over it, once: a region on the same pages as a region already registered (memory
//! registered twice, as UCX's `ucx_perftest` does) takes its bytes from the region that pinned
//! them (its host); one that overlaps pinned pages otherwise is refused. A host deregistered while others still
//! use its pages stops working at once ([`ModelMr::revoke`]) and its pages stay pinned until the
//! last of them is deregistered.

use crate::model::ModelMr;
use std::sync::Mutex;

/// A run of pinned pages: its host's key, the pages `[s0, e0)`, the regions using them besides
/// the host, and the host once deregistered.
pub(super) struct Pin {
    key: u32,
    s0: usize,
    e0: usize,
    borrowers: u32,
    revoked: Option<ModelMr>,
}

/// A registered region of a context: the model's region, and the key of the region whose pages
/// it uses (`None`: its own).
pub(super) struct MrEnt {
    pub(super) mr: ModelMr,
    host: Option<u32>,
}

/// The pinned runs of all contexts of the process.
pub(super) static PINS: Mutex<Vec<Pin>> = Mutex::new(Vec::new());

/// Where pages `[s0, e0)` stand: `Ok(None)` not pinned, `Ok(Some((key, s0)))` the very pages of
/// the run of the host with `key`, `Err` overlapping a run otherwise. Only the same pages are
/// shared: a region on part of a run would keep the rest pinned after the host's
/// deregistration, memory the program may unmap and map again meanwhile (which the run's
/// release, a `MAP_FIXED` over all of it, would then overwrite).
pub(super) fn find(pins: &[Pin], s0: usize, e0: usize) -> Result<Option<(u32, usize)>, ()> {
    if let Some(p) = pins.iter().find(|p| p.s0 == s0 && e0 == p.e0) {
        return Ok(Some((p.key, p.s0)));
    }
    if pins.iter().any(|p| s0 < p.e0 && p.s0 < e0) {
        return Err(());
    }
    Ok(None)
}

/// Records region `mr`, which pinned `[s0, e0)` itself (`host` None) or uses the run of host
/// `host`.
pub(super) fn add(pins: &mut Vec<Pin>, mr: ModelMr, (s0, e0): (usize, usize), host: Option<u32>) -> MrEnt {
    match host {
        Some(k) => {
            if let Some(p) = pins.iter_mut().find(|p| p.key == k) {
                p.borrowers += 1;
            }
        }
        None => pins.push(Pin {
            key: mr.lkey(),
            s0,
            e0,
            borrowers: 0,
            revoked: None,
        }),
    }
    MrEnt { mr, host }
}

/// Deregisters `e`: a host others still use is revoked and kept; the last user of a revoked
/// host's run takes the host with it.
pub(super) fn release(pins: &mut Vec<Pin>, e: MrEnt) {
    match e.host {
        Some(k) => {
            drop(e.mr);
            if let Some(i) = pins.iter().position(|p| p.key == k) {
                pins[i].borrowers = pins[i].borrowers.saturating_sub(1);
                if pins[i].borrowers == 0 && pins[i].revoked.is_some() {
                    // the host's file and pages go with it
                    pins.remove(i);
                }
            }
        }
        None => {
            let k = e.mr.lkey();
            match pins.iter().position(|p| p.key == k) {
                Some(i) if pins[i].borrowers > 0 => {
                    e.mr.revoke();
                    pins[i].revoked = Some(e.mr);
                }
                Some(i) => {
                    drop(e.mr);
                    pins.remove(i);
                }
                None => drop(e.mr),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(key: u32, s0: usize, e0: usize) -> Pin {
        Pin {
            key,
            s0,
            e0,
            borrowers: 0,
            revoked: None,
        }
    }

    #[test]
    fn the_same_pages_use_the_run_and_any_other_overlap_is_refused() {
        let pins = vec![pin(7, 0x10000, 0x14000), pin(9, 0x20000, 0x21000)];
        assert_eq!(find(&pins, 0x10000, 0x14000), Ok(Some((7, 0x10000))));
        assert_eq!(find(&pins, 0x11000, 0x12000), Err(()));
        assert_eq!(find(&pins, 0x20000, 0x21000), Ok(Some((9, 0x20000))));
        assert_eq!(find(&pins, 0x13000, 0x15000), Err(()));
        assert_eq!(find(&pins, 0xf000, 0x11000), Err(()));
        assert_eq!(find(&pins, 0x14000, 0x20000), Ok(None));
    }
}

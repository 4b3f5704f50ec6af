//! model0's per-thread lookup cache: any process's objects mapped and found without a lock
//! ([`Model::lookup`]), the scopes in which its references stay valid ([`Model::scope`]), and
//! the giving back of the mappings of objects retired (taken out of service).

use super::layout::{hdr, ObjHdr, MAGIC};
use super::objects::Model;
use super::shm::{ObjKind, Shm};
use std::sync::atomic::Ordering;
use std::sync::Arc;

impl Model {
    /// A stretch of model work on this thread (executing a QP, delivering to its receives,
    /// flushing them) in which references from [`Model::lookup`] are used: they stay valid until
    /// the outermost scope of the thread ends. Entering an outermost scope is the one point where
    /// no reference is held, and where the cache gives back the mappings of destroyed objects:
    /// an entry found destroyed there is marked, and removed at the next such point (a
    /// destroyed object's entry is never handed out again), once the cache holds twice the live
    /// objects of the last pass (the pass costs a walk of the cache: amortised, nothing per
    /// doorbell). Without
    /// it a pinned thread kept every object it ever reached mapped and its file open: 4 files per
    /// QP pair of every bandwidth run, until `EMFILE`.
    pub(super) fn scope() -> LookupScope {
        DEPTH.with(|d| {
            if d.get() == 0 {
                CACHE.with(|c| {
                    let mut c = c.borrow_mut();
                    // a pass when this process has retired objects since this thread's last
                    // pass, when the last pass marked some, or when the cache has doubled (the
                    // objects of other processes: their retirement is not counted here)
                    let retired = RETIRED.load(Ordering::Acquire);
                    if retired != SEEN.with(|s| s.get())
                        || MARKED.with(|m| m.get())
                        || c.len() >= PRUNE_AT.with(|p| p.get())
                    {
                        SEEN.with(|s| s.set(retired));
                        let mut live = 0;
                        let mut marked = false;
                        c.retain_mut(|e| {
                            if hdr::<ObjHdr>(&e.2).valid.load(Ordering::Acquire) == 1 {
                                live += 1;
                                return true;
                            }
                            let keep = !e.3;
                            e.3 = true;
                            marked |= keep;
                            keep
                        });
                        MARKED.with(|m| m.set(marked));
                        PRUNE_AT.with(|p| p.set((2 * live).max(64)));
                    }
                });
            }
            d.set(d.get() + 1);
        });
        LookupScope(std::marker::PhantomData)
    }

    /// The object `id` of `kind`, from this thread's own cache (no lock, no reference count
    /// touched, nothing written that another thread reads). This process's own objects are
    /// reached through their owner's mapping (one virtual address per physical page: some CPUs
    /// penalise a line reached through two), others' through a mapping of this thread's.
    pub(super) fn lookup(&self, kind: ObjKind, id: u32) -> Option<ObjRef> {
        CACHE.with(|c| {
            let mut c = c.borrow_mut();
            for e in c.iter().rev() {
                if e.0 == kind && e.1 == id && hdr::<ObjHdr>(&e.2).valid.load(Ordering::Acquire) == 1 {
                    return Some(ObjRef(Arc::as_ptr(&e.2)));
                }
            }
            let map = match kind {
                ObjKind::Mr => &self.inner.mrs,
                ObjKind::Qp => &self.inner.qps,
                ObjKind::Cq => &self.inner.cqs,
                ObjKind::Db => &self.inner.dbs,
                ObjKind::Srq => &self.inner.srqs,
            };
            let own = map.lock().unwrap_or_else(|p| p.into_inner()).get(&id).cloned();
            let s = match own {
                Some(s) => s,
                None => Arc::new(Shm::open(kind, id).ok()?),
            };
            let h: &ObjHdr = hdr(&s);
            if h.magic != MAGIC || h.id != id || h.valid.load(Ordering::Acquire) != 1 {
                return None;
            }
            let r = ObjRef(Arc::as_ptr(&s));
            c.push((kind, id, s, false));
            Some(r)
        })
    }
}

/// A lookup cache entry: kind, id, the mapping, found destroyed by a pass of `Model::scope`.
type Cached = (ObjKind, u32, Arc<Shm>, bool);

thread_local! {
    // This thread's mappings of the objects it reached: (kind, id, mapping, found destroyed by
    // a pass of `Model::scope`). Entries are removed only by `scope` at depth 0.
    static CACHE: std::cell::RefCell<Vec<Cached>> = const { std::cell::RefCell::new(Vec::new()) };
    // How deep in `LookupScope`s this thread is.
    static DEPTH: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    // The cache's length at which the next pass runs.
    static PRUNE_AT: std::cell::Cell<usize> = const { std::cell::Cell::new(64) };
    // `RETIRED` at this thread's last pass.
    static SEEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    // The last pass marked entries (the next removes them).
    static MARKED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Gives back this thread's mappings of the objects retired since its last pass — both steps of
/// `Model::scope`'s mark-then-remove — now, outside any measurement: each measuring thread
/// calls it before its start barrier ([`crate::workers`]). Left to the first doorbell a thread
/// executes, unmapping a finished run's regions (16 MiB each under `bw -a`) took 2-7 ms inside
/// the measured run: a bandwidth run's start-up stall (windows of 0 MiB/s after the first).
pub fn settle_thread() {
    DEPTH.with(|d| {
        // inside a scope references are held: nothing may be given back
        if d.get() != 0 {
            return;
        }
        for _ in 0..2 {
            drop(Model::scope());
        }
    });
}

/// Counts an object taken out of service (by [`retire`](super::objects::retire) and elsewhere).
#[inline]
pub(super) fn note_retired() {
    RETIRED.fetch_add(1, Ordering::Release);
}

/// Objects this process has retired (taken out of service), ever: a lookup cache whose thread
/// saw another count has entries to give back.
static RETIRED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// See [`Model::scope`] (not `Send`: it counts this thread's depth).
pub(super) struct LookupScope(std::marker::PhantomData<*const ()>);

impl Drop for LookupScope {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// A reference to a mapped object from this thread's lookup cache (not `Send`: it is only valid
/// on the thread that looked it up, whose cache keeps the mapping until its outermost
/// [`LookupScope`] ends, or the thread).
#[derive(Clone, Copy)]
pub(super) struct ObjRef(*const Shm);

impl std::ops::Deref for ObjRef {
    type Target = Shm;
    fn deref(&self) -> &Shm {
        // SAFETY: the pointer comes from an Arc held by this thread's cache, whose entries are
        // removed only when this thread enters an outermost LookupScope (where no reference
        // is held: they are used within the scope they were taken in), and only those of
        // objects already found destroyed by an earlier pass (never handed out since); ObjRef
        // cannot leave the thread.
        unsafe { &*self.0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelConfig;
    use crate::workers::Placed;
    use std::time::Duration;

    /// Whether this thread's cache holds an entry for the region `key`.
    fn holds(key: u32) -> bool {
        CACHE.with(|c| c.borrow().iter().any(|e| e.0 == ObjKind::Mr && e.1 == key))
    }

    #[test]
    fn settling_gives_back_both_steps_of_the_pass() {
        std::thread::spawn(|| {
            let m = Model::open(ModelConfig::default()).unwrap();
            let mr = m.reg_mr(m.alloc_pd(), 1 << 20, 0).unwrap();
            let key = mr.lkey();
            {
                let _s = Model::scope();
                assert!(m.lookup(ObjKind::Mr, key).is_some());
            }
            drop(mr);
            assert!(holds(key), "a destroyed region stays mapped until a pass");
            settle_thread();
            assert!(!holds(key), "one call gives it back (mark, then remove)");
            // inside a scope nothing is given back: references may be held
            let mr = m.reg_mr(m.alloc_pd(), 4096, 0).unwrap();
            let key = mr.lkey();
            let s = Model::scope();
            assert!(m.lookup(ObjKind::Mr, key).is_some());
            drop(mr);
            settle_thread();
            assert!(holds(key));
            drop(s);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_measuring_thread_gives_back_a_finished_runs_regions_before_its_next_job() {
        let m = Model::open(ModelConfig::default()).unwrap();
        let mr = m.reg_mr(m.alloc_pd(), 1 << 20, 0).unwrap();
        let key = mr.lkey();
        let one = |job: Box<dyn FnOnce() + Send + '_>| {
            crate::workers::run(vec![Placed { cpu: 0, job }], Duration::from_secs(30))
        };
        // a run: its worker reaches the region, as a doorbell's execution does
        let m2 = &m;
        one(Box::new(move || {
            let _s = Model::scope();
            assert!(m2.lookup(ObjKind::Mr, key).is_some());
        }))
        .unwrap();
        // the run's teardown, then the next run on the same worker (CPU 0's first)
        drop(mr);
        let mut held = true;
        let h = &mut held;
        one(Box::new(move || *h = holds(key))).unwrap();
        assert!(
            !held,
            "the next job started with the finished run's region still mapped"
        );
    }
}

//! The QPs made through this device in this process, and each thread's copy of that list, so
//! that the preload's wrappers of `poll_cq`, `post_send` and `post_recv` (called in a program's
//! hot loop, e.g. perftest's) find the model's QPs without a lock or an allocation per call.

use crate::model::ModelQp;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// One QP: its number, the model's QP, and the last send doorbell record
/// [`progress`](super::progress) delivered for it (shared by every thread that polls).
pub(crate) type QpEntry = (u32, Weak<ModelQp>, Arc<AtomicU32>);

/// The QPs made through this device in this process. Whoever changes it calls [`changed`].
pub(crate) static QPS: Mutex<Vec<QpEntry>> = Mutex::new(Vec::new());

/// Moves on each change of [`QPS`]: a thread's copy made at another value is remade.
static GEN: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's copy of [`QPS`] and the [`GEN`] it was made at (0: never).
    static COPY: RefCell<(u64, Vec<QpEntry>)> = const { RefCell::new((0, Vec::new())) };
}

/// [`QPS`] changed (a QP added or removed): every thread's copy is remade at its next use.
pub(crate) fn changed() {
    GEN.fetch_add(1, Ordering::Release);
}

/// Calls `f` with the process's QPs: this thread's copy, remade when [`QPS`] changed since; a
/// copy taken under the lock when this thread's is in use (a call from inside `f`) or gone (the
/// thread is exiting).
pub(crate) fn with_qps<R>(mut f: impl FnMut(&[QpEntry]) -> R) -> R {
    let gen = GEN.load(Ordering::Acquire);
    let mut out = None;
    let _ = COPY.try_with(|c| {
        if let Ok(mut c) = c.try_borrow_mut() {
            if c.0 != gen {
                let t = QPS.lock().unwrap_or_else(|p| p.into_inner());
                c.1.clear();
                c.1.extend(t.iter().cloned());
                // the value read before the lock: a change after it is seen at the next call
                c.0 = gen;
            }
            out = Some(f(&c.1));
        }
    });
    match out {
        Some(r) => r,
        None => {
            let t: Vec<QpEntry> = QPS.lock().unwrap_or_else(|p| p.into_inner()).clone();
            f(&t)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(qpn: u32) -> bool {
        with_qps(|qs| qs.iter().any(|e| e.0 == qpn))
    }

    #[test]
    fn a_threads_copy_follows_the_table_and_a_nested_call_reads_it_under_the_lock() {
        use std::sync::mpsc::channel;
        let qpn = 0x00ff_fe01;
        // another thread with a copy made before the change
        let (ask, asked) = channel::<()>();
        let (tell, told) = channel::<bool>();
        let other = std::thread::spawn(move || {
            while asked.recv().is_ok() {
                if tell.send(has(qpn)).is_err() {
                    break;
                }
            }
        });
        let other_has = || {
            ask.send(()).unwrap();
            told.recv().unwrap()
        };
        assert!(!has(qpn) && !other_has());
        QPS.lock()
            .unwrap()
            .push((qpn, Weak::new(), Arc::new(AtomicU32::new(0))));
        changed();
        assert!(has(qpn) && other_has());
        // inside a call this thread's copy is in use: the nested one takes the table's
        assert!(with_qps(|outer| outer.iter().any(|e| e.0 == qpn) && has(qpn)));
        QPS.lock().unwrap().retain(|e| e.0 != qpn);
        changed();
        assert!(!has(qpn) && !other_has());
        drop(ask);
        other.join().unwrap();
    }
}

//! Persistent pinned worker threads: the threads that measure are made once per process, each
//! pinned to its CPU before it runs anything, and reused for every block, size and backend.
//!
//! Why: a thread spawned from a thread already pinned to one CPU inherits that one-CPU mask and
//! cannot run (to pin itself elsewhere) until the spinning parent is preempted — milliseconds on
//! a busy host, and that wait landed in the first sample of every latency block. Here a worker's
//! affinity is set by its creator right after the spawn (and again by the worker itself), the
//! caller never runs a measured job itself, and the jobs of one call start together behind a
//! spin barrier, so no job's first step waits for another thread to wake up.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The CPUs this process may run on, read once, before any thread is pinned (a pinned thread's
/// view of its own mask is one CPU).
pub fn cpus() -> &'static [core_affinity::CoreId] {
    static CPUS: OnceLock<Vec<core_affinity::CoreId>> = OnceLock::new();
    CPUS.get_or_init(|| core_affinity::get_core_ids().unwrap_or_default())
}

/// Whether threads are pinned at all: more than one CPU and no `RDMAPROBE_NO_PIN`.
pub fn pinning() -> bool {
    cpus().len() > 1 && std::env::var_os("RDMAPROBE_NO_PIN").is_none()
}

/// The CPU of slot `i` counted from the start of the process's set.
pub fn cpu_from_start(i: usize) -> usize {
    i % cpus().len().max(1)
}

/// The CPU of slot `i` counted from the end of the process's set (a server process keeps off the
/// CPUs its client on the same machine takes from the start).
pub fn cpu_from_end(i: usize) -> usize {
    let n = cpus().len().max(1);
    n - 1 - i % n
}

/// Pins the calling thread to CPU index `cpu` of the process's set (when pinning is on).
pub fn pin_current(cpu: usize) -> bool {
    pinning() && core_affinity::set_for_current(cpus()[cpu % cpus().len()])
}

/// Sets the affinity of another thread of this process to one CPU.
fn pin_thread(t: libc::pthread_t, core: usize) -> bool {
    // SAFETY: `cpu_set_t` is plain data; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `core` is a CPU number the kernel gave us (below CPU_SETSIZE); `set` is a valid
    // set; `t` is a live thread of this process (its JoinHandle is held by the pool).
    unsafe {
        libc::CPU_SET(core, &mut set);
        libc::pthread_setaffinity_np(t, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

struct Worker {
    tx: Sender<Job>,
}

/// Workers by CPU index: the k-th job of one call placed on CPU c runs on `pool[c][k]`.
fn pool() -> &'static Mutex<Vec<Vec<Worker>>> {
    static POOL: OnceLock<Mutex<Vec<Vec<Worker>>>> = OnceLock::new();
    POOL.get_or_init(|| Mutex::new(Vec::new()))
}

fn spawn_worker(cpu: usize, k: usize) -> std::io::Result<Worker> {
    use std::os::unix::thread::JoinHandleExt;
    let (tx, rx) = channel::<Job>();
    let pin = pinning();
    let core = cpus().get(cpu).map(|c| c.id);
    let h = std::thread::Builder::new()
        .name(format!("rdmaprobe-cpu{cpu}-{k}"))
        .spawn(move || {
            if pin {
                pin_current(cpu);
            }
            while let Ok(job) = rx.recv() {
                job();
            }
        })?;
    if let (true, Some(core)) = (pin, core) {
        // Set by the creator too: the new thread inherited the creator's mask and may not get to
        // run before the creator yields its CPU.
        pin_thread(h.as_pthread_t(), core);
    }
    // Detached: it lives as long as the process (its channel keeps it waiting between jobs).
    drop(h);
    Ok(Worker { tx })
}

/// A job of [`run`]: where it runs (a CPU index of the process's set, see [`cpu_from_start`] and
/// [`cpu_from_end`]) and what.
pub struct Placed<'a> {
    /// CPU index.
    pub cpu: usize,
    /// The job.
    pub job: Box<dyn FnOnce() + Send + 'a>,
}

/// Why [`run`] could not give a result.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// A job panicked (the message, when it was a string).
    #[error("a measuring thread panicked: {0}")]
    Panicked(String),
    /// A worker thread could not be made.
    #[error("cannot start a measuring thread: {0}")]
    Spawn(#[from] std::io::Error),
    /// The jobs did not all start within the deadline (a worker is stuck).
    #[error("the measuring threads did not start within {0:?}")]
    Start(Duration),
}

#[derive(Default)]
struct Latch {
    left: Mutex<usize>,
    cv: Condvar,
}

impl Latch {
    fn done(&self) {
        let mut l = self.left.lock().unwrap_or_else(|p| p.into_inner());
        *l -= 1;
        if *l == 0 {
            self.cv.notify_all();
        }
    }
    fn wait(&self) {
        let mut l = self.left.lock().unwrap_or_else(|p| p.into_inner());
        while *l > 0 {
            l = self.cv.wait(l).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Waits for every submitted job on drop, so no job outlives the data it borrows (even when the
/// caller unwinds).
struct WaitAll<'l>(&'l Latch);

impl Drop for WaitAll<'_> {
    fn drop(&mut self) {
        self.0.wait();
    }
}

/// Runs every job on its own persistent worker pinned to the job's CPU, all started together
/// (each job begins only when every job of the call has reached its worker; `start_deadline`
/// bounds that wait), and returns when all have finished. The calling thread only waits.
pub fn run(jobs: Vec<Placed<'_>>, start_deadline: Duration) -> Result<(), WorkerError> {
    let n = jobs.len();
    if n == 0 {
        return Ok(());
    }
    let latch = Arc::new(Latch {
        left: Mutex::new(n),
        cv: Condvar::new(),
    });
    let arrived = Arc::new(AtomicUsize::new(0));
    let late = Arc::new(AtomicUsize::new(0));
    let panics: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut senders = Vec::with_capacity(n);
    {
        let mut p = pool().lock().unwrap_or_else(|p| p.into_inner());
        let ncpu = cpus().len().max(1);
        if p.len() < ncpu {
            p.resize_with(ncpu, Vec::new);
        }
        let mut used = vec![0usize; ncpu];
        for j in &jobs {
            let c = j.cpu % ncpu;
            let k = used[c];
            used[c] += 1;
            while p[c].len() <= k {
                let w = spawn_worker(c, p[c].len())?;
                p[c].push(w);
            }
            senders.push(p[c][k].tx.clone());
        }
    }
    let guard = WaitAll(&latch);
    for (j, tx) in jobs.into_iter().zip(senders) {
        let (latch2, arrived, late, panics) = (latch.clone(), arrived.clone(), late.clone(), panics.clone());
        let job = j.job;
        let wrapped: Box<dyn FnOnce() + Send + '_> = Box::new(move || {
            arrived.fetch_add(1, Ordering::AcqRel);
            let t0 = Instant::now();
            let mut spins = 0u32;
            while arrived.load(Ordering::Acquire) < n {
                spins = spins.wrapping_add(1);
                if spins % 1024 == 0 {
                    if t0.elapsed() > start_deadline {
                        late.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    // another job may share this CPU (one CPU, or pinning off)
                    std::thread::yield_now();
                }
                std::hint::spin_loop();
            }
            if late.load(Ordering::Relaxed) == 0 {
                if let Err(e) = catch_unwind(AssertUnwindSafe(job)) {
                    let msg = e
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| e.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "(no message)".into());
                    panics.lock().unwrap_or_else(|p| p.into_inner()).push(msg);
                }
            }
            latch2.done();
        });
        // SAFETY: the job may borrow data that lives only as long as this call; the lifetime is
        // widened so the job can cross the channel to a thread that outlives the call. It is
        // sound because this function does not return, and does not unwind past `guard`, until
        // every submitted job has finished running (`guard` waits on the latch in its Drop, and
        // every job counts the latch down exactly once, after its last use of borrowed data).
        // A job whose send fails (the worker is gone) is dropped right here, inside the call.
        let wrapped: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Job>(wrapped) };
        if let Err(e) = tx.send(wrapped) {
            // the worker thread is gone: run nothing more; count this job down ourselves
            drop(e);
            latch.done();
        }
    }
    drop(guard);
    if late.load(Ordering::Relaxed) > 0 {
        return Err(WorkerError::Start(start_deadline));
    }
    let p = panics.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = p.first() {
        return Err(WorkerError::Panicked(m.clone()));
    }
    if arrived.load(Ordering::Acquire) < n {
        return Err(WorkerError::Spawn(std::io::Error::other("a worker thread has exited")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_on_persistent_threads_pinned_to_their_cpu() {
        let mut names = Vec::new();
        for _ in 0..3 {
            let (mut a, mut b) = (None, None);
            run(
                vec![
                    Placed {
                        cpu: 0,
                        job: Box::new(|| a = std::thread::current().name().map(String::from)),
                    },
                    Placed {
                        cpu: 1,
                        job: Box::new(|| b = std::thread::current().name().map(String::from)),
                    },
                ],
                Duration::from_secs(5),
            )
            .unwrap();
            names.push((a.unwrap(), b.unwrap()));
        }
        // the same two threads every call: nothing spawned per call
        assert!(names.iter().all(|n| *n == names[0]), "{names:?}");
        assert_ne!(names[0].0, names[0].1);
        if pinning() {
            assert_eq!(names[0].0, "rdmaprobe-cpu0-0");
            assert_eq!(names[0].1, "rdmaprobe-cpu1-0");
        }
    }

    #[test]
    fn a_panicking_job_is_an_error_and_the_others_still_finish() {
        let mut done = false;
        let r = run(
            vec![
                Placed {
                    cpu: 0,
                    job: Box::new(|| panic!("boom")),
                },
                Placed {
                    cpu: 1,
                    job: Box::new(|| done = true),
                },
            ],
            Duration::from_secs(5),
        );
        assert!(matches!(r, Err(WorkerError::Panicked(ref m)) if m == "boom"), "{r:?}");
        assert!(done);
        // the pool still works afterwards
        let mut x = 0;
        run(
            vec![Placed {
                cpu: 0,
                job: Box::new(|| x = 7),
            }],
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(x, 7);
    }
}

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
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce() + Send + 'static>;

static CPUS: OnceLock<Vec<core_affinity::CoreId>> = OnceLock::new();
/// Whether the user chose the CPUs (`--pin-cores`, `--numa-node`).
static CHOSEN: OnceLock<()> = OnceLock::new();
/// The NUMA node the user chose.
static NODE: OnceLock<u32> = OnceLock::new();

/// The CPUs this process may run on, read once, before any thread is pinned (a pinned thread's
/// view of its own mask is one CPU); or the ones the user chose ([`choose`]).
pub fn cpus() -> &'static [core_affinity::CoreId] {
    CPUS.get_or_init(|| core_affinity::get_core_ids().unwrap_or_default())
}

/// Whether threads are pinned at all: chosen CPUs, or more than one CPU; and no
/// `RDMAPROBE_NO_PIN`.
pub fn pinning() -> bool {
    (CHOSEN.get().is_some() || cpus().len() > 1) && std::env::var_os("RDMAPROBE_NO_PIN").is_none()
}

/// The steal time of CPUs `ids` (the hypervisor running something else while their vCPUs were
/// ready to run), summed, ns: the `steal` column of `/proc/stat`'s `cpuN` lines, in USER_HZ ticks
/// (10 ms on Debian). `None` where there is no such file or column (not Linux, a CPU not listed).
pub fn steal_ns(ids: &[usize]) -> Option<u64> {
    // SAFETY: sysconf takes a constant name and returns a value or -1; it touches no memory of ours.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    parse_steal(
        &std::fs::read_to_string("/proc/stat").ok()?,
        ids,
        u64::try_from(hz).ok()?,
    )
}

/// [`steal_ns`] from `/proc/stat`'s text `stat`, `hz` ticks per second.
fn parse_steal(stat: &str, ids: &[usize], hz: u64) -> Option<u64> {
    if hz == 0 || ids.is_empty() {
        return None;
    }
    let mut ticks = 0u64;
    for id in ids {
        let name = format!("cpu{id}");
        let line = stat
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
        // cpuN user nice system idle iowait irq softirq steal guest guest_nice
        ticks += line.split_whitespace().nth(8)?.parse::<u64>().ok()?;
    }
    Some(ticks.saturating_mul(1_000_000_000) / hz)
}

/// The CPUs the slots `0..n` take, each once: counted from the start ([`cpu_from_start`]) or
/// from the end ([`cpu_from_end`]); every CPU of the process's set when threads are not pinned
/// (they may run on any).
pub fn slot_ids(n: usize, from_end: bool) -> Vec<usize> {
    if !pinning() {
        return cpus().iter().map(|c| c.id).collect();
    }
    let slot = |i| if from_end { cpu_from_end(i) } else { cpu_from_start(i) };
    let mut ids: Vec<usize> = (0..n).filter_map(|i| cpus().get(slot(i)).map(|c| c.id)).collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// [`run`], and the steal time of CPUs `ids` from just before the jobs were handed out to just
/// after they ended, ns (read on the calling thread, which only waits meanwhile).
pub(crate) fn run_with_steal(
    jobs: Vec<Placed<'_>>,
    start_deadline: Duration,
    ids: &[usize],
) -> Result<Option<u64>, WorkerError> {
    let before = steal_ns(ids);
    run(jobs, start_deadline)?;
    Ok(before.and_then(|a| Some(steal_ns(ids)?.saturating_sub(a))))
}

/// The CPU numbers the measuring threads are pinned to, in the order they are taken (empty: not
/// pinned).
pub fn pinned_ids() -> Vec<usize> {
    if pinning() {
        cpus().iter().map(|c| c.id).collect()
    } else {
        Vec::new()
    }
}

/// When `threads` measuring threads outnumber the process's CPUs they cannot each be pinned
/// alone: how they share the CPUs, as a sentence for the report (`None`: each has its own).
pub fn oversubscription(threads: usize) -> Option<String> {
    sharing(threads, cpus().len().max(1), pinning())
}

/// [`oversubscription`] for `ncpu` CPUs, pinned or not.
fn sharing(threads: usize, ncpu: usize, pinned: bool) -> Option<String> {
    if threads <= ncpu {
        return None;
    }
    let (lo, hi) = (threads / ncpu, threads.div_ceil(ncpu));
    let per = if lo == hi {
        lo.to_string()
    } else {
        format!("{lo} or {hi}")
    };
    Some(if pinned {
        format!(
            "--threads {threads} on {ncpu} CPU(s): more threads than CPUs, so they cannot each be pinned alone; \
             pinned round-robin, {per} per CPU, taking turns on it (the figures are those of threads sharing CPUs)"
        )
    } else {
        format!(
            "--threads {threads} on {ncpu} CPU(s): more threads than CPUs, {per} per CPU; not pinned (one CPU or \
             RDMAPROBE_NO_PIN): the scheduler shares the CPUs among them"
        )
    })
}

/// The NUMA node chosen with `--numa-node`.
pub fn numa_node() -> Option<u32> {
    NODE.get().copied()
}

/// The CPUs of NUMA node `node` (sysfs `cpulist`).
pub fn node_cpus(node: u32) -> Result<Vec<usize>, String> {
    let path = format!("/sys/devices/system/node/node{node}/cpulist");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("no NUMA node {node} ({path}: {e})"))?;
    if text.trim().is_empty() {
        // a node of memory alone
        return Ok(Vec::new());
    }
    parse_cpu_list(text.trim()).map_err(|e| format!("{path}: {e}"))
}

/// `0-3,8,10-11` as CPU numbers, in the order named (each once).
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let mut v = Vec::new();
    for part in s.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(format!("'{s}': an empty entry"));
        }
        let num = |x: &str| {
            x.trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n < libc::CPU_SETSIZE as usize)
                .ok_or_else(|| format!("'{x}' is not a CPU number"))
        };
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("'{part}': the range goes down"));
                }
                v.extend(a..=b);
            }
            None => v.push(num(part)?),
        }
    }
    let mut seen = Vec::with_capacity(v.len());
    for c in v {
        if seen.contains(&c) {
            return Err(format!("CPU {c} is named twice"));
        }
        seen.push(c);
    }
    Ok(seen)
}

/// Confines the measuring threads to `cpus` (`--pin-cores`), or to the CPUs of `node` and its
/// memory (`--numa-node`: the process's memory policy binds its allocations to the node), or
/// both (the CPUs must be on the node). Called once, before any thread is pinned; a CPU the
/// process may not run on, or a node without CPUs here, is an error naming it.
pub fn choose(cpus: Option<&[usize]>, node: Option<u32>) -> Result<(), String> {
    if cpus.is_none() && node.is_none() {
        return Ok(());
    }
    let allowed: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .iter()
        .map(|c| c.id)
        .collect();
    let on_node = match node {
        Some(n) => Some(node_cpus(n).map_err(|e| format!("--numa-node {n}: {e}"))?),
        None => None,
    };
    let list: Vec<usize> = match (cpus, &on_node) {
        (Some(c), Some(nc)) => {
            if let Some(x) = c.iter().find(|x| !nc.contains(x)) {
                return Err(format!(
                    "--pin-cores: CPU {x} is not on NUMA node {}",
                    node.unwrap_or(0)
                ));
            }
            c.to_vec()
        }
        (Some(c), None) => c.to_vec(),
        (None, Some(nc)) => nc.iter().copied().filter(|x| allowed.contains(x)).collect(),
        (None, None) => unreachable!("returned above"),
    };
    if let Some(x) = list.iter().find(|x| !allowed.contains(x)) {
        return Err(format!(
            "{}: CPU {x} is not one this process may run on ({})",
            if cpus.is_some() { "--pin-cores" } else { "--numa-node" },
            allowed.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",")
        ));
    }
    if list.is_empty() {
        return Err(format!(
            "--numa-node {}: none of its CPUs is one this process may run on",
            node.unwrap_or(0)
        ));
    }
    if let Some(n) = node {
        bind_memory(n).map_err(|e| format!("--numa-node {n}: set_mempolicy(MPOL_BIND) failed: {e}"))?;
        let _ = NODE.set(n);
    }
    let ids: Vec<core_affinity::CoreId> = list.into_iter().map(|id| core_affinity::CoreId { id }).collect();
    if CPUS.set(ids).is_err() {
        return Err("the CPUs were read before they were chosen".into());
    }
    let _ = CHOSEN.set(());
    Ok(())
}

/// Binds this thread's (and the threads it makes from now on) memory to NUMA node `node`.
fn bind_memory(node: u32) -> std::io::Result<()> {
    const MPOL_BIND: libc::c_long = 2;
    let bits = 8 * std::mem::size_of::<libc::c_ulong>();
    let mut mask = vec![0 as libc::c_ulong; (node as usize / bits) + 1];
    mask[node as usize / bits] |= 1 << (node as usize % bits);
    // SAFETY: set_mempolicy reads `maxnode` bits from `mask`, which holds that many (one word
    // past the node's); it changes only this thread's policy.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_set_mempolicy,
            MPOL_BIND,
            mask.as_ptr(),
            (mask.len() * bits) as libc::c_ulong,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
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

/// A job of the worker pool (`run`): where it runs (a CPU index of the process's set, see [`cpu_from_start`] and
/// [`cpu_from_end`]) and what.
pub struct Placed<'a> {
    /// CPU index.
    pub cpu: usize,
    /// The job.
    pub job: Box<dyn FnOnce() + Send + 'a>,
}

/// Why the worker pool could not give a result.
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

/// Counts the jobs of one call still to finish.
#[derive(Default)]
struct Latch {
    left: Mutex<usize>,
    cv: Condvar,
}

impl Latch {
    fn add(&self) {
        *self.left.lock().unwrap_or_else(|p| p.into_inner()) += 1;
    }
    fn done(&self) {
        let mut l = self.left.lock().unwrap_or_else(|p| p.into_inner());
        *l = l.saturating_sub(1);
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

/// Counts its job down when dropped: declared before the job inside a wrapped job, it drops
/// after the job (and everything the job borrowed) on every path, unwinding included.
struct CountDown(Arc<Latch>);

impl Drop for CountDown {
    fn drop(&mut self) {
        self.0.done();
    }
}

/// The jobs of a call: not decided yet, all arrived (run), or the start deadline passed (skip).
const UNDECIDED: u8 = 0;
const GO: u8 = 1;
const ABORT: u8 = 2;

/// The start of one call's jobs, shared by them: how many have reached their worker, whether
/// they run, and the messages of those that panicked.
struct Start {
    /// The call's jobs.
    jobs: usize,
    /// How long a job waits for the others to arrive.
    deadline: Duration,
    arrived: AtomicUsize,
    decision: AtomicU8,
    panics: Mutex<Vec<String>>,
}

impl Start {
    /// A job has reached its worker: spins until every job of the call has (they run) or the
    /// start deadline passed (none runs). Returns whether the jobs run.
    fn all_arrived(&self) -> bool {
        self.arrived.fetch_add(1, Ordering::AcqRel);
        let t0 = Instant::now();
        let mut spins = 0u32;
        while self.decision.load(Ordering::Acquire) == UNDECIDED {
            if self.arrived.load(Ordering::Acquire) >= self.jobs {
                let _ = self
                    .decision
                    .compare_exchange(UNDECIDED, GO, Ordering::AcqRel, Ordering::Acquire);
                break;
            }
            spins = spins.wrapping_add(1);
            if spins % 1024 == 0 {
                if t0.elapsed() > self.deadline {
                    let _ = self
                        .decision
                        .compare_exchange(UNDECIDED, ABORT, Ordering::AcqRel, Ordering::Acquire);
                    break;
                }
                // another job may share this CPU (one CPU, or pinning off)
                std::thread::yield_now();
            }
            std::hint::spin_loop();
        }
        self.decision.load(Ordering::Acquire) == GO
    }

    /// Runs `job`, a panic caught and its message (when it was a string) kept.
    fn run_caught(&self, job: Box<dyn FnOnce() + Send + '_>) {
        if let Err(e) = catch_unwind(AssertUnwindSafe(job)) {
            let msg = e
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| e.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            self.panics.lock().unwrap_or_else(|p| p.into_inner()).push(msg);
        }
    }

    /// The call's result once every job is done: a worker lost (`lost`), the start deadline
    /// passed, or the first panic.
    fn outcome(&self, lost: bool) -> Result<(), WorkerError> {
        if lost {
            return Err(WorkerError::Spawn(std::io::Error::other("a worker thread had exited")));
        }
        if self.decision.load(Ordering::Acquire) != GO {
            return Err(WorkerError::Start(self.deadline));
        }
        let p = self.panics.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = p.first() {
            return Err(WorkerError::Panicked(m.clone()));
        }
        Ok(())
    }
}

/// The worker of each job, `(CPU index, k)`: the k-th job of the call placed on that CPU runs on
/// `pool[c][k]`, spawned now if the pool has none there yet.
fn place(pool: &mut Vec<Vec<Worker>>, jobs: &[Placed<'_>]) -> Result<Vec<(usize, usize)>, WorkerError> {
    let ncpu = cpus().len().max(1);
    if pool.len() < ncpu {
        pool.resize_with(ncpu, Vec::new);
    }
    let mut slots = Vec::with_capacity(jobs.len());
    let mut used = vec![0usize; ncpu];
    for j in jobs {
        let c = j.cpu % ncpu;
        let k = used[c];
        used[c] += 1;
        while pool[c].len() <= k {
            let w = spawn_worker(c, pool[c].len())?;
            pool[c].push(w);
        }
        slots.push((c, k));
    }
    Ok(slots)
}

/// Runs every job on its own persistent worker pinned to the job's CPU, all started together
/// (each job begins only when every job of the call has reached its worker; `start_deadline`
/// bounds that wait: past it no job runs), and returns when all have finished. The calling
/// thread only waits. Calls are serialised (measurements never overlap, and two calls cannot
/// wait on each other's workers); a job must not call `run` itself.
pub(crate) fn run(jobs: Vec<Placed<'_>>, start_deadline: Duration) -> Result<(), WorkerError> {
    let n = jobs.len();
    if n == 0 {
        return Ok(());
    }
    // held for the whole call: the pool, and one call at a time
    let mut pool = pool().lock().unwrap_or_else(|p| p.into_inner());
    let slots = place(&mut pool, &jobs)?;
    let latch = Arc::new(Latch::default());
    let start = Arc::new(Start {
        jobs: n,
        deadline: start_deadline,
        arrived: AtomicUsize::new(0),
        decision: AtomicU8::new(UNDECIDED),
        panics: Mutex::default(),
    });
    let guard = WaitAll(&latch);
    let mut lost = false;
    for (j, (c, k)) in jobs.into_iter().zip(slots) {
        let (latch2, start2) = (latch.clone(), start.clone());
        let job = j.job;
        let wrapped: Box<dyn FnOnce() + Send + '_> = Box::new(move || {
            // first the count-down, then the job: locals drop in reverse order, so the job (and
            // what it borrows) is gone before the call can see the count reach 0
            let _cd = CountDown(latch2);
            let job = job;
            // the model's mappings of a finished run's objects are given back here, before the
            // barrier, not by the first doorbell this thread executes (milliseconds, measured)
            crate::model::settle_thread();
            if !start2.all_arrived() {
                drop(job);
                return;
            }
            start2.run_caught(job);
        });
        // SAFETY: the job may borrow data that lives only as long as this call; the lifetime is
        // widened so the job can cross the channel to a thread that outlives the call. It is
        // sound because this function does not return, and does not unwind past `guard`, until
        // every submitted job has been dropped: the latch counts each job before it is sent,
        // `guard` waits for the count to reach 0 in its Drop, and a wrapped job counts down
        // through `CountDown`, which drops after the job itself on every path (run, skipped,
        // panicked). A job whose send fails comes back in the error and is dropped here, inside
        // the call, uncounted.
        let wrapped: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Job>(wrapped) };
        latch.add();
        if let Err(e) = pool[c][k].tx.send(wrapped) {
            // the worker thread is gone: its job is dropped here, never run; the jobs already
            // sent cannot start (one is missing) and end at the start deadline
            drop(e);
            latch.done();
            lost = true;
            // a fresh worker for the next call
            if let Ok(w) = spawn_worker(c, k) {
                pool[c][k] = w;
            }
        }
    }
    drop(guard);
    start.outcome(lost)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_read_from_the_cpus_lines_in_ticks() {
        let stat = "cpu  84286 0 6376 133712 654 0 225 129 0 0\n\
                    cpu0 31534 0 2090 78779 91 0 99 67 0 0\n\
                    cpu1 52751 0 4286 54932 562 0 126 62 0 0\nintr 1 2 3\n";
        assert_eq!(parse_steal(stat, &[0], 100), Some(670_000_000));
        assert_eq!(parse_steal(stat, &[0, 1], 100), Some(1_290_000_000));
        assert_eq!(parse_steal(stat, &[1], 1000), Some(62_000_000));
        // a CPU not listed, no CPUs, a line without the column: unknown, not 0
        assert_eq!(parse_steal(stat, &[2], 100), None);
        assert_eq!(parse_steal(stat, &[], 100), None);
        assert_eq!(parse_steal("cpu0 1 2 3 4\n", &[0], 100), None);
        // this machine's own file answers for the CPUs the workers take
        assert!(steal_ns(&slot_ids(1, false)).is_some());
        // as many slots as CPUs: every CPU, whichever end they are counted from
        let n = cpus().len();
        assert_eq!(slot_ids(n, false), slot_ids(n, true));
    }

    #[test]
    fn cpu_lists_keep_the_order_named() {
        assert_eq!(parse_cpu_list("3,1").unwrap(), vec![3, 1]);
        assert!(parse_cpu_list("0-3,8,2").unwrap_err().contains("twice"));
        assert_eq!(parse_cpu_list("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
        assert_eq!(parse_cpu_list(" 5 ").unwrap(), vec![5]);
        for bad in ["", "x", "3-1", "1,,", "-1", "99999"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn more_threads_than_cpus_are_said_with_how_many_per_cpu() {
        assert_eq!(sharing(2, 2, true), None);
        let s = sharing(128, 2, true).unwrap();
        assert!(
            s.contains("--threads 128 on 2 CPU(s)") && s.contains("pinned round-robin, 64 per CPU"),
            "{s}"
        );
        assert!(sharing(5, 2, true).unwrap().contains("2 or 3 per CPU"));
        assert!(sharing(3, 1, false).unwrap().contains("3 per CPU; not pinned"));
    }

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

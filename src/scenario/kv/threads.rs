//! A key-value run with a thread per role, as HERD runs one: each client and each worker stepped
//! by a thread of its own (in one process both kinds; between two, the kinds this side holds),
//! while the calling thread watches: a stop asked, the deadline, a stall (no thread moved), the
//! peer, a thread that failed. The threads start together, after every client's keys are drawn
//! and every store populated; they are not pinned (the report says so).

use super::engine::{Client, Step, Worker, WorkerStats};
use super::run::{KvParams, KvRunError, Watch};
use crate::backend::kv::{ClientLink, WorkerLink};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

/// How a key-value run's clients and workers are stepped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Threads {
    /// One thread of each process steps all of its clients and workers in turn.
    One,
    /// A thread per client and per worker, as HERD runs them.
    PerRole,
}

impl Threads {
    /// `one` or `per-role` (the JSON's and compare's spelling).
    pub fn as_str(self) -> &'static str {
        match self {
            Threads::One => "one",
            Threads::PerRole => "per-role",
        }
    }
}

/// Steps between a thread's looks at the shared flags (and its report of its moves).
const CHECK_EVERY: u64 = 256;
/// Idle steps in a row after which a thread yields its CPU (to threads that share it).
const YIELD_AFTER: u32 = 256;
/// How often the watching thread looks.
const TICK: Duration = Duration::from_millis(1);

/// One thread's count of moves, alone on its cache line (the others' stores do not slow it).
#[repr(align(64))]
#[derive(Default)]
struct Moves(AtomicU64);

/// What the threads share: the stop, the workers' end, each thread's moves, the first error.
struct Shared {
    /// Every thread stops (an error, a signal, the deadline, a stall).
    stop: AtomicBool,
    /// The workers stop (the clients are done).
    workers_done: AtomicBool,
    moves: Vec<Moves>,
    /// Clients that have every response.
    clients_done: AtomicU64,
    error: Mutex<Option<KvRunError>>,
}

impl Shared {
    fn fail(&self, e: KvRunError) {
        let mut g = self.error.lock().unwrap_or_else(|p| p.into_inner());
        g.get_or_insert(e);
        self.stop.store(true, Ordering::Release);
    }

    fn moved(&self) -> u64 {
        self.moves.iter().map(|m| m.0.load(Ordering::Relaxed)).sum()
    }
}

/// A thread's loop: `step` until it says done or a flag stops it (or it fails: `sh` holds why);
/// moves reported every [`CHECK_EVERY`] steps, the CPU yielded after [`YIELD_AFTER`] idle ones.
/// Whether it was done.
fn spin(sh: &Shared, me: usize, stop_too: &AtomicBool, mut step: impl FnMut() -> Result<Step, KvRunError>) -> bool {
    let (mut n, mut moves, mut idle) = (0u64, 0u64, 0u32);
    let done = loop {
        match step() {
            Ok(Step::Done) => break true,
            Ok(Step::Progress) => {
                moves += 1;
                idle = 0;
            }
            Ok(Step::Idle) => {
                idle += 1;
                if idle >= YIELD_AFTER {
                    idle = 0;
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            Err(e) => {
                sh.fail(e);
                break false;
            }
        }
        n += 1;
        if n % CHECK_EVERY == 0 {
            sh.moves[me].0.store(moves, Ordering::Relaxed);
            if sh.stop.load(Ordering::Acquire) || stop_too.load(Ordering::Acquire) {
                break false;
            }
        }
    };
    sh.moves[me].0.store(moves, Ordering::Relaxed);
    done
}

/// Runs `cs` on `clinks` and `ws` on `wlinks` (either may be empty: the other side is another
/// process, heard through `watch`, which returns true when it ended the run: the server's
/// clients are done), a thread each. The clients (for [`super::run::finish`]) and the workers'
/// counts.
pub fn per_role<C: ClientLink + Send, W: WorkerLink + Send>(
    (cs, clinks): (Vec<Client>, &mut [C]),
    (ws, wlinks): (Vec<Worker>, &mut [W]),
    p: &KvParams,
    mut watch: Option<Watch<'_>>,
) -> Result<(Vec<Client>, Vec<WorkerStats>), KvRunError> {
    let nc = cs.len();
    let sh = Shared {
        stop: AtomicBool::new(false),
        workers_done: AtomicBool::new(false),
        moves: (0..nc + ws.len()).map(|_| Moves::default()).collect(),
        clients_done: AtomicU64::new(0),
        error: Mutex::new(None),
    };
    let start = Barrier::new(nc + ws.len() + 1);
    let never = AtomicBool::new(false);
    let (cs, ws) = std::thread::scope(|s| {
        let mut ch = Vec::new();
        for (i, (mut c, l)) in cs.into_iter().zip(clinks.iter_mut()).enumerate() {
            let (sh, start, never) = (&sh, &start, &never);
            ch.push(s.spawn(move || {
                start.wait();
                if let Err(e) = c.start(l) {
                    sh.fail(e.into());
                    return c;
                }
                if spin(sh, i, never, || Ok(c.step(l)?)) {
                    sh.clients_done.fetch_add(1, Ordering::AcqRel);
                }
                c
            }));
        }
        let mut wh = Vec::new();
        for (j, (mut w, l)) in ws.into_iter().zip(wlinks.iter_mut()).enumerate() {
            let (sh, start) = (&sh, &start);
            wh.push(s.spawn(move || {
                start.wait();
                spin(sh, nc + j, &sh.workers_done, || Ok(w.step(l)?));
                w
            }));
        }
        start.wait();
        watch_over(&sh, nc, p, &mut watch);
        sh.workers_done.store(true, Ordering::Release);
        let cs: Vec<Client> = ch
            .into_iter()
            .map(|h| h.join())
            .collect::<Result<_, _>>()
            .unwrap_or_default();
        let ws: Vec<Worker> = wh
            .into_iter()
            .map(|h| h.join())
            .collect::<Result<_, _>>()
            .unwrap_or_default();
        (cs, ws)
    });
    if let Some(e) = sh.error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    if cs.len() != nc || ws.len() != wlinks.len() {
        return Err(KvRunError::Thread("a client or worker thread panicked".into()));
    }
    Ok((cs, ws.iter().map(|w| w.stats()).collect()))
}

/// The watching thread's loop, until the clients are done (or, with none here, `watch` says the
/// run is over) or something stops the run (then `sh` holds why).
fn watch_over(sh: &Shared, nc: usize, p: &KvParams, watch: &mut Option<Watch<'_>>) {
    let started = Instant::now();
    let (mut last, mut last_move) = (0, Instant::now());
    loop {
        std::thread::sleep(TICK);
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        if nc > 0 && sh.clients_done.load(Ordering::Acquire) == nc as u64 {
            return;
        }
        if crate::signals::interrupted() {
            return sh.fail(KvRunError::Interrupted);
        }
        match watch.as_mut().map(|w| w()) {
            Some(Ok(true)) if nc == 0 => return,
            Some(Ok(true)) => {
                return sh.fail(KvRunError::Peer(
                    "the server ended the run before every request was answered".into(),
                ))
            }
            Some(Err(e)) => return sh.fail(e),
            _ => {}
        }
        if started.elapsed() > p.deadline {
            return sh.fail(KvRunError::Deadline(p.deadline));
        }
        let m = sh.moved();
        if m != last {
            (last, last_move) = (m, Instant::now());
        } else if last_move.elapsed() > p.stall {
            let who = if nc > 0 {
                "the client threads"
            } else {
                "the worker threads, for requests from the clients"
            };
            return sh.fail(KvRunError::Stalled {
                waited: last_move.elapsed(),
                what: format!("{who}: none moved"),
            });
        }
    }
}

/// No path: the side of a run that is in another process.
pub enum Elsewhere {}

impl ClientLink for Elsewhere {
    fn write(&mut self, _: usize, _: &[u8], _: bool) -> Result<(), crate::backend::BackendError> {
        match *self {}
    }
    fn post_recvs(&mut self, _: u32) -> Result<(), crate::backend::BackendError> {
        match *self {}
    }
    fn poll_sends(&mut self) -> Result<u32, crate::backend::BackendError> {
        match *self {}
    }
    fn poll_responses(
        &mut self,
        _: &mut Vec<crate::backend::kv::Response>,
    ) -> Result<(), crate::backend::BackendError> {
        match *self {}
    }
}

impl WorkerLink for Elsewhere {
    fn read_slot(&self, _: usize, _: &mut [u8; crate::backend::kv::SLOT]) {
        match *self {}
    }
    fn opcode(&self, _: usize) -> u8 {
        match *self {}
    }
    fn set_opcode(&self, _: usize, _: u8) {
        match *self {}
    }
    fn respond(&mut self, _: &[crate::backend::kv::Reply<'_>]) -> Result<(), crate::backend::BackendError> {
        match *self {}
    }
    fn poll_sends(&mut self) -> Result<u32, crate::backend::BackendError> {
        match *self {}
    }
}

/// Both sides in this process, a thread each: the run reconciled.
pub fn loopback<C: ClientLink + Send, W: WorkerLink + Send>(
    clients: &mut [C],
    workers: &mut [W],
    p: &KvParams,
) -> Result<super::run::KvRun, KvRunError> {
    let ws = super::run::new_workers(workers.len(), p)?;
    let cs = super::run::new_clients(clients.len(), p);
    let (cs, ws) = per_role((cs, clients), (ws, workers), p, None)?;
    super::run::finish(&cs, ws, p)
}

/// The clients' side of two processes, a thread each: the clients, for
/// [`super::run::finish`] with the workers' counts.
pub fn clients_alone<C: ClientLink + Send>(
    clients: &mut [C],
    p: &KvParams,
    watch: Watch<'_>,
) -> Result<Vec<Client>, KvRunError> {
    let cs = super::run::new_clients(clients.len(), p);
    let none: &mut [Elsewhere] = &mut [];
    Ok(per_role((cs, clients), (Vec::new(), none), p, Some(watch))?.0)
}

/// The workers' side of two processes, a thread each ([`super::run::new_workers`] made them):
/// each worker's counts.
pub fn workers_alone<W: WorkerLink + Send>(
    workers: &mut [W],
    ws: Vec<Worker>,
    p: &KvParams,
    watch: Watch<'_>,
) -> Result<Vec<WorkerStats>, KvRunError> {
    let none: &mut [Elsewhere] = &mut [];
    Ok(per_role((Vec::new(), none), (ws, workers), p, Some(watch))?.1)
}

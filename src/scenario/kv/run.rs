//! One key-value run in one thread (`--loopback`): every client and worker stepped in turn (a
//! client until it waits, a worker one pass over its clients), on
//! whatever path ends it is given, until each client has its requests answered; a run in which
//! nothing moves for the stall deadline, or that outlives its deadline, stops with an error that
//! says who waited for what; a stop asked by a signal ends it too.

use super::engine::{Client, ClientStats, KvError, Shape, Step, Worker, WorkerStats};
use crate::backend::kv::{ClientLink, WorkerLink};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone, Copy)]
pub struct KvParams {
    /// The region, the keys, the updates, the value size.
    pub shape: Shape,
    /// Most requests a worker takes into one batch (and one post of responses).
    pub postlist: u32,
    /// Requests per client.
    pub requests: u64,
    /// Longest time with no step moving.
    pub stall: Duration,
    /// Longest run.
    pub deadline: Duration,
    /// One thread, or a thread per client and worker (the runner the caller chooses; the
    /// result says which).
    pub threads: super::threads::Threads,
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct KvRun {
    /// Each client's counts.
    pub clients: Vec<ClientStats>,
    /// Each client's per-request ticks (post to response), in the order answered.
    pub latency: Vec<Vec<u64>>,
    /// Each client's ticks from its first request to its last response.
    pub client_ticks: Vec<u64>,
    /// Each worker's counts.
    pub workers: Vec<WorkerStats>,
    /// Ticks of the whole run (the first request to the last response).
    pub ticks: u64,
}

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KvRunError {
    /// A client or a worker failed.
    #[error(transparent)]
    Kv(#[from] KvError),
    /// Nothing moved.
    #[error(
        "no progress for {waited:?}: {what}; the path dropped a request or a response (UC and UD do not retransmit: one lost stops the run)"
    )]
    Stalled {
        /// How long.
        waited: Duration,
        /// Who was waiting (the clients' counts).
        what: String,
    },
    /// A stop was asked (SIGINT, SIGTERM, SIGHUP).
    #[error("interrupted")]
    Interrupted,
    /// The run's deadline passed.
    #[error("the run's deadline ({0:?}) passed before every request was answered")]
    Deadline(Duration),
    /// The clients' counts are not the stores'.
    #[error("the responses do not add up: {0}")]
    Counts(String),
    /// The process on the other side failed, or broke the protocol.
    #[error("the peer: {0}")]
    Peer(String),
    /// A thread of the run died.
    #[error("{0}")]
    Thread(String),
    /// The store could not be built.
    #[error("the store: {0}")]
    Store(#[from] super::store::StoreError),
}

/// What a side in another process says, asked between turns: nothing yet, or that it finished
/// (the clients, to the server), or a failure.
pub type Watch<'a> = &'a mut dyn FnMut() -> Result<bool, KvRunError>;

/// The checks every 1024 turns: a stop asked, the deadline, a stall (nothing moved for `stall`;
/// `who` says who waited), and the peer (`watch`: true when it says the run is over).
struct Guard {
    started: Instant,
    last_move: Instant,
    turns: u64,
    deadline: Duration,
    stall: Duration,
}

impl Guard {
    fn new(deadline: Duration, stall: Duration) -> Guard {
        Guard {
            started: Instant::now(),
            last_move: Instant::now(),
            turns: 0,
            deadline,
            stall,
        }
    }

    /// One turn: `moved` or not; every 1024th the checks, `Ok(true)` when `watch` ends the run.
    fn turn(&mut self, moved: bool, who: &dyn Fn() -> String, watch: Option<Watch<'_>>) -> Result<bool, KvRunError> {
        self.turns += 1;
        if moved {
            self.last_move = Instant::now();
        }
        if self.turns % 1024 != 0 {
            return Ok(false);
        }
        if crate::signals::interrupted() {
            return Err(KvRunError::Interrupted);
        }
        if let Some(w) = watch {
            if w()? {
                return Ok(true);
            }
        }
        if self.started.elapsed() > self.deadline {
            return Err(KvRunError::Deadline(self.deadline));
        }
        if self.last_move.elapsed() > self.stall {
            return Err(KvRunError::Stalled {
                waited: self.last_move.elapsed(),
                what: who(),
            });
        }
        Ok(false)
    }
}

/// The clients' part of one turn: each goes on until it waits (a window written, or a
/// completion owed), as a client thread would, so the workers find several requests a pass.
/// Whether any moved, and whether all are done.
fn clients_turn<C: ClientLink>(cs: &mut [Client], links: &mut [C], window: u32) -> Result<(bool, bool), KvError> {
    let (mut moved, mut done) = (false, 0);
    for (c, l) in cs.iter_mut().zip(links.iter_mut()) {
        for _ in 0..=window {
            match c.step(l)? {
                Step::Done => {
                    done += 1;
                    break;
                }
                Step::Progress => moved = true,
                Step::Idle => break,
            }
        }
    }
    Ok((moved, done == cs.len()))
}

/// The workers' part of one turn: a pass over their clients each; whether any moved.
fn workers_turn<W: WorkerLink>(ws: &mut [Worker], links: &mut [W]) -> Result<bool, KvError> {
    let mut moved = false;
    for (w, l) in ws.iter_mut().zip(links.iter_mut()) {
        moved |= w.step(l)? == Step::Progress;
    }
    Ok(moved)
}

/// What the clients waited for when a run stalled.
fn waiting(cs: &[Client]) -> String {
    cs.iter()
        .enumerate()
        .map(|(i, c)| {
            format!(
                "client {i}: {} written, {} answered",
                c.stats().issued,
                c.stats().answered
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `n` clients made (each its keys' permutation drawn), not started.
pub fn new_clients(n: usize, p: &KvParams) -> Vec<Client> {
    (0..n as u32).map(|i| Client::new(i, p.shape, p.requests)).collect()
}

/// The clients made and started.
fn start_clients<C: ClientLink>(links: &mut [C], p: &KvParams) -> Result<Vec<Client>, KvRunError> {
    let mut cs = new_clients(links.len(), p);
    for (c, l) in cs.iter_mut().zip(links.iter_mut()) {
        c.start(l)?;
    }
    Ok(cs)
}

/// The workers made, each with its populated store (before the clients start: populating takes
/// time no request should wait for).
pub fn new_workers(n: usize, p: &KvParams) -> Result<Vec<Worker>, KvRunError> {
    let mut ws = Vec::with_capacity(n);
    for i in 0..n as u32 {
        ws.push(Worker::new(i, p.shape, p.shape.store()?, p.postlist));
    }
    Ok(ws)
}

/// Runs `clients.len()` clients against `workers.len()` workers in this thread.
pub fn loopback<C: ClientLink, W: WorkerLink>(
    clients: &mut [C],
    workers: &mut [W],
    p: &KvParams,
) -> Result<KvRun, KvRunError> {
    let mut ws = new_workers(workers.len(), p)?;
    let mut cs = start_clients(clients, p)?;
    let mut guard = Guard::new(p.deadline, p.stall);
    loop {
        let (moved, done) = clients_turn(&mut cs, clients, p.shape.layout.window)?;
        if done {
            break;
        }
        let moved = workers_turn(&mut ws, workers)? | moved;
        guard.turn(moved, &|| waiting(&cs), None)?;
    }
    let stats: Vec<WorkerStats> = ws.iter().map(|w| w.stats()).collect();
    finish(&cs, stats, p)
}

/// The clients of a run whose workers are in another process: stepped until each has its
/// requests answered; `watch` hears the server (true: it ended the run, an error). The clients,
/// for [`finish`] with the workers' counts.
pub fn clients_alone<C: ClientLink>(
    clients: &mut [C],
    p: &KvParams,
    watch: Watch<'_>,
) -> Result<Vec<Client>, KvRunError> {
    let mut cs = start_clients(clients, p)?;
    let mut guard = Guard::new(p.deadline, p.stall);
    loop {
        let (moved, done) = clients_turn(&mut cs, clients, p.shape.layout.window)?;
        if done {
            return Ok(cs);
        }
        if guard.turn(moved, &|| waiting(&cs), Some(&mut *watch))? {
            return Err(KvRunError::Peer(
                "the server ended the run before every request was answered".into(),
            ));
        }
    }
}

/// The workers `ws` ([`new_workers`]) of a run whose clients are in another process, on `links`:
/// stepped until `watch` says the clients are done (nothing arriving for `p.stall` is a stall:
/// the clients stopped writing). Each worker's counts.
pub fn workers_alone<W: WorkerLink>(
    links: &mut [W],
    mut ws: Vec<Worker>,
    p: &KvParams,
    watch: Watch<'_>,
) -> Result<Vec<WorkerStats>, KvRunError> {
    let mut guard = Guard::new(p.deadline, p.stall);
    let who = || "the workers, for requests from the clients (none came)".to_string();
    loop {
        let moved = workers_turn(&mut ws, links)?;
        if guard.turn(moved, &who, Some(&mut *watch))? {
            return Ok(ws.iter().map(|w| w.stats()).collect());
        }
    }
}

/// The run of clients `cs` and workers whose counts are `ws`: the counts reconciled, the spans
/// and latencies taken.
pub fn finish(cs: &[Client], ws: Vec<WorkerStats>, p: &KvParams) -> Result<KvRun, KvRunError> {
    let spans: Vec<(u64, u64)> = cs.iter().map(|c| c.span().unwrap_or((0, 0))).collect();
    let first = spans.iter().map(|s| s.0).min().unwrap_or(0);
    let last = spans.iter().map(|s| s.1).max().unwrap_or(0);
    reconcile(cs, &ws, p)?;
    Ok(KvRun {
        clients: cs.iter().map(|c| c.stats()).collect(),
        latency: cs.iter().map(|c| c.latency().to_vec()).collect(),
        client_ticks: spans.iter().map(|s| s.1 - s.0).collect(),
        workers: ws,
        ticks: last - first,
    })
}

/// What the clients counted must be what the stores did: every GET hit a client checked is a
/// store's hit, every empty GET response a store's miss, every PUT a store's update or insert
/// (beyond populate's). A GET answered empty where the store had the value (a response that
/// lost its bytes on the way) is caught here.
fn reconcile(cs: &[Client], ws: &[WorkerStats], p: &KvParams) -> Result<(), KvRunError> {
    let sum = |f: fn(&ClientStats) -> u64| cs.iter().map(|c| f(&c.stats())).sum::<u64>();
    let populated = u64::from(p.shape.keys) * ws.len() as u64;
    let store_puts = ws
        .iter()
        .map(|w| w.store.put_hits + w.store.put_inserts)
        .sum::<u64>()
        .saturating_sub(populated);
    let got = (sum(|c| c.get_hits), sum(|c| c.get_misses), sum(|c| c.puts));
    let want = (
        ws.iter().map(|w| w.store.get_hits).sum::<u64>(),
        ws.iter().map(|w| w.store.get_misses).sum::<u64>(),
        store_puts,
    );
    if got != want {
        return Err(KvRunError::Counts(format!(
            "the clients counted {} GET hits, {} GET misses and {} PUTs; the stores {} hits, {} misses and {} PUTs",
            got.0, got.1, got.2, want.0, want.1, want.2
        )));
    }
    Ok(())
}

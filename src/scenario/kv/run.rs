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
    #[error("no progress for {waited:?}: {what}; the path dropped a request or a response")]
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
    /// The store could not be built.
    #[error("the store: {0}")]
    Store(#[from] super::store::StoreError),
}

/// Runs `clients.len()` clients against `workers.len()` workers in this thread.
pub fn loopback<C: ClientLink, W: WorkerLink>(
    clients: &mut [C],
    workers: &mut [W],
    p: &KvParams,
) -> Result<KvRun, KvRunError> {
    let mut cs: Vec<Client> = (0..clients.len() as u32)
        .map(|i| Client::new(i, p.shape, p.requests))
        .collect();
    let mut ws = Vec::with_capacity(workers.len());
    for i in 0..workers.len() as u32 {
        ws.push(Worker::new(i, p.shape, p.shape.store()?, p.postlist));
    }
    for (c, l) in cs.iter_mut().zip(clients.iter_mut()) {
        c.start(l)?;
    }
    let started = Instant::now();
    let mut last_move = Instant::now();
    let mut turns = 0u64;
    loop {
        let mut moved = false;
        let mut done = 0;
        // each client goes on until it waits (a window written, or a completion owed), as a
        // client thread would, so the workers find several requests a pass
        for (c, l) in cs.iter_mut().zip(clients.iter_mut()) {
            for _ in 0..=p.shape.layout.window {
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
        if done == cs.len() {
            break;
        }
        for (w, l) in ws.iter_mut().zip(workers.iter_mut()) {
            moved |= w.step(l)? == Step::Progress;
        }
        turns += 1;
        if moved {
            last_move = Instant::now();
        }
        if turns % 1024 == 0 {
            if crate::signals::interrupted() {
                return Err(KvRunError::Interrupted);
            }
            if started.elapsed() > p.deadline {
                return Err(KvRunError::Deadline(p.deadline));
            }
            if last_move.elapsed() > p.stall {
                let what = cs
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        format!(
                            "client {i}: {} written, {} answered",
                            c.stats().issued,
                            c.stats().answered
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                return Err(KvRunError::Stalled {
                    waited: last_move.elapsed(),
                    what,
                });
            }
        }
    }
    let spans: Vec<(u64, u64)> = cs.iter().map(|c| c.span().unwrap_or((0, 0))).collect();
    let first = spans.iter().map(|s| s.0).min().unwrap_or(0);
    let last = spans.iter().map(|s| s.1).max().unwrap_or(0);
    let stats: Vec<WorkerStats> = ws.iter().map(|w| w.stats()).collect();
    reconcile(&cs, &stats, p)?;
    Ok(KvRun {
        clients: cs.iter().map(|c| c.stats()).collect(),
        latency: cs.iter().map(|c| c.latency().to_vec()).collect(),
        client_ticks: spans.iter().map(|s| s.1 - s.0).collect(),
        workers: stats,
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

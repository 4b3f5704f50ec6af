//! One key-value run in one thread (`--loopback`): every client and worker stepped in turn (a
//! client until it waits, a worker one pass over its clients), on
//! whatever path ends it is given, until each client has its requests answered; a run in which
//! nothing moves for the stall deadline, or that outlives its deadline, stops with an error that
//! says who waited for what.

use super::engine::{Client, ClientStats, KvError, Shape, Step, Worker, WorkerStats};
use crate::backend::kv::{ClientLink, WorkerLink};
use crate::clock;
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
    /// The run's deadline passed.
    #[error("the run's deadline ({0:?}) passed before every request was answered")]
    Deadline(Duration),
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
    let (started, t0) = (Instant::now(), clock::start());
    let mut finished = vec![0u64; cs.len()];
    let mut last_move = Instant::now();
    let mut turns = 0u64;
    loop {
        let mut moved = false;
        let mut done = 0;
        // each client goes on until it waits (a window written, or a completion owed), as a
        // client thread would, so the workers find several requests a pass
        for (i, (c, l)) in cs.iter_mut().zip(clients.iter_mut()).enumerate() {
            for _ in 0..=p.shape.layout.window {
                match c.step(l, clock::start())? {
                    Step::Done => {
                        done += 1;
                        if finished[i] == 0 {
                            finished[i] = clock::stop();
                        }
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
    let end = finished.iter().copied().max().unwrap_or(t0);
    Ok(KvRun {
        clients: cs.iter().map(|c| c.stats()).collect(),
        latency: cs.iter().map(|c| c.latency().to_vec()).collect(),
        client_ticks: finished.iter().map(|&f| f.saturating_sub(t0)).collect(),
        workers: ws.iter().map(|w| w.stats()).collect(),
        ticks: end.saturating_sub(t0),
    })
}

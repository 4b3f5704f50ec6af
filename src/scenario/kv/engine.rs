//! HERD's client and worker as state machines that take one step at a time, over two small
//! link traits (what a client and a worker ask of the RDMA path), so one thread can run a whole
//! loopback and a thread per role can run them apart, on any backend.
//!
//! The client follows rdma_bench's herd/client.c: draws (worker, update, key) from its generator
//! after its permutation, writes the request into its slot `OFFSET(wn, cn, ws[wn])` of the
//! server's region, a write signalled 1 in 64 (and one send completion reaped before each 64th),
//! batch-synchronous: after every `window` requests it posts `window` receives and waits for
//! `window` responses. Beyond HERD it matches each response to its request (per worker, in
//! order: a worker answers a client's slots in order), checks a GET hit's value against its key,
//! counts GET misses and PUTs, and times each request from its post to its response.
//!
//! The worker follows herd/worker.c: a pass over the clients round-robin, a slot whose opcode is
//! at least [`HERD_OP_GET`] is new and its opcode drops by [`HERD_MICA_OFFSET`] in place; up to
//! `postlist` of them go to the store as one batch and their responses (the GET hit's value,
//! else no bytes; the immediate is the worker's number) leave as one post, signalled 1 in 64.
//! Beyond HERD, a PUT's value is checked against its key before it is stored, and a GET miss in a
//! store that did not lose that key (by an eviction or to a key of its tag; or any key once the
//! log has wrapped) is an error naming the key.

use super::keys::{self, FastRand};
use super::op::{self, Layout, HERD_MICA_OFFSET, HERD_OP_GET, SLOT};
use super::store::{self, Outcome, Store, StoreError, StoreStats, MAX_BATCH};
use crate::backend::kv::{ClientLink, Reply, Response, WorkerLink};
use crate::backend::BackendError;
use crate::clock;
use std::collections::VecDeque;

/// One completion in 64 (rdma_bench's `UNSIG_BATCH`).
pub const UNSIG_BATCH: u64 = 64;

/// Why a client or a worker stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KvError {
    /// The path failed.
    #[error("{side} {id}: {source}")]
    Backend {
        /// `client` or `worker`.
        side: &'static str,
        /// Its number.
        id: u32,
        /// The error.
        #[source]
        source: BackendError,
    },
    /// A response's value was not its key's.
    #[error("client {client}, response from worker {worker}: {source}")]
    Value {
        /// The client.
        client: u32,
        /// The worker that answered.
        worker: u32,
        /// What differs.
        #[source]
        source: op::ValueError,
    },
    /// A response no request of this client waits for, or of a length its request cannot have.
    #[error("client {client}: {why}")]
    Response {
        /// The client.
        client: u32,
        /// What was wrong.
        why: String,
    },
    /// The store refused a batch.
    #[error("worker {worker}: {source}")]
    Store {
        /// The worker.
        worker: u32,
        /// The store's error.
        #[source]
        source: StoreError,
    },
    /// A request the worker took was not what a client writes.
    #[error("worker {worker}, slot {slot} (client {client}): {why}")]
    Request {
        /// The worker.
        worker: u32,
        /// The slot.
        slot: usize,
        /// The client whose slot it is.
        client: u32,
        /// What was wrong.
        why: String,
    },
}

/// What a client counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClientStats {
    /// Requests written.
    pub issued: u64,
    /// Responses matched to them.
    pub answered: u64,
    /// GETs answered with their key's value (each checked).
    pub get_hits: u64,
    /// GETs answered with no value.
    pub get_misses: u64,
    /// PUTs answered.
    pub puts: u64,
}

/// A request waiting for its response.
#[derive(Debug, Clone, Copy)]
struct Pending {
    /// The key's number and its bytes (hashed once, when the request was drawn).
    key: u32,
    bytes: [u8; 16],
    put: bool,
    t0: u64,
}

/// The run's shape, shared by clients and workers.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// The region's layout (workers, clients, window).
    pub layout: Layout,
    /// Keys in each store (`0..keys`).
    pub keys: u32,
    /// PUTs in 100 requests.
    pub update_pct: u32,
    /// Bytes of a value.
    pub val_len: u8,
    /// How a request's key is drawn.
    pub dist: keys::KeyDist,
}

impl Shape {
    /// A store for this shape, populated with keys `0..keys`: a bucket per key (rounded up to a
    /// power of two; HERD has one per 4 keys, so evictions at populate are rarer here) and a log
    /// of at least twice the populated entries (so PUT-miss inserts do not wrap it soon), within
    /// 1 GiB (`probe::measure::kv` refuses more keys than that holds twice).
    pub fn store(&self) -> Result<Store, StoreError> {
        let (buckets, log) = self.geometry();
        let mut st = Store::new(buckets, log, self.val_len)?;
        st.populate(self.keys);
        Ok(st)
    }
}

impl Shape {
    /// The buckets and the log bytes of each store ([`Shape::store`]).
    pub fn geometry(&self) -> (u32, u64) {
        let buckets = self
            .keys
            .max(1)
            .checked_next_power_of_two()
            .unwrap_or(1 << 31)
            .min(16 << 20);
        let log = (u64::from(self.keys) * store::entry_bytes(self.val_len) * 2)
            .next_power_of_two()
            .clamp(4096, store::MAX_LOG);
        (buckets, log)
    }
}

/// One HERD client.
pub struct Client {
    id: u32,
    shape: Shape,
    rng: FastRand,
    perm: Vec<u32>,
    ws: Vec<u32>,
    pending: Vec<VecDeque<Pending>>,
    outstanding: u64,
    total: u64,
    /// A window is written: every response before the next request (batch-synchronous).
    drain: bool,
    /// A send completion to reap before the next write.
    owe_send: bool,
    got: Vec<Response>,
    stats: ClientStats,
    latency: Vec<u64>,
    /// When its first request was written, and its last response found (TSC).
    first: Option<u64>,
    last: u64,
}

/// What a step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Something moved.
    Progress,
    /// Nothing to do until the other side moves.
    Idle,
    /// Every request answered.
    Done,
}

impl Client {
    /// Client `id` that will issue `total` requests, its generator seeded as HERD's client
    /// (0xdeadbeef, then its permutation).
    pub fn new(id: u32, shape: Shape, total: u64) -> Self {
        let mut rng = FastRand::new(keys::HERD_SEED);
        let perm = keys::permutation(shape.keys, id, &mut rng);
        let l = shape.layout;
        Client {
            id,
            shape,
            rng,
            perm,
            ws: vec![0; l.workers as usize],
            pending: vec![VecDeque::new(); l.workers as usize],
            outstanding: 0,
            total,
            drain: false,
            owe_send: false,
            got: Vec::with_capacity(64),
            stats: ClientStats::default(),
            latency: Vec::with_capacity(total.min(1 << 24) as usize),
            first: None,
            last: 0,
        }
    }

    /// What it counted.
    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// When it wrote its first request and found its last response (TSC ticks; none before its
    /// first request).
    pub fn span(&self) -> Option<(u64, u64)> {
        self.first.map(|f| (f, self.last.max(f)))
    }

    /// Each answered request's ticks from its post to its response, in the order answered.
    pub fn latency(&self) -> &[u64] {
        &self.latency
    }

    /// Posts the first window's receives (before the first request).
    pub fn start(&mut self, link: &mut impl ClientLink) -> Result<(), KvError> {
        let w = self.shape.layout.window;
        link.post_recvs(w).map_err(|e| self.backend(e))
    }

    fn backend(&self, source: BackendError) -> KvError {
        KvError::Backend {
            side: "client",
            id: self.id,
            source,
        }
    }

    /// One step: reap responses (each request's end is stamped right after the poll that
    /// found its response), then write the next request when the window allows (its start
    /// stamped right before its write).
    pub fn step(&mut self, link: &mut impl ClientLink) -> Result<Step, KvError> {
        let mut moved = false;
        if self.outstanding > 0 {
            self.got.clear();
            link.poll_responses(&mut self.got).map_err(|e| self.backend(e))?;
            if !self.got.is_empty() {
                let t1 = clock::stop();
                self.last = t1;
                for i in 0..self.got.len() {
                    let r = self.got[i];
                    self.answer(&r, t1)?;
                }
                moved = true;
            }
        }
        if self.stats.issued == self.total {
            return Ok(if self.outstanding == 0 {
                Step::Done
            } else {
                step_of(moved)
            });
        }
        if self.drain {
            if self.outstanding > 0 {
                return Ok(step_of(moved));
            }
            self.drain = false;
        }
        if self.owe_send {
            if link.poll_sends().map_err(|e| self.backend(e))? == 0 {
                return Ok(step_of(moved));
            }
            self.owe_send = false;
        }
        self.issue(link)?;
        Ok(Step::Progress)
    }

    fn issue(&mut self, link: &mut impl ClientLink) -> Result<(), KvError> {
        let (l, n) = (self.shape.layout, self.stats.issued);
        let d = keys::draw_from(
            &mut self.rng,
            l.workers,
            self.shape.update_pct,
            self.shape.keys,
            &self.shape.dist,
        );
        let id = self.perm[d.index as usize];
        let k = keys::key(id);
        let mut v = [0u8; op::MAX_VALUE];
        let v = &mut v[..usize::from(self.shape.val_len)];
        op::fill_value(&k, v);
        let (bytes, len) = op::request(&k, d.update.then_some(&*v));
        let ws = &mut self.ws[d.worker as usize];
        let slot = l.slot(d.worker, self.id, *ws);
        *ws = (*ws + 1) % l.window;
        let signal = n % UNSIG_BATCH == 0;
        let t0 = clock::start();
        self.first.get_or_insert(t0);
        self.pending[d.worker as usize].push_back(Pending {
            key: id,
            bytes: k,
            put: d.update,
            t0,
        });
        link.write(slot, &bytes[..len], signal).map_err(|e| self.backend(e))?;
        self.stats.issued += 1;
        self.outstanding += 1;
        let issued = self.stats.issued;
        self.owe_send = issued % UNSIG_BATCH == UNSIG_BATCH - 1;
        if issued % u64::from(l.window) == 0 {
            self.drain = true;
            if issued < self.total {
                link.post_recvs(l.window).map_err(|e| self.backend(e))?;
            }
        }
        Ok(())
    }

    fn answer(&mut self, r: &Response, t1: u64) -> Result<(), KvError> {
        let client = self.id;
        let fifo = self.pending.get_mut(r.imm as usize).ok_or_else(|| KvError::Response {
            client,
            why: format!("a response with immediate {} names no worker", r.imm),
        })?;
        let p = fifo.pop_front().ok_or_else(|| KvError::Response {
            client,
            why: format!(
                "a response from worker {} with no request of this client waiting",
                r.imm
            ),
        })?;
        let k = p.bytes;
        let data = &r.data[..(r.len as usize).min(SLOT)];
        match (p.put, r.len) {
            (true, 0) => self.stats.puts += 1,
            (false, 0) => self.stats.get_misses += 1,
            (false, _) => {
                op::check_value(&k, data, usize::from(self.shape.val_len)).map_err(|source| KvError::Value {
                    client,
                    worker: r.imm,
                    source,
                })?;
                self.stats.get_hits += 1;
            }
            (true, n) => {
                return Err(KvError::Response {
                    client,
                    why: format!(
                        "the PUT of key {} (number {}) was answered with {n} B",
                        keys::hex(&k),
                        p.key
                    ),
                })
            }
        }
        self.latency.push(t1.wrapping_sub(p.t0));
        self.stats.answered += 1;
        self.outstanding -= 1;
        Ok(())
    }
}

fn step_of(moved: bool) -> Step {
    if moved {
        Step::Progress
    } else {
        Step::Idle
    }
}

/// What a worker counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerStats {
    /// Requests taken.
    pub requests: u64,
    /// Batches (posts of responses).
    pub batches: u64,
    /// PUTs whose value was read before all its bytes had landed, and read again until it held
    /// (see [`TORN_WAIT`]).
    pub torn_reads: u64,
    /// The store's counts.
    pub store: StoreStats,
}

/// One HERD worker with its store.
pub struct Worker {
    id: u32,
    shape: Shape,
    store: Store,
    postlist: usize,
    ws: Vec<u32>,
    clt: u32,
    sent: u64,
    /// Signalled responses posted, their completions not yet reaped.
    unreaped: u32,
    slots: Vec<[u8; SLOT]>,
    from: Vec<(u32, usize)>,
    out: Vec<Outcome>,
    requests: u64,
    batches: u64,
    torn_reads: u64,
}

/// How long a worker reads a PUT's slot again when its value is not its key's yet. A WRITE's
/// bytes need not become visible at once to a worker in another thread or process: on model0 the
/// writer's `memcpy` of a 50-byte PUT stores bytes 0-31 (the key, the opcode, the length and the
/// value's head) before bytes 18-49 (glibc's AVX2 copy), and its CPU may be descheduled between
/// the two (measured: a few PUTs in a million, docs/kv.md); a NIC's DMA of a cache line is seen
/// whole in practice, which HERD's layout (the opcode before the value) relies on. A value still
/// wrong after this is an error.
pub const TORN_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

impl Worker {
    /// Worker `id` with its store (populated), taking up to `postlist` requests a batch (1 to 32).
    pub fn new(id: u32, shape: Shape, store: Store, postlist: u32) -> Self {
        let postlist = (postlist as usize).clamp(1, MAX_BATCH);
        Worker {
            id,
            shape,
            store,
            postlist,
            ws: vec![0; shape.layout.clients as usize],
            clt: shape.layout.clients - 1,
            sent: 0,
            unreaped: 0,
            slots: vec![[0; SLOT]; postlist],
            from: Vec::with_capacity(postlist),
            out: Vec::with_capacity(postlist),
            requests: 0,
            batches: 0,
            torn_reads: 0,
        }
    }

    /// What it counted.
    pub fn stats(&self) -> WorkerStats {
        WorkerStats {
            requests: self.requests,
            batches: self.batches,
            torn_reads: self.torn_reads,
            store: self.store.stats(),
        }
    }

    /// One pass over the clients: takes the new requests (up to the postlist), runs them through
    /// the store and posts their responses.
    pub fn step(&mut self, link: &mut impl WorkerLink) -> Result<Step, KvError> {
        // HERD reaps one completion before each 64th response: a batch that may reach it waits
        // for the signalled one before it (so at most 64 + postlist responses are unreaped)
        if self.unreaped > 0 && self.sent % UNSIG_BATCH + self.postlist as u64 >= UNSIG_BATCH {
            let c = link.poll_sends().map_err(|e| self.backend(e))?;
            if c == 0 {
                return Ok(Step::Idle);
            }
            self.unreaped = self.unreaped.saturating_sub(c);
        }
        let l = self.shape.layout;
        self.from.clear();
        for _ in 0..l.clients {
            self.clt = (self.clt + 1) % l.clients;
            let c = self.clt as usize;
            let slot = l.slot(self.id, self.clt, self.ws[c]);
            let opc = link.opcode(slot);
            if opc < HERD_OP_GET {
                continue;
            }
            link.set_opcode(slot, opc - HERD_MICA_OFFSET);
            let i = self.from.len();
            link.read_slot(slot, &mut self.slots[i]);
            self.slots[i][op::OPCODE_AT] = opc - HERD_MICA_OFFSET;
            self.put_landed(link, slot, i)?;
            self.from.push((self.clt, slot));
            self.ws[c] = (self.ws[c] + 1) % l.window;
            if self.from.len() == self.postlist {
                break;
            }
        }
        if self.from.is_empty() {
            return Ok(Step::Idle);
        }
        self.serve(link)?;
        Ok(Step::Progress)
    }

    fn backend(&self, source: BackendError) -> KvError {
        KvError::Backend {
            side: "worker",
            id: self.id,
            source,
        }
    }

    /// A PUT's value must be its key's; one that is not yet is read again for up to
    /// [`TORN_WAIT`] (counted in `torn_reads` when it then holds), else the error stands.
    fn put_landed(&mut self, link: &impl WorkerLink, slot: usize, i: usize) -> Result<(), KvError> {
        let Err(first) = self.check_put(slot, i) else {
            return Ok(());
        };
        let opc = self.slots[i][op::OPCODE_AT];
        let t = std::time::Instant::now();
        while t.elapsed() < TORN_WAIT {
            std::hint::spin_loop();
            link.read_slot(slot, &mut self.slots[i]);
            self.slots[i][op::OPCODE_AT] = opc;
            if self.check_put(slot, i).is_ok() {
                self.torn_reads += 1;
                return Ok(());
            }
        }
        Err(first)
    }

    /// A PUT's value must be its key's (HERD's are never filled; here they are, so a PUT that
    /// landed wrong is caught where it lands).
    fn check_put(&self, slot: usize, i: usize) -> Result<(), KvError> {
        let s = &self.slots[i];
        if s[op::OPCODE_AT] != op::MICA_OP_PUT {
            return Ok(());
        }
        let mut k = [0u8; 16];
        k.copy_from_slice(&s[..16]);
        let n = usize::from(s[op::VAL_LEN_AT]).min(op::MAX_VALUE);
        op::check_value(&k, &s[op::VALUE_AT..op::VALUE_AT + n], usize::from(self.shape.val_len)).map_err(|e| {
            KvError::Request {
                worker: self.id,
                slot,
                client: self.clt,
                why: format!("a PUT: {e}"),
            }
        })
    }

    fn serve(&mut self, link: &mut impl WorkerLink) -> Result<(), KvError> {
        let n = self.from.len();
        let mut reqs: [&[u8]; MAX_BATCH] = [&[]; MAX_BATCH];
        for (r, s) in reqs.iter_mut().zip(&self.slots[..n]) {
            *r = &s[..];
        }
        self.store
            .batch(&reqs[..n], &mut self.out)
            .map_err(|source| KvError::Store {
                worker: self.id,
                source,
            })?;
        // a GET misses only a key the store lost (evicted, or to a key of its tag), or any key
        // once the log has wrapped (whose overwritten entries are not tracked)
        let wrapped = self.store.stats().wraps > 0;
        for (i, o) in self.out.iter().enumerate() {
            let mut k = [0u8; 16];
            k.copy_from_slice(&self.slots[i][..16]);
            if *o == Outcome::GetMiss && !wrapped && !self.store.is_lost(&k) {
                let (client, slot) = self.from[i];
                let why = format!(
                    "a GET of key {} missed, and the store never lost that key",
                    keys::hex(&k)
                );
                return Err(KvError::Request {
                    worker: self.id,
                    slot,
                    client,
                    why,
                });
            }
        }
        let mut replies = [Reply {
            to: 0,
            data: &[],
            imm: self.id,
            signal: false,
        }; MAX_BATCH];
        for (i, o) in self.out.iter().enumerate() {
            let data = o.value();
            let signal = self.sent % UNSIG_BATCH == 0;
            self.unreaped += u32::from(signal);
            self.sent += 1;
            replies[i] = Reply {
                to: self.from[i].0,
                data,
                imm: self.id,
                signal,
            };
        }
        link.respond(&replies[..n]).map_err(|e| KvError::Backend {
            side: "worker",
            id: self.id,
            source: e,
        })?;
        self.requests += n as u64;
        self.batches += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests;

//! What a key-value run reports: throughput (all, per client, per worker), each request's
//! latency from its post to its response as percentiles and an HdrHistogram, the counts the
//! clients checked, and the batches the workers posted.

use super::run::{KvParams, KvRun};
use crate::clock::Calibration;
use crate::report::{Hist, Stats};

/// The statistics of no sample (a run answers every request, so only of a run of none).
const NONE: Stats = Stats {
    count: 0,
    min: 0.0,
    p50: 0.0,
    p90: 0.0,
    p99: 0.0,
    p99_9: 0.0,
    p99_99: 0.0,
    max: 0.0,
    mean: 0.0,
    stdev: 0.0,
};

/// One backend's key-value run.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct KvResult {
    /// `kv`.
    pub scenario: String,
    /// `herd`: HERD's GET/PUT requests (compare's rows name it as an operation).
    pub op: String,
    /// Backend name.
    pub backend: String,
    /// Workers.
    pub workers: u32,
    /// Clients.
    pub clients: u32,
    /// Requests a client writes before it waits for their responses.
    pub window: u32,
    /// Most requests per worker batch.
    pub postlist: u32,
    /// PUTs in 100 requests.
    pub update_pct: u32,
    /// Bytes of a value.
    #[serde(rename = "size_bytes")]
    pub value_size: u32,
    /// The Zipf exponent of the keys (none: uniform, as HERD).
    pub zipf_theta: Option<f64>,
    /// Keys in each store.
    pub keys: u32,
    /// Requests per client.
    pub requests_per_client: u64,
    /// `one` (one thread of each process stepped its clients and workers) or `per-role` (a
    /// thread each).
    pub threads: String,
    /// The run, first request to last response, ns.
    pub duration_ns: f64,
    /// Requests answered per microsecond over the run, all clients (millions a second).
    pub mops: f64,
    /// Each client's, over its own first request to last response.
    pub client_mops: Vec<f64>,
    /// Each worker's requests over the run.
    pub worker_mops: Vec<f64>,
    /// Every request, post to response.
    #[serde(rename = "latency_ns")]
    pub latency: Stats,
    /// Their HdrHistogram (base64 of the V2 compressed encoding).
    #[serde(rename = "histogram_ns")]
    pub histogram: String,
    /// GETs answered with their key's value, each checked by its client.
    pub get_hits: u64,
    /// GETs answered with no value.
    pub get_misses: u64,
    /// PUTs answered.
    pub puts: u64,
    /// PUTs that found their key (updates in place), over the workers.
    pub put_hits: u64,
    /// PUTs that inserted (beyond populate), over the workers.
    pub put_inserts: u64,
    /// Index evictions over the workers (populate's included).
    pub evictions: u64,
    /// Keys lost to another key of the same tag over the workers (populate's included).
    pub collisions: u64,
    /// Posts of responses over the workers.
    pub batches: u64,
    /// Requests per post of responses (the doorbell batching achieved).
    pub mean_batch: f64,
    /// PUTs a worker read before all their value's bytes were visible, and read again until
    /// they were (`engine::TORN_WAIT`), over the workers.
    #[serde(default)]
    pub torn_reads: u64,
}

impl KvResult {
    /// The figures of `run` on `backend`, with the clock `cal`; `p` is what ran.
    pub fn of(backend: &str, p: &KvParams, run: &KvRun, cal: &Calibration) -> KvResult {
        let ns: Vec<f64> = run.latency.iter().flatten().map(|&t| cal.to_ns(t)).collect();
        let mut h = Hist::new();
        for &v in &ns {
            h.record(v);
        }
        let dur = cal.to_ns(run.ticks);
        let per_us = |n: u64, ticks: u64| {
            let d = cal.to_ns(ticks);
            if d > 0.0 {
                n as f64 * 1e3 / d
            } else {
                0.0
            }
        };
        let answered: u64 = run.clients.iter().map(|c| c.answered).sum();
        let batches: u64 = run.workers.iter().map(|w| w.batches).sum();
        let served: u64 = run.workers.iter().map(|w| w.requests).sum();
        let populated = u64::from(p.shape.keys) * run.workers.len() as u64;
        let l = p.shape.layout;
        KvResult {
            scenario: "kv".into(),
            op: "herd".into(),
            backend: backend.into(),
            workers: l.workers,
            clients: l.clients,
            window: l.window,
            postlist: p.postlist,
            update_pct: p.shape.update_pct,
            value_size: u32::from(p.shape.val_len),
            zipf_theta: p.shape.dist.theta(),
            keys: p.shape.keys,
            requests_per_client: p.requests,
            threads: p.threads.as_str().into(),
            duration_ns: dur,
            mops: per_us(answered, run.ticks),
            client_mops: run
                .clients
                .iter()
                .zip(&run.client_ticks)
                .map(|(c, &t)| per_us(c.answered, t))
                .collect(),
            worker_mops: run.workers.iter().map(|w| per_us(w.requests, run.ticks)).collect(),
            latency: Stats::of(&ns).unwrap_or(NONE),
            histogram: h.encode(),
            get_hits: run.clients.iter().map(|c| c.get_hits).sum(),
            get_misses: run.clients.iter().map(|c| c.get_misses).sum(),
            puts: run.clients.iter().map(|c| c.puts).sum(),
            put_hits: run.workers.iter().map(|w| w.store.put_hits).sum(),
            put_inserts: run
                .workers
                .iter()
                .map(|w| w.store.put_inserts)
                .sum::<u64>()
                .saturating_sub(populated),
            evictions: run.workers.iter().map(|w| w.store.evictions).sum(),
            collisions: run.workers.iter().map(|w| w.store.collisions).sum(),
            batches,
            torn_reads: run.workers.iter().map(|w| w.torn_reads).sum(),
            mean_batch: if batches > 0 {
                served as f64 / batches as f64
            } else {
                0.0
            },
        }
    }
}

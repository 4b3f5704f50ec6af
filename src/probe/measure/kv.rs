//! A key-value measurement from plan to report: the plan checked, the device and its backends,
//! the clock, then on each backend the QPs built and the run stepped in this thread: both sides
//! in one process (`--loopback`), or one side of two ([`peer`]).

mod peer;

use super::session;
use crate::backend::kv::{direct, verbs};
use crate::backend::setup::{Dev, DEPTH};
use crate::backend::BackendKind;
use crate::model::ModelConfig;
use crate::oob::Rendezvous;
use crate::probe::check::{counters, diag};
use crate::probe::report::{Report, Role, Runs};
use crate::probe::{KvPlan, KvThreads, Observer, PeerSpec, Plan, ProbeError};
use crate::scenario::kv::engine::Shape;
use crate::scenario::kv::keys::KeyDist;
use crate::scenario::kv::op::{Layout, MAX_VALUE, SLOT};
use crate::scenario::kv::result::KvResult;
use crate::scenario::kv::run::{self, KvParams};
use crate::scenario::kv::store::{entry_bytes, MAX_BATCH, MAX_LOG};
use crate::scenario::kv::threads;
use serde_json::json;
use std::time::Duration;

/// The largest request region (rdma_bench's RR_SIZE, 16 MiB).
pub const MAX_REGION: usize = 16 << 20;
/// The most keys a store holds (MICA's index of 16 Mi buckets).
pub const MAX_KEYS: u32 = 16 << 20;

/// What the plan asks that cannot run, named by its flag.
fn check(kp: &KvPlan) -> Result<(), ProbeError> {
    let bad = |s: String| Err(ProbeError::Usage(s));
    for (flag, v) in [
        ("--workers", u64::from(kp.workers)),
        ("--clients", u64::from(kp.clients)),
        ("-n", kp.requests),
        ("--keys", u64::from(kp.keys)),
    ] {
        if v == 0 {
            return bad(format!("{flag} 0: at least 1"));
        }
    }
    if let Some(t) = kp.zipf.filter(|t| !(0.0..=10.0).contains(t)) {
        return bad(format!("--zipf {t}: an exponent from 0 to 10 (YCSB's is 0.99)"));
    }
    if kp.window == 0 || kp.window > DEPTH / 2 {
        return bad(format!(
            "--window {}: 1 to {} (a client keeps two windows of receives posted on a queue of {DEPTH})",
            kp.window,
            DEPTH / 2
        ));
    }
    if kp.batching && kp.postlist == 1 {
        return bad(
            "--batching with --postlist 1: it runs each backend at --postlist and at 1; give a postlist above 1".into(),
        );
    }
    if kp.postlist == 0 || kp.postlist as usize > MAX_BATCH {
        return bad(format!(
            "--postlist {}: 1 to {MAX_BATCH} (MICA's largest batch)",
            kp.postlist
        ));
    }
    if kp.value_size == 0 || kp.value_size as usize > MAX_VALUE {
        return bad(format!(
            "--value-size {}: 1 to {MAX_VALUE} B (what fits a {SLOT}-byte request slot after the key, opcode and length)",
            kp.value_size
        ));
    }
    if kp.update_pct > 100 {
        return bad(format!("--update {}: a percentage, 0 to 100", kp.update_pct));
    }
    if kp.keys > MAX_KEYS {
        return bad(format!("--keys {}: at most {MAX_KEYS} (MICA's index)", kp.keys));
    }
    // the log holds every populated entry twice over (so it does not wrap at populate, nor soon
    // after), within MICA's largest log
    let entry = entry_bytes(kp.value_size as u8);
    if u64::from(kp.keys) * entry * 2 > MAX_LOG {
        return bad(format!(
            "--keys {} with --value-size {}: {} entries of {entry} B twice over exceed a log of {} MiB (MICA's largest); at most {} keys",
            kp.keys,
            kp.value_size,
            kp.keys,
            MAX_LOG >> 20,
            MAX_LOG / (2 * entry)
        ));
    }
    let region = kp.workers as usize * kp.clients as usize * kp.window as usize * SLOT;
    if region > MAX_REGION {
        return bad(format!(
            "--clients {} x --workers {} x --window {} slots of {SLOT} B is {region} B: the request region holds at most {MAX_REGION} B",
            kp.clients, kp.workers, kp.window
        ));
    }
    Ok(())
}

/// Which parts of a run this process holds: the server's (the workers, their stores, the
/// region) and the clients'.
#[derive(Debug, Clone, Copy)]
struct Sides {
    server: bool,
    clients: bool,
}

impl Sides {
    /// The sides `plan.peer` gives this process: both in loopback, the server's when it listens,
    /// the clients' when it connects (with a rendezvous given too).
    fn of(plan: &Plan) -> Sides {
        Sides {
            server: !matches!(plan.peer, PeerSpec::Connect { .. }),
            clients: !matches!(plan.peer, PeerSpec::Listen { .. }),
        }
    }

    /// Bytes the parts take: each worker's store (index and log, as [`Shape::store`] sizes
    /// them), each client's permutation of the keys and every request's latency sample (kept,
    /// then copied twice into the result).
    fn memory(self, kp: &KvPlan, shape: &Shape) -> u64 {
        let (buckets, log) = shape.geometry();
        let stores = u64::from(kp.workers).saturating_mul(u64::from(buckets) * 64 + log);
        let per_client = (u64::from(kp.keys) * 4).saturating_add(kp.requests.saturating_mul(24));
        let clients = u64::from(kp.clients).saturating_mul(per_client);
        (if self.server { stores } else { 0 }).saturating_add(if self.clients { clients } else { 0 })
    }

    /// model0's open files of the parts (a file per object): per client its UC QP, its UD QP
    /// (each with its CQ) and its receive buffers; per client the server's UC QP and CQ; per
    /// worker a UD QP and its CQ; the region.
    fn model_files(self, kp: &KvPlan) -> (u64, &'static str) {
        let (c, w) = (u64::from(kp.clients), u64::from(kp.workers));
        match (self.server, self.clients) {
            (true, true) => (7 * c + 2 * w + 1, "7 per client, 2 per worker"),
            (true, false) => (2 * c + 2 * w + 1, "2 per client, 2 per worker"),
            _ => (5 * c, "5 per client"),
        }
    }
}

/// The scenario's parameters of a plan (checked: its Zipf exponent is one rand_distr takes).
fn params(kp: &KvPlan) -> Result<KvParams, ProbeError> {
    let dist = match kp.zipf {
        None => KeyDist::Uniform,
        Some(t) if !(0.0..=10.0).contains(&t) => {
            return Err(ProbeError::Usage(format!(
                "--zipf {t}: an exponent from 0 to 10 (YCSB's is 0.99)"
            )))
        }
        Some(t) => KeyDist::zipf(kp.keys, t).map_err(|e| ProbeError::Usage(format!("--zipf {t}: {e}")))?,
    };
    let layout = Layout {
        workers: kp.workers,
        clients: kp.clients,
        window: kp.window,
    };
    Ok(KvParams {
        shape: Shape {
            layout,
            keys: kp.keys,
            update_pct: kp.update_pct,
            val_len: kp.value_size as u8,
            dist,
        },
        postlist: kp.postlist,
        requests: kp.requests,
        stall: Duration::from_secs(10),
        deadline: Duration::from_secs(3600),
        threads: kp.threads,
    })
}

/// Runs a key-value plan (see [`crate::probe::run`]): both sides in this process, or one, its
/// peer reached through `given` or as the plan says.
pub(in crate::probe) fn run(
    plan: &Plan,
    kp: &KvPlan,
    given: Option<&mut (dyn Rendezvous + '_)>,
    obs: &mut dyn Observer,
) -> Result<Report, ProbeError> {
    check(kp)?;
    let p = params(kp)?;
    let sides = Sides::of(plan);
    if given.is_some() && plan.peer == PeerSpec::Loopback {
        return Err(ProbeError::Invalid(
            "kv: a peer was given to a run in one process (the plan's peer is loopback)".into(),
        ));
    }
    session::check_memory(sides.memory(kp, &p.shape), || {
        format!(
            "--keys {} in each of --workers {} stores, --clients {} x -n {} latency samples",
            kp.keys, kp.workers, kp.clients, kp.requests
        )
    })?;
    let dev = session::open_device(plan, ModelConfig::default(), obs)?;
    // the backends the device runs (direct: model0's own QPs, or an mlx5 device's taken over
    // with mlx5dv)
    let kinds = session::backends(&dev, plan.backends)?;
    let (files, per) = sides.model_files(kp);
    let what = || {
        format!(
            "--clients {} and --workers {}: model0 keeps an open file per QP, CQ and buffer ({per})",
            kp.clients, kp.workers
        )
    };
    if let Some(n) = session::check_model_files(&dev, files, what, "lower --clients or --workers")? {
        obs.note(&n);
    }
    let before = counters::sample(&dev);
    let (cal, env) = session::calibrate(&dev, false)?;
    let mut tcp_peer = None;
    let mut tcp: Option<&mut (dyn Rendezvous + '_)> = match given {
        Some(r) => Some(r),
        None if plan.peer == PeerSpec::Loopback => None,
        None => match session::tcp_peer(plan, obs)? {
            Some(t) => Some(tcp_peer.insert(t)),
            None => None,
        },
    };
    let role = match (&tcp, sides.server) {
        (None, _) => Role::Loopback,
        (Some(t), true) => Role::Server(t.peer_name()),
        (Some(t), false) => Role::Client(t.peer_name()),
    };
    let mut report = new_report(plan, kp, &dev, &kinds, env, cal, role);
    if let Some(t) = tcp.as_deref_mut() {
        let mut phase = session::Phase::new(t, plan.oob_timeout);
        let r: &mut dyn Rendezvous = &mut phase;
        r.agree(&peer::hello(kp, &kinds))?;
    }
    obs.started(&report);
    // a server hears of a stall from its clients (which see it first) before it calls one itself
    let idle = p.stall + plan.oob_timeout;
    // each backend at the plan's postlist, and with --batching at 1 right after it
    let postlists = if kp.batching {
        vec![kp.postlist, 1]
    } else {
        vec![kp.postlist]
    };
    for (k, postlist) in kinds.iter().flat_map(|k| postlists.iter().map(move |l| (k, *l))) {
        let p = KvParams { postlist, ..p };
        let bundle = || diag::Bundle::of(plan, &dev, &before, Vec::new());
        let r = match tcp.as_deref_mut() {
            None => one(&dev, *k, &p).map(|r| KvResult::of(k.as_str(), &p, &r, &report.clock)),
            Some(t) if sides.server => peer::server_one(t, &dev, *k, &p, idle),
            Some(t) => peer::client_one(t, &dev, *k, &p, &report.clock),
        };
        let r = r.map_err(|e| diag::failed(bundle(), e))?;
        if let Runs::Kv(v) = &mut report.runs {
            v.push(r);
        }
        obs.finished(&report, report.runs.len() - 1);
    }
    if let Some(t) = tcp {
        session::end(t, plan, false)?;
    }
    report.counters = counters::CounterDelta::since(before, &dev);
    Ok(report)
}

/// The suite's key-value point `kp` checked before anything runs, as `kv` checks its plan:
/// its values (named by the suite's flags), the memory of both sides, model0's open files (the
/// note when the soft limit was raised).
pub(in crate::probe) fn suite_check(dev: &Dev, kp: &KvPlan) -> Result<Option<String>, ProbeError> {
    let named = |e: ProbeError| match e {
        ProbeError::Usage(m) => ProbeError::Usage(format!(
            "suite kv at {} client(s), window {}: {}",
            kp.clients,
            kp.window,
            m.replace("--clients", "--kv-clients/kv_clients")
                .replace("--window", "--kv-windows/kv_windows")
                .replace("--keys", "--kv-keys/kv_keys")
                .replace(" with --value-size ", " of value size ")
        )),
        e => e,
    };
    check(kp).map_err(named)?;
    let p = params(kp)?;
    let sides = Sides {
        server: true,
        clients: true,
    };
    session::check_memory(sides.memory(kp, &p.shape), || {
        format!(
            "suite kv: --kv-keys/kv_keys {} in each of {} stores, --kv-clients/kv_clients {} x --kv-requests/kv_requests {} latency samples",
            kp.keys, kp.workers, kp.clients, kp.requests
        )
    })?;
    let (files, per) = sides.model_files(kp);
    let what = || {
        format!(
            "suite --kv-clients/kv_clients {}: model0 keeps an open file per QP, CQ and buffer ({per})",
            kp.clients
        )
    };
    session::check_model_files(dev, files, what, "lower --kv-clients")
}

/// One of the suite's key-value points on backend `k`, both sides in this process.
pub(in crate::probe) fn suite_point(
    dev: &Dev,
    k: BackendKind,
    kp: &KvPlan,
    cal: &crate::clock::Calibration,
) -> Result<KvResult, ProbeError> {
    let p = params(kp)?;
    one(dev, k, &p).map(|r| KvResult::of(k.as_str(), &p, &r, cal))
}

/// A run's error as the probe's: a stop asked is the scenario's interruption, the peer's failure
/// the peer's, anything else named with the backend.
fn run_error(k: BackendKind, e: run::KvRunError) -> ProbeError {
    match e {
        run::KvRunError::Interrupted => ProbeError::Scenario(crate::scenario::ScenarioError::Interrupted),
        run::KvRunError::Peer(e) => ProbeError::Peer(e),
        e => ProbeError::Invalid(format!("kv on {}: {e}", k.as_str())),
    }
}

/// One backend's run in this process: its ends built on the device, the run stepped (in this
/// thread, or a thread per client and worker).
fn one(dev: &Dev, k: BackendKind, p: &KvParams) -> Result<run::KvRun, ProbeError> {
    let failed = |e| run_error(k, e);
    let per_role = p.threads == KvThreads::PerRole;
    match (k, dev) {
        (BackendKind::Direct, Dev::Model(m)) => {
            let mut paths = direct::model_loopback(&m.model, p.shape.layout)?;
            let (c, w) = (&mut paths.clients, &mut paths.workers);
            if per_role {
                threads::loopback(c, w, p).map_err(failed)
            } else {
                run::loopback(c, w, p).map_err(failed)
            }
        }
        (BackendKind::Direct, _) => {
            let mut paths = direct::nic_loopback(dev, p.shape.layout)?;
            let (c, w) = (&mut paths.clients, &mut paths.workers);
            if per_role {
                threads::loopback(c, w, p).map_err(failed)
            } else {
                run::loopback(c, w, p).map_err(failed)
            }
        }
        _ => {
            let mut paths = verbs::loopback(dev, k, p.shape.layout)?;
            let (c, w) = (&mut paths.clients, &mut paths.workers);
            if per_role {
                threads::loopback(c, w, p).map_err(failed)
            } else {
                run::loopback(c, w, p).map_err(failed)
            }
        }
    }
}

/// How this process steps its clients and workers, in words (the JSON's `params.threads`).
pub(in crate::probe) fn threads_said(t: KvThreads, role: &Role) -> &'static str {
    match (t, role) {
        (KvThreads::One, Role::Loopback) => "one: every client and worker stepped in turn",
        (KvThreads::One, Role::Client(_)) => "one in this process: its clients stepped in turn",
        (KvThreads::One, Role::Server(_)) => "one in this process: its workers stepped in turn",
        (KvThreads::PerRole, Role::Loopback) => "a thread per client and per worker, not pinned",
        (KvThreads::PerRole, Role::Client(_)) => "a thread per client in this process, not pinned",
        (KvThreads::PerRole, Role::Server(_)) => "a thread per worker in this process, not pinned",
    }
}

/// The report before the runs: what runs, on what, and this side's role.
fn new_report(
    plan: &Plan,
    kp: &KvPlan,
    dev: &Dev,
    kinds: &[BackendKind],
    env: crate::report::env::Fingerprint,
    cal: crate::clock::Calibration,
    role: Role,
) -> Report {
    let mut warnings = env.warnings();
    if kp.threads == KvThreads::PerRole {
        let sides = Sides::of(plan);
        let n = u64::from(kp.workers) * u64::from(sides.server) + u64::from(kp.clients) * u64::from(sides.clients);
        let cpus = std::thread::available_parallelism().map_or(1, |c| c.get()) as u64;
        if n > cpus {
            warnings.push(format!(
                "{n} threads (one per client and worker) on {cpus} CPUs: they take turns, so the figures include their scheduling (--threads one steps them all in one thread)"
            ));
        }
    }
    Report {
        plan: plan.clone(),
        role: role.clone(),
        device: dev.name(),
        provider: dev.provider(),
        is_model: dev.is_model(),
        backends: kinds.to_vec(),
        warnings,
        env,
        clock: cal,
        params: json!({ "scenario": "kv", "workers": kp.workers, "clients": kp.clients, "window": kp.window,
            "postlist": kp.postlist, "batching": kp.batching, "update_pct": kp.update_pct, "value_size_bytes": kp.value_size,
            "keys": kp.keys, "requests_per_client": kp.requests, "key_distribution": match kp.zipf {
                None => "uniform (HERD's draws over its permutation)".to_string(),
                Some(t) => format!("zipf {t} (rand_distr over HERD's generator, ranks through its permutation)"),
            }, "zipf_theta": kp.zipf,
            "requests": "inline RDMA WRITE over UC", "responses": "inline SEND_WITH_IMM over UD",
            "threads": threads_said(kp.threads, &role),
            "peer": match &role { Role::Loopback => None, Role::Client(p) | Role::Server(p) => Some(p.clone()) },
            "rows_from": matches!(role, Role::Server(_)).then_some("client") }),
        runs: Runs::Kv(Vec::new()),
        intervals: Vec::new(),
        short_runs: Vec::new(),
        end_error: None,
        counters: None,
        regions: Vec::new(),
    }
}

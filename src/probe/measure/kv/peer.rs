//! A key-value run between two processes: the server (its workers, their stores and the request
//! region) and the clients, each side stepped by one thread of its own process. Over the
//! out-of-band channel: the parameters agreed once; then per backend the clients' QP addresses,
//! the server's (its UC QPs, the region, the workers' UD QPs), a barrier, the run; the clients'
//! end, the workers' counts (which the clients reconcile with theirs), and the clients' result,
//! which the server prints as its row.

use super::run_error;
use crate::backend::kv::{direct, verbs, ClientAddr, ClientLink, ServerAddr, WorkerLink};
use crate::backend::setup::Dev;
use crate::backend::BackendKind;
use crate::oob::{Done, Hello, Rendezvous};
use crate::probe::measure::session;
use crate::probe::{KvPlan, KvThreads, ProbeError};
use crate::scenario::kv::engine::WorkerStats;
use crate::scenario::kv::result::KvResult;
use crate::scenario::kv::run::{self, KvParams, KvRunError};
use crate::scenario::kv::threads;
use std::time::Duration;

/// The workers' counts, sent by the server when the clients are done.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Workers {
    kv_workers: Vec<WorkerStats>,
}

/// The parameters both sides must share: the workload's shape and the backends run.
pub(super) fn hello(kp: &KvPlan, kinds: &[BackendKind]) -> Hello {
    let kinds = kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(",");
    Hello::new(
        [
            ("scenario", "kv".to_string()),
            ("workers", kp.workers.to_string()),
            ("clients", kp.clients.to_string()),
            ("window", kp.window.to_string()),
            ("kv_postlist", kp.postlist.to_string()),
            ("kv_batching", kp.batching.to_string()),
            ("update", kp.update_pct.to_string()),
            ("value_size", kp.value_size.to_string()),
            ("keys", kp.keys.to_string()),
            ("requests", kp.requests.to_string()),
            ("zipf", kp.zipf.map_or("uniform".into(), |t| t.to_string())),
            ("backends", kinds),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
    )
}

/// A message the peer sent in the middle of a run (its failure, most likely) as the run's error.
fn heard(peer: &mut dyn Rendezvous) -> KvRunError {
    match session::take_checked::<serde_json::Value>(peer) {
        Err(ProbeError::Peer(e)) => KvRunError::Peer(e),
        Err(e) => KvRunError::Peer(e.to_string()),
        Ok(v) => KvRunError::Peer(format!(
            "sent a message in the middle of the run: {}",
            crate::oob::escape(&v.to_string())
        )),
    }
}

/// One backend's run as the clients' side: its ends made, addresses exchanged, the clients run,
/// the workers' counts heard, the result made with `cal` and sent to the server. A failure here
/// is told to the server.
pub(super) fn client_one(
    peer: &mut dyn Rendezvous,
    dev: &Dev,
    k: BackendKind,
    p: &KvParams,
    cal: &crate::clock::Calibration,
) -> Result<KvResult, ProbeError> {
    let l = p.shape.layout;
    let r = match (k, dev) {
        (BackendKind::Direct, Dev::Model(m)) => {
            direct::model_clients(&m.model, l)
                .map_err(ProbeError::from)
                .and_then(|(mut cs, a)| {
                    let s = addresses(peer, &a)?;
                    direct::connect_model_clients(&mut cs, l, &s)?;
                    clients(peer, &mut cs, k, p)
                })
        }
        (BackendKind::Direct, _) => direct::nic_clients(dev, l)
            .map_err(ProbeError::from)
            .and_then(|(mut cs, a)| {
                let s = addresses(peer, &a)?;
                direct::connect_nic_clients(dev, &mut cs, l, &s)?;
                clients(peer, &mut cs, k, p)
            }),
        _ => verbs::clients(dev, k, l)
            .map_err(ProbeError::from)
            .and_then(|(mut cs, a)| {
                let s = addresses(peer, &a)?;
                verbs::connect_clients(dev, &mut cs, l, &s)?;
                clients(peer, &mut cs, k, p)
            }),
    };
    let r = r.map_err(|e| session::fail(peer, e))?;
    let result = KvResult::of(k.as_str(), p, &r, cal);
    peer.put(&result)?;
    Ok(result)
}

/// The clients' addresses sent, the server's heard.
fn addresses(peer: &mut dyn Rendezvous, mine: &[ClientAddr]) -> Result<ServerAddr, ProbeError> {
    peer.put(&mine)?;
    session::take_checked(peer)
}

/// The clients run against the server's workers: the barrier, the run (the server heard between
/// turns: its failure ends it), the end said, the workers' counts heard and reconciled.
fn clients<C: ClientLink + Send>(
    peer: &mut dyn Rendezvous,
    links: &mut [C],
    k: BackendKind,
    p: &KvParams,
) -> Result<run::KvRun, ProbeError> {
    peer.barrier(links.len() as u32)?;
    let cs = {
        let mut watch = || {
            if peer.pending() {
                Err(heard(peer))
            } else {
                Ok(false)
            }
        };
        match p.threads {
            KvThreads::One => run::clients_alone(links, p, &mut watch),
            KvThreads::PerRole => threads::clients_alone(links, p, &mut watch),
        }
        .map_err(|e| run_error(k, e))?
    };
    peer.put(&Done { error: None })?;
    let w: Workers = session::take_checked(peer)?;
    if w.kv_workers.len() != p.shape.layout.workers as usize {
        return Err(ProbeError::Invalid(format!(
            "the server sent the counts of {} workers; {} were agreed",
            w.kv_workers.len(),
            p.shape.layout.workers
        )));
    }
    run::finish(&cs, w.kv_workers, p).map_err(|e| run_error(k, e))
}

/// One backend's run as the server's side: the clients' addresses heard, its ends made and
/// theirs sent, the workers run until the clients are done (nothing from them for `idle` is a
/// stall), the workers' counts sent; the clients' result, heard. A failure here is told to the
/// clients.
pub(super) fn server_one(
    peer: &mut dyn Rendezvous,
    dev: &Dev,
    k: BackendKind,
    p: &KvParams,
    idle: Duration,
) -> Result<KvResult, ProbeError> {
    let l = p.shape.layout;
    let p = KvParams { stall: idle, ..*p };
    let r = session::take_checked::<Vec<ClientAddr>>(peer).and_then(|a| match (k, dev) {
        (BackendKind::Direct, Dev::Model(m)) => {
            let (mut side, s) = direct::model_server(&m.model, l, &a)?;
            peer.put(&s)?;
            workers(peer, &mut side.workers, k, &p)
        }
        (BackendKind::Direct, _) => {
            let (mut side, s) = direct::nic_server(dev, l, &a)?;
            peer.put(&s)?;
            workers(peer, &mut side.workers, k, &p)
        }
        _ => {
            let (mut side, s) = verbs::server(dev, k, l, &a)?;
            peer.put(&s)?;
            workers(peer, &mut side.workers, k, &p)
        }
    });
    r.map_err(|e| session::fail(peer, e))?;
    let theirs: KvResult = session::take_checked(peer)?;
    if theirs.backend != k.as_str() || theirs.postlist != p.postlist {
        return Err(ProbeError::Invalid(format!(
            "the clients sent the result of backend {} at postlist {}; this run was {} at {}",
            crate::oob::escape(&theirs.backend),
            theirs.postlist,
            k.as_str(),
            p.postlist
        )));
    }
    Ok(theirs)
}

/// The workers run for the clients: their stores populated, the barrier, the run until the
/// clients say they are done (their failure ends it), the workers' counts sent.
fn workers<W: WorkerLink + Send>(
    peer: &mut dyn Rendezvous,
    links: &mut [W],
    k: BackendKind,
    p: &KvParams,
) -> Result<(), ProbeError> {
    let ws = run::new_workers(links.len(), p).map_err(|e| run_error(k, e))?;
    peer.barrier(p.shape.layout.clients)?;
    let stats = {
        let mut watch = || {
            if !peer.pending() {
                return Ok(false);
            }
            match peer.take::<Done>() {
                Ok(Done { error: None }) => Ok(true),
                Ok(Done { error: Some(e) }) => Err(KvRunError::Peer(crate::oob::escape(&e))),
                Err(e) => Err(KvRunError::Peer(e.to_string())),
            }
        };
        match p.threads {
            KvThreads::One => run::workers_alone(links, ws, p, &mut watch),
            KvThreads::PerRole => threads::workers_alone(links, ws, p, &mut watch),
        }
        .map_err(|e| run_error(k, e))?
    };
    peer.put(&Workers { kv_workers: stats })?;
    Ok(())
}

//! What every measurement sets up before it runs: the device, the backends, the doorbell mode,
//! the clock and the environment fingerprint; and the connection to the peer, with the steps of
//! the exchange every client/server scenario shares.

use crate::backend::setup::{Dev, Mlx5Env};
use crate::backend::BackendKind;
use crate::clock::Calibration;
use crate::mlx5::sq::DbMode;
use crate::model::ModelConfig;
use crate::oob::{Done, Peer, QpInfo, Rendezvous};
use crate::probe::{Backends, Observer, PeerSpec, Plan, ProbeError};
use crate::report::env::Fingerprint;

/// The TSC calibration window every measurement uses, ns.
pub const CALIBRATION_NS: u64 = 200_000_000;

/// Opens the plan's device (model0 configured as `model`); a note (the fall-back to model0)
/// goes to the observer.
pub fn open_device(plan: &Plan, model: ModelConfig, obs: &mut dyn Observer) -> Result<Dev, ProbeError> {
    let d = &plan.device;
    let (mut dev, note) = Dev::open(d.name.as_deref(), d.port, d.gid_index, model)?;
    if let Some(n) = note {
        obs.note(&n);
    }
    if plan.path != crate::backend::setup::PathOpts::default() && dev.is_model() {
        obs.note(
            "model0: -m, -S, -T, -u, --retry_count and --pkey_index set the verbs QPs (verbs and wr backends, \
             through libmlx5); model0's own direct QPs have no path",
        );
    }
    dev.opts_mut().path = plan.path;
    if plan.huge_pages && dev.is_model() {
        return Err(ProbeError::Usage(
            "--use-hugepages: model0 keeps registered memory in its shared-memory files (it maps them over the \
             buffers, as a NIC would pin them), so no buffer can stay on huge pages there; use it on a NIC or rxe"
                .into(),
        ));
    }
    dev.opts_mut().huge_pages = plan.huge_pages;
    if plan.rdma_cm && dev.is_model() {
        return Err(ProbeError::Usage(format!(
            "-R/--rdma-cm: {} has no IP address for the connection manager to resolve; give an RDMA device with \
             an IP address (-d)",
            dev.name()
        )));
    }
    let op = match &plan.scenario {
        crate::probe::Scenario::Lat(l) => Some(l.op),
        crate::probe::Scenario::Bw(b) => Some(b.op),
        crate::probe::Scenario::PostCost(_) | crate::probe::Scenario::Kv(_) => None,
    };
    if let Some(op) = op.filter(|op| !plan.transport.allows(*op)) {
        return Err(ProbeError::Usage(format!(
            "-c {}: the transport carries {}, not {}",
            plan.transport.as_str(),
            if plan.transport == crate::backend::Transport::Ud {
                "SEND (and SEND with immediate)"
            } else {
                "SEND and WRITE (and their immediates)"
            },
            op.as_str()
        )));
    }
    dev.opts_mut().transport = plan.transport;
    Ok(dev)
}

/// The rows of a run: each backend polling, then with -e each verbs backend again, waiting for
/// completion events. Refused (exit 2) when -e finds no verbs backend, and between two
/// processes on model0, which raises a completion event in the process that executes the WQE.
pub fn event_rows(
    dev: &Dev,
    kinds: &[BackendKind],
    events: bool,
    network: bool,
) -> Result<Vec<(BackendKind, bool)>, ProbeError> {
    let rows: Vec<(BackendKind, bool)> = kinds
        .iter()
        .map(|k| (*k, false))
        .chain(
            kinds
                .iter()
                .filter(|k| events && **k != BackendKind::Direct)
                .map(|k| (*k, true)),
        )
        .collect();
    if events && rows.len() == kinds.len() {
        return Err(ProbeError::Usage(format!(
            "-e/--events: no verbs or wr backend runs on {} (completion events are libibverbs' completion channel)",
            dev.name()
        )));
    }
    if events && network && dev.is_model() {
        return Err(ProbeError::Usage(
            "-e/--events between two processes on model0: the model raises a completion event in the process that \
             executes the WQE, and the peer's completion channel is in the other process (its events would be lost \
             and every wait would end at its time slice); use --loopback, or a NIC or rxe"
                .into(),
        ));
    }
    Ok(rows)
}

/// The backends the plan asks for, each checked against the device.
pub fn backends(dev: &Dev, sel: Backends) -> Result<Vec<BackendKind>, ProbeError> {
    let kinds = match sel {
        Backends::All => dev.backends(),
        Backends::Only(k) => vec![k],
        Backends::Perftest => [BackendKind::Wr, BackendKind::Verbs, BackendKind::Direct]
            .into_iter()
            .find(|k| dev.supports(*k).is_ok())
            .into_iter()
            .collect(),
    };
    if kinds.is_empty() {
        return Err(ProbeError::Usage(format!(
            "-c {}: no backend that runs it on {}",
            dev.transport().as_str(),
            dev.name()
        )));
    }
    for k in &kinds {
        dev.supports(*k).map_err(crate::backend::setup::SetupError::from)?;
    }
    Ok(kinds)
}

/// UD's limits, refused before anything runs (a bandwidth run on the network, `-m`). With `-a`
/// (`all`) the sizes stop at the MTU, and a `-s` above it is the MTU, as perftest's: the note
/// returned says so.
pub fn ud_checks(dev: &Dev, plan: &Plan, sizes: &mut Vec<u32>, all: bool) -> Result<Option<String>, ProbeError> {
    if dev.transport() != crate::backend::Transport::Ud {
        return Ok(None);
    }
    if plan.peer != PeerSpec::Loopback && matches!(plan.scenario, crate::probe::Scenario::Bw(_)) {
        return Err(ProbeError::Usage(
            "bw -c UD runs with --loopback only in this version (the receiver cannot know how many of the datagrams \
             it did not drop will come)"
                .into(),
        ));
    }
    if let Some(m) = plan.path.mtu {
        return Err(ProbeError::Usage(format!(
            "-m {m}: a UD QP has no path MTU (its datagrams are up to the port's MTU, {} bytes on {})",
            ud_mtu(dev),
            dev.name()
        )));
    }
    let mtu = ud_mtu(dev);
    if all && sizes.iter().any(|s| *s > mtu) {
        sizes.retain(|s| *s <= mtu);
        return Ok(Some(format!(
            "-a with -c UD: sizes up to the port's MTU, {mtu} bytes on {} (a UD message is at most that)",
            dev.name()
        )));
    }
    if let Some(&s) = sizes.iter().find(|s| **s > mtu) {
        // perftest's habit: a UD size above the MTU is the MTU (it says "Changing to MTU")
        for x in sizes.iter_mut() {
            *x = (*x).min(mtu);
        }
        sizes.dedup();
        return Ok(Some(format!(
            "-c UD: messages of {mtu} bytes instead of {s}, the port's MTU on {} (a UD message is at most that; \
             perftest clamps so its -a and its default size, and refuses a -s above it)",
            dev.name()
        )));
    }
    Ok(None)
}

/// The port's active MTU on `dev` (the JSON's `port_active_mtu_bytes`; none when unknown).
pub fn active_mtu(dev: &Dev) -> Option<u32> {
    Some(ud_mtu(dev)).filter(|m| *m != u32::MAX)
}

/// The largest UD message on `dev`: its port's active MTU.
pub fn ud_mtu(dev: &Dev) -> u32 {
    match (dev.verbs_parts(), dev.is_model()) {
        (Some((_, port, _)), _) => port.active_mtu,
        (None, true) => crate::model::transport::UD_MTU as u32,
        (None, false) => u32::MAX,
    }
}

/// The direct path's doorbell mode: as asked, unless `MLX5_SHUT_UP_BF` says the doorbell only
/// (as libmlx5 then rings).
pub fn direct_mode(asked: DbMode) -> DbMode {
    Mlx5Env::get().direct_mode(asked)
}

/// Calibrates the TSC and takes the environment's fingerprint (with the port's attributes when
/// `port`).
pub fn calibrate(dev: &Dev, port: bool) -> Result<(Calibration, Fingerprint), ProbeError> {
    let cal = Calibration::run(CALIBRATION_NS).map_err(|e| ProbeError::Clock(e.to_string()))?;
    let mut fp = Fingerprint::collect(&cal, &dev.name(), &dev.provider(), dev.firmware(), dev.is_model());
    fp.provider_library = dev.provider_library();
    if let (true, Dev::Verbs { port, .. }) = (port, dev) {
        fp.port = serde_json::to_value(port).ok();
    }
    Ok((cal, fp))
}

/// The TCP peer the plan names (none in loopback): a client connects, a server waits (and says
/// so through the observer).
pub fn tcp_peer(plan: &Plan, obs: &mut dyn Observer) -> Result<Option<Peer>, ProbeError> {
    Ok(match &plan.peer {
        PeerSpec::Loopback => None,
        PeerSpec::Connect { host, port } => {
            let until = clock_utc(std::time::SystemTime::now() + plan.oob_timeout);
            let secs = plan.oob_timeout.as_secs();
            let mut say = |e: &std::io::Error| {
                let what = match e.kind() {
                    std::io::ErrorKind::ConnectionRefused => {
                        format!("nothing listens at {host}:{port} (connection refused)")
                    }
                    _ => format!("cannot reach {host}:{port}: {e}"),
                };
                obs.note(&format!(
                    "{what}; retrying until {until} (--oob-timeout {secs} s: the server may still be starting; Ctrl-C to stop)"
                ));
            };
            Some(Peer::connect_saying(host, *port, plan.oob_timeout, &mut say)?)
        }
        PeerSpec::Listen { bind, port } => {
            let l = crate::oob::Listener::bind(bind, *port)?;
            obs.waiting(l.local_addr(), plan.oob_timeout.as_secs());
            Some(l.accept(plan.oob_timeout)?)
        }
    })
}

/// A time of day as `HH:MM:SS UTC` (the deadline of a wait, said to the user).
fn clock_utc(t: std::time::SystemTime) -> String {
    let s = t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()) % 86_400;
    format!("{:02}:{:02}:{:02} UTC", s / 3600, s / 60 % 60, s % 60)
}

/// The hello of a client/server scenario: its name, operation and sizes, its own parameters
/// (`own`), then what every scenario shares ([`end_params`]).
#[allow(clippy::too_many_arguments)]
pub fn hello<const N: usize>(
    scenario: &str,
    op: crate::backend::OpKind,
    sizes: &[u32],
    own: [(&str, String); N],
    kinds: &[BackendKind],
    mode: DbMode,
    inline_limit: u32,
    buf_len: usize,
) -> crate::oob::Hello {
    let sizes = sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(",");
    crate::oob::Hello::new(
        [
            ("scenario", scenario.to_string()),
            ("op", op.as_str().to_string()),
            ("sizes", sizes),
        ]
        .into_iter()
        .chain(own)
        .map(|(k, v)| (k.to_string(), v))
        .chain(end_params(kinds, mode, inline_limit, buf_len))
        .collect(),
    )
}

/// The connection's parameters both ends must share, into `hello`: the transport, -R and the
/// path MTU.
pub fn connection_params(hello: &mut crate::oob::Hello, plan: &Plan) {
    hello.params.insert("transport".into(), plan.transport.as_str().into());
    hello.params.insert("rdma_cm".into(), plan.rdma_cm.to_string());
    hello.params.insert(
        "path_mtu".into(),
        plan.path.mtu.map_or("active".into(), |m| m.to_string()),
    );
}

/// The hello parameters every client/server scenario shares: the backends and what each end's
/// QPs and buffers are made with.
pub fn end_params(kinds: &[BackendKind], mode: DbMode, inline_limit: u32, buf_len: usize) -> [(String, String); 4] {
    [
        (
            "backends".into(),
            kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(","),
        ),
        ("db_mode".into(), mode.as_str().to_string()),
        ("inline_limit".into(), inline_limit.to_string()),
        ("buffer".into(), buf_len.to_string()),
    ]
}

/// The end of a client/server run: each side says it is done (or why it failed) and hears the
/// other, within the stall deadline and the out-of-band timeout.
pub fn end(peer: &mut dyn Rendezvous, plan: &Plan, hold: bool) -> Result<(), ProbeError> {
    // with `hold` (--run-infinitely, which a stop ends): a stop asked now still hears the peer
    let _hold = hold.then(crate::signals::hold);
    peer.set_timeout(plan.stall + plan.oob_timeout)?;
    let theirs: Done = peer.exchange(&Done { error: None })?;
    match theirs.error {
        Some(e) => Err(ProbeError::Peer(crate::oob::escape(&e))),
        None => Ok(()),
    }
}

/// One QP of a client/server run for the JSON's `qps` and the header: this side's address and
/// the peer's as exchanged (perftest's "local address" and "remote address" lines).
/// `backend` is the row's label (`verbs-e` for a `-e` row). The PSN, LID and GID are those
/// exchanged, which the QPs were connected with, unless `not_used` says why not (-R: the
/// connection manager chose them; model0's direct QPs have none): then they are left out and
/// the reason is given instead (`psn_lid_gid`).
pub fn qp_addrs_json(backend: &str, local: &QpInfo, remote: &QpInfo, not_used: Option<&str>) -> serde_json::Value {
    let side = |q: &QpInfo| match not_used {
        None => serde_json::json!({
            "qpn": q.qpn, "psn": q.psn, "lid": q.lid, "gid": std::net::Ipv6Addr::from(q.gid).to_string(),
            "rkey": q.rkey, "vaddr": q.addr, "len": q.len,
        }),
        Some(_) => serde_json::json!({ "qpn": q.qpn, "rkey": q.rkey, "vaddr": q.addr, "len": q.len }),
    };
    let mut v = serde_json::json!({ "backend": backend, "local": side(local), "remote": side(remote) });
    if let Some(why) = not_used {
        v["psn_lid_gid"] = why.into();
    }
    v
}

/// Why a QP's exchanged PSN, LID and GID are not the ones it runs with (see [`qp_addrs_json`]).
pub fn psn_lid_gid_unused(cm: bool, dev: &Dev, kind: BackendKind) -> Option<&'static str> {
    if cm {
        Some("the connection manager's (-R): params.rdma_cm")
    } else if dev.is_model() && kind == BackendKind::Direct {
        Some("none: model0's direct QPs have no PSN, LID or GID")
    } else {
        None
    }
}

/// One QP pair of a run in this process for the JSON's `qps` and the header: both ends' QP
/// numbers (the requester's first); `backend` the row's label.
pub fn qp_pair_json(backend: &str, (a, b): (u32, u32)) -> serde_json::Value {
    serde_json::json!({ "backend": backend, "qpns": [a, b] })
}

/// Sends this side's QP address and receives the peer's; a peer that sends back ours (a QP would
/// be connected to itself, and measure nothing of the wire) is refused.
pub fn exchange_qp(peer: &mut dyn Rendezvous, mine: &QpInfo) -> Result<QpInfo, ProbeError> {
    let theirs: QpInfo = peer.exchange(mine)?;
    if theirs == *mine {
        return Err(ProbeError::Invalid(format!(
            "the peer {} sent back this side's own QP (QP number {:#x}): refusing to connect a QP to itself",
            peer.peer_name(),
            mine.qpn
        )));
    }
    Ok(theirs)
}

/// Sends `mine` and receives the peer's message of the same kind; the peer's failure report
/// (`Done` with an error, sent instead) is returned as the peer's failure, and an end (`Done`
/// without one) or any other message as a protocol error.
pub fn exchange_checked<T: serde::Serialize + serde::de::DeserializeOwned>(
    peer: &mut dyn Rendezvous,
    mine: &T,
) -> Result<T, ProbeError> {
    peer.put(mine)?;
    take_checked(peer)
}

/// Receives the peer's next message, of type `T`; its failure report, an end, or another
/// message are told apart as [`exchange_checked`] does.
pub fn take_checked<T: serde::de::DeserializeOwned>(peer: &mut dyn Rendezvous) -> Result<T, ProbeError> {
    let v = peer.recv_value()?;
    if v.get("error").is_some() {
        if let Ok(Done { error }) = serde_json::from_value::<Done>(v.clone()) {
            return Err(match error {
                Some(e) => ProbeError::Peer(crate::oob::escape(&e)),
                None => ProbeError::Invalid(format!("the peer {} ended the run out of step", peer.peer_name())),
            });
        }
    }
    serde_json::from_value(v.clone()).map_err(|e| {
        ProbeError::Oob(crate::oob::OobError::Protocol {
            peer: peer.peer_name(),
            why: format!(
                "sent an unexpected message ({e}): {}",
                crate::oob::escape(&v.to_string())
            ),
        })
    })
}

/// Tells the peer (best effort) that this side failed with `e`, and returns `e`.
pub fn fail(peer: &mut dyn Rendezvous, e: ProbeError) -> ProbeError {
    let _ = peer.put(&Done {
        error: Some(e.to_string()),
    });
    e
}

/// The ordered sizes' buffer: room for two messages of the largest, at least 64 B each, in
/// whole pages.
pub fn buffer_len(sizes: &[u32]) -> usize {
    let max = *sizes.iter().max().unwrap_or(&8) as usize;
    // each half holds a message and a UD receive's 40-byte GRH area before it
    (2 * (max.max(64) + 64)).next_multiple_of(4096)
}

/// Bytes a latency run may need per iteration and backend: its samples kept, the round trip,
/// post and wait timestamps and the post-to-post period (4 x 8, reserved up front); a block's
/// own samples before they join them (4 x 8 for one backend's block: the whole run with
/// `--blocks 1`); and while one backend's result is made, its figures, post and wait times in
/// ns and the sorted copy of its periods (4 x 8). Over-counted with several backends (the last
/// two are one backend's at a time).
pub const LAT_SAMPLE_BYTES: u64 = 96;
/// Bytes a bandwidth run keeps per message (its post and completion times).
pub const BW_SAMPLE_BYTES: u64 = 16;
/// The fastest a ping-pong iteration (a round trip) can be, for the memory a `-D` run may need
/// (ns; model0 in one process takes about 400).
pub const FASTEST_ITERATION_NS: u64 = 200;

/// The memory this process can still use, in bytes: the least of the machine's available memory
/// (`MemAvailable`), what its cgroup allows beyond what it holds (`memory.max` −
/// `memory.current`, cgroup v2) and its address-space limit beyond what it maps (`RLIMIT_AS`);
/// `None` when none can be read.
pub fn memory_budget() -> Option<u64> {
    let mut best: Option<u64> = None;
    let mut take = |v: u64| best = Some(best.map_or(v, |b: u64| b.min(v)));
    let kib = |text: &str, key: &str| -> Option<u64> {
        text.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|v| v.saturating_mul(1024))
    };
    if let Some(v) = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| kib(&t, "MemAvailable:"))
    {
        take(v);
    }
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").ok();
    if let Some(path) = cgroup
        .as_deref()
        .and_then(|t| t.lines().find_map(|l| l.strip_prefix("0::")))
    {
        let dir = std::path::Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'));
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        if let (Some(max), Some(cur)) = (read("memory.max"), read("memory.current")) {
            take(max.saturating_sub(cur));
        }
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct, which lives on this stack frame.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) };
    if rc == 0 && lim.rlim_cur != libc::RLIM_INFINITY {
        let mapped = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|t| kib(&t, "VmSize:"))
            .unwrap_or(0);
        take(lim.rlim_cur.saturating_sub(mapped));
    }
    best
}

/// Memory kept out of the samples' budget for everything else a run maps, bytes.
pub const MEMORY_RESERVE: u64 = 256 << 20;

/// Refuses, before the run, a run whose samples would not fit in memory: `need` bytes, named
/// by `what` (the flags that ask for them).
pub fn check_memory(need: u64, what: impl FnOnce() -> String) -> Result<(), ProbeError> {
    // what the run maps besides its samples (threads' stacks, libmlx5, model0's objects, the
    // results' copies) is not known here: the samples may take half of what is left, less 256 MiB
    let budget = memory_budget().map(|b| b.saturating_sub(MEMORY_RESERVE) / 2);
    match budget {
        Some(budget) if need > budget => Err(ProbeError::Usage(format!(
            "{}: the run needs {} MiB, and {} MiB are available to it (half of what this process may still use, less 256 MiB: MemAvailable, its cgroup's memory.max, RLIMIT_AS)",
            what(),
            need.div_ceil(1 << 20),
            budget >> 20
        ))),
        _ => Ok(()),
    }
}

/// Open files model0 keeps per QP pair of a bandwidth run: two QPs, two CQs and two buffers,
/// a shared-memory file each (measured: `-q 150` runs with 1024 open files, `-q 200` does not).
pub const MODEL_FILES_PER_PAIR: u64 = 6;

/// Open files of a run besides its QP pairs (the model's directory, libraries, the output).
const FILES_BASE: u64 = 64;

/// On model0, which keeps an open file per object: the files `pairs` QP pairs need, against the
/// open-files limit (RLIMIT_NOFILE). The soft limit is raised up to the hard one when that is
/// enough (the note returned says so); a run the hard limit cannot hold is refused before any QP
/// is made (exit 2, naming `what()`). Nothing on a NIC, where QPs are not files.
pub fn check_open_files(dev: &Dev, pairs: u64, what: impl FnOnce() -> String) -> Result<Option<String>, ProbeError> {
    let files = pairs.saturating_mul(MODEL_FILES_PER_PAIR);
    check_model_files(
        dev,
        files,
        || {
            format!(
                "{}: model0 keeps {MODEL_FILES_PER_PAIR} open files per QP pair (its QPs, CQs and buffers are \
             shared-memory files)",
                what()
            )
        },
        "lower -q or --threads",
    )
}

/// As [`check_open_files`], for `files` model0 objects (a QP, a CQ or a buffer each); `what()`
/// says whose and `remedy` what to lower.
pub fn check_model_files(
    dev: &Dev,
    files: u64,
    what: impl FnOnce() -> String,
    remedy: &str,
) -> Result<Option<String>, ProbeError> {
    if !dev.is_model() {
        return Ok(None);
    }
    let need = files.saturating_add(FILES_BASE);
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct passed, a valid local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 || need <= r.rlim_cur {
        return Ok(None);
    }
    if need > r.rlim_max {
        return Err(ProbeError::Usage(format!(
            "{}, {need} for this run; the open-files limit is {} (ulimit -Hn): {remedy}, or raise the limit",
            what(),
            r.rlim_max
        )));
    }
    let old = r.rlim_cur;
    r.rlim_cur = r.rlim_max;
    // SAFETY: setrlimit reads the struct passed; the soft limit is raised to the hard one, which
    // an unprivileged process may do.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
        return Err(ProbeError::Usage(format!(
            "{}: model0 needs {need} open files for this run; the limit is {old} and could not be raised to {} ({})",
            what(),
            r.rlim_max,
            std::io::Error::last_os_error()
        )));
    }
    Ok(Some(format!(
        "the open-files limit raised from {old} to {} for this run's {need} (model0 keeps a file per QP, CQ and buffer)",
        r.rlim_cur
    )))
}

/// The set-up with the peer (hello, QP addresses, barrier) as one phase with one deadline: each
/// message still has its own (`--oob-timeout`), and the phase as a whole must end within it too
/// (a peer answering each message just in time cannot stretch the set-up to many times it).
pub struct Phase<'a> {
    inner: &'a mut dyn Rendezvous,
    deadline: std::time::Instant,
    per: std::time::Duration,
}

impl<'a> Phase<'a> {
    /// A phase over `inner` that must end within `limit`.
    pub fn new(inner: &'a mut dyn Rendezvous, limit: std::time::Duration) -> Self {
        Phase {
            inner,
            deadline: std::time::Instant::now() + limit,
            per: limit,
        }
    }
}

impl Rendezvous for Phase<'_> {
    fn send_value(&mut self, msg: serde_json::Value) -> Result<(), crate::oob::OobError> {
        self.inner.send_value(msg)
    }
    fn recv_value(&mut self) -> Result<serde_json::Value, crate::oob::OobError> {
        let (peer, secs) = (self.inner.peer_name(), self.per.as_secs());
        let over = || {
            crate::oob::OobError::Protocol {
            peer: peer.clone(),
            why: format!(
                "the set-up (parameters, QP addresses, barrier) did not end within {secs} s (--oob-timeout): the peer answers too slowly"
            ),
        }
        };
        let left = self.deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(over());
        }
        self.inner.set_timeout(left.min(self.per))?;
        let r = self.inner.recv_value();
        self.inner.set_timeout(self.per)?;
        match r {
            Err(crate::oob::OobError::Timeout { .. }) if std::time::Instant::now() >= self.deadline => Err(over()),
            r => r,
        }
    }
    fn leads(&self) -> bool {
        self.inner.leads()
    }
    fn peer_name(&self) -> String {
        self.inner.peer_name()
    }
    fn set_timeout(&mut self, t: std::time::Duration) -> Result<(), crate::oob::OobError> {
        self.per = t;
        self.inner.set_timeout(t)
    }
    fn pending(&mut self) -> bool {
        self.inner.pending()
    }
    fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        self.inner.peer_addr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oob::Canned;

    #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Word {
        stop: bool,
    }

    /// What the peer sends instead of the awaited message is told apart: its failure report is
    /// its failure, an end out of step and another message are errors, never a default value.
    #[test]
    fn a_checked_exchange_tells_the_peer_s_failure_from_the_message() {
        let mut r = Canned(
            [
                serde_json::json!({"stop": true}),
                serde_json::json!({"error": "out of memory"}),
                serde_json::json!({"error": null}),
                serde_json::json!({"iters": 5}),
            ]
            .into(),
            Vec::new(),
        );
        let mine = Word { stop: false };
        assert_eq!(exchange_checked(&mut r, &mine).unwrap(), Word { stop: true });
        let e = exchange_checked(&mut r, &mine).unwrap_err();
        assert!(matches!(&e, ProbeError::Peer(m) if m == "out of memory"), "{e}");
        let e = exchange_checked(&mut r, &mine).unwrap_err().to_string();
        assert!(e.contains("ended the run out of step"), "{e}");
        let e = exchange_checked(&mut r, &mine).unwrap_err().to_string();
        assert!(e.contains("unexpected message"), "{e}");
        assert_eq!(r.1.len(), 4, "ours was sent every time");
    }
}

//! What to measure: the plan a caller fills in (the command line from its arguments).

use crate::backend::{BackendKind, OpKind};
use crate::mlx5::sq::DbMode;
use std::time::Duration;

/// One measurement: the scenario, the device, the backends, and where the peer is.
#[derive(Debug, Clone)]
pub struct Plan {
    /// What runs.
    pub scenario: Scenario,
    /// The device and port.
    pub device: DeviceSpec,
    /// The post paths.
    pub backends: Backends,
    /// The direct backend's doorbell mode.
    pub db_mode: DbMode,
    /// Where the peer is.
    pub peer: PeerSpec,
    /// How long to wait for the peer to connect or answer out of band.
    pub oob_timeout: Duration,
    /// How long a run may go without progress before it is declared stalled.
    pub stall: Duration,
    /// Where the diagnostics bundle goes: written here always when given (a directory of this
    /// user's that nobody else may write in, or one that does not exist yet: checked before the
    /// run); on a failure without it, into a new private directory under the temporary
    /// directory ([`super::check::diag`]).
    pub diag: Option<std::path::PathBuf>,
    /// The path and QP options of the verbs QPs (-m, -S, -T, -u, --retry_count, --pkey_index).
    pub path: crate::backend::setup::PathOpts,
    /// Buffers on 2 MiB huge pages (perftest's --use_hugepages).
    pub huge_pages: bool,
    /// The QPs' transport (perftest's -c).
    pub transport: crate::backend::Transport,
    /// Client/server: the QPs connected through the RDMA connection manager (perftest's -R).
    pub rdma_cm: bool,
    /// What the peer is: another rdmaprobe, or an unmodified perftest (`--peer perftest`).
    pub peer_tool: PeerTool,
}

/// The program at the other end of a client/server run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PeerTool {
    /// Another rdmaprobe, over rdmaprobe's own exchange.
    #[default]
    Rdmaprobe,
    /// An unmodified perftest (`ib_write_lat` ...), over perftest's exchange and on its
    /// data-path conventions.
    Perftest,
}

impl Plan {
    /// A plan with both ends in this process, on the default device, every backend.
    pub fn loopback(scenario: Scenario) -> Self {
        Plan {
            scenario,
            device: DeviceSpec::default(),
            backends: Backends::All,
            db_mode: DbMode::Bf,
            peer: PeerSpec::Loopback,
            oob_timeout: Duration::from_secs(60),
            stall: Duration::from_secs(10),
            path: Default::default(),
            huge_pages: false,
            transport: Default::default(),
            rdma_cm: false,
            diag: None,
            peer_tool: PeerTool::Rdmaprobe,
        }
    }
}

/// The scenario and its parameters.
#[derive(Debug, Clone)]
pub enum Scenario {
    /// Latency ping-pong.
    Lat(LatPlan),
    /// Bandwidth and message rate.
    Bw(BwPlan),
    /// The cost of the post call alone.
    PostCost(PostCostPlan),
    /// HERD's key-value workload over a MICA store.
    Kv(KvPlan),
}

/// The device (`-d`, `-i`, `-x`).
#[derive(Debug, Clone)]
pub struct DeviceSpec {
    /// Its name; `None`: the first RDMA device, else model0.
    pub name: Option<String>,
    /// The port.
    pub port: u8,
    /// The GID index (RoCE); `None`: the RoCE v2 IPv4-mapped entry.
    pub gid_index: Option<u8>,
}

impl Default for DeviceSpec {
    fn default() -> Self {
        DeviceSpec {
            name: None,
            port: 1,
            gid_index: None,
        }
    }
}

/// Which post paths run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backends {
    /// Every backend the device supports, interleaved.
    All,
    /// One.
    Only(BackendKind),
    /// One, perftest's choice (`--output` with no `--backend`): `wr` (the `ibv_wr_*` API,
    /// perftest's default post path), else `verbs` (`ibv_post_send`), else `direct`, the first
    /// the device runs.
    Perftest,
}

/// Where the peer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerSpec {
    /// Both ends in this process, on two pinned threads.
    Loopback,
    /// This side is the client of a server at `host:port`.
    Connect {
        /// The server.
        host: String,
        /// Its TCP port.
        port: u16,
    },
    /// This side is the server, waiting for a client on `bind:port`.
    Listen {
        /// The address to listen on (`0.0.0.0`: every IPv4 address).
        bind: String,
        /// The TCP port (0: one the system picks, said when waiting).
        port: u16,
    },
}

/// Message sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizes {
    /// One size, in bytes.
    One(u32),
    /// Powers of two from 2 B to 8 MiB.
    All,
}

impl Sizes {
    /// The sizes, in bytes (atomics move 8 whatever was asked).
    pub fn list(self, op: OpKind) -> Vec<u32> {
        match self {
            _ if matches!(op, OpKind::FetchAdd | OpKind::CmpSwap) => vec![8],
            Sizes::All => (1..=23).map(|e| 1u32 << e).collect(),
            Sizes::One(s) => vec![s],
        }
    }
}

/// A latency ping-pong.
#[derive(Debug, Clone)]
pub struct LatPlan {
    /// The operation.
    pub op: OpKind,
    /// The sizes.
    pub sizes: Sizes,
    /// Measured iterations per size and backend.
    pub iters: u64,
    /// Iterations before measuring.
    pub warmup: u64,
    /// Blocks the iterations are split into (the backends alternate between blocks).
    pub blocks: u64,
    /// Run this long per size instead of `iters` (in-process only).
    pub duration: Option<Duration>,
    /// Inline messages up to this size; `None`: the QPs' limit.
    pub inline_size: Option<u32>,
    /// model0 only: the wire delay of every message in each direction, ns.
    pub model_delay_ns: Option<u64>,
    /// Keep one HdrHistogram interval per block and backend ([`super::Report::interval_log`]).
    pub intervals: bool,
    /// Completion events (`-e`): the verbs and wr backends also run with their ends waiting for
    /// completion events, beside the same backends polling (in-process only).
    pub events: bool,
    /// The table says each run's CPU use, the client thread's (perftest's --cpu_util); the JSON
    /// always has it.
    pub cpu_util: bool,
    /// `--anatomy`: the server stamps its turnaround in every iteration, and each round trip is
    /// split into the turnaround and the rest (a second table, `anatomy` in the JSON).
    pub anatomy: bool,
}

impl LatPlan {
    /// `op` at `size` bytes, 1000 iterations in 10 blocks, 100 warm-up.
    pub fn new(op: OpKind, size: u32) -> Self {
        LatPlan {
            op,
            sizes: Sizes::One(size),
            iters: 1000,
            warmup: 100,
            blocks: 10,
            duration: None,
            inline_size: None,
            model_delay_ns: None,
            intervals: false,
            events: false,
            cpu_util: false,
            anatomy: false,
        }
    }
}

/// The most bandwidth threads a run takes (each drives its own QPs, CQs and buffers; more threads
/// than CPUs share them, pinned round-robin).
pub const MAX_THREADS: u64 = 128;

/// A bandwidth run.
#[derive(Debug, Clone)]
pub struct BwPlan {
    /// The operation.
    pub op: OpKind,
    /// The sizes.
    pub sizes: Sizes,
    /// Messages per QP.
    pub iters: u64,
    /// Outstanding operations per QP.
    pub tx_depth: u32,
    /// Receives kept posted per receiving QP of a SEND run (perftest's -r); `None`: the sends in
    /// flight and two batches of reposts (`scenario::bw::recv_depth`), at most 128.
    pub rx_depth: Option<u32>,
    /// Operations per doorbell.
    pub postlist: u32,
    /// A completion every this many operations.
    pub cq_mod: u32,
    /// QPs per thread.
    pub qps: u64,
    /// Threads (1 to [`MAX_THREADS`]).
    pub threads: u64,
    /// Both ends send.
    pub bidirectional: bool,
    /// Inline messages up to this size; `None`: the default inline limit.
    pub inline_size: Option<u32>,
    /// Length of the bandwidth windows.
    pub window: Duration,
    /// In-process: a shorter run is repeated with more messages; client/server: flagged (with
    /// -D or --run-infinitely: the client sizes the runs to it).
    pub min_duration: Duration,
    /// -D: each run lasts at least this long (`min_duration` is it).
    pub duration: Option<Duration>,
    /// Figures in Gb/s instead of MB/s (2^20 bytes) in the table.
    pub gbits: bool,
    /// No perftest peak (perftest's -N).
    pub no_peak: bool,
    /// Run until stopped (SIGINT, SIGTERM), a row per backend every `min_duration` (perftest's
    /// --run_infinitely); one size.
    pub run_infinitely: bool,
    /// -e: beside each verbs backend polling, the same waiting for completion events.
    pub events: bool,
    /// The table says each run's CPU use (perftest's --cpu_util); the JSON always has it.
    pub cpu_util: bool,
}

impl BwPlan {
    /// `op` at `size` bytes: 5000 messages, tx depth 128, postlist 1, a completion every 64, one
    /// thread with one QP, 1 ms windows, 200 ms at least.
    pub fn new(op: OpKind, size: u32) -> Self {
        BwPlan {
            op,
            sizes: Sizes::One(size),
            iters: 5000,
            tx_depth: 128,
            rx_depth: None,
            postlist: 1,
            cq_mod: 64,
            qps: 1,
            threads: 1,
            bidirectional: false,
            inline_size: None,
            window: Duration::from_millis(1),
            min_duration: Duration::from_millis(200),
            duration: None,
            gbits: false,
            no_peak: false,
            run_infinitely: false,
            cpu_util: false,
            events: false,
        }
    }
}

/// HERD's key-value workload (`scenario::kv`): workers with a MICA store each, clients writing
/// requests into the region and checking every response.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KvPlan {
    /// Worker threads of the server (each a store and a UD QP).
    pub workers: u32,
    /// Clients (each a UC QP and a UD QP).
    pub clients: u32,
    /// Requests a client writes before it waits for their responses (HERD's WINDOW_SIZE).
    pub window: u32,
    /// Most requests a worker takes into one batch and one post of responses.
    pub postlist: u32,
    /// PUTs in 100 requests.
    pub update_pct: u32,
    /// Bytes of a value.
    pub value_size: u32,
    /// Keys in each store.
    pub keys: u32,
    /// Requests per client.
    pub requests: u64,
    /// Keys drawn Zipf-distributed with this exponent (0.99 as YCSB); `None`: uniformly, as
    /// HERD.
    pub zipf: Option<f64>,
    /// How the clients and workers are stepped: all by one thread of each process, or a thread
    /// each (as HERD).
    pub threads: KvThreads,
    /// Each backend also at postlist 1 (a post per response), right after its run at
    /// `postlist`: the doorbell batching's gain measured in the same run.
    pub batching: bool,
}

/// How a key-value run's clients and workers are stepped.
pub use crate::scenario::kv::threads::Threads as KvThreads;

impl Default for KvPlan {
    /// rdma_bench's HERD where one machine allows it: 32 B values, a window of 32, postlist 32,
    /// no updates; 2 workers and 2 clients, 1 Mi keys, 100 000 requests per client.
    fn default() -> Self {
        KvPlan {
            workers: 2,
            clients: 2,
            window: 32,
            postlist: 32,
            update_pct: 0,
            value_size: 32,
            keys: 1 << 20,
            requests: 100_000,
            zipf: None,
            threads: KvThreads::PerRole,
            batching: false,
        }
    }
}

/// The cost of posting alone.
#[derive(Debug, Clone)]
pub struct PostCostPlan {
    /// Operations.
    pub ops: Vec<OpKind>,
    /// Message size in bytes.
    pub size: u32,
    /// Timed blocks per configuration.
    pub blocks: u64,
    /// Postlists (WQEs per doorbell).
    pub postlists: Vec<u32>,
    /// A completion every this many WQEs, besides every WQE.
    pub cq_mod: u32,
}

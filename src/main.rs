//! The rdmaprobe command line.

use anyhow::Result;
use clap::builder::TypedValueParser as _;
use clap::{Parser, Subcommand};
use rdmaprobe::backend::{BackendKind, OpKind};
use rdmaprobe::mlx5::sq::DbMode;
use rdmaprobe::probe::suite::matrix;
use rdmaprobe::probe::{
    self, Backends, BwPlan, DeviceSpec, LatPlan, PeerSpec, Plan, PostCostPlan, ProbeError, Scenario, Sizes, SuitePlan,
};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "rdmaprobe",
    version,
    about = "RDMA performance probe: verbs, ibv_wr_* and direct mlx5 post paths on one TSC clock"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List RDMA devices and their ports, like ibv_devinfo, then the built-in model0. Exit 0 when
    /// a hardware device exists, 3 when none does (with the reason and what to do), 1 on error.
    Devices {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// How many GID table entries to show per port.
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
        gids: u32,
    },
    /// Latency ping-pong (perftest's ib_*_lat): write and send report one-way latency (half the
    /// round trip), read and atomic the round trip. Runs both ends in this process (--loopback).
    Lat(LatArgs),
    /// Bandwidth and message rate (perftest's ib_*_bw): tx depth, postlist, completion every N,
    /// QPs and threads; average, peak and minimum-window bandwidth. Both ends in this process
    /// (--loopback).
    Bw(BwArgs),
    /// The cost of posting alone, per backend (and per doorbell mode on the direct path):
    /// cycles and ns per WQE for each postlist, inline or not, a completion every WQE or every N.
    PostCost(PostCostArgs),
    /// The standard matrix in one run: latency (send, write, read, atomic), bandwidth (write,
    /// send) and post cost, on every backend the device runs, backends interleaved; writes
    /// results.json and an HdrHistogram interval log into --out and prints the driver's overhead
    /// (verbs - direct, wr - direct) per operation and size.
    Suite(SuiteArgs),
    /// Compare result files: `compare BASE NEW`, or several process runs per side with
    /// `--base F1 F2 F3 --new G1 G2 G3`. Per matched run and metric: the change, its 95 %
    /// interval (hierarchical bootstrap: runs, then blocks within runs), the p-value adjusted
    /// over all rows (Holm), and a verdict. Exit 0: no regression; 1: regression; 2: the inputs
    /// cannot be compared.
    Compare(CompareArgs),
    /// Plots (SVG) and report.html of a result file: latency percentile spectrum and CDF,
    /// latency versus size, bandwidth versus size, one line per backend. Exit 2 when the file
    /// cannot be read as an rdmaprobe result.
    Plot(PlotArgs),
    /// Check the host and the device for what makes RDMA slow or fail: CPU governor and idle
    /// states, NUMA, hugepages, memlock, THP, irqbalance, clock, hypervisor, IOMMU, PCIe link,
    /// port state, MTU, RoCE v2 GID, PFC/ECN, firewall on UDP 4791, driver. Each with its status
    /// (pass, warn, fail, unknown, n/a), evidence and fix. Exit 0 when nothing fails, 1 when
    /// something does.
    Doctor {
        /// Device (default: the first RDMA device, else model0).
        #[arg(short = 'd', long = "ib-dev")]
        device: Option<String>,
        /// Port.
        #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..))]
        port: u8,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The connectivity ladder: layer 1 the device (port ACTIVE, a usable GID), layer 2 the
    /// connection (the peer reachable out of band, QPs to RTS, a 1-byte SEND and WRITE
    /// completing), layer 3 performance (latency and bandwidth against --max-lat-ns, --min-bw
    /// or a --baseline result). Names the first failing layer and its likely cause. Exit 0: all
    /// pass; 11, 12, 13: layer 1, 2, 3 failed; 2: bad arguments.
    Ping(PingArgs),
    /// Aggregate a fleet acceptance run (harness/fleet/playbook.yml's results directory) into
    /// one verdict: per node and per pair, pass or fail per layer, latency and bandwidth against
    /// the fleet's median and median absolute deviation, outliers flagged with their evidence.
    /// Writes fleet-report.json and fleet-report.html into the directory (or --json, --html).
    /// Exit 0: no node failed; 1: nodes failed, or planned pairs left no result (listed); 2: the
    /// directory cannot be read.
    FleetReport(FleetReportArgs),
    /// Calibrate the TSC and measure the cost of an empty timed region.
    Clock {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Calibration window in milliseconds (at least 100).
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(100..=10_000))]
        window_ms: u64,
    },
}

#[derive(clap::Args, Debug)]
struct FleetReportArgs {
    /// The results directory of a fleet run (holds fleet.json).
    dir: std::path::PathBuf,
    /// Write the JSON report here (default DIR/fleet-report.json).
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Write the HTML page here (default DIR/fleet-report.html).
    #[arg(long)]
    html: Option<std::path::PathBuf>,
    /// An outlier is worse than the fleet's median by more than this many robust standard
    /// deviations (1.4826 x the median absolute deviation)...
    #[arg(long, default_value_t = 3.5, value_parser = positive_f64)]
    mad_k: f64,
    /// ...and by more than this many percent of the median.
    #[arg(long, default_value_t = 20.0, value_parser = positive_f64)]
    min_deviation_pct: f64,
}

fn positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("'{s}' is not a number >= 0")),
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
enum BackendArg {
    Verbs,
    Wr,
    Direct,
    All,
}

/// Which device and port a scenario runs on (`-d`, `-i`, `-x`, as perftest).
#[derive(clap::Args, Debug)]
struct DevArgs {
    /// Device (default: the first RDMA device, else model0).
    #[arg(short = 'd', long = "ib-dev")]
    device: Option<String>,
    /// Port.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..))]
    port: u8,
    /// GID index (RoCE; default: the RoCE v2 IPv4-mapped entry).
    #[arg(short = 'x', long = "gid-index")]
    gid: Option<u8>,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Inline messages up to this size (default: the QP's max_inline_data; 0 disables).
    #[arg(short = 'I', long, visible_alias = "inline_size")]
    inline_size: Option<u32>,
    /// Device, port and GID index.
    #[command(flatten)]
    dev: DevArgs,
    /// Post path(s); `all` runs every backend the device supports, interleaved.
    #[arg(long, value_enum, default_value_t = BackendArg::All)]
    backend: BackendArg,
    /// Doorbell mode of the direct backend.
    #[arg(long, value_enum, default_value_t = DbMode::Bf)]
    db_mode: DbMode,
    /// Seconds without progress before a run is declared stalled.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    stall_secs: u64,
    /// Path MTU (perftest's -m): 256, 512, 1024, 2048 or 4096 (default: the port's active MTU).
    #[arg(short = 'm', long, value_parser = clap::builder::PossibleValuesParser::new(["256", "512", "1024", "2048", "4096"])
          .map(|v| v.parse::<u32>().unwrap_or(1024)))]
    mtu: Option<u32>,
    /// Service level (perftest's -S).
    #[arg(short = 'S', long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=15))]
    sl: u8,
    /// GRH traffic class (perftest's --tclass; RoCE and global routing).
    #[arg(short = 'T', long = "tclass", visible_alias = "tos", default_value_t = 0)]
    tclass: u8,
    /// Local ACK timeout exponent, 4.096 us x 2^N (perftest's -u).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14, value_parser = clap::value_parser!(u8).range(0..=31))]
    qp_timeout: u8,
    /// Transport retries (perftest's --retry_count).
    #[arg(long = "retry_count", default_value_t = 7, value_parser = clap::value_parser!(u8).range(0..=7))]
    retry_count: u8,
    /// P_Key index (perftest's --pkey_index).
    #[arg(long = "pkey_index", default_value_t = 0)]
    pkey_index: u16,
    /// Transport (perftest's -c): RC; UC (SEND and WRITE, nothing acknowledged: a message the
    /// responder cannot take is dropped, and a ping-pong stalls on it); UD (SEND up to the
    /// port's MTU; a datagram from another QP than the peer's stops the run). Between two
    /// processes: lat; bw UC/UD with --loopback.
    #[arg(short = 'c', long = "connection", value_enum, ignore_case = true, default_value_t = rdmaprobe::backend::Transport::Rc)]
    connection: rdmaprobe::backend::Transport,
    /// Buffers on 2 MiB huge pages (perftest's --use_hugepages; they must be reserved:
    /// `sysctl vm.nr_hugepages=N`, `rdmaprobe doctor` says how many are free).
    #[arg(long = "use-hugepages", visible_alias = "use_hugepages")]
    use_hugepages: bool,
    /// A memory region per QP (perftest's --mr_per_qp): what rdmaprobe always does (every QP has
    /// its own buffers, registered on their own); accepted for perftest's scripts.
    #[arg(long = "mr-per-qp", visible_alias = "mr_per_qp")]
    mr_per_qp: bool,
    /// Pin the measuring threads to these CPUs, taken in order (e.g. 2,3 or 4-7); a server and
    /// its client on one machine each take their own.
    #[arg(long, value_name = "LIST", value_parser = cpu_list)]
    pin_cores: Option<CpuList>,
    /// Run on the CPUs of this NUMA node and bind the memory to it (the node of the NIC:
    /// `rdmaprobe doctor` shows it).
    #[arg(long, value_name = "N")]
    numa_node: Option<u32>,
    /// Write the results as JSON.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Write a diagnostics bundle into this directory (command, environment, devices, doctor,
    /// QP states, counters, error, kernel log); a failed run writes one anyway, under /tmp.
    #[arg(long)]
    diag: Option<std::path::PathBuf>,
}

#[derive(clap::Args, Debug)]
struct PeerArgs {
    /// Server to connect to; without it this side is the server and waits for a client.
    host: Option<String>,
    /// Run both ends in this process, on two pinned threads.
    #[arg(long, conflicts_with_all = ["port_tcp", "bind", "oob_timeout"])]
    loopback: bool,
    /// TCP port of the out-of-band exchange (server: 0 lets the system pick one, printed).
    #[arg(short = 'p', long, visible_alias = "port", default_value_t = rdmaprobe::oob::DEFAULT_PORT)]
    port_tcp: u16,
    /// Server: the address to listen on (default every IPv4 address).
    #[arg(long, default_value = "0.0.0.0", conflicts_with = "host")]
    bind: std::net::IpAddr,
    /// Seconds to wait for the peer to connect or answer out of band. A bandwidth server waits
    /// for the client's word at the end of each run, so a client/server bw run may last at most
    /// this plus --stall-secs (plus twice -D with -D): raise it for longer runs.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    oob_timeout: u64,
    /// Connect the QPs through the RDMA connection manager (perftest's -R): librdmacm resolves
    /// the server's IP address and the route and chooses the source GID (no -x on RoCE), the
    /// P_Key, the path MTU (-m caps it) and the PSNs; -T is its ToS. RC, client/server; the
    /// parameters still go over the TCP connection of -p. Needs the rdma_ucm kernel module.
    #[arg(
        short = 'R',
        long = "rdma-cm",
        visible_alias = "rdma_cm",
        conflicts_with = "loopback"
    )]
    rdma_cm: bool,
}

/// perftest's options that lat and bw share: the atomic's kind, -F, --output.
#[derive(clap::Args, Debug)]
struct PerftestArgs {
    /// The atomic operation of `atomic` (perftest's -A): FETCH_AND_ADD (add 1) or CMP_AND_SWAP
    /// (compare 0, swap 0: a hit that leaves the word unchanged).
    #[arg(short = 'A', long = "atomic_type", value_enum)]
    atomic_type: Option<AtomicArg>,
    /// Accepted for perftest's scripts (its -F: do not fail on CPU-frequency warnings); rdmaprobe
    /// only warns about the CPU frequency, so it changes nothing.
    #[arg(short = 'F', long = "CPU-freq")]
    cpu_freq: bool,
    /// Print one number per size instead of the table, for scripts (perftest's --output): lat
    /// `latency` (p50, ns); bw `bandwidth` (average, MB/s = 2^20 B/s, or Gb/s with
    /// --report-gbits) or `message_rate` (Mpps). Needs one backend (--backend).
    #[arg(long, value_enum)]
    output: Option<rdmaprobe::probe::console::OutputKind>,
    /// `write` as RDMA WRITE with immediate (perftest's --write_with_imm): the receiver consumes
    /// a posted receive and waits for its completion instead of watching memory.
    #[arg(long = "write-with-imm", visible_alias = "write_with_imm")]
    write_with_imm: bool,
    /// `send` as SEND with immediate (perftest's --send_with_imm).
    #[arg(long = "send-with-imm", visible_alias = "send_with_imm")]
    send_with_imm: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
enum AtomicArg {
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
}

/// The operation after perftest's -A, --write_with_imm and --send_with_imm: `atomic` with
/// CMP_AND_SWAP is compare-and-swap, `write` with --write-with-imm WRITE with immediate, `send`
/// with --send-with-imm SEND with immediate; each with another operation is refused (exit 2).
fn perftest_op(op: OpKind, a: &PerftestArgs) -> Result<OpKind, ProbeError> {
    let refuse = |flag: &str, applies: &str| {
        Err(ProbeError::Usage(format!(
            "{flag} applies to the operation {applies}, not {}",
            op.cli_name()
        )))
    };
    if a.write_with_imm {
        return match (op, a.atomic_type, a.send_with_imm) {
            (OpKind::Write, None, false) => Ok(OpKind::WriteImm),
            _ => refuse("--write-with-imm", "write"),
        };
    }
    if a.send_with_imm {
        return match (op, a.atomic_type) {
            (OpKind::Send, None) => Ok(OpKind::SendImm),
            _ => refuse("--send-with-imm", "send"),
        };
    }
    match (op, a.atomic_type) {
        (_, None) => Ok(op),
        (OpKind::FetchAdd, Some(AtomicArg::CmpAndSwap)) => Ok(OpKind::CmpSwap),
        (OpKind::FetchAdd, Some(AtomicArg::FetchAndAdd)) => Ok(OpKind::FetchAdd),
        (_, Some(_)) => refuse("-A/--atomic_type", "atomic"),
    }
}

#[derive(clap::Args, Debug)]
struct LatArgs {
    /// Operation.
    #[arg(value_enum)]
    op: OpKind,
    /// Where the peer is.
    #[command(flatten)]
    peer: PeerArgs,
    /// Message size in bytes (atomics: 8).
    #[arg(short = 's', long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=8 * 1024 * 1024))]
    size: u32,
    /// All sizes from 2 B to 8 MiB, powers of two.
    #[arg(short = 'a', long, visible_alias = "all")]
    all_sizes: bool,
    /// Measured iterations per size and backend.
    #[arg(short = 'n', long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    iters: u64,
    /// Iterations before measuring.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    warmup: u64,
    /// Run for this many seconds per size instead of -n iterations (blocks of 1000 per backend,
    /// interleaved; every sample kept, percentiles included): 0.01 to 86400, fractions too.
    /// --loopback only.
    #[arg(short = 'D', long, value_parser = positive_secs, conflicts_with = "iters")]
    duration: Option<Duration>,
    /// Write an HdrHistogram interval log: one interval per block and backend (tagged).
    #[arg(long)]
    hdr: Option<std::path::PathBuf>,
    /// Completion events (perftest's -e): beside each verbs backend polling, the same backend
    /// waiting for completion events (ibv_req_notify_cq, ibv_get_cq_event; rows `verbs-e`,
    /// `wr-e`), interleaved in one run. Not for write (it watches memory: use
    /// --write-with-imm); between two processes not on model0 (its events are raised in the
    /// process that executes the WQE).
    #[arg(short = 'e', long)]
    events: bool,
    /// Blocks the iterations are split into (backends alternate between blocks).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    blocks: u64,
    /// model0 only: a wire delay in ns added to every message in each direction (WRITE and SEND
    /// one-way figures rise by D; READ and atomic round trips by 2D); at most 1 s. Given (even 0),
    /// the model times the wire on every operation, so runs with 0 and with D differ by D alone.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=rdmaprobe::model::MAX_WIRE_DELAY_NS))]
    model_delay_ns: Option<u64>,
    /// perftest's -A, -F, --output.
    #[command(flatten)]
    perftest: PerftestArgs,
    /// Device, backends, doorbell mode, deadline, output.
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Args, Debug)]
struct BwArgs {
    /// Operation.
    #[arg(value_enum)]
    op: OpKind,
    /// Where the peer is.
    #[command(flatten)]
    peer: PeerArgs,
    /// Message size in bytes (atomics: 8).
    #[arg(short = 's', long, default_value_t = 65536, value_parser = clap::value_parser!(u32).range(1..=8 * 1024 * 1024))]
    size: u32,
    /// All sizes from 2 B to 8 MiB, powers of two.
    #[arg(short = 'a', long, visible_alias = "all")]
    all_sizes: bool,
    /// Messages per QP.
    #[arg(short = 'n', long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    iters: u64,
    /// Outstanding operations per QP.
    #[arg(short = 't', long = "tx-depth", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=128))]
    tx_depth: u32,
    /// Operations per doorbell (postlist).
    #[arg(short = 'l', long = "post-list", visible_alias = "post_list", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    postlist: u32,
    /// A completion every this many operations.
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=128))]
    cq_mod: u32,
    /// QPs per thread.
    #[arg(short = 'q', long = "qp", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=16384))]
    qps: u64,
    /// Threads, each with its own QPs, CQs and buffers, pinned.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    threads: u64,
    /// Both ends send.
    #[arg(short = 'b', long)]
    bidirectional: bool,
    /// Report Gb/s instead of MB/sec.
    #[arg(long, visible_alias = "report_gbits")]
    report_gbits: bool,
    /// Length of the bandwidth windows (best and worst window), microseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    window_us: u64,
    /// --loopback: a run shorter than this many ms is run again with more iterations, sized by
    /// the first (0: never).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    min_ms: u64,
    /// Run each size and backend for at least this many seconds (perftest's -D): a short first
    /// run sizes the messages of the measured one, whose real length is printed (time[ms]).
    /// 0.01 to 86400 seconds, fractions too. Between two processes the client sizes the runs
    /// and the server runs the messages it is told.
    #[arg(short = 'D', long, value_parser = positive_secs, conflicts_with_all = ["iters", "min_ms"])]
    duration: Option<Duration>,
    /// No perftest peak (perftest's -N, --noPeak): post and completion times are not traced,
    /// the peak column says "-".
    #[arg(short = 'N', long = "noPeak")]
    no_peak: bool,
    /// Run until stopped (Ctrl-C or SIGTERM; exit 0), printing a row per backend every -D
    /// seconds (default 5), as perftest's --run_infinitely. One size; between two processes a
    /// stop on either side ends both after the run under way.
    #[arg(long = "run-infinitely", visible_alias = "run_infinitely", conflicts_with_all = ["iters", "min_ms", "all_sizes"])]
    run_infinitely: bool,
    /// Completion events (perftest's -e): beside each verbs backend polling, the same backend
    /// waiting for completion events whenever a turn of its thread moves nothing (arm every
    /// CQ, poll once more, then block on the channels; rows `verbs-e`, `wr-e`). Between two
    /// processes not on model0 (its events are raised in the process that executes the WQE).
    #[arg(short = 'e', long)]
    events: bool,
    /// perftest's -A, -F, --output.
    #[command(flatten)]
    perftest: PerftestArgs,
    /// Device, backends, doorbell mode, deadline, output.
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Args, Debug)]
struct PostCostArgs {
    /// Operations to measure.
    #[arg(long = "op", value_delimiter = ',', default_values = ["write", "send", "read"],
          value_parser = clap::builder::PossibleValuesParser::new(["write", "send", "read"])
              .map(|o| match o.as_str() { "send" => OpKind::Send, "read" => OpKind::Read, _ => OpKind::Write }))]
    ops: Vec<OpKind>,
    /// Message size in bytes.
    #[arg(short = 's', long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024 * 1024))]
    size: u32,
    /// Postlists (WQEs per doorbell) to measure.
    #[arg(short = 'l', long = "post-list", value_delimiter = ',', default_values_t = [1u32, 8, 32],
          value_parser = clap::value_parser!(u32).range(1..=48))]
    postlists: Vec<u32>,
    /// Completion every N WQEs, besides every WQE (at most 48).
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 32, value_parser = clap::value_parser!(u32).range(2..=48))]
    cq_mod: u32,
    /// Timed blocks per configuration (each as many post calls as fill 96 WQEs: 96 at postlist
    /// 1, 3 at postlist 32).
    #[arg(short = 'n', long = "blocks", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    blocks: u64,
    /// Device, port and GID index.
    #[command(flatten)]
    dev: DevArgs,
    /// Post path(s).
    #[arg(long, value_enum, default_value_t = BackendArg::All)]
    backend: BackendArg,
    /// Write the results as JSON.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[derive(clap::Args, Debug)]
struct SuiteArgs {
    /// Device, port and GID index.
    #[command(flatten)]
    dev: DevArgs,
    /// Output directory (created).
    #[arg(long, default_value = "rdmaprobe-out")]
    out: std::path::PathBuf,
    /// A small matrix that finishes in well under a minute.
    #[arg(long)]
    quick: bool,
    /// Latency iterations per size and backend (default 10000; --quick 2000).
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u64).range(10..=100_000_000))]
    iters: Option<u64>,
    /// Bandwidth messages per point before a run is sized to the minimum duration (default
    /// 100000 x 64 B / size, at least 500).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    bw_messages: Option<u64>,
    /// Shortest bandwidth run, ms (default 200; --quick 50; 0: no minimum).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    bw_min_ms: Option<u64>,
    /// Post-cost blocks per configuration (default 1000; --quick 300).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    post_cost_blocks: Option<u64>,
    /// The parts that run, of lat, bw, post-cost (default all).
    #[arg(long, value_name = "LIST", value_parser = |s: &str| matrix::parse_parts(s).map(Listed))]
    parts: Option<Listed<matrix::Part>>,
    /// Operations of the latency and the bandwidth parts, of send, write, read, atomic, cmp_swap,
    /// write_imm, send_imm (default: lat send,write,read,atomic; bw write,send).
    #[arg(long, value_name = "LIST", value_parser = ops_list)]
    ops: Option<Listed<OpKind>>,
    /// Operations of the latency part (over --ops).
    #[arg(long, value_name = "LIST", value_parser = ops_list)]
    lat_ops: Option<Listed<OpKind>>,
    /// Operations of the bandwidth part (over --ops).
    #[arg(long, value_name = "LIST", value_parser = ops_list)]
    bw_ops: Option<Listed<OpKind>>,
    /// Message sizes of the latency and bandwidth parts (atomics: 8): 8,64,4K,1M, and ranges of
    /// powers of two as 8-4M (default: lat 8 B-1 MiB, bw 64 B-4 MiB; --quick fewer).
    #[arg(long, value_name = "LIST", value_parser = sizes_list)]
    sizes: Option<Listed<u32>>,
    /// Sizes of the latency part (over --sizes).
    #[arg(long, value_name = "LIST", value_parser = sizes_list)]
    lat_sizes: Option<Listed<u32>>,
    /// Sizes of the bandwidth part (over --sizes).
    #[arg(long, value_name = "LIST", value_parser = sizes_list)]
    bw_sizes: Option<Listed<u32>>,
    /// Seconds per point: each latency point runs this long (blocks of 1000 per backend,
    /// interleaved), each bandwidth point at least this long (instead of -n and --bw-min-ms).
    #[arg(short = 'D', long, value_parser = positive_secs, conflicts_with_all = ["iters", "bw_min_ms"])]
    duration: Option<Duration>,
    /// Backends, of verbs, wr, direct (default: every one the device runs; each named must run).
    #[arg(long, value_name = "LIST", value_parser = |s: &str| matrix::parse_backends(s).map(Listed))]
    backends: Option<Listed<BackendKind>>,
    /// Transports the latency and bandwidth parts run on, of RC, UC, UD (default RC; UC runs
    /// send and write, UD send up to the MTU; the post cost stays on RC).
    #[arg(long, value_name = "LIST", value_parser = |s: &str| matrix::parse_transports(s).map(Listed))]
    transports: Option<Listed<rdmaprobe::backend::Transport>>,
    /// Bandwidth QPs per thread (default 1).
    #[arg(short = 'q', long = "qp", value_parser = clap::value_parser!(u64).range(1..=16384))]
    qps: Option<u64>,
    /// Bandwidth threads, each with its own QPs, pinned (default 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=64))]
    threads: Option<u64>,
    /// A matrix file (TOML) with the keys parts, ops, lat_ops, bw_ops, sizes, lat_sizes,
    /// bw_sizes, iters, duration_s, backends, transports, qps, threads, bw_messages, bw_min_ms,
    /// post_cost_blocks (docs/perftest.md); a flag wins over the file's key.
    #[arg(long, value_name = "FILE")]
    matrix: Option<std::path::PathBuf>,
}

/// A CPU list argument (`2,3`, `4-7`).
#[derive(Clone, Debug)]
struct CpuList(Vec<usize>);

fn cpu_list(s: &str) -> Result<CpuList, String> {
    rdmaprobe::workers::parse_cpu_list(s).map(CpuList)
}

/// A list argument (a newtype, so that clap takes it as one value).
#[derive(Clone, Debug)]
struct Listed<T>(Vec<T>);

fn ops_list(s: &str) -> Result<Listed<OpKind>, String> {
    matrix::parse_ops(s).map(Listed)
}

fn sizes_list(s: &str) -> Result<Listed<u32>, String> {
    matrix::parse_sizes(s).map(Listed)
}

fn positive_secs(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (matrix::MIN_DURATION_S..=86_400.0).contains(&v) => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!("'{s}' is not a number of seconds from 0.01 to 86400")),
    }
}

#[derive(clap::Args, Debug)]
struct PingArgs {
    /// Where the peer is.
    #[command(flatten)]
    peer: PeerArgs,
    /// Device, backends, doorbell mode, deadline, output.
    #[command(flatten)]
    run: RunArgs,
    /// Layer 3: the 8-byte WRITE latency p50 (one-way, ns) must not exceed this.
    #[arg(long)]
    max_lat_ns: Option<f64>,
    /// Layer 3: the 64 KiB WRITE bandwidth (MB/s, 2^20 bytes) must reach this.
    #[arg(long)]
    min_bw: Option<f64>,
    /// Layer 3: limits from a result file (lat write p50, bw write average), with --tolerance.
    #[arg(long)]
    baseline: Option<String>,
    /// Slack around the baseline, percent.
    #[arg(long, default_value_t = 20.0)]
    tolerance: f64,
    /// model0 only: this side's wire delay in ns (a slow peer).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=rdmaprobe::model::MAX_WIRE_DELAY_NS))]
    model_delay_ns: Option<u64>,
}

#[derive(clap::Args, Debug)]
struct PlotArgs {
    /// The result file (results.json of suite, or the --json of lat / bw).
    results: String,
    /// Output directory (created): the SVG files and report.html.
    #[arg(long, default_value = "rdmaprobe-plots")]
    out: std::path::PathBuf,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
enum CmpFormat {
    Text,
    Markdown,
    Junit,
}

#[derive(clap::Args, Debug)]
struct CompareArgs {
    /// BASE and NEW: one result file each (one process run per side). For several runs per
    /// side use --base and --new instead.
    #[arg(value_name = "FILE", num_args = 0..=2)]
    files: Vec<String>,
    /// BASE's result files, one process run each (run the two sides alternately: A B A B ...).
    #[arg(long, value_name = "FILE", num_args = 1..)]
    base: Vec<String>,
    /// NEW's result files, one process run each.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    new: Vec<String>,
    /// Smallest change (percent) that can be a regression, every row. Default, by row, with
    /// several runs on both sides: lat p50 5, lat p99 20, bw 10, post_cost 75 (p99 100); with one
    /// run on a side (its interval cannot contain run-to-run variation): 20, 50, 50, 100: the
    /// run-to-run variation measured on model0.
    #[arg(long)]
    threshold: Option<f64>,
    /// Metrics to compare.
    #[arg(long, value_delimiter = ',', default_values_t = ["p50".to_string(), "p99".to_string(), "bw".to_string()])]
    metric: Vec<String>,
    /// Adjustment of the p-values over all rows: holm (any false alarm at 5 %) or bh
    /// (Benjamini-Hochberg: 5 % of the alarms false).
    #[arg(long, default_value = "holm", value_parser = ["holm", "bh"])]
    adjust: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = CmpFormat::Text)]
    format: CmpFormat,
}

fn main() -> ExitCode {
    // Output into a closed pipe (`rdmaprobe suite | head`) ends the process quietly, as it does
    // a C tool, instead of a panic in println!. Sockets are unaffected: Rust's std sends with
    // MSG_NOSIGNAL, so a peer that goes away is still an EPIPE error we report.
    // SAFETY: restores the default disposition of one signal before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Devices { json, gids } => probe::console::devices(json, gids)
            .map(ExitCode::from)
            .map_err(Into::into),
        Cmd::Clock { json, window_ms } => probe::console::clock(json, window_ms)
            .map(ExitCode::from)
            .map_err(Into::into),
        Cmd::Doctor { device, port, json } => probe::console::doctor(device.as_deref(), port, json)
            .map(ExitCode::from)
            .map_err(Into::into),
        Cmd::Ping(a) => ping(a),
        Cmd::Lat(a) => lat(a),
        Cmd::Bw(a) => bw(a),
        Cmd::PostCost(a) => post_cost(a),
        Cmd::Compare(a) => compare(a),
        Cmd::Suite(a) => suite(a),
        Cmd::Plot(a) => plot(a),
        Cmd::FleetReport(a) => Ok(ExitCode::from(probe::console::fleet_report(
            &a.dir,
            a.json.as_deref(),
            a.html.as_deref(),
            rdmaprobe::report::fleet::Rules {
                mad_k: a.mad_k,
                min_deviation: a.min_deviation_pct / 100.0,
            },
        ))),
    };
    match r {
        Ok(code) => code,
        // stopped by a signal: the run unwound and gave everything back; the status is the
        // shell's for that signal (SIGPIPE, a closed output: quietly), 1 for SIGINT
        Err(_) if rdmaprobe::signals::signal() == Some(libc::SIGPIPE) => ExitCode::from(128 + libc::SIGPIPE as u8),
        Err(e) => {
            let usage = matches!(e.downcast_ref::<ProbeError>(), Some(ProbeError::Usage(_)));
            eprintln!("rdmaprobe: error: {}", probe::console::chain(e.as_ref()));
            match rdmaprobe::signals::signal() {
                Some(s @ (libc::SIGTERM | libc::SIGHUP)) => ExitCode::from(128 + s as u8),
                _ => ExitCode::from(if usage { 2 } else { 1 }),
            }
        }
    }
}

impl BackendArg {
    fn backends(self) -> Backends {
        match self {
            BackendArg::All => Backends::All,
            BackendArg::Verbs => Backends::Only(BackendKind::Verbs),
            BackendArg::Wr => Backends::Only(BackendKind::Wr),
            BackendArg::Direct => Backends::Only(BackendKind::Direct),
        }
    }
}

impl DevArgs {
    fn spec(&self) -> DeviceSpec {
        DeviceSpec {
            name: self.device.clone(),
            port: self.port,
            gid_index: self.gid,
        }
    }
}

/// The plan from a scenario and the arguments every scenario shares.
fn plan(scenario: Scenario, r: &RunArgs, p: &PeerArgs) -> Result<Plan> {
    if p.host.is_some() && p.loopback {
        return Err(ProbeError::Usage("--loopback runs both ends in this process: give no HOST".into()).into());
    }
    if p.host.is_some() && p.port_tcp == 0 {
        return Err(ProbeError::Usage("-p 0: a client needs the server's port (0 is for a server)".into()).into());
    }
    let peer = match (p.loopback, &p.host) {
        (true, _) => PeerSpec::Loopback,
        (false, Some(h)) => PeerSpec::Connect {
            host: h.clone(),
            port: p.port_tcp,
        },
        (false, None) => PeerSpec::Listen {
            bind: p.bind.to_string(),
            port: p.port_tcp,
        },
    };
    if p.rdma_cm {
        // what the connection manager chooses cannot also be given
        let refuse = |what: &str| Err(ProbeError::Usage(format!("-R/--rdma-cm: {what}")).into());
        if r.connection != rdmaprobe::backend::Transport::Rc {
            return refuse(&format!(
                "connects RC QPs (-c {} is not supported with -R in this version)",
                r.connection.as_str()
            ));
        }
        if r.sl != 0 {
            return refuse("the connection manager chooses the service level (from -T's ToS on RoCE): give no -S");
        }
        if r.pkey_index != 0 {
            return refuse("the connection manager chooses the P_Key: give no --pkey_index");
        }
        if r.qp_timeout != 14 {
            return refuse("the connection manager sets the ACK timeout from the path: give no -u");
        }
    }
    rdmaprobe::workers::choose(r.pin_cores.as_ref().map(|c| c.0.as_slice()), r.numa_node).map_err(ProbeError::Usage)?;
    if peer == PeerSpec::Loopback
        && (r.pin_cores.is_some() || r.numa_node.is_some())
        && rdmaprobe::workers::cpus().len() < 2
    {
        // two spinning ends on one CPU measure the scheduler's time slice, not the path
        return Err(ProbeError::Usage(format!(
            "{}: --loopback runs its two ends on two CPUs (the client on the first, the server on the next): name two",
            if r.pin_cores.is_some() {
                "--pin-cores"
            } else {
                "--numa-node"
            }
        ))
        .into());
    }
    Ok(Plan {
        scenario,
        device: r.dev.spec(),
        backends: r.backend.backends(),
        db_mode: r.db_mode,
        peer,
        oob_timeout: Duration::from_secs(p.oob_timeout),
        stall: Duration::from_secs(r.stall_secs),
        path: rdmaprobe::probe::PathOpts {
            mtu: r.mtu,
            sl: r.sl,
            traffic_class: r.tclass,
            timeout: r.qp_timeout,
            retry_count: r.retry_count,
            pkey_index: r.pkey_index,
        },
        diag: r.diag.clone(),
        huge_pages: r.use_hugepages,
        transport: r.connection,
        rdma_cm: p.rdma_cm,
    })
}

/// --output prints one number per size: refused with -e (two per verbs backend).
fn one_number(events: bool, p: &PerftestArgs) -> Result<(), ProbeError> {
    if events && p.output.is_some() {
        return Err(ProbeError::Usage(
            "--output prints one number per size: with -e each verbs backend has two (polling and events); \
             use --json"
                .into(),
        ));
    }
    Ok(())
}

fn lat(a: LatArgs) -> Result<ExitCode> {
    one_number(a.events, &a.perftest)?;
    let l = LatPlan {
        op: perftest_op(a.op, &a.perftest)?,
        sizes: if a.all_sizes { Sizes::All } else { Sizes::One(a.size) },
        iters: a.iters,
        warmup: a.warmup,
        blocks: a.blocks,
        duration: a.duration,
        inline_size: a.run.inline_size,
        model_delay_ns: a.model_delay_ns,
        intervals: a.hdr.is_some(),
        events: a.events,
    };
    let p = plan(Scenario::Lat(l), &a.run, &a.peer)?;
    Ok(ExitCode::from(probe::console::measure(
        &p,
        a.run.json.as_ref(),
        a.hdr.as_ref(),
        a.perftest.output,
    )?))
}

fn bw(a: BwArgs) -> Result<ExitCode> {
    one_number(a.events, &a.perftest)?;
    let b = BwPlan {
        op: perftest_op(a.op, &a.perftest)?,
        sizes: if a.all_sizes { Sizes::All } else { Sizes::One(a.size) },
        // -D: a short first run sizes the measured one
        iters: if a.duration.is_some() || a.run_infinitely {
            2000
        } else {
            a.iters
        },
        tx_depth: a.tx_depth,
        postlist: a.postlist,
        cq_mod: a.cq_mod,
        qps: a.qps,
        threads: a.threads,
        bidirectional: a.bidirectional,
        inline_size: a.run.inline_size,
        window: Duration::from_micros(a.window_us),
        min_duration: match (a.duration, a.run_infinitely) {
            (Some(d), _) => d,
            (None, true) => Duration::from_secs(5),
            (None, false) => Duration::from_millis(a.min_ms),
        },
        duration: a.duration,
        gbits: a.report_gbits,
        no_peak: a.no_peak,
        run_infinitely: a.run_infinitely,
        events: a.events,
    };
    let p = plan(Scenario::Bw(b), &a.run, &a.peer)?;
    Ok(ExitCode::from(probe::console::measure(
        &p,
        a.run.json.as_ref(),
        None,
        a.perftest.output,
    )?))
}

fn post_cost(a: PostCostArgs) -> Result<ExitCode> {
    let pc = PostCostPlan {
        ops: a.ops.clone(),
        size: a.size,
        blocks: a.blocks,
        postlists: a.postlists.clone(),
        cq_mod: a.cq_mod,
    };
    let p = Plan {
        device: a.dev.spec(),
        backends: a.backend.backends(),
        ..Plan::loopback(Scenario::PostCost(pc))
    };
    Ok(ExitCode::from(probe::console::measure(
        &p,
        a.json.as_ref(),
        None,
        None,
    )?))
}

fn suite(a: SuiteArgs) -> Result<ExitCode> {
    let ops = a.ops.map(|o| o.0);
    let sizes = a.sizes.map(|o| o.0);
    let cli = matrix::MatrixSpec {
        parts: a.parts.map(|o| o.0),
        lat_ops: a.lat_ops.map(|o| o.0).or(ops.clone()),
        bw_ops: a.bw_ops.map(|o| o.0).or(ops),
        lat_sizes: a.lat_sizes.map(|o| o.0).or(sizes.clone()),
        bw_sizes: a.bw_sizes.map(|o| o.0).or(sizes),
        iters: a.iters,
        duration: a.duration,
        backends: a.backends.map(|o| o.0),
        qps: a.qps,
        threads: a.threads,
        bw_messages: a.bw_messages,
        bw_min_ms: a.bw_min_ms,
        post_cost_blocks: a.post_cost_blocks,
        transports: a.transports.map(|o| o.0),
    };
    let file = match &a.matrix {
        None => matrix::MatrixSpec::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ProbeError::Usage(format!("--matrix {}: {e}", path.display())))?;
            matrix::MatrixSpec::from_toml(&text)
                .map_err(|e| ProbeError::Usage(format!("--matrix {}: {e}", path.display())))?
        }
    };
    let sp = SuitePlan {
        device: a.dev.spec(),
        quick: a.quick,
        matrix: cli.over(file),
    };
    Ok(ExitCode::from(probe::console::suite(&sp, &a.out)?))
}

fn compare(a: CompareArgs) -> Result<ExitCode> {
    let (base, new) = match (a.files.as_slice(), a.base.is_empty(), a.new.is_empty()) {
        ([b, n], true, true) => (vec![b.clone()], vec![n.clone()]),
        ([], false, false) => (a.base.clone(), a.new.clone()),
        _ => {
            eprintln!("rdmaprobe: error: give BASE NEW (one file each) or --base FILE... --new FILE... (several runs per side), not both");
            return Ok(ExitCode::from(2));
        }
    };
    let format = match a.format {
        CmpFormat::Text => "text",
        CmpFormat::Markdown => "markdown",
        CmpFormat::Junit => "junit",
    };
    Ok(ExitCode::from(probe::console::compare(
        &base,
        &new,
        a.threshold,
        &a.metric,
        &a.adjust,
        format,
    )))
}

fn plot(a: PlotArgs) -> Result<ExitCode> {
    Ok(ExitCode::from(probe::console::plot(&a.results, &a.out)))
}

fn ping(a: PingArgs) -> Result<ExitCode> {
    if a.peer.rdma_cm {
        return Err(ProbeError::Usage(
            "ping -R: the ladder connects its QPs itself in this version; use lat or bw with -R".into(),
        )
        .into());
    }
    if a.run.connection != rdmaprobe::backend::Transport::Rc {
        return Err(ProbeError::Usage(format!(
            "ping -c {}: the ladder checks an RC connection (its layers are WRITEs and a bandwidth run over one); \
             use lat or bw with -c",
            a.run.connection.as_str()
        ))
        .into());
    }
    let p = probe::check::ping::PingPlan {
        plan: plan(Scenario::Lat(LatPlan::new(OpKind::Write, 1)), &a.run, &a.peer)?,
        max_lat_ns: a.max_lat_ns,
        min_bw_mib_s: a.min_bw,
        baseline: None,
        tolerance_pct: a.tolerance,
        model_delay_ns: a.model_delay_ns,
    };
    Ok(ExitCode::from(probe::console::ping(
        p,
        a.baseline.as_deref(),
        a.run.json.as_ref(),
    )?))
}

//! `lat`, `bw` and `post-cost`: their arguments (with perftest's options that lat and bw share)
//! and their mapping to a [`Plan`], run and printed by [`console::measure`].

use super::console;
use super::plan::{plan, DevArgs, PeerArgs, RunArgs};
use super::values::{positive_secs, size, size_1m, threads, BackendArg, OpArg};
use anyhow::Result;
use clap::builder::TypedValueParser as _;
use rdmaprobe::backend::OpKind;
use rdmaprobe::probe::{Backends, BwPlan, KvPlan, KvThreads, LatPlan, Plan, PostCostPlan, ProbeError, Scenario, Sizes};
use std::process::ExitCode;
use std::time::Duration;

/// perftest's options that lat and bw share: the atomic's kind, -F, --output.
#[derive(clap::Args, Debug)]
pub struct PerftestArgs {
    /// The atomic operation of `atomic` (perftest's -A): FETCH_AND_ADD (add 1) or CMP_AND_SWAP
    /// (compare 0, swap 0: a hit that leaves the word unchanged).
    #[arg(short = 'A', long = "atomic_type", value_enum)]
    atomic_type: Option<AtomicArg>,
    /// Accepted for perftest's scripts (its -F: do not fail on CPU-frequency warnings); rdmaprobe
    /// only warns about the CPU frequency, so it changes nothing.
    #[arg(short = 'F', long = "CPU-freq")]
    cpu_freq: bool,
    /// Print one number per size instead of the table, for scripts (perftest's --output): lat
    /// `latency` (the average, ns, as perftest's t_avg); bw `bandwidth` (average, MB/s = 2^20
    /// B/s, or Gb/s with --report-gbits) or `message_rate` (Mpps). One backend: without
    /// --backend perftest's post path (wr, else verbs, else direct; named on standard error).
    #[arg(long, value_enum)]
    output: Option<console::OutputKind>,
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
pub struct LatArgs {
    /// Operation.
    #[arg(value_enum)]
    op: OpArg,
    /// Where the peer is.
    #[command(flatten)]
    peer: PeerArgs,
    /// Message size in bytes, or with K or M (4K, 1M), up to 8M (atomics: 8).
    #[arg(short = 's', long, default_value_t = 2, value_parser = size)]
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
    /// CPU use of the measuring (client) thread per size and backend (perftest's --cpu_util):
    /// its CPU time over its blocks (warm-up included), percent (a polling thread near 100 unless descheduled; -e
    /// rows show what waiting for events saves). The JSON has it always (cpu_pct).
    #[arg(long = "cpu_util", visible_alias = "cpu-util")]
    cpu_util: bool,
    /// Where each round trip goes (write and send): the server stamps each iteration's turnaround
    /// (from seeing the request to its reply's post returning; between two processes its stamps
    /// come to the client after the run), and a second table splits every round trip into the
    /// turnaround and the rest (the client's post, both messages through the NICs and the wire,
    /// the polling until each was seen). The server's stamps lie on the round trip (on model0
    /// 50-80 ns a round trip, measured): set a run without --anatomy beside it for the figures.
    #[arg(long)]
    anatomy: bool,
    /// perftest's -A, -F, --output.
    #[command(flatten)]
    perftest: PerftestArgs,
    /// Device, backends, doorbell mode, deadline, output.
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Args, Debug)]
pub struct BwArgs {
    /// Operation.
    #[arg(value_enum)]
    op: OpArg,
    /// Where the peer is.
    #[command(flatten)]
    peer: PeerArgs,
    /// Message size in bytes, or with K or M (4K, 1M), up to 8M (atomics: 8; -c UD: at most the
    /// port's MTU, a larger size is the MTU, said so).
    #[arg(short = 's', long, default_value_t = 65536, value_parser = size)]
    size: u32,
    /// All sizes from 2 B to 8 MiB, powers of two.
    #[arg(short = 'a', long, visible_alias = "all")]
    all_sizes: bool,
    /// Messages per QP (default 5000). Given, it is exact (no --min-ms repeat) unless --min-ms is
    /// given too: then a run shorter than --min-ms is repeated with more messages.
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    iters: Option<u64>,
    /// Outstanding operations per QP (perftest's -t). The QPs hold 128 WQEs: a larger -t is 128,
    /// said so.
    #[arg(short = 't', long = "tx-depth", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=65536))]
    tx_depth: u32,
    /// Receives kept posted on each receiving QP of a SEND run (perftest's -r; its default is
    /// 512): at most the 128 WQEs a queue holds, said so when larger. Default: -t plus two
    /// batches of 16 reposts, at most 128 (at -t 128 a few SENDs still find the queue empty
    /// between two reposts: the RNR warning counts them); a smaller -r makes more of them, as
    /// perftest's does.
    #[arg(short = 'r', long = "rx-depth", visible_alias = "rx_depth", value_parser = clap::value_parser!(u32).range(1..=65536))]
    rx_depth: Option<u32>,
    /// Operations per doorbell (postlist).
    #[arg(short = 'l', long = "post-list", visible_alias = "post_list", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    postlist: u32,
    /// A completion every this many operations (perftest's -Q, default 100 as perftest's); above
    /// -t it is -t, as perftest's (said so).
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=65536))]
    cq_mod: u32,
    /// QPs per thread.
    #[arg(short = 'q', long = "qp", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=16384))]
    qps: u64,
    /// Threads, each with its own QPs, CQs and buffers, pinned (1 to 128; more threads than CPUs
    /// are pinned round-robin, several to a CPU, said so).
    #[arg(long, default_value_t = 1, value_parser = threads)]
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
    /// the first (0: never). Default 200, and 0 when -n is given (-n is then exact).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    min_ms: Option<u64>,
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
    /// CPU use of each run's measuring threads (perftest's --cpu_util): their CPU time over
    /// their run, percent (a polling thread near 100 unless descheduled; -e rows show what
    /// waiting for events saves). The JSON has it always (summary.cpu_pct).
    #[arg(long = "cpu_util", visible_alias = "cpu-util")]
    cpu_util: bool,
    /// perftest's -A, -F, --output.
    #[command(flatten)]
    perftest: PerftestArgs,
    /// Device, backends, doorbell mode, deadline, output.
    #[command(flatten)]
    run: RunArgs,
}

#[derive(clap::Args, Debug)]
pub struct PostCostArgs {
    /// Operations to measure.
    #[arg(long = "op", value_delimiter = ',', default_values = ["write", "send", "read"],
          value_parser = clap::builder::PossibleValuesParser::new(["write", "send", "read"])
              .map(|o| match o.as_str() { "send" => OpKind::Send, "read" => OpKind::Read, _ => OpKind::Write }))]
    ops: Vec<OpKind>,
    /// Message size in bytes, or with K or M (4K, 1M), up to 1M.
    #[arg(short = 's', long, default_value_t = 8, value_parser = size_1m)]
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

/// `kv`'s arguments: HERD's key-value workload (requests over UC, responses over UD, MICA stores).
#[derive(clap::Args)]
pub struct KvArgs {
    /// The server to connect to: this side runs the clients. Without it (and without
    /// --loopback) this side is the server (the workers, their stores, the request region) and
    /// waits for the clients.
    host: Option<String>,
    /// The server and the clients both in this process.
    #[arg(long, conflicts_with_all = ["port_tcp", "bind", "oob_timeout"])]
    loopback: bool,
    /// TCP port of the out-of-band exchange (server: 0 lets the system pick one, printed).
    #[arg(short = 'p', long, visible_alias = "port", default_value_t = rdmaprobe::oob::DEFAULT_PORT)]
    port_tcp: u16,
    /// Server: the address to listen on (default every IPv4 address).
    #[arg(long, default_value = "0.0.0.0", conflicts_with = "host")]
    bind: std::net::IpAddr,
    /// Seconds to wait for the peer to connect or answer out of band (each run's results are
    /// exchanged when it ends).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    oob_timeout: u64,
    /// Workers of the server, each with its MICA store and UD QP (and its thread, with
    /// --threads per-role).
    #[arg(long, default_value_t = KvPlan::default().workers, allow_negative_numbers = true)]
    workers: u32,
    /// Clients, each with a UC QP (requests) and a UD QP (responses).
    #[arg(long, default_value_t = KvPlan::default().clients, allow_negative_numbers = true)]
    clients: u32,
    /// Requests a client writes before it waits for their responses (HERD's WINDOW_SIZE, 1 to 64).
    #[arg(long, default_value_t = KvPlan::default().window, allow_negative_numbers = true)]
    window: u32,
    /// Most requests a worker answers with one post (doorbell batching; 1 to 32).
    #[arg(long = "postlist", default_value_t = KvPlan::default().postlist, allow_negative_numbers = true)]
    postlist: u32,
    /// PUTs in 100 requests (HERD's --update-percentage).
    #[arg(long = "update", default_value_t = KvPlan::default().update_pct, allow_negative_numbers = true)]
    update: u32,
    /// Bytes of a value (1 to 46: what fits a 64-byte request slot).
    #[arg(long = "value-size", default_value_t = KvPlan::default().value_size, allow_negative_numbers = true)]
    value_size: u32,
    /// Keys in each worker's store (HERD's HERD_NUM_KEYS is 8 Mi).
    #[arg(long, default_value_t = KvPlan::default().keys, allow_negative_numbers = true)]
    keys: u32,
    /// Requests per client.
    #[arg(short = 'n', long = "requests", default_value_t = KvPlan::default().requests, allow_negative_numbers = true,
          value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    requests: u64,
    /// Keys drawn Zipf-distributed with this exponent (0.99 as YCSB), not uniformly as HERD.
    #[arg(long, allow_negative_numbers = true)]
    zipf: Option<f64>,
    /// Each backend also at postlist 1 (a post per response) right after its run at --postlist:
    /// the doorbell batching's gain, measured in this run, under the table.
    #[arg(long)]
    batching: bool,
    /// per-role: a thread per client and per worker, as HERD (not pinned; more threads than
    /// CPUs share them); one: one thread of each process steps all of its clients and workers
    /// in turn.
    #[arg(long, value_enum, default_value_t = ThreadsArg::PerRole)]
    threads: ThreadsArg,
    /// Device, port and GID index.
    #[command(flatten)]
    dev: DevArgs,
    /// Post path(s): verbs, wr, and direct (an mlx5 device, or model0: rdmaprobe's own WQEs on
    /// the UC and UD QPs).
    #[arg(long, value_enum, default_value_t = BackendArg::All)]
    backend: BackendArg,
    /// Write the results as JSON.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

/// `kv --threads`'s values.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum ThreadsArg {
    /// One thread per process.
    One,
    /// A thread per client and per worker.
    PerRole,
}

/// `kv`: the key-value plan from its arguments, measured and printed; the exit status.
pub fn kv(a: KvArgs) -> Result<ExitCode> {
    let peer = super::plan::peer_spec(a.host.as_deref(), a.loopback, a.port_tcp, a.bind)?;
    let k = KvPlan {
        workers: a.workers,
        clients: a.clients,
        window: a.window,
        postlist: a.postlist,
        update_pct: a.update,
        value_size: a.value_size,
        keys: a.keys,
        requests: a.requests,
        zipf: a.zipf,
        threads: match a.threads {
            ThreadsArg::One => KvThreads::One,
            ThreadsArg::PerRole => KvThreads::PerRole,
        },
        batching: a.batching,
    };
    let p = Plan {
        device: a.dev.spec(),
        backends: a.backend.backends(),
        peer,
        oob_timeout: Duration::from_secs(a.oob_timeout),
        ..Plan::loopback(Scenario::Kv(k))
    };
    Ok(ExitCode::from(console::measure(&p, a.json.as_ref(), None, None)?))
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

/// --output with no --backend: one backend, perftest's post path ([`Backends::Perftest`]).
fn perftest_backend(p: Plan, r: &RunArgs, a: &PerftestArgs) -> Plan {
    match (a.output, r.backend) {
        (Some(_), None) => Plan {
            backends: Backends::Perftest,
            ..p
        },
        _ => p,
    }
}

/// `lat`: the latency plan from its arguments, measured and printed; the exit status.
pub fn lat(a: LatArgs) -> Result<ExitCode> {
    one_number(a.events, &a.perftest)?;
    let l = LatPlan {
        op: perftest_op(a.op.into(), &a.perftest)?,
        sizes: if a.all_sizes { Sizes::All } else { Sizes::One(a.size) },
        iters: a.iters,
        warmup: a.warmup,
        blocks: a.blocks,
        duration: a.duration,
        inline_size: a.run.inline_size,
        model_delay_ns: a.model_delay_ns,
        intervals: a.hdr.is_some(),
        events: a.events,
        cpu_util: a.cpu_util,
        anatomy: a.anatomy,
    };
    let p = plan(Scenario::Lat(l), &a.run, &a.peer)?;
    let p = perftest_backend(p, &a.run, &a.perftest);
    Ok(ExitCode::from(console::measure(
        &p,
        a.run.json.as_ref(),
        a.hdr.as_ref(),
        a.perftest.output,
    )?))
}

/// perftest's -t and -Q as perftest takes them: -t above the QPs' depth is that depth, -Q above
/// -t is -t (perftest clamps silently; said here on standard error).
fn depths(tx_depth: u32, cq_mod: u32) -> (u32, u32) {
    let max = rdmaprobe::backend::setup::DEPTH;
    let t = tx_depth.min(max);
    if t < tx_depth {
        eprintln!("rdmaprobe: -t {tx_depth}: the QPs hold {max} WQEs, so -t {t}");
    }
    let q = cq_mod.min(t);
    if q < cq_mod && cq_mod != 100 {
        eprintln!("rdmaprobe: -Q {cq_mod} above -t {t}: a completion every {t} (as perftest)");
    }
    (t, q)
}

/// perftest's -r: above the queue's depth it is that depth; for an operation that consumes no
/// receive it does nothing (both said on standard error).
fn rx_depth(r: Option<u32>, op: rdmaprobe::backend::OpKind) -> Option<u32> {
    let r = r?;
    let max = rdmaprobe::backend::setup::DEPTH;
    if !op.needs_recv() {
        eprintln!(
            "rdmaprobe: -r {r}: {} consumes no receive, so -r does nothing here",
            op.as_str()
        );
    } else if r > max {
        eprintln!("rdmaprobe: -r {r}: the QPs hold {max} WQEs, so -r {max}");
    }
    Some(r.min(max))
}

/// `bw`: the bandwidth plan from its arguments, measured and printed; the exit status.
pub fn bw(a: BwArgs) -> Result<ExitCode> {
    one_number(a.events, &a.perftest)?;
    let (tx_depth, cq_mod) = depths(a.tx_depth, a.cq_mod);
    let (iters, min_ms) = match (a.iters, a.min_ms) {
        (None, m) => (5000, m.unwrap_or(200)),
        (Some(n), None) => (n, 0),
        (Some(n), Some(m)) => {
            if m > 0 {
                eprintln!("rdmaprobe: -n {n} with --min-ms {m}: a run shorter than {m} ms is repeated with more messages (-n alone is exact)");
            }
            (n, m)
        }
    };
    let b = BwPlan {
        op: perftest_op(a.op.into(), &a.perftest)?,
        sizes: if a.all_sizes { Sizes::All } else { Sizes::One(a.size) },
        // -D: a short first run sizes the measured one
        iters: if a.duration.is_some() || a.run_infinitely {
            2000
        } else {
            iters
        },
        tx_depth,
        rx_depth: rx_depth(a.rx_depth, a.op.into()),
        postlist: a.postlist,
        cq_mod,
        qps: a.qps,
        threads: a.threads,
        bidirectional: a.bidirectional,
        inline_size: a.run.inline_size,
        window: Duration::from_micros(a.window_us),
        min_duration: match (a.duration, a.run_infinitely) {
            (Some(d), _) => d,
            (None, true) => Duration::from_secs(5),
            (None, false) => Duration::from_millis(min_ms),
        },
        duration: a.duration,
        gbits: a.report_gbits,
        no_peak: a.no_peak,
        run_infinitely: a.run_infinitely,
        events: a.events,
        cpu_util: a.cpu_util,
    };
    let p = plan(Scenario::Bw(b), &a.run, &a.peer)?;
    let p = perftest_backend(p, &a.run, &a.perftest);
    Ok(ExitCode::from(console::measure(
        &p,
        a.run.json.as_ref(),
        None,
        a.perftest.output,
    )?))
}

/// `post-cost`: its plan (both ends in this process), measured and printed; the exit status.
pub fn post_cost(a: PostCostArgs) -> Result<ExitCode> {
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
    Ok(ExitCode::from(console::measure(&p, a.json.as_ref(), None, None)?))
}

//! `suite`: its arguments (the matrix from flags, over a TOML file's) and their mapping to a
//! [`SuitePlan`], run and printed by [`console::suite`].

use super::console;
use super::plan::DevArgs;
use super::values::{ops_list, positive_secs, sizes_list, Listed};
use anyhow::Result;
use rdmaprobe::backend::{BackendKind, OpKind, Transport};
use rdmaprobe::probe::suite::matrix;
use rdmaprobe::probe::{ProbeError, SuitePlan};
use std::process::ExitCode;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct SuiteArgs {
    /// Device, port and GID index.
    #[command(flatten)]
    dev: DevArgs,
    /// Output directory (created).
    #[arg(long, default_value = "rdmaprobe-out")]
    out: std::path::PathBuf,
    /// Also report.pdf, report.html printed by headless Chromium (chromium on PATH, or
    /// RDMAPROBE_CHROMIUM): looked for before the run (none: exit 2); exit 2 when it fails.
    #[arg(long)]
    pdf: bool,
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
    /// The parts that run, of lat, bw, post-cost, kv (default all).
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
    transports: Option<Listed<Transport>>,
    /// Bandwidth QPs per thread (default 1).
    #[arg(short = 'q', long = "qp", value_parser = clap::value_parser!(u64).range(1..=16384))]
    qps: Option<u64>,
    /// Bandwidth threads, each with its own QPs, pinned (default 1; at most 128).
    #[arg(long, value_parser = super::values::threads)]
    threads: Option<u64>,
    /// The key-value part's client counts, a point each (default 1,2,4,8; --quick 1,2).
    #[arg(long, value_name = "LIST", value_parser = |s: &str| matrix::parse_counts(s, matrix::MAX_KV_CLIENTS).map(Listed))]
    kv_clients: Option<Listed<u32>>,
    /// The key-value part's windows, a point each with every client count (default 32).
    #[arg(long, value_name = "LIST", value_parser = |s: &str| matrix::parse_counts(s, matrix::MAX_KV_WINDOW).map(Listed))]
    kv_windows: Option<Listed<u32>>,
    /// Requests per client of each key-value point (default 100000; --quick 20000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    kv_requests: Option<u64>,
    /// How each key-value point steps its clients and workers: one (one thread steps them all,
    /// the default: the backends side by side, no scheduling in the figures) or per-role (a
    /// thread each, as HERD and `kv`).
    #[arg(long, value_name = "one|per-role", value_parser = matrix::parse_kv_threads)]
    kv_threads: Option<rdmaprobe::probe::KvThreads>,
    /// Keys in each store of a key-value point (default 1048576, as `kv`).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=16_777_216))]
    kv_keys: Option<u32>,
    /// A matrix file (TOML) with the keys parts, ops, lat_ops, bw_ops, sizes, lat_sizes,
    /// bw_sizes, iters, duration_s, backends, transports, qps, threads, bw_messages, bw_min_ms,
    /// post_cost_blocks, kv_clients, kv_windows, kv_requests, kv_threads, kv_keys
    /// (docs/perftest.md); a flag wins over the file's key.
    #[arg(long, value_name = "FILE")]
    matrix: Option<std::path::PathBuf>,
}

/// `suite`: the matrix from the flags over --matrix's file, run, printed and written into
/// --out; the exit status.
pub fn suite(a: SuiteArgs) -> Result<ExitCode> {
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
        kv_clients: a.kv_clients.map(|o| o.0),
        kv_windows: a.kv_windows.map(|o| o.0),
        kv_requests: a.kv_requests,
        kv_threads: a.kv_threads,
        kv_keys: a.kv_keys,
    };
    let file = match &a.matrix {
        None => matrix::MatrixSpec::default(),
        Some(path) => matrix::MatrixSpec::read(path)
            .map_err(|e| ProbeError::Usage(format!("--matrix {}: {e}", path.display())))?,
    };
    let sp = SuitePlan {
        device: a.dev.spec(),
        quick: a.quick,
        matrix: cli.over(file),
    };
    Ok(ExitCode::from(console::suite(&sp, &a.out, a.pdf)?))
}

//! The rdmaprobe command line.

use anyhow::Result;
use clap::{Parser, Subcommand};
use rdmaprobe::clock::{Calibration, TscSource};
use rdmaprobe::model;
use rdmaprobe::verbs::device::{self, libibverbs_loaded};
use rdmaprobe::verbs::{DeviceList, VerbsError};
use serde_json::json;
use std::process::ExitCode;

/// Exit status of `devices` when the machine has no usable RDMA device (explained on stdout).
const EXIT_NO_DEVICE: u8 = 3;

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

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
enum LatOp {
    Write,
    Send,
    Read,
    Atomic,
}

impl LatOp {
    /// The operation's name in perftest's banner style.
    fn title(self) -> &'static str {
        match self {
            LatOp::Write => "RDMA WRITE",
            LatOp::Send => "SEND",
            LatOp::Read => "RDMA READ",
            LatOp::Atomic => "ATOMIC FETCH-AND-ADD",
        }
    }
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
enum BackendArg {
    Verbs,
    Wr,
    Direct,
    All,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
enum DbArg {
    Bf,
    BfNofence,
    Db,
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

impl DevArgs {
    /// Opens the device (the note says when it fell back to model0).
    fn open(
        &self,
        model: rdmaprobe::model::ModelConfig,
    ) -> Result<(rdmaprobe::backend::setup::Dev, Option<String>), rdmaprobe::backend::setup::SetupError> {
        rdmaprobe::backend::setup::Dev::open(self.device.as_deref(), self.port, self.gid, model)
    }
}

#[derive(clap::Args, Debug)]
struct LatArgs {
    /// Operation.
    #[arg(value_enum)]
    op: LatOp,
    /// Server to connect to; without it this side is the server and waits for a client.
    host: Option<String>,
    /// Run both ends in this process, on two pinned threads.
    #[arg(long)]
    loopback: bool,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long, default_value_t = rdmaprobe::oob::DEFAULT_PORT)]
    port_tcp: u16,
    /// Seconds to wait for the peer to connect or answer out of band.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    oob_timeout: u64,
    /// Message size in bytes (atomics: 8).
    #[arg(short = 's', long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=8 * 1024 * 1024))]
    size: u32,
    /// All sizes from 2 B to 8 MiB, powers of two.
    #[arg(short = 'a', long)]
    all_sizes: bool,
    /// Measured iterations per size and backend.
    #[arg(short = 'n', long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    iters: u64,
    /// Iterations before measuring.
    #[arg(long, default_value_t = 100)]
    warmup: u64,
    /// Run for this many seconds per size instead of -n iterations (blocks of 1000 per backend,
    /// interleaved; every sample kept, percentiles included). --loopback only.
    #[arg(short = 'D', long, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    duration: Option<u64>,
    /// Write an HdrHistogram interval log: one interval per block and backend (tagged).
    #[arg(long)]
    hdr: Option<std::path::PathBuf>,
    /// Inline messages up to this size (default: the QP's max_inline_data; 0 disables).
    #[arg(short = 'I', long)]
    inline_size: Option<u32>,
    /// Device, port and GID index.
    #[command(flatten)]
    dev: DevArgs,
    /// Post path(s); `all` runs every backend the device supports, interleaved in blocks.
    #[arg(long, value_enum, default_value_t = BackendArg::All)]
    backend: BackendArg,
    /// Blocks the iterations are split into (backends alternate between blocks).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    blocks: u64,
    /// Doorbell mode of the direct backend.
    #[arg(long, value_enum, default_value_t = DbArg::Bf)]
    db_mode: DbArg,
    /// model0 only: a wire delay in ns added to every message in each direction (WRITE and SEND
    /// one-way figures rise by D; READ and atomic round trips by 2D); at most 1 s. Given (even 0),
    /// the model times the wire on every operation, so runs with 0 and with D differ by D alone.
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=rdmaprobe::model::MAX_WIRE_DELAY_NS))]
    model_delay_ns: Option<u64>,
    /// Seconds without progress before a run is declared stalled.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    stall_secs: u64,
    /// Write the results as JSON.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[derive(clap::Args, Debug)]
struct BwArgs {
    /// Operation.
    #[arg(value_enum)]
    op: LatOp,
    /// Server to connect to; without it this side is the server and waits for a client.
    host: Option<String>,
    /// Run both ends in this process.
    #[arg(long)]
    loopback: bool,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long, default_value_t = rdmaprobe::oob::DEFAULT_PORT)]
    port_tcp: u16,
    /// Seconds to wait for the peer to connect or answer out of band.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    oob_timeout: u64,
    /// Message size in bytes (atomics: 8).
    #[arg(short = 's', long, default_value_t = 65536, value_parser = clap::value_parser!(u32).range(1..=8 * 1024 * 1024))]
    size: u32,
    /// All sizes from 2 B to 8 MiB, powers of two.
    #[arg(short = 'a', long)]
    all_sizes: bool,
    /// Messages per QP.
    #[arg(short = 'n', long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    iters: u64,
    /// Outstanding operations per QP.
    #[arg(short = 't', long = "tx-depth", default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=128))]
    tx_depth: u32,
    /// Operations per doorbell (postlist).
    #[arg(short = 'l', long = "post-list", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    postlist: u32,
    /// A completion every this many operations.
    #[arg(short = 'Q', long = "cq-mod", default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=128))]
    cq_mod: u32,
    /// QPs per thread.
    #[arg(short = 'q', long = "qp", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    qps: u64,
    /// Threads, each with its own QPs, CQs and buffers, pinned.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    threads: u64,
    /// Both ends send.
    #[arg(short = 'b', long)]
    bidirectional: bool,
    /// Report Gb/s instead of MB/sec.
    #[arg(long)]
    report_gbits: bool,
    /// Length of the bandwidth windows (best and worst window), microseconds.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    window_us: u64,
    /// --loopback: a run shorter than this many ms is run again with more iterations, sized by
    /// the first (0: never).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(0..=3_600_000))]
    min_ms: u64,
    /// Inline messages up to this size (default: the QP's max_inline_data; 0 disables).
    #[arg(short = 'I', long)]
    inline_size: Option<u32>,
    /// Device, port and GID index.
    #[command(flatten)]
    dev: DevArgs,
    /// Post path(s); `all` runs every backend the device supports, one after the other.
    #[arg(long, value_enum, default_value_t = BackendArg::All)]
    backend: BackendArg,
    /// Doorbell mode of the direct backend.
    #[arg(long, value_enum, default_value_t = DbArg::Bf)]
    db_mode: DbArg,
    /// Seconds without any completion before a run is declared stalled.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    stall_secs: u64,
    /// Write the results as JSON.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[derive(clap::Args, Debug)]
struct PostCostArgs {
    /// Operations to measure.
    #[arg(long = "op", value_enum, value_delimiter = ',', default_values_t = [PcOp::Write, PcOp::Send, PcOp::Read])]
    ops: Vec<PcOp>,
    /// Message size in bytes.
    #[arg(short = 's', long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=1024 * 1024))]
    size: u32,
    /// Postlists (WQEs per doorbell) to measure.
    #[arg(short = 'l', long = "post-list", value_delimiter = ',', default_values_t = [1u32, 8, 32])]
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

/// The operations of `post-cost`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum PcOp {
    Write,
    Send,
    Read,
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

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::Relaxed);
    rdmaprobe::model::abort_wire_waits();
}

fn main() -> ExitCode {
    // Output into a closed pipe (`rdmaprobe suite | head`) ends the process quietly, as it does
    // a C tool, instead of a panic in println!. Sockets are unaffected: Rust's std sends with
    // MSG_NOSIGNAL, so a peer that goes away is still an EPIPE error we report.
    // SAFETY: restores the default disposition of one signal before any thread starts.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Devices { json, gids } => devices(json, gids),
        Cmd::Clock { json, window_ms } => clock(json, window_ms),
        Cmd::Lat(a) => lat(a),
        Cmd::Bw(a) => bw(a),
        Cmd::PostCost(a) => post_cost(a),
        Cmd::Compare(a) => compare(a),
        Cmd::Suite(a) => suite(a),
        Cmd::Plot(a) => plot(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rdmaprobe: error: {}", chain(&e));
            ExitCode::from(1)
        }
    }
}

/// The error and its causes, each cause only when the message so far does not already say it.
fn chain(e: &anyhow::Error) -> String {
    let mut msg = String::new();
    for c in e.chain() {
        let t = c.to_string();
        if !msg.contains(&t) {
            if !msg.is_empty() {
                msg.push_str(": ");
            }
            msg.push_str(&t);
        }
    }
    msg
}

fn build_info() -> serde_json::Value {
    let (lib, lib_version) = libibverbs_loaded();
    json!({
        "tool_version": env!("CARGO_PKG_VERSION"),
        "rdma_core_built_against": env!("RDMAPROBE_BUILD_RDMA_CORE"),
        "libibverbs_built_against": env!("RDMAPROBE_BUILD_LIBIBVERBS"),
        "libibverbs_loaded": lib,
        "libibverbs_loaded_version": lib_version,
    })
}

fn devices(as_json: bool, max_gids: u32) -> Result<ExitCode> {
    let model = model::info().map_err(|e| e.to_string()).map(|mut i| {
        // model0 through the machine's libibverbs and libmlx5 (its user-space uverbs device)
        match rdmaprobe::verbs::Context::open_model0() {
            Ok(ctx) => {
                i.backends = vec!["verbs", "wr", "direct"];
                i.provider_library = ctx.provider_library();
            }
            Err(e) => i.verbs_unavailable = Some(e.to_string()),
        }
        i
    });
    let list = match DeviceList::get() {
        Ok(l) => l,
        Err(VerbsError::NoDevice(why)) => {
            if as_json {
                let doc = json!({
                    "build": build_info(),
                    "devices": [],
                    "hardware_device": false,
                    "no_device_reason": format!("{why:?}"),
                    "explanation": why.explain(),
                    "model": model_json(&model),
                    "default_device": model.as_ref().ok().map(|m| m.name),
                });
                println!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                println!("No RDMA device.\n\n{}\n", why.explain());
                print_model(&model);
                if model.is_ok() {
                    println!(
                        "\nWithout an RDMA device, {} is the default device.",
                        model::DEVICE_NAME
                    );
                }
            }
            return Ok(ExitCode::from(EXIT_NO_DEVICE));
        }
        Err(e) => return Err(e.into()),
    };
    let mut docs = Vec::new();
    for name in list.names() {
        let ctx = list.open(&name)?;
        let info = ctx.query()?;
        let mut ports = Vec::new();
        for p in 1..=info.phys_port_cnt {
            let port = ctx.query_port(p)?;
            let gids = ctx.gids(p, max_gids)?;
            ports.push((port, gids));
        }
        docs.push((info, ports));
    }
    if as_json {
        let devs: Vec<_> = docs
            .iter()
            .map(|(info, ports)| {
                let ports: Vec<_> = ports
                    .iter()
                    .map(|(p, g)| {
                        let mut v = serde_json::to_value(p).unwrap_or_default();
                        v["gids"] = serde_json::to_value(g).unwrap_or_default();
                        v["roce_gid_index"] = json!(if p.is_ethernet() {
                            device::pick_gid_index(g)
                        } else {
                            None
                        });
                        v
                    })
                    .collect();
                let mut v = serde_json::to_value(info).unwrap_or_default();
                v["ports"] = json!(ports);
                v
            })
            .collect();
        let doc =
            json!({ "build": build_info(), "devices": devs, "hardware_device": true, "model": model_json(&model) });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(ExitCode::SUCCESS);
    }
    let (lib, lib_version) = libibverbs_loaded();
    println!(
        "rdma-core: built against {} (libibverbs {}), loaded {} ({})",
        env!("RDMAPROBE_BUILD_RDMA_CORE"),
        env!("RDMAPROBE_BUILD_LIBIBVERBS"),
        lib_version,
        lib
    );
    for (info, ports) in &docs {
        println!("hca_id:\t{}", info.name);
        println!("\tprovider:\t\t{}", info.provider);
        println!(
            "\tfw_ver:\t\t\t{}",
            if info.fw_ver.is_empty() { "-" } else { &info.fw_ver }
        );
        println!("\tnode_guid:\t\t{}", info.node_guid);
        println!("\tvendor_id:\t\t{:#06x}", info.vendor_id);
        println!("\tvendor_part_id:\t\t{}", info.vendor_part_id);
        println!("\thw_ver:\t\t\t{:#x}", info.hw_ver);
        println!("\tphys_port_cnt:\t\t{}", info.phys_port_cnt);
        println!("\tatomic_cap:\t\t{}", info.atomic_cap);
        println!(
            "\tdirect backend:\t\t{}",
            if info.mlx5dv {
                "yes (mlx5dv)"
            } else {
                "no (not an mlx5 device)"
            }
        );
        for (p, gids) in ports {
            println!("\t\tport:\t{}", p.port);
            println!("\t\t\tstate:\t\t\t{} ({})", p.state, p.state_raw);
            println!("\t\t\tphys_state:\t\t{}", p.phys_state);
            println!("\t\t\tlink_layer:\t\t{}", p.link_layer);
            println!("\t\t\tmax_mtu:\t\t{}", p.max_mtu);
            println!("\t\t\tactive_mtu:\t\t{}", p.active_mtu);
            println!("\t\t\tactive_speed:\t\t{}", p.speed);
            println!("\t\t\tactive_width:\t\t{}", p.width);
            println!("\t\t\tport_lid:\t\t{}", p.lid);
            println!("\t\t\tmax_msg_sz:\t\t{:#x}", p.max_msg_sz);
            println!("\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len);
            for g in gids {
                let v4 = g.ipv4().map(|a| format!(", {a}")).unwrap_or_default();
                println!("\t\t\tGID[{:>4}]:\t\t{}, {}{}", g.index, g.gid, g.gid_type, v4);
            }
            if p.is_ethernet() {
                match device::pick_gid_index(gids) {
                    Some(i) => println!("\t\t\tuse GID index:\t\t{i} (-x {i})"),
                    None => println!("\t\t\tuse GID index:\t\tnone found among the first {}", gids.len()),
                }
            }
        }
    }
    print_model(&model);
    Ok(ExitCode::SUCCESS)
}

fn model_json(m: &Result<model::ModelInfo, String>) -> serde_json::Value {
    match m {
        Ok(i) => serde_json::to_value(i).unwrap_or_default(),
        Err(e) => json!({ "name": model::DEVICE_NAME, "error": e }),
    }
}

fn print_model(m: &Result<model::ModelInfo, String>) {
    match m {
        Ok(i) => {
            println!("hca_id:\t{}\t(SOFTWARE MODEL, not hardware)", i.name);
            println!("\tdescription:\t\t{}", i.description);
            println!("\tshared memory:\t\t{}", i.shm_dir);
            println!("\tbackends:\t\t{}", i.backends.join(", "));
            if let Some(p) = &i.provider_library {
                println!("\tprovider:\t\t{p} (verbs and wr run through it)");
            }
            if let Some(why) = &i.verbs_unavailable {
                println!("\tverbs, wr:\t\tunavailable: {why}");
            }
            println!("\tmax_qp_wr:\t\t{}", i.max_qp_wr);
            println!("\tmax_inline_data:\t{} (device limit)", i.max_inline_data);
            println!("\tbf_size:\t\t{}", i.bf_size);
            if i.swept > 0 {
                println!("\tcleaned up:\t\t{} objects of processes that died", i.swept);
            }
        }
        Err(e) => println!("hca_id:\t{}\t(SOFTWARE MODEL) unavailable: {e}", model::DEVICE_NAME),
    }
}

fn current_clocksource() -> Option<String> {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .ok()
        .map(|s| s.trim().to_string())
}

fn clock(as_json: bool, window_ms: u64) -> Result<ExitCode> {
    let c = Calibration::run(window_ms * 1_000_000)?;
    let mut warnings = Vec::new();
    if c.source == TscSource::ClockGettime {
        warnings.push("no TSC on this architecture: timestamps are clock_gettime(CLOCK_MONOTONIC_RAW)".to_string());
    } else if !c.invariant_tsc {
        warnings.push(
            "the TSC is not invariant (CPUID 0x80000007 EDX[8] clear): its rate may change with power states".into(),
        );
    }
    if let Some(h) = c.cpuid_hz {
        let d = (h as f64 - c.calibrated_hz).abs() / h as f64;
        if d > 1e-3 {
            warnings.push(format!(
                "CPUID 0x15 gives {h} Hz but calibration measured {:.0} Hz ({:.2}% apart)",
                c.calibrated_hz,
                d * 100.0
            ));
        }
    }
    let cs = current_clocksource();
    if c.source != TscSource::ClockGettime && cs.as_deref().is_some_and(|s| s != "tsc") {
        warnings.push(format!(
            "the kernel's clocksource is {} (not tsc): the kernel does not trust the TSC here",
            cs.as_deref().unwrap_or("?")
        ));
    }
    if as_json {
        let doc = json!({
            "tsc_hz": c.hz,
            "source": c.source.as_str(),
            "invariant_tsc": c.invariant_tsc,
            "cpuid_hz": c.cpuid_hz,
            "calibrated_hz": c.calibrated_hz,
            "calibration_window_ns": c.calibration_window_ns,
            "calibration_residual_max_ns": c.calibration_residual_ns,
            "timed_region_overhead": {
                "min_ticks": c.overhead.min_cycles,
                "median_ticks": c.overhead.median_cycles,
                "p99_ticks": c.overhead.p99_cycles,
                "samples": c.overhead.samples,
                "min_ns": c.to_ns(c.overhead.min_cycles),
                "median_ns": c.to_ns(c.overhead.median_cycles),
            },
            "kernel_clocksource": cs,
            "warnings": warnings,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("TSC rate:          {:.6} MHz ({})", c.hz / 1e6, c.source.as_str());
        if let Some(h) = c.cpuid_hz {
            println!("CPUID 0x15 rate:   {:.6} MHz", h as f64 / 1e6);
        }
        println!(
            "calibration:       {:.6} MHz against CLOCK_MONOTONIC_RAW over {} ms, max residual {:.0} ns",
            c.calibrated_hz / 1e6,
            c.calibration_window_ns / 1_000_000,
            c.calibration_residual_ns
        );
        println!("invariant TSC:     {}", if c.invariant_tsc { "yes" } else { "no" });
        println!("kernel clocksource: {}", cs.as_deref().unwrap_or("unknown"));
        println!(
            "timed-region overhead: min {} TSC ticks ({:.1} ns), median {} ticks ({:.1} ns), p99 {} ticks, {} samples",
            c.overhead.min_cycles,
            c.to_ns(c.overhead.min_cycles),
            c.overhead.median_cycles,
            c.to_ns(c.overhead.median_cycles),
            c.overhead.p99_cycles,
            c.overhead.samples
        );
        for w in &warnings {
            println!("warning: {w}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Fewer iterations per latency block than this get a warning.
const MIN_BLOCK: u64 = 100;
/// Fewer iterations per latency block than this: the blocks are lowered until each has this many.
const MIN_BLOCK_FLOOR: u64 = 10;

fn lat(mut a: LatArgs) -> Result<ExitCode> {
    use rdmaprobe::backend::setup::{Dev, DEPTH};
    use rdmaprobe::backend::{BackendKind, OpKind};
    use rdmaprobe::mlx5::sq::DbMode;
    use rdmaprobe::report::env::Fingerprint;
    use rdmaprobe::scenario::lat::LatParams;
    use rdmaprobe::scenario::runner::{run_blocks, AnyPair, LatPair, LatResult, Length};

    if a.host.is_some() && a.loopback {
        anyhow::bail!("--loopback runs both ends in this process: give no HOST");
    }
    if let Some(c) = outputs_ok(&[a.json.as_ref(), a.hdr.as_ref()]) {
        return Ok(c);
    }
    let network = !a.loopback;
    if network && (a.duration.is_some() || a.hdr.is_some()) {
        anyhow::bail!(
            "-D and --hdr are available with --loopback only in this version (both ends must run the same iterations)"
        );
    }
    // SAFETY: installs a handler that only stores to an atomic (async-signal-safe).
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
    let op = match a.op {
        LatOp::Write => OpKind::Write,
        LatOp::Send => OpKind::Send,
        LatOp::Read => OpKind::Read,
        LatOp::Atomic => OpKind::FetchAdd,
    };
    let sizes: Vec<u32> = if op == OpKind::FetchAdd {
        if a.all_sizes || a.size != 2 && a.size != 8 {
            eprintln!("rdmaprobe: atomics move 8 bytes; -s/-a ignored");
        }
        vec![8]
    } else if a.all_sizes {
        (1..=23).map(|e| 1u32 << e).collect()
    } else {
        vec![a.size]
    };
    let max = *sizes.iter().max().unwrap_or(&8) as usize;
    let buf_len = (2 * max.max(64)).next_multiple_of(4096);
    let model_cfg = rdmaprobe::model::ModelConfig {
        wire_delay_ns: a.model_delay_ns,
        // the model executes a WQE after the post call returns: the post column is the post alone
        exec: rdmaprobe::model::ExecMode::AfterPost,
        ..Default::default()
    };
    let (dev, note) = a.dev.open(model_cfg)?;
    if let Some(n) = note {
        eprintln!("rdmaprobe: {n}");
    }
    if a.model_delay_ns.is_some() && !dev.is_model() {
        anyhow::bail!("--model-delay-ns applies to model0 only (device is {})", dev.name());
    }
    let kinds: Vec<BackendKind> = match a.backend {
        BackendArg::All => dev.backends(),
        BackendArg::Verbs => vec![BackendKind::Verbs],
        BackendArg::Wr => vec![BackendKind::Wr],
        BackendArg::Direct => vec![BackendKind::Direct],
    };
    for k in &kinds {
        dev.supports(*k)?;
    }
    if kinds.is_empty() {
        anyhow::bail!("no backend can run on {}", dev.name());
    }
    for s in &sizes {
        dev.check_size(*s)?;
    }
    let mode = match a.db_mode {
        DbArg::Bf => DbMode::Bf,
        DbArg::BfNofence => DbMode::BfNoFence,
        DbArg::Db => DbMode::Db,
    };
    // MLX5_SHUT_UP_BF: libmlx5 rings the doorbell only, and so does the direct path
    let mode = rdmaprobe::backend::setup::Mlx5Env::get().direct_mode(mode);
    let cal = Calibration::run(200_000_000)?;
    let mut fp = Fingerprint::collect(&cal, &dev.name(), &dev.provider(), dev.firmware(), dev.is_model());
    fp.provider_library = dev.provider_library();
    if let Dev::Verbs { port, .. } = &dev {
        fp.port = serde_json::to_value(port).ok();
    }
    let mut warnings = fp.warnings();
    if let Some(d) = a.model_delay_ns {
        if d.saturating_mul(2) >= a.stall_secs.saturating_mul(1_000_000_000) {
            eprintln!(
                "rdmaprobe: error: --model-delay-ns {d} must stay below half the stall deadline (--stall-secs {})",
                a.stall_secs
            );
            return Ok(ExitCode::from(2));
        }
        warnings.push(format!(
            "model0 adds a wire delay of {d} ns to every message in each direction (one-way figures +{d} ns, round trips +{} ns)",
            2 * d
        ));
    }
    let per_block = a.iters / a.blocks.max(1);
    if a.duration.is_none() && per_block < MIN_BLOCK_FLOOR {
        // a block's first iterations follow the hand-over to the measuring threads: blocks of a
        // few iterations would weigh them in the figures; fewer blocks, said so
        let blocks = (a.iters / MIN_BLOCK_FLOOR).max(1);
        let msg = format!(
            "--blocks {} lowered to {blocks}: -n {} allows at least {MIN_BLOCK_FLOOR} iterations per block",
            a.blocks, a.iters
        );
        eprintln!("rdmaprobe: {msg}");
        warnings.push(msg);
        a.blocks = blocks;
    }
    let per_block = a.iters / a.blocks.max(1);
    if a.duration.is_none() && per_block < MIN_BLOCK {
        warnings.push(format!(
            "{per_block} iterations per block (-n {} / --blocks {}): a block's first iterations follow the hand-over \
             to the measuring threads, and per-block statistics (compare's intervals) rest on few samples; \
             use at least {MIN_BLOCK} per block",
            a.iters, a.blocks
        ));
    }
    let mut pairs = Vec::new();
    let mut net: Option<(
        rdmaprobe::oob::Peer,
        Vec<(BackendKind, rdmaprobe::backend::setup::AnyEnd)>,
    )> = None;
    let max_inline = if network {
        rdmaprobe::backend::setup::INLINE
    } else {
        for k in &kinds {
            pairs.push(LatPair::new(*k, AnyPair::new(&dev, *k, op, buf_len, mode)?));
        }
        pairs.iter().map(|p| p.pair.max_inline()).min().unwrap_or(0)
    };
    let inline_limit = match a.inline_size {
        Some(i) if i > max_inline && matches!(op, OpKind::Write | OpKind::Send) => {
            anyhow::bail!("-I {i} exceeds the QPs' max_inline_data {max_inline}")
        }
        Some(i) => i,
        None => max_inline,
    };
    if network {
        let hello = rdmaprobe::oob::Hello::new(
            [
                ("scenario", "lat".to_string()),
                ("op", op.as_str().to_string()),
                (
                    "sizes",
                    sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(","),
                ),
                ("iters", a.iters.to_string()),
                ("warmup", a.warmup.to_string()),
                ("blocks", a.blocks.to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .chain(end_params(&kinds, mode, inline_limit, buf_len))
            .collect(),
        );
        net = Some(connect_peer(&a, &hello, &dev, &kinds, op, buf_len, mode)?);
    }
    let one_way = rdmaprobe::scenario::lat::one_way(op);
    let server = network && a.host.is_none();
    if server {
        let (peer, _) = net.as_ref().expect("connected");
        println!(
            " server: client {} connected; running {} with it",
            peer.addr(),
            a.op.title()
        );
    }
    if !server {
        println!("{}", "-".repeat(118));
        println!(
            " {} latency, device {} ({}), backends {}, {}",
            a.op.title(),
            dev.name(),
            dev.provider(),
            kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", "),
            match a.duration {
                Some(d) => format!("{d} s per size, blocks of 1000 iterations per backend, interleaved"),
                None => format!(
                    "{} iterations per size and backend in {} interleaved blocks",
                    a.iters, a.blocks
                ),
            }
        );
        println!(
            " figure: {}; TSC {:.3} MHz ({}); timer overhead {:.1} ns (median)",
            if one_way {
                "one-way latency = round trip / 2"
            } else {
                "round trip"
            },
            cal.hz / 1e6,
            cal.source.as_str(),
            cal.overhead_ns()
        );
        if dev.is_model() {
            println!(
                " post p50: the post call alone; model0 executes each WQE after it returns (in the completion wait)"
            );
        }
        for w in &warnings {
            println!(" WARNING: {w}");
        }
        println!("{}", "-".repeat(118));
        println!(
            " {:>8} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "#bytes",
            "backend",
            "#iter",
            "min[ns]",
            "p50[ns]",
            "p90[ns]",
            "p99[ns]",
            "p99.9",
            "p99.99",
            "max[ns]",
            "avg[ns]",
            "stdev",
            "post p50"
        );
    }
    let mut results: Vec<LatResult> = Vec::new();
    let mut intervals: Vec<rdmaprobe::report::Interval> = Vec::new();
    let run_start = std::time::Instant::now();
    // ping-pong state per backend across sizes (marker numbering, receives posted once)
    let mut net_states = vec![rdmaprobe::scenario::lat::PingState::default(); kinds.len()];
    for size in sizes {
        let inline = matches!(op, OpKind::Write | OpKind::Send) && size <= inline_limit;
        let p = LatParams {
            op,
            size,
            iters: a.iters,
            warmup: a.warmup,
            inline,
            stall: std::time::Duration::from_secs(a.stall_secs),
        };
        let _ = DEPTH;
        let rs = match net.as_mut() {
            None => {
                let len = match a.duration {
                    Some(d) => Length::Duration {
                        time: std::time::Duration::from_secs(d),
                        block: 1000,
                    },
                    None => Length::Iterations {
                        iters: a.iters,
                        blocks: a.blocks,
                    },
                };
                // interval times from the start of the whole run (several sizes follow each other)
                let t_base = run_start.elapsed().as_secs_f64();
                let mut on_block = |k: BackendKind, v: &[f64], t0: f64, t1: f64| {
                    if a.hdr.is_some() {
                        let mut h = rdmaprobe::report::Hist::new();
                        v.iter().for_each(|&x| h.record(x));
                        intervals.push(rdmaprobe::report::Interval {
                            tag: format!("{}-{}-{}", k.as_str(), op.as_str(), size),
                            start_s: t_base + t0,
                            duration_s: t1 - t0,
                            hist: h,
                        });
                    }
                };
                run_blocks(&mut pairs, &p, len, &cal, &INTERRUPTED, &mut on_block)?
            }
            Some((peer, ends)) => match run_network(ends, &mut net_states, &p, a.blocks, !server, &cal) {
                Ok(rs) => rs,
                Err(e) => {
                    // tell the peer (best effort) and stop
                    let _ = peer.send(&rdmaprobe::oob::Done {
                        error: Some(e.to_string()),
                    });
                    return Err(e);
                }
            },
        };
        for r in rs {
            let l = &r.latency;
            println!(
                " {:>8} {:>7} {:>9} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8.1}{}",
                r.size,
                r.backend,
                r.iterations,
                l.min,
                l.p50,
                l.p90,
                l.p99,
                l.p99_9,
                l.p99_99,
                l.max,
                l.mean,
                l.stdev,
                r.post.p50,
                if r.post_below_overhead { "*" } else { "" }
            );
            results.push(r);
        }
    }
    if let Some(path) = &a.hdr {
        let mut buf = Vec::new();
        rdmaprobe::report::write_interval_log(
            &mut buf,
            &format!(
                "rdmaprobe {} lat {} on {} ({}), ns",
                env!("CARGO_PKG_VERSION"),
                op.as_str(),
                dev.name(),
                dev.provider()
            ),
            &intervals,
        )
        .map_err(|e| anyhow::anyhow!("writing the interval log: {e}"))?;
        write_atomically(path, &buf)?;
        println!(
            " interval log ({} intervals) written to {}",
            intervals.len(),
            path.display()
        );
    }
    if let Some((peer, _)) = net.as_mut() {
        peer.set_timeout(std::time::Duration::from_secs(a.stall_secs + a.oob_timeout))?;
        peer.send(&rdmaprobe::oob::Done { error: None })?;
        let theirs: rdmaprobe::oob::Done = peer.recv()?;
        if let Some(e) = theirs.error {
            anyhow::bail!("the peer failed: {e}");
        }
        if server {
            println!(" server: done");
            return Ok(ExitCode::SUCCESS);
        }
    }
    if results.iter().any(|r| r.post_below_overhead) {
        println!(" * post time at or below the timer's own overhead: not a real measurement");
    }
    println!("{}", "-".repeat(118));
    if let Some(path) = &a.json {
        let doc = result_doc(
            &fp,
            &cal,
            &warnings,
            json!({
                "scenario": "lat", "op": op.as_str(), "iters": a.iters, "warmup": a.warmup, "blocks": a.blocks,
                "backends": kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(), "db_mode": mode.as_str(),
                "inline_limit": inline_limit, "loopback": !network, "model_delay_ns": a.model_delay_ns,
                // what the QPs were granted (in process: read from them; client/server: asked for)
                "qp_max_inline_data": max_inline, "qp_max_inline_data_source": if network { "requested" } else { "granted" },
                "model_exec": dev.is_model().then_some("after_post"),
                "duration_s": a.duration,
                "peer": net.as_ref().map(|(p, _)| p.addr().to_string()),
            }),
            &results,
        )?;
        write_atomically(path, &serde_json::to_vec_pretty(&doc)?)?;
        println!(" results written to {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes a result file safely (`report::output`): a regular file replaced whole through an
/// exclusive temporary file, a symlink followed, a device or FIFO written through, never replaced.
fn write_atomically(path: &std::path::Path, data: &[u8]) -> Result<()> {
    rdmaprobe::report::output::write(path, data)?;
    Ok(())
}

/// Checks the output files given before the run spends its time: exit status 2 and a message.
fn outputs_ok(paths: &[Option<&std::path::PathBuf>]) -> Option<ExitCode> {
    for p in paths.iter().flatten() {
        if let Err(e) = rdmaprobe::report::output::check(p) {
            eprintln!("rdmaprobe: error: cannot write the output file {e}");
            return Some(ExitCode::from(2));
        }
    }
    None
}

fn bw(a: BwArgs) -> Result<ExitCode> {
    use rdmaprobe::backend::setup::Dev;
    use rdmaprobe::backend::{BackendKind, OpKind};
    use rdmaprobe::mlx5::sq::DbMode;
    use rdmaprobe::report::env::Fingerprint;
    use rdmaprobe::scenario::bw::BwParams;
    use rdmaprobe::scenario::runner::run_bw;

    if a.host.is_some() && a.loopback {
        anyhow::bail!("--loopback runs both ends in this process: give no HOST");
    }
    if let Some(c) = outputs_ok(&[a.json.as_ref()]) {
        return Ok(c);
    }
    let network = !a.loopback;
    let server = network && a.host.is_none();
    // SAFETY: installs a handler that only stores to an atomic (async-signal-safe).
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
    let op = match a.op {
        LatOp::Write => OpKind::Write,
        LatOp::Send => OpKind::Send,
        LatOp::Read => OpKind::Read,
        LatOp::Atomic => OpKind::FetchAdd,
    };
    if a.postlist > a.tx_depth || a.cq_mod > a.tx_depth {
        anyhow::bail!(
            "--post-list ({}) and --cq-mod ({}) must not exceed --tx-depth ({})",
            a.postlist,
            a.cq_mod,
            a.tx_depth
        );
    }
    let sizes: Vec<u32> = if op == OpKind::FetchAdd {
        vec![8]
    } else if a.all_sizes {
        (1..=23).map(|e| 1u32 << e).collect()
    } else {
        vec![a.size]
    };
    let max = *sizes.iter().max().unwrap_or(&8) as usize;
    let buf_len = (2 * max.max(64)).next_multiple_of(4096);
    // as suite runs it: the model executes after the post call (the same figures in both)
    let model_cfg = rdmaprobe::model::ModelConfig {
        wire_delay_ns: None,
        exec: rdmaprobe::model::ExecMode::AfterPost,
        ..Default::default()
    };
    let (dev, note) = a.dev.open(model_cfg)?;
    if let Some(n) = note {
        eprintln!("rdmaprobe: {n}");
    }
    let kinds: Vec<BackendKind> = match a.backend {
        BackendArg::All => dev.backends(),
        BackendArg::Verbs => vec![BackendKind::Verbs],
        BackendArg::Wr => vec![BackendKind::Wr],
        BackendArg::Direct => vec![BackendKind::Direct],
    };
    for k in &kinds {
        dev.supports(*k)?;
    }
    let mode = match a.db_mode {
        DbArg::Bf => DbMode::Bf,
        DbArg::BfNofence => DbMode::BfNoFence,
        DbArg::Db => DbMode::Db,
    };
    // MLX5_SHUT_UP_BF: libmlx5 rings the doorbell only, and so does the direct path
    let mode = rdmaprobe::backend::setup::Mlx5Env::get().direct_mode(mode);
    for s in &sizes {
        dev.check_size(*s)?;
    }
    let inline_limit = a.inline_size.unwrap_or(rdmaprobe::backend::setup::INLINE);
    let cal = Calibration::run(200_000_000)?;
    let mut fp = Fingerprint::collect(&cal, &dev.name(), &dev.provider(), dev.firmware(), dev.is_model());
    fp.provider_library = dev.provider_library();
    if let Dev::Verbs { port, .. } = &dev {
        fp.port = serde_json::to_value(port).ok();
    }
    let warnings = fp.warnings();
    // client and server: the handshake, then every thread's QPs of every backend connected
    let mut net: Option<(rdmaprobe::oob::Peer, Vec<Vec<Vec<rdmaprobe::backend::setup::AnyEnd>>>)> = None;
    if network {
        let hello = rdmaprobe::oob::Hello::new(
            [
                ("scenario", "bw".to_string()),
                ("op", op.as_str().to_string()),
                (
                    "sizes",
                    sizes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(","),
                ),
                ("iters", a.iters.to_string()),
                ("tx_depth", a.tx_depth.to_string()),
                ("postlist", a.postlist.to_string()),
                ("cq_mod", a.cq_mod.to_string()),
                ("qps", a.qps.to_string()),
                ("threads", a.threads.to_string()),
                ("bidirectional", a.bidirectional.to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .chain(end_params(&kinds, mode, inline_limit, buf_len))
            .collect(),
        );
        let link = OobLink {
            host: a.host.clone(),
            port: a.port_tcp,
            timeout: a.oob_timeout,
        };
        let mut peer = handshake(&link, &hello)?;
        let mut all = Vec::new();
        for k in &kinds {
            let mut threads = Vec::new();
            for _ in 0..a.threads {
                let mut ends = Vec::new();
                for _ in 0..a.qps {
                    let half = rdmaprobe::backend::setup::HalfEnd::new(&dev, *k, op, buf_len, mode)?;
                    peer.send(&half.info(&dev)?)?;
                    let theirs: rdmaprobe::oob::QpInfo = peer.recv()?;
                    ends.push(half.connect(&dev, op, &theirs)?);
                }
                threads.push(ends);
            }
            all.push(threads);
        }
        // neither side posts before the other's QPs are connected
        let connected: usize = all.iter().flatten().map(|t| t.len()).sum();
        peer.ready(connected as u32)?;
        if server {
            println!(
                " server: client {} connected; running {} bandwidth with it",
                peer.addr(),
                a.op.title()
            );
        }
        net = Some((peer, all));
    }
    let unit = if a.report_gbits { "Gb/sec" } else { "MB/sec" };
    println!("{}", "-".repeat(118));
    println!(
        " {} bandwidth, device {} ({}), {} thread(s) x {} QP(s), tx depth {}, postlist {}, CQE every {}{}",
        a.op.title(),
        dev.name(),
        dev.provider(),
        a.threads,
        a.qps,
        a.tx_depth,
        a.postlist,
        a.cq_mod,
        if a.bidirectional { ", bidirectional" } else { "" }
    );
    println!(
        " MB = 2^20 bytes, as perftest; TSC {:.3} MHz ({})",
        cal.hz / 1e6,
        cal.source.as_str()
    );
    for w in &warnings {
        println!(" WARNING: {w}");
    }
    println!("{}", "-".repeat(118));
    println!(
        " windows of {:.3} ms, or the multiple that holds at least 16 completions (win[ms]: the length used; a window moves in steps of one completion), partition each run (the last up to 1.5 windows); peak: perftest's (shortest time per message from a post to a later completion; one QP, one direction only); {}",
        a.window_us as f64 / 1e3,
        if network {
            format!("runs are -n messages per QP (client and server agree on them); runs under {} ms are flagged", a.min_ms)
        } else {
            format!("runs shorter than {} ms are repeated with more messages (--min-ms)", a.min_ms)
        }
    );
    println!(
        " {:>8} {:>7} {:>12} {:>10} {:>8} {:>16} {:>16} {:>16} {:>16} {:>12}",
        "#bytes",
        "backend",
        "#messages",
        "time[ms]",
        "win[ms]",
        format!("peak[{unit}]"),
        format!("average[{unit}]"),
        format!("best win[{unit}]"),
        format!("worst win[{unit}]"),
        "MsgRate[Mpps]"
    );
    let mut short_runs: Vec<String> = Vec::new();
    let conv = |mib: f64| {
        if a.report_gbits {
            mib * 1024.0 * 1024.0 * 8.0 / 1e9
        } else {
            mib
        }
    };
    let mut results = Vec::new();
    for size in &sizes {
        for k in &kinds {
            let p = BwParams {
                op,
                size: *size,
                iters: a.iters,
                tx_depth: a.tx_depth,
                postlist: a.postlist,
                cq_mod: a.cq_mod,
                inline: matches!(op, OpKind::Write | OpKind::Send) && *size <= inline_limit,
                bidirectional: a.bidirectional,
                stall: std::time::Duration::from_secs(a.stall_secs),
                window: std::time::Duration::from_micros(a.window_us),
                // both ends of a client/server run must agree on the iterations: no resizing
                min_duration: if network {
                    std::time::Duration::ZERO
                } else {
                    std::time::Duration::from_millis(a.min_ms)
                },
            };
            let r = match net.as_mut() {
                None => run_bw(
                    &dev,
                    *k,
                    &p,
                    a.threads as usize,
                    a.qps as usize,
                    buf_len,
                    mode,
                    &cal,
                    &INTERRUPTED,
                )?,
                Some((peer, all)) => {
                    let ki = kinds.iter().position(|x| x == k).unwrap_or(0);
                    let out = match rdmaprobe::scenario::runner::bw_side(&mut all[ki], &p, !server, &cal, &INTERRUPTED)
                    {
                        Ok(o) => o,
                        Err(e) => {
                            let _ = peer.send(&rdmaprobe::oob::Done {
                                error: Some(e.to_string()),
                            });
                            return Err(e.into());
                        }
                    };
                    if server {
                        continue;
                    }
                    rdmaprobe::scenario::runner::BwResult {
                        scenario: "bw".into(),
                        backend: k.as_str().into(),
                        op: op.cli_name().into(),
                        verb: op.as_str().into(),
                        size: *size,
                        threads: a.threads as usize,
                        qps_per_thread: a.qps as usize,
                        tx_depth: a.tx_depth,
                        postlist: a.postlist,
                        cq_mod: a.cq_mod,
                        bidirectional: a.bidirectional,
                        inline: p.inline,
                        iters: p.iters,
                        min_duration_ms: 0.0,
                        summary: rdmaprobe::scenario::bw::summarize(&out, *size, a.cq_mod, cal.hz),
                    }
                }
            };
            let s = &r.summary;
            println!(
                " {:>8} {:>7} {:>12} {:>10.1} {:>8.2} {:>16} {:>16.2} {:>16.2} {:>16.2} {:>12.4}",
                size,
                k.as_str(),
                s.messages,
                s.seconds * 1e3,
                s.window_ms,
                s.bw_peak_perftest_mib_s
                    .map(|v| format!("{:.2}", conv(v)))
                    .unwrap_or_else(|| "-".into()),
                conv(s.bw_avg_mib_s),
                conv(s.bw_peak_window_mib_s),
                conv(s.bw_min_window_mib_s),
                s.msg_rate_mpps
            );
            if s.seconds * 1e3 < a.min_ms as f64 {
                short_runs.push(format!("{size} B {} ({:.1} ms)", k.as_str(), s.seconds * 1e3));
            }
            results.push(r);
        }
    }
    if !short_runs.is_empty() && !server {
        println!(
            " WARNING: shorter than {} ms, too short for a steady figure (raise -n): {}",
            a.min_ms,
            short_runs.join(", ")
        );
    }
    if let Some((peer, _)) = net.as_mut() {
        peer.set_timeout(std::time::Duration::from_secs(a.stall_secs + a.oob_timeout))?;
        peer.send(&rdmaprobe::oob::Done { error: None })?;
        let theirs: rdmaprobe::oob::Done = peer.recv()?;
        if let Some(e) = theirs.error {
            anyhow::bail!("the peer failed: {e}");
        }
        if server {
            println!(" server: done");
            return Ok(ExitCode::SUCCESS);
        }
    }
    println!("{}", "-".repeat(118));
    if let Some(path) = &a.json {
        let doc = result_doc(
            &fp,
            &cal,
            &warnings,
            json!({
                "scenario": "bw", "window_ms": a.window_us as f64 / 1e3, "min_duration_ms": a.min_ms, "inline_limit": inline_limit,
                "model_exec": dev.is_model().then_some("after_post"), "op": op.as_str(), "iters": a.iters, "tx_depth": a.tx_depth, "postlist": a.postlist,
                "cq_mod": a.cq_mod, "qps_per_thread": a.qps, "threads": a.threads, "bidirectional": a.bidirectional,
                "backends": kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(), "db_mode": mode.as_str(), "loopback": !network,
                "peer": net.as_ref().map(|(p, _)| p.addr().to_string()),
            }),
            &results,
        )?;
        write_atomically(path, &serde_json::to_vec_pretty(&doc)?)?;
        println!(" results written to {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

fn post_cost(a: PostCostArgs) -> Result<ExitCode> {
    use rdmaprobe::backend::setup::INLINE;
    use rdmaprobe::backend::{BackendKind, OpKind};
    use rdmaprobe::mlx5::sq::DbMode;
    use rdmaprobe::report::env::Fingerprint;
    use rdmaprobe::scenario::post_cost::{PostCostParams, BLOCK_WQES};
    use rdmaprobe::scenario::runner::{run_post_cost, tsc_step};

    if let Some(c) = outputs_ok(&[a.json.as_ref()]) {
        return Ok(c);
    }
    if let Some(bad) = a.postlists.iter().find(|&&l| l == 0 || l > 48) {
        anyhow::bail!("--post-list {bad}: postlists must be within 1..=48");
    }
    // model0 executes only between timed blocks, so the timed region holds the posts alone
    let model_cfg = rdmaprobe::model::ModelConfig {
        wire_delay_ns: None,
        exec: rdmaprobe::model::ExecMode::Deferred,
        ..Default::default()
    };
    let (dev, note) = a.dev.open(model_cfg)?;
    if let Some(n) = note {
        eprintln!("rdmaprobe: {n}");
    }
    let kinds: Vec<BackendKind> = match a.backend {
        BackendArg::All => dev.backends(),
        BackendArg::Verbs => vec![BackendKind::Verbs],
        BackendArg::Wr => vec![BackendKind::Wr],
        BackendArg::Direct => vec![BackendKind::Direct],
    };
    for k in &kinds {
        dev.supports(*k)?;
    }
    let ops: Vec<OpKind> = a
        .ops
        .iter()
        .map(|o| match o {
            PcOp::Write => OpKind::Write,
            PcOp::Send => OpKind::Send,
            PcOp::Read => OpKind::Read,
        })
        .collect();
    let cal = Calibration::run(200_000_000)?;
    let mut fp = Fingerprint::collect(&cal, &dev.name(), &dev.provider(), dev.firmware(), dev.is_model());
    fp.provider_library = dev.provider_library();
    let warnings = fp.warnings();
    let step_ns = cal.to_ns(tsc_step());
    println!("{}", "-".repeat(112));
    println!(
        " post cost, {} B, device {} ({}); {} blocks of up to {BLOCK_WQES} WQEs per configuration, each timed as a whole",
        a.size,
        dev.name(),
        dev.provider(),
        a.blocks
    );
    println!(
        " TSC {:.3} MHz, step {:.1} ns ({} ticks); timer overhead {:.1} ns (median, taken off every block); ticks are TSC ticks, not core cycles",
        cal.hz / 1e6,
        step_ns,
        tsc_step(),
        cal.overhead_ns()
    );
    if dev.is_model() {
        println!(" model0 executes the WQEs between blocks, outside the timed region");
    }
    for w in &warnings {
        println!(" WARNING: {w}");
    }
    println!("{}", "-".repeat(112));
    println!(
        " {:>5} {:>7} {:>10} {:>8} {:>6} {:>7} {:>7} {:>14} {:>12} {:>12} {:>13}",
        "op",
        "backend",
        "doorbell",
        "postlist",
        "inline",
        "CQE/N",
        "blocks",
        "ticks/WQE p50",
        "ns/WQE p50",
        "ns/WQE p99",
        "ns/call p50"
    );
    let mut results = Vec::new();
    for &op in &ops {
        for k in &kinds {
            let modes: &[DbMode] = if *k == BackendKind::Direct && rdmaprobe::backend::setup::Mlx5Env::get().shut_up_bf
            {
                // MLX5_SHUT_UP_BF: the doorbell only, as libmlx5
                &[DbMode::Db]
            } else if *k == BackendKind::Direct {
                &[DbMode::Bf, DbMode::BfNoFence, DbMode::Db]
            } else {
                &[DbMode::Bf]
            };
            for mode in modes {
                for &postlist in &a.postlists {
                    for inline in [false, true] {
                        if inline && (a.size > INLINE || op == OpKind::Read) {
                            continue;
                        }
                        for cq_mod in [1, a.cq_mod] {
                            let p = PostCostParams {
                                op,
                                size: a.size,
                                postlist,
                                inline,
                                cq_mod,
                                blocks: a.blocks,
                                stall: std::time::Duration::from_secs(10),
                            };
                            let r = run_post_cost(&dev, *k, &p, *mode, &cal)?;
                            println!(
                                " {:>5} {:>7} {:>10} {:>8} {:>6} {:>7} {:>7} {:>14.2} {:>12.2} {:>12.2} {:>12.2}{}",
                                op.as_str(),
                                k.as_str(),
                                r.db_mode.as_deref().unwrap_or("-"),
                                postlist,
                                if inline { "yes" } else { "no" },
                                cq_mod,
                                r.block_per_wqe_ns.len(),
                                r.per_wqe_ticks_p50,
                                r.per_wqe_ns.p50,
                                r.per_wqe_ns.p99,
                                r.call_ns.p50,
                                if r.below_overhead { "*" } else { "" }
                            );
                            results.push(r);
                        }
                    }
                }
            }
        }
    }
    if results.iter().any(|r| r.below_overhead) {
        println!(" * block within 4 TSC steps of the timer's own overhead: not a resolved measurement");
    }
    println!("{}", "-".repeat(112));
    if let Some(path) = &a.json {
        let runs: Vec<serde_json::Value> = results
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(r)?;
                v["scenario"] = json!("post_cost");
                Ok(v)
            })
            .collect::<Result<_>>()?;
        let doc = result_doc(
            &fp,
            &cal,
            &warnings,
            json!({ "scenario": "post_cost", "ops": ops.iter().map(|o| o.as_str()).collect::<Vec<_>>(), "size_bytes": a.size,
                    "blocks": a.blocks, "postlists": a.postlists, "cq_mod": a.cq_mod, "max_wqes_per_block": BLOCK_WQES,
                    "tsc_step_ns": step_ns }),
            &runs,
        )?;
        write_atomically(path, &serde_json::to_vec_pretty(&doc)?)?;
        println!(" results written to {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Where the peer is: a server to connect to, or none (this side is the server).
struct OobLink {
    host: Option<String>,
    port: u16,
    timeout: u64,
}

/// The out-of-band handshake: parameters compared; a difference stops both ends, naming it.
fn handshake(link: &OobLink, hello: &rdmaprobe::oob::Hello) -> Result<rdmaprobe::oob::Peer> {
    use rdmaprobe::oob::{Answer, Hello, OobError, Peer};
    let timeout = std::time::Duration::from_secs(link.timeout);
    Ok(match &link.host {
        Some(h) => {
            let mut p = Peer::connect(h, link.port, timeout)?;
            p.send(hello)?;
            match p.recv::<Answer>()? {
                Answer::Agree(theirs) => hello.check(&theirs)?,
                Answer::Refuse { param, server, client } => {
                    return Err(OobError::Mismatch {
                        param,
                        ours: client,
                        theirs: server,
                    }
                    .into())
                }
            }
            p
        }
        None => {
            eprintln!(
                "rdmaprobe: server waiting for a client on TCP port {} ({} s)",
                link.port, link.timeout
            );
            let mut p = Peer::accept(link.port, timeout)?;
            let theirs: Hello = p.recv()?;
            if let Err(e) = hello.check(&theirs) {
                if let OobError::Mismatch { param, ours, theirs } = &e {
                    p.send(&Answer::Refuse {
                        param: param.clone(),
                        server: ours.clone(),
                        client: theirs.clone(),
                    })?;
                }
                return Err(e.into());
            }
            p.send(&Answer::Agree(hello.clone()))?;
            p
        }
    })
}

/// The hello parameters every client/server scenario shares: the backends and what each end's
/// QPs and buffers are made with.
fn end_params(
    kinds: &[rdmaprobe::backend::BackendKind],
    mode: rdmaprobe::mlx5::sq::DbMode,
    inline_limit: u32,
    buf_len: usize,
) -> [(String, String); 4] {
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

/// The handshake, then for each backend this side's QP and buffer exchanged with the peer's and
/// connected.
#[allow(clippy::too_many_arguments)]
fn connect_peer(
    a: &LatArgs,
    hello: &rdmaprobe::oob::Hello,
    dev: &rdmaprobe::backend::setup::Dev,
    kinds: &[rdmaprobe::backend::BackendKind],
    op: rdmaprobe::backend::OpKind,
    buf_len: usize,
    mode: rdmaprobe::mlx5::sq::DbMode,
) -> Result<(
    rdmaprobe::oob::Peer,
    Vec<(rdmaprobe::backend::BackendKind, rdmaprobe::backend::setup::AnyEnd)>,
)> {
    let link = OobLink {
        host: a.host.clone(),
        port: a.port_tcp,
        timeout: a.oob_timeout,
    };
    let mut peer = handshake(&link, hello)?;
    let mut ends = Vec::new();
    for k in kinds {
        let half = rdmaprobe::backend::setup::HalfEnd::new(dev, *k, op, buf_len, mode)?;
        peer.send(&half.info(dev)?)?;
        let theirs: rdmaprobe::oob::QpInfo = peer.recv()?;
        ends.push((*k, half.connect(dev, op, &theirs)?));
    }
    // neither side posts before the other's QPs are connected
    peer.ready(ends.len() as u32)?;
    Ok((peer, ends))
}

/// Runs the blocks of one size on connected ends; the client returns the results.
fn run_network(
    ends: &mut [(rdmaprobe::backend::BackendKind, rdmaprobe::backend::setup::AnyEnd)],
    states: &mut [rdmaprobe::scenario::lat::PingState],
    p: &rdmaprobe::scenario::lat::LatParams,
    blocks: u64,
    client: bool,
    cal: &Calibration,
) -> Result<Vec<rdmaprobe::scenario::runner::LatResult>> {
    use rdmaprobe::scenario::lat::LatSamples;
    use rdmaprobe::scenario::runner::{figures_ns, finish, lat_side, Blocks};
    let blocks = blocks.clamp(1, p.iters.max(1));
    let mut all: Vec<(LatSamples, Blocks)> = ends
        .iter()
        .map(|_| (LatSamples::default(), Blocks::default()))
        .collect();
    for b in 0..blocks {
        let iters = p.iters / blocks + u64::from(b < p.iters % blocks);
        let warmup = if b == 0 { p.warmup } else { 0 };
        // the backends' order rotates from block to block, the same on both ends
        let n = ends.len();
        for j in 0..n {
            let i = (j + b as usize) % n;
            let end = &mut ends[i].1;
            if let Some(s) = lat_side(end, client, p, iters, warmup, &mut states[i], &INTERRUPTED)? {
                all[i].1.add(figures_ns(p, &s.rtt, cal));
                all[i].0.rtt.extend(s.rtt);
                all[i].0.post.extend(s.post);
                all[i].0.wait.extend(s.wait);
            }
        }
    }
    if !client {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for ((k, _), (s, m)) in ends.iter().zip(all) {
        out.push(finish(*k, p, &s, m, cal)?);
    }
    Ok(out)
}

fn compare(a: CompareArgs) -> Result<ExitCode> {
    use rdmaprobe::report::compare;
    let fail = |why: String| {
        eprintln!("rdmaprobe: error: {why}");
        Ok(ExitCode::from(2))
    };
    if let Some(t) = a.threshold.filter(|t| !(t.is_finite() && *t >= 0.0)) {
        return fail(format!("--threshold must be a percentage >= 0 (got {t})"));
    }
    if let Some(m) = a.metric.iter().find(|m| !["p50", "p99", "bw"].contains(&m.as_str())) {
        return fail(format!("unknown metric '{m}' (p50, p99, bw)"));
    }
    let (base, new) = match (a.files.as_slice(), a.base.is_empty(), a.new.is_empty()) {
        ([b, n], true, true) => (vec![b.clone()], vec![n.clone()]),
        ([], false, false) => (a.base.clone(), a.new.clone()),
        _ => {
            return fail(
                "give BASE NEW (one file each) or --base FILE... --new FILE... (several runs per side), not both"
                    .into(),
            )
        }
    };
    let load = |paths: &[String]| -> Result<Vec<(String, serde_json::Value)>, compare::CompareError> {
        paths.iter().map(|p| Ok((p.clone(), compare::load(p)?))).collect()
    };
    let opts = compare::Options {
        threshold_pct: a.threshold,
        metrics: a.metric.clone(),
        adjust: if a.adjust == "bh" {
            compare::Adjust::BenjaminiHochberg
        } else {
            compare::Adjust::Holm
        },
        ..compare::Options::default()
    };
    let r = match load(&base).and_then(|b| Ok((b, load(&new)?))) {
        Ok((b, n)) => compare::compare_sets(&b, &n, &opts),
        Err(e) => Err(e),
    };
    let r = match r {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot compare: {e}")),
    };
    if r.rows.is_empty() {
        eprintln!("rdmaprobe: error: cannot compare: no run of BASE matches a run of NEW (scenario, operation, backend, size, parameters)");
        print!("{}", compare::text(&r));
        return Ok(ExitCode::from(2));
    }
    match a.format {
        CmpFormat::Text => print!("{}", compare::text(&r)),
        CmpFormat::Markdown => print!("{}", compare::markdown(&r)),
        CmpFormat::Junit => print!("{}", compare::junit(&r)),
    }
    Ok(ExitCode::from(if r.regressed() { 1 } else { 0 }))
}

fn suite(a: SuiteArgs) -> Result<ExitCode> {
    use rdmaprobe::backend::setup::Dev;
    use rdmaprobe::backend::{BackendKind, OpKind};
    use rdmaprobe::mlx5::sq::DbMode;
    use rdmaprobe::report::env::Fingerprint;
    use rdmaprobe::scenario::bw::BwParams;
    use rdmaprobe::scenario::lat::LatParams;
    use rdmaprobe::scenario::post_cost::PostCostParams;
    use rdmaprobe::scenario::runner::{run_blocks, run_bw, run_post_cost, AnyPair, LatPair, Length};

    // SAFETY: installs a handler that only stores to an atomic (async-signal-safe).
    unsafe { libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t) };
    if let Err(e) = writable_dir(&a.out) {
        eprintln!("rdmaprobe: error: {}", chain(&e));
        return Ok(ExitCode::from(2));
    }

    // post cost: timed blocks (of up to 96 WQEs) per configuration
    let (lat_sizes, bw_sizes, mut iters, bw_iters, mut pc_blocks): (Vec<u32>, Vec<u32>, u64, u64, u64) = if a.quick {
        (vec![8, 4096, 65536], vec![64, 65536], 2000, 20000, 300)
    } else {
        (
            (3..=20).map(|e| 1u32 << e).collect(),
            (6..=22).map(|e| 1u32 << e).collect(),
            10000,
            100000,
            1000,
        )
    };
    iters = a.iters.unwrap_or(iters);
    pc_blocks = a.post_cost_blocks.unwrap_or(pc_blocks);
    let bw_min_ms = a.bw_min_ms.unwrap_or(if a.quick { 50 } else { 200 });
    let model_cfg = rdmaprobe::model::ModelConfig {
        wire_delay_ns: None,
        exec: rdmaprobe::model::ExecMode::AfterPost,
        ..Default::default()
    };
    let (dev, note) = a.dev.open(model_cfg)?;
    let cal = Calibration::run(200_000_000)?;
    let mut fp = Fingerprint::collect(&cal, &dev.name(), &dev.provider(), dev.firmware(), dev.is_model());
    fp.provider_library = dev.provider_library();
    if let Dev::Verbs { port, .. } = &dev {
        fp.port = serde_json::to_value(port).ok();
    }
    let mut warnings = fp.warnings();
    if let Some(n) = &note {
        warnings.insert(0, n.clone());
    }
    let kinds = dev.backends();
    println!(
        "rdmaprobe suite{} on {} ({}), backends {}",
        if a.quick { " --quick" } else { "" },
        dev.name(),
        dev.provider(),
        kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", ")
    );
    for w in &warnings {
        println!("WARNING: {w}");
    }
    let mut runs: Vec<serde_json::Value> = Vec::new();
    let mut intervals: Vec<rdmaprobe::report::Interval> = Vec::new();
    let started = std::time::Instant::now();
    let mut summary: Vec<String> = Vec::new();
    let mut progress = Progress::new(3 * lat_sizes.len() + 1 + 2 * bw_sizes.len() + 3, started);
    // latency
    for (op, name) in [
        (OpKind::Send, "send"),
        (OpKind::Write, "write"),
        (OpKind::Read, "read"),
        (OpKind::FetchAdd, "atomic"),
    ] {
        let sizes: Vec<u32> = if op == OpKind::FetchAdd {
            vec![8]
        } else {
            lat_sizes.clone()
        };
        let buf = (2 * *sizes.iter().max().unwrap_or(&8) as usize)
            .max(128)
            .next_multiple_of(4096);
        let mut pairs = Vec::new();
        for k in &kinds {
            pairs.push(LatPair::new(*k, AnyPair::new(&dev, *k, op, buf, DbMode::Bf)?));
        }
        let max_inline = pairs.iter().map(|p| p.pair.max_inline()).min().unwrap_or(0);
        for size in sizes {
            progress.step(&format!("lat {name} {size} B"));
            let p = LatParams {
                op,
                size,
                iters,
                warmup: 100.min(iters),
                inline: matches!(op, OpKind::Write | OpKind::Send) && size <= max_inline,
                stall: std::time::Duration::from_secs(10),
            };
            let t_base = started.elapsed().as_secs_f64();
            let mut on_block = |k: BackendKind, v: &[f64], t0: f64, t1: f64| {
                let mut h = rdmaprobe::report::Hist::new();
                v.iter().for_each(|&x| h.record(x));
                intervals.push(rdmaprobe::report::Interval {
                    tag: format!("lat-{name}-{size}-{}", k.as_str()),
                    start_s: t_base + t0,
                    duration_s: t1 - t0,
                    hist: h,
                });
            };
            let rs = run_blocks(
                &mut pairs,
                &p,
                Length::Iterations { iters, blocks: 10 },
                &cal,
                &INTERRUPTED,
                &mut on_block,
            )?;
            summary.push(overhead_line(&format!("lat {name} {size} B"), &rs));
            for r in rs {
                let mut v = serde_json::to_value(&r)?;
                v["scenario"] = json!("lat");
                runs.push(v);
            }
        }
    }
    // bandwidth
    for (op, name) in [(OpKind::Write, "write"), (OpKind::Send, "send")] {
        for &size in &bw_sizes {
            progress.step(&format!("bw {name} {size} B"));
            let buf = (2 * size as usize).max(128).next_multiple_of(4096);
            for k in &kinds {
                let p = BwParams {
                    op,
                    size,
                    iters: a
                        .bw_messages
                        .unwrap_or((bw_iters * 64 / u64::from(size).max(64)).max(500)),
                    tx_depth: 128,
                    postlist: 1,
                    cq_mod: 64,
                    inline: size <= rdmaprobe::backend::setup::INLINE,
                    bidirectional: false,
                    stall: std::time::Duration::from_secs(10),
                    window: std::time::Duration::from_millis(1),
                    // long enough for 50 (quick) or 200 one-millisecond windows
                    min_duration: std::time::Duration::from_millis(bw_min_ms),
                };
                let r = run_bw(&dev, *k, &p, 1, 1, buf, DbMode::Bf, &cal, &INTERRUPTED)?;
                let mut v = serde_json::to_value(&r)?;
                v["scenario"] = json!("bw");
                runs.push(v);
            }
        }
    }
    // post cost (model0: its own handle in deferred mode, so only the post is timed)
    let pc_dev = if dev.is_model() {
        Dev::open(
            Some("model0"),
            1,
            None,
            rdmaprobe::model::ModelConfig {
                wire_delay_ns: None,
                exec: rdmaprobe::model::ExecMode::Deferred,
                ..Default::default()
            },
        )?
        .0
    } else {
        a.dev.open(model_cfg)?.0
    };
    for postlist in [1u32, 8, 32] {
        progress.step(&format!("post-cost postlist {postlist}"));
        for k in &kinds {
            let p = PostCostParams {
                op: OpKind::Write,
                size: 8,
                postlist,
                inline: true,
                cq_mod: 32,
                blocks: pc_blocks,
                stall: std::time::Duration::from_secs(10),
            };
            let r = run_post_cost(&pc_dev, *k, &p, DbMode::Bf, &cal)?;
            let mut v = serde_json::to_value(&r)?;
            v["scenario"] = json!("post_cost");
            runs.push(v);
        }
    }
    let doc = result_doc(
        &fp,
        &cal,
        &warnings,
        json!({ "scenario": "suite", "quick": a.quick, "backends": kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
                "lat_iters": iters, "bw_min_duration_ms": bw_min_ms, "bw_window_ms": 1.0, "post_cost_blocks": pc_blocks }),
        &runs,
    )?;
    make_dir(&a.out)?;
    write_atomically(&a.out.join("results.json"), &serde_json::to_vec_pretty(&doc)?)?;
    let mut hlog = Vec::new();
    rdmaprobe::report::write_interval_log(
        &mut hlog,
        &format!("rdmaprobe suite on {} ({}), latency in ns", dev.name(), dev.provider()),
        &intervals,
    )
    .map_err(|e| anyhow::anyhow!("writing the interval log: {e}"))?;
    write_atomically(&a.out.join("latency.hlog"), &hlog)?;
    let plots = write_plots(&doc, &a.out)?;
    progress.done();
    println!();
    let has_direct = kinds.contains(&rdmaprobe::backend::BackendKind::Direct);
    println!(
        "summary: latency p50 / p99 in ns per backend; {}",
        match (has_direct, kinds.len() > 1) {
            (true, true) => "the driver's overhead = backend - direct (p50, 95 % interval)",
            (true, false) => "only the direct backend runs here, so no driver overhead to show",
            (false, _) =>
                "no direct backend on this device (it needs an mlx5 device or model0), so no driver overhead to show",
        }
    );
    for line in &summary {
        println!("{line}");
    }
    println!(
        "\nwritten: {} (results.json, latency.hlog, {}) in {:.1} s",
        a.out.display(),
        plots.join(", "),
        started.elapsed().as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

/// A results document: what every rdmaprobe result file carries (schema, tool, time, command,
/// environment, clock, timer overhead, warnings), then the parameters and the runs.
fn result_doc(
    fp: &rdmaprobe::report::env::Fingerprint,
    cal: &Calibration,
    warnings: &[String],
    params: serde_json::Value,
    runs: &impl serde::Serialize,
) -> Result<serde_json::Value> {
    Ok(json!({
        "schema_version": rdmaprobe::report::SCHEMA_VERSION,
        "tool": { "name": "rdmaprobe", "version": env!("CARGO_PKG_VERSION") },
        "created_unix": std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
        "command": std::env::args().collect::<Vec<_>>(),
        "environment": fp,
        "clock": cal,
        "timer_overhead_ns": cal.overhead_ns(),
        "warnings": warnings,
        "params": params,
        "runs": serde_json::to_value(runs)?,
    }))
}

/// The suite's progress: a bar redrawn in place on a terminal, one plain line per step otherwise
/// (a log file or CI).
struct Progress {
    total: usize,
    n: usize,
    started: std::time::Instant,
    tty: bool,
}

impl Progress {
    fn new(total: usize, started: std::time::Instant) -> Self {
        // SAFETY: isatty only inspects the descriptor.
        let tty = unsafe { libc::isatty(libc::STDOUT_FILENO) } == 1;
        Progress {
            total,
            n: 0,
            started,
            tty,
        }
    }

    fn step(&mut self, what: &str) {
        use std::io::Write;
        self.n += 1;
        let t = self.started.elapsed().as_secs_f64();
        if self.tty {
            let filled = 30 * (self.n - 1) / self.total.max(1);
            print!(
                "\r\x1b[2K[{}{}] {}/{} {t:>5.1}s {what}",
                "#".repeat(filled),
                " ".repeat(30 - filled),
                self.n,
                self.total
            );
            let _ = std::io::stdout().flush();
        } else {
            println!("[{t:>5.1}s] {}/{} {what}", self.n, self.total);
        }
    }

    fn done(&self) {
        if self.tty {
            println!("\r\x1b[2K[{}] {}/{} done", "#".repeat(30), self.n, self.total);
        }
    }
}

/// Writes the plots and report.html of a results document into `out`; returns the file names.
fn write_plots(doc: &serde_json::Value, out: &std::path::Path) -> Result<Vec<String>> {
    let figs = rdmaprobe::report::plot::figures(doc).map_err(|e| anyhow::anyhow!("plotting: {e}"))?;
    make_dir(out)?;
    let mut names = Vec::new();
    let mut png = true;
    for f in &figs {
        write_atomically(&out.join(&f.file), f.svg.as_bytes())?;
        names.push(f.file.clone());
        if !png {
            continue;
        }
        // the same figure as PNG (for slides, issue trackers, mail)
        let file = f.file.trim_end_matches(".svg").to_string() + ".png";
        match rdmaprobe::report::png::render(&f.file, &f.svg) {
            Ok(bytes) => {
                write_atomically(&out.join(&file), &bytes)?;
                names.push(file);
            }
            Err(e @ rdmaprobe::report::png::PngError::NoFont) => {
                eprintln!("rdmaprobe: warning: {e}");
                png = false;
            }
            Err(e) => return Err(e.into()),
        }
    }
    write_atomically(
        &out.join("report.html"),
        rdmaprobe::report::html::report(doc, &figs).as_bytes(),
    )?;
    names.push("report.html".into());
    Ok(names)
}

/// Creates `dir` and checks that a file can be written in it.
/// Checks that `dir` can hold the output, without creating it (a run that fails leaves no empty
/// directory): an existing directory must take a file; else its nearest existing ancestor must.
fn writable_dir(dir: &std::path::Path) -> Result<()> {
    let mut d = dir.to_path_buf();
    while !d.exists() {
        match d.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(p) => d = p.to_path_buf(),
            None => d = std::path::PathBuf::from("."),
        }
        if d == std::path::Path::new(".") {
            break;
        }
    }
    let what = if d.as_path() == dir { "writing in" } else { "creating" };
    if !d.is_dir() {
        anyhow::bail!("{what} {}: {} is not a directory", dir.display(), d.display());
    }
    rdmaprobe::report::output::check(&d.join(".rdmaprobe-probe"))
        .map_err(|e| anyhow::anyhow!("{what} {}: {} is not writable ({e})", dir.display(), d.display()))?;
    Ok(())
}

/// Creates the output directory (after the run: a failed run leaves none).
fn make_dir(dir: &std::path::Path) -> Result<()> {
    use anyhow::Context;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

fn plot(a: PlotArgs) -> Result<ExitCode> {
    let doc = match rdmaprobe::report::compare::load(&a.results) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("rdmaprobe: error: cannot plot: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if let Err(e) = writable_dir(&a.out) {
        eprintln!("rdmaprobe: error: {}", chain(&e));
        return Ok(ExitCode::from(2));
    }
    match write_plots(&doc, &a.out) {
        Ok(names) => {
            println!("written in {}: {}", a.out.display(), names.join(", "));
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("rdmaprobe: error: {}", chain(&e));
            Ok(ExitCode::from(2))
        }
    }
}

/// One summary line: each backend's p50/p99, and verbs - direct, wr - direct with a bootstrap
/// interval over the per-block medians.
fn overhead_line(what: &str, rs: &[rdmaprobe::scenario::runner::LatResult]) -> String {
    let mut s = format!("  {what:<22}");
    for r in rs {
        s.push_str(&format!(" {}: {:.0}/{:.0}", r.backend, r.latency.p50, r.latency.p99));
    }
    if let Some(d) = rs.iter().find(|r| r.backend == "direct") {
        for r in rs.iter().filter(|r| r.backend != "direct") {
            let diff = r.latency.p50 - d.latency.p50;
            let iv = rdmaprobe::report::compare::bootstrap(&d.block_medians_ns, &r.block_medians_ns, 1000)
                .map(|(lo, hi)| format!(" [{:+.0}, {:+.0}]", lo * d.latency.p50, hi * d.latency.p50))
                .unwrap_or_default();
            s.push_str(&format!("  {}-direct: {diff:+.0}{iv}", r.backend));
        }
    }
    s
}

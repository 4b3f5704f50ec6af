//! The command line (binary-only): the commands and their dispatch. Each command's arguments and
//! their mapping to the library's plans live in the file of its group; [`console`] runs and
//! prints. The library parses no arguments.

mod console;
mod measure;
mod model0;
mod plan;
mod suite;
mod tools;
mod values;

use anyhow::Result;
use clap::{Parser, Subcommand};
use measure::{BwArgs, KvArgs, LatArgs, PostCostArgs};
use std::process::ExitCode;
use suite::SuiteArgs;
use tools::{ClockArgs, CompareArgs, DevicesArgs, DoctorArgs, FleetReportArgs, PingArgs, PlotArgs};

pub use console::chain;
pub use values::perftest_hint;

// The command line: one command and its arguments.
#[derive(Parser)]
#[command(
    name = "rdmaprobe",
    version,
    about = "RDMA performance probe: verbs, ibv_wr_* and direct mlx5 post paths on one TSC clock"
)]
pub struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List RDMA devices and their ports, like ibv_devinfo, then the built-in model0. Exit 0 when
    /// a hardware device exists, 3 when none does (with the reason and what to do), 1 on error.
    Devices(DevicesArgs),
    /// Latency ping-pong (perftest's ib_*_lat): write and send report one-way latency (half the
    /// round trip), read and atomic the round trip. Client and server over TCP (the server
    /// without HOST, the client with it), or both ends in this process with --loopback.
    Lat(LatArgs),
    /// Bandwidth and message rate (perftest's ib_*_bw): tx depth, postlist, completion every N,
    /// QPs and threads; average, peak and minimum-window bandwidth. Client and server over TCP,
    /// or both ends in this process with --loopback.
    Bw(BwArgs),
    /// The cost of posting alone, per backend (and per doorbell mode on the direct path):
    /// cycles and ns per WQE for each postlist, inline or not, a completion every WQE or every N.
    PostCost(PostCostArgs),
    /// HERD's key-value workload (as efficient/rdma_bench runs it): clients write GET and PUT
    /// requests inline over UC into the server's request region, workers answer from their MICA
    /// stores over UD, a batch per post; every GET's value is checked, every request timed.
    /// In one process (--loopback) or two (the server, then the clients with its HOST); a thread
    /// per client and worker, or one; the verbs and wr backends, and direct on model0.
    Kv(KvArgs),
    /// The standard matrix in one run: latency (send, write, read, atomic), bandwidth (write,
    /// send) and post cost, on every backend the device runs, backends interleaved; writes
    /// results.json and an HdrHistogram interval log into --out and prints the driver's overhead
    /// (verbs - direct, wr - direct) per operation and size.
    Suite(SuiteArgs),
    /// Compare result files: `compare BASE NEW`, or several process runs per side with
    /// `--base F1 F2 F3 --new G1 G2 G3`. Per matched run and metric: the change, its 95 %
    /// interval and p-value (3 or more runs on both sides: Welch's t over the runs' logarithms;
    /// fewer on a side: a bootstrap resampling the runs, then the blocks within each, so one run
    /// per side holds only the noise within the runs), the p-value adjusted over all rows (Holm,
    /// or Benjamini-Hochberg with --adjust bh), and a verdict. Exit 0: no regression; 1:
    /// regression; 2: the inputs cannot be compared (or --control on where the control cannot
    /// be used, --until-decided with fewer than 3 or more than MAX files per side); 3: with
    /// --until-decided, rows undecided and no regression.
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
    Doctor(DoctorArgs),
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
    Clock(ClockArgs),
    /// model0 for other programs: `model0 exec [--model-delay-ns D] -- PROGRAM ARGS...` runs an
    /// unmodified verbs program (perftest, ibv_rc_pingpong, ...) with model0 preloaded.
    Model0(model0::Model0Args),
}

impl Cli {
    /// Runs the command; its exit status, or the error that stopped it.
    pub fn run(self) -> Result<ExitCode> {
        match self.cmd {
            Cmd::Devices(a) => tools::devices(a),
            Cmd::Clock(a) => tools::clock(a),
            Cmd::Doctor(a) => tools::doctor(a),
            Cmd::Ping(a) => tools::ping(a),
            Cmd::Lat(a) => measure::lat(a),
            Cmd::Bw(a) => measure::bw(a),
            Cmd::PostCost(a) => measure::post_cost(a),
            Cmd::Kv(a) => measure::kv(a),
            Cmd::Compare(a) => tools::compare(a),
            Cmd::Suite(a) => suite::suite(a),
            Cmd::Plot(a) => tools::plot(a),
            Cmd::FleetReport(a) => tools::fleet_report(a),
            Cmd::Model0(a) => model0::model0(a),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
    }
}

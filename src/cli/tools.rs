//! The commands around the measurements: `ping` (the connectivity ladder), `compare`, `plot`
//! and `fleet-report` (their arguments and their mapping to the console's calls).

use super::console;
use super::plan::{plan, PeerArgs, RunArgs};
use super::values::positive_f64;
use anyhow::Result;
use rdmaprobe::backend::{OpKind, Transport};
use rdmaprobe::probe::{self, LatPlan, ProbeError, Scenario};
use std::process::ExitCode;

// `devices`'s arguments.
#[derive(clap::Args, Debug)]
pub struct DevicesArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// How many GID table entries to show per port.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
    gids: u32,
}

// `doctor`'s arguments.
#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// Device (default: the first RDMA device, else model0).
    #[arg(short = 'd', long = "ib-dev")]
    device: Option<String>,
    /// Port.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..))]
    port: u8,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

// `clock`'s arguments.
#[derive(clap::Args, Debug)]
pub struct ClockArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Calibration window in milliseconds (at least 100).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(100..=10_000))]
    window_ms: u64,
}

#[derive(clap::Args, Debug)]
pub struct FleetReportArgs {
    /// The results directory of a fleet run (holds fleet.json).
    dir: std::path::PathBuf,
    /// Write the JSON report here (default DIR/fleet-report.json).
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Write the HTML page here (default DIR/fleet-report.html).
    #[arg(long)]
    html: Option<std::path::PathBuf>,
    /// Also the page as PDF, beside it (DIR/fleet-report.pdf), printed by headless Chromium
    /// (chromium on PATH, or RDMAPROBE_CHROMIUM); exit 2 when there is none or it fails.
    #[arg(long)]
    pdf: bool,
    /// An outlier is worse than the fleet's median by more than this many robust standard
    /// deviations (1.4826 x the median absolute deviation)...
    #[arg(long, default_value_t = 3.5, value_parser = positive_f64)]
    mad_k: f64,
    /// ...and by more than this many percent of the median.
    #[arg(long, default_value_t = 20.0, value_parser = positive_f64)]
    min_deviation_pct: f64,
}

#[derive(clap::Args, Debug)]
pub struct PingArgs {
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
pub struct PlotArgs {
    /// The result file (results.json of suite, or the --json of lat / bw).
    results: String,
    /// Output directory (created): the SVG files and report.html.
    #[arg(long, default_value = "rdmaprobe-plots")]
    out: std::path::PathBuf,
    /// Also report.pdf, report.html printed by headless Chromium (chromium on PATH, or
    /// RDMAPROBE_CHROMIUM); exit 2 when there is none (nothing written) or it fails.
    #[arg(long)]
    pdf: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
enum CmpFormat {
    Text,
    Markdown,
    Junit,
}

#[derive(clap::Args, Debug)]
pub struct CompareArgs {
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
    /// Smallest change (percent) that can be a regression, every row. Default, by row, with 3 or
    /// more runs on both sides: lat p50 5, lat p99 20, bw 10, post_cost 75 (p99 100), kv Mops 10
    /// (p50 10, p99 20), --anatomy's turn 110 and rest 90, its NIC split's wire 90, responder
    /// and poll 60 (one run per side: shown, not judged);
    /// with fewer (the interval cannot contain run-to-run variation): 250, 500, 75, 300 (p99
    /// 100), kv 75 (p50 100, p99 200), above the largest change measured
    /// between identical runs on model0's VM (the contrasts of the in-run control 100 and 250,
    /// direct's own rows then 300 and 500, post_cost 300).
    #[arg(long)]
    threshold: Option<f64>,
    /// Metrics to compare: p50, p99, bw; turn and rest (the medians of an --anatomy run's server
    /// turnaround and of the rest of its round trips); wire, responder and poll (the medians of
    /// its NIC split's components, where it has one).
    #[arg(long, value_delimiter = ',', default_values_t = rdmaprobe::report::compare::METRICS.iter().map(|m| m.to_string()))]
    metric: Vec<String>,
    /// Adjustment of the p-values over the rows that decide the verdict (the rows shown beside
    /// them are adjusted apart): holm (any false alarm at 5 %) or bh (Benjamini-Hochberg: 5 % of
    /// the alarms false).
    #[arg(long, default_value = "holm", value_parser = ["holm", "bh"])]
    adjust: String,
    /// The in-run control. auto: where both sides ran the same rdmaprobe source on the same
    /// kernel, CPU and device, latency rows of verbs and wr are judged by their contrast to
    /// direct in the same run (whether the sides differ in rdma-core or not), direct's own rows
    /// against wider thresholds with one run per side; it says why not otherwise. on: the same,
    /// required (exit 2 where it cannot be used). off: every backend's own rows judged.
    #[arg(long, default_value = "auto", value_parser = ["auto", "on", "off"])]
    control: String,
    /// A change (percent, in the worse direction) to plan for: each row says how many runs per
    /// side (alternated) would find it with 80 % power, from the spread of the runs given (3 or
    /// more per side), or that it is within the row's threshold.
    #[arg(long = "target-effect", value_name = "PCT")]
    target_effect: Option<f64>,
    /// The files are one look of runs until decided, with at most MAX runs per side (3 or more
    /// files per side, run alternately): a group-sequential rule spends the 5 % over the looks
    /// at 3, 4, ... MAX runs; exit 3 while a row that counts is undecided (neither a regression
    /// nor shown within its threshold). harness/until-decided.sh runs the sides until decided.
    #[arg(long = "until-decided", value_name = "MAX")]
    until_decided: Option<usize>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = CmpFormat::Text)]
    format: CmpFormat,
}

/// `compare`: BASE NEW or --base ... --new ..., compared and printed; the exit status (2: both
/// forms or neither).
pub fn compare(a: CompareArgs) -> Result<ExitCode> {
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
    Ok(ExitCode::from(console::compare(
        &base,
        &new,
        a.threshold,
        &a.metric,
        &a.adjust,
        console::CompareHow {
            control: match a.control.as_str() {
                "on" => rdmaprobe::report::compare::ControlMode::On,
                "off" => rdmaprobe::report::compare::ControlMode::Off,
                _ => rdmaprobe::report::compare::ControlMode::Auto,
            },
            target_effect_pct: a.target_effect,
            until_decided: a.until_decided,
        },
        format,
    )))
}

/// `plot`: the plots and report.html of a result file; the exit status.
pub fn plot(a: PlotArgs) -> Result<ExitCode> {
    Ok(ExitCode::from(console::plot(&a.results, &a.out, a.pdf)))
}

/// `ping`: the ladder's plan (refusing -R and a transport other than RC), run and printed; the
/// exit status.
pub fn ping(a: PingArgs) -> Result<ExitCode> {
    if a.peer.rdma_cm {
        return Err(ProbeError::Usage(
            "ping -R: the ladder connects its QPs itself in this version; use lat or bw with -R".into(),
        )
        .into());
    }
    if a.peer.peer_tool != super::plan::PeerToolArg::Rdmaprobe {
        return Err(ProbeError::Usage(
            "ping --peer perftest: the ladder's layers are rdmaprobe's own exchange; use lat write --peer perftest"
                .into(),
        )
        .into());
    }
    if a.run.transport() != Transport::Rc {
        return Err(ProbeError::Usage(format!(
            "ping -c {}: the ladder checks an RC connection (its layers are WRITEs and a bandwidth run over one); \
             use lat or bw with -c",
            a.run.transport().as_str()
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
    Ok(ExitCode::from(console::ping(
        p,
        a.baseline.as_deref(),
        a.run.json.as_ref(),
    )?))
}

/// `devices`: printed as text or JSON; the exit status (3: no hardware device).
pub fn devices(a: DevicesArgs) -> Result<ExitCode> {
    Ok(ExitCode::from(console::devices(a.json, a.gids)?))
}

/// `doctor`: the checks, printed; the exit status (1: a check failed).
pub fn doctor(a: DoctorArgs) -> Result<ExitCode> {
    Ok(ExitCode::from(console::doctor(a.device.as_deref(), a.port, a.json)?))
}

/// `clock`: the calibrated TSC, printed.
pub fn clock(a: ClockArgs) -> Result<ExitCode> {
    Ok(ExitCode::from(console::clock(a.json, a.window_ms)?))
}

/// `fleet-report`: the verdict on a fleet run, printed and written; the exit status.
pub fn fleet_report(a: FleetReportArgs) -> Result<ExitCode> {
    let rules = rdmaprobe::report::fleet::Rules {
        mad_k: a.mad_k,
        min_deviation: a.min_deviation_pct / 100.0,
    };
    Ok(ExitCode::from(console::fleet_report(
        &a.dir,
        a.json.as_deref(),
        a.html.as_deref(),
        a.pdf,
        rules,
    )))
}

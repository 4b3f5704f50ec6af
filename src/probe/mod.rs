//! The library's entry point: a [`Plan`] says what to measure, where and against whom; [`run`]
//! measures it and returns a [`Report`], which renders itself as the table the command line
//! prints, the JSON result document and the HdrHistogram interval log. [`suite`] runs the
//! standard matrix over plans. The command line (`src/cli`, binary-only) only maps its
//! arguments to a plan and prints the report; a program can do the same:
//!
//! ```no_run
//! use rdmaprobe::probe::{self, Plan, Scenario, LatPlan, Quiet};
//! use rdmaprobe::backend::OpKind;
//! let plan = Plan::loopback(Scenario::Lat(LatPlan::new(OpKind::Write, 8)));
//! let report = probe::run(&plan, &mut Quiet)?;
//! print!("{}", report.table());
//! # Ok::<(), rdmaprobe::probe::ProbeError>(())
//! ```
//!
//! One measurement flows: [`run`] hands the plan to its scenario's module in [`measure`] (`lat`,
//! `bw`, `post_cost`; a new scenario is a new module there), which opens the device through
//! [`measure::session`] (device, backends, doorbell mode, TSC calibration, environment
//! fingerprint and its warnings), connects the peer through a [`crate::oob::Rendezvous`] when
//! there is one (the parameter handshake, QP exchange, barrier), runs over the sizes, calling the
//! [`Observer`] as each run ends, ends the exchange with the peer, and returns the report.
//! [`check`] holds the acceptance tools beside the measurements (doctor, ping, the device's
//! counters, the diagnostics bundle, devices and clock).

pub mod check;
pub mod measure;
mod plan;
pub mod report;
pub mod suite;

pub use suite::{SuitePlan, SuiteReport};

pub use crate::backend::setup::PathOpts;
pub use plan::{
    Backends, BwPlan, DeviceSpec, KvPlan, KvThreads, LatPlan, PeerSpec, PeerTool, Plan, PostCostPlan, Scenario, Sizes,
    MAX_THREADS,
};
pub use report::{Region, Report, Role, Runs};

use crate::backend::setup::SetupError;
use crate::oob::{OobError, Rendezvous};
use crate::scenario::runner::RunError;
use crate::scenario::ScenarioError;

/// Set to stop a measurement between iterations (the command line sets it on SIGINT, SIGTERM,
/// SIGHUP and SIGPIPE, see [`stop_on_sigint`]); the run then ends with
/// [`ProbeError::Scenario`] naming the interrupt.
pub use crate::signals::INTERRUPTED;

/// Installs the handler that sets [`INTERRUPTED`] on SIGINT, SIGTERM, SIGHUP and SIGPIPE
/// ([`crate::signals::install`]).
pub fn stop_on_sigint() {
    crate::signals::install();
}

/// Why a measurement could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The plan cannot be run here as given (the message says why); the command line exits 1.
    #[error("{0}")]
    Invalid(String),
    /// An invalid or conflicting parameter, named (the command line exits 2).
    #[error("{0}")]
    Usage(String),
    /// Device, QP or memory set-up.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The measurement.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// The out-of-band exchange with the peer.
    #[error(transparent)]
    Oob(#[from] OobError),
    /// The clock could not be calibrated.
    #[error("calibrating the TSC: {0}")]
    Clock(String),
    /// The peer reported a failure of its own.
    #[error("the peer failed: {0}")]
    Peer(String),
    /// A result could not be rendered.
    #[error("rendering the results: {0}")]
    Render(String),
    /// A run failed; its diagnostics were written into `dir`.
    #[error("{source}{note} (diagnostics: {})", dir.display())]
    Bundled {
        /// The failure.
        source: Box<ProbeError>,
        /// What the failure means for this run's transport (empty, or a clause starting "; ").
        note: &'static str,
        /// The bundle's directory.
        dir: std::path::PathBuf,
    },
}

impl From<serde_json::Error> for ProbeError {
    fn from(e: serde_json::Error) -> Self {
        ProbeError::Render(e.to_string())
    }
}

impl From<crate::verbs::VerbsError> for ProbeError {
    fn from(e: crate::verbs::VerbsError) -> Self {
        ProbeError::Setup(SetupError::from(e))
    }
}

impl From<crate::clock::ClockError> for ProbeError {
    fn from(e: crate::clock::ClockError) -> Self {
        ProbeError::Clock(e.to_string())
    }
}

impl From<RunError> for ProbeError {
    fn from(e: RunError) -> Self {
        match e {
            RunError::Setup(e) => ProbeError::Setup(e),
            RunError::Scenario(e) => ProbeError::Scenario(e),
        }
    }
}

/// What a caller hears while a measurement runs (the command line prints it as it comes; a
/// program may ignore it: [`Quiet`]).
pub trait Observer {
    /// A note for the user (the command line prints it on standard error).
    fn note(&mut self, _msg: &str) {}
    /// This side listens for its peer on `addr` (address:port) for at most `secs` seconds.
    fn waiting(&mut self, _addr: &str, _secs: u64) {}
    /// The header is known (device, clock, warnings); on a server the peer is connected.
    fn started(&mut self, _report: &Report) {}
    /// Run `i` of the report finished.
    fn finished(&mut self, _report: &Report, _i: usize) {}
    /// A suite's heading: what runs on what, and the warnings.
    fn heading(&mut self, _text: &str) {}
    /// Step `n` of `total` of a suite starts.
    fn step(&mut self, _n: usize, _total: usize, _what: &str) {}
}

/// An observer that hears nothing.
pub struct Quiet;

impl Observer for Quiet {}

/// Measures what `plan` says; the peer, if any, is reached as `plan.peer` says (TCP).
pub fn run(plan: &Plan, obs: &mut dyn Observer) -> Result<Report, ProbeError> {
    measure::run(plan, None, obs)
}

/// As [`run`], with the peer reached through `peer` (another launcher's exchange: MPI, a batch
/// system's key-value store); `plan.peer` then only says which side this is (`Connect`: the
/// client, `Listen`: the server).
pub fn run_with_peer(plan: &Plan, peer: &mut dyn Rendezvous, obs: &mut dyn Observer) -> Result<Report, ProbeError> {
    measure::run(plan, Some(peer), obs)
}

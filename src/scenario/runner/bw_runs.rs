//! Bandwidth runs: `threads` x `qps` pairs of one backend built and run, a run shorter than its
//! minimum duration run again with more messages, and the result; one side of a client/server
//! run.

use super::RunError;
use crate::backend::setup::{self, Dev, SetupError};
use crate::backend::BackendKind;
use crate::clock::Calibration;
use crate::mlx5::sq::DbMode;
use crate::scenario::bw;
use crate::scenario::ScenarioError;
use std::sync::atomic::AtomicBool;

/// One backend's bandwidth result for one operation and size.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct BwResult {
    /// `bw`.
    pub scenario: String,
    /// Backend name.
    pub backend: String,
    /// Operation as the command line names it.
    pub op: String,
    /// The verb.
    pub verb: String,
    /// Message size.
    #[serde(rename = "size_bytes")]
    pub size: u32,
    /// Threads.
    pub threads: usize,
    /// QPs per thread.
    pub qps_per_thread: usize,
    /// Outstanding operations per QP.
    pub tx_depth: u32,
    /// Receives kept posted per receiving QP, when -r set them (a run of SENDs or immediates);
    /// absent at the default depth, so such runs match older files' in `compare`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rx_depth: Option<u32>,
    /// Operations per doorbell.
    pub postlist: u32,
    /// A completion every this many operations.
    pub cq_mod: u32,
    /// Both directions.
    pub bidirectional: bool,
    /// Inline payloads.
    pub inline: bool,
    /// Messages per QP and direction in the reported run.
    pub iters: u64,
    /// The shortest run reported, ms: a shorter first run only sized the reported one (0: none).
    pub min_duration_ms: f64,
    /// The figures.
    pub summary: crate::scenario::bw::BwSummary,
    /// `events`: the ends waited for completion events when nothing moved (`-e`); absent:
    /// polling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<String>,
    /// The buffers of the reported run (made afresh for every run: `{backend}.t{thread}.q{QP}.A`
    /// or `.B`), and where they sit.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_regions: Vec<super::Region>,
}

/// Where the buffers of `threads` (each its pairs of two ends) sit, named `{label}.t{i}.q{j}.A`
/// and `.B`.
fn regions<B: crate::backend::Backend>(label: &str, threads: &[Vec<(B, B)>]) -> Vec<super::Region> {
    let mut v = Vec::new();
    for (i, pairs) in threads.iter().enumerate() {
        for (j, (a, b)) in pairs.iter().enumerate() {
            for (end, e) in [("A", a), ("B", b)] {
                v.push(super::Region {
                    name: format!("{label}.t{i}.q{j}.{end}"),
                    placement: e.placement(),
                });
            }
        }
    }
    v
}

fn build<B>(
    threads: usize,
    qps: usize,
    mut mk: impl FnMut() -> Result<(B, B), SetupError>,
) -> Result<Vec<Vec<(B, B)>>, SetupError> {
    (0..threads).map(|_| (0..qps).map(|_| mk()).collect()).collect()
}

/// The most messages per QP a run is sized up to.
pub const MAX_BW_ITERS: u64 = 1_000_000_000;

/// How many times a bandwidth run too short for its minimum is run again, at most.
pub const BW_RESIZES: u32 = 6;

/// The messages per QP of the next run when a run of `iters` took `took` seconds, shorter than
/// `min` (a fifth over the minimum; a short first run is slower per message, so a few rounds may
/// be needed); `None` when it was long enough (or cannot grow).
pub fn bw_resized(iters: u64, took: f64, min: f64) -> Option<u64> {
    if min <= 0.0 || took >= min || iters >= MAX_BW_ITERS {
        return None;
    }
    let scale = (min * 1.2 / took.max(1e-9)).clamp(1.2, 1e6);
    Some(((iters as f64 * scale).ceil() as u64).min(MAX_BW_ITERS))
}

/// Builds `threads` x `qps` pairs of `kind` on `dev` and runs the bandwidth scenario; an
/// in-process run shorter than `p.min_duration` is run again with more messages.
#[allow(clippy::too_many_arguments)]
pub fn run_bw(
    dev: &Dev,
    kind: BackendKind,
    p: &crate::scenario::bw::BwParams,
    threads: usize,
    qps: usize,
    buf_len: usize,
    mode: DbMode,
    cal: &Calibration,
    intr: &AtomicBool,
) -> Result<BwResult, RunError> {
    run_bw_with(dev, (kind, false), p, (threads, qps), buf_len, mode, cal, intr)
}

/// As [`run_bw`]; with `events` (the verbs and wr backends, `-e`) the ends wait for completion
/// events when a turn moves nothing, and the result says so (`completion`).
#[allow(clippy::too_many_arguments)]
pub fn run_bw_with(
    dev: &Dev,
    (kind, events): (BackendKind, bool),
    p: &crate::scenario::bw::BwParams,
    (threads, qps): (usize, usize),
    buf_len: usize,
    mode: DbMode,
    cal: &Calibration,
    intr: &AtomicBool,
) -> Result<BwResult, RunError> {
    if events && kind == BackendKind::Direct {
        return Err(setup::no_events_on_direct().into());
    }
    dev.supports(kind).map_err(SetupError::from)?;
    let run = BwRun {
        dev,
        kind,
        events,
        threads,
        qps,
        buf_len,
        mode,
        cal,
        intr,
        regions: std::cell::RefCell::new(Vec::new()),
    };
    let (p, rs) = run.long_enough(*p)?;
    Ok(run.result(&p, &rs))
}

/// One backend's bandwidth runs on a device: what every run of it is made of.
struct BwRun<'a> {
    dev: &'a Dev,
    kind: BackendKind,
    events: bool,
    threads: usize,
    qps: usize,
    buf_len: usize,
    mode: DbMode,
    cal: &'a Calibration,
    intr: &'a AtomicBool,
    /// Where the buffers of the last run sat.
    regions: std::cell::RefCell<Vec<super::Region>>,
}

impl BwRun<'_> {
    /// One run of `p` on fresh pairs (a run leaves receives posted on its pairs).
    fn once(&self, p: &bw::BwParams) -> Result<Vec<bw::ThreadResult>, RunError> {
        let (dev, kind, mode, buf_len) = (self.dev, self.kind, self.mode, self.buf_len);
        let (threads, qps, intr) = (self.threads, self.qps, self.intr);
        let grid = bw::Grid::new(self.cal.to_ticks(p.window.as_nanos() as f64));
        let label = format!("{}{}", kind.as_str(), if self.events { "-e" } else { "" });
        let mut placed = self.regions.borrow_mut();
        Ok(match (dev, kind) {
            (Dev::Model(m), BackendKind::Direct) => {
                let mut t = build(threads, qps, || {
                    setup::model_pair_with(m, p.op, buf_len, mode, m.opts.transport)
                })?;
                *placed = regions(&label, &t);
                bw::run(&mut t, p, &grid, intr)?
            }
            (_, BackendKind::Direct) => {
                let mut t = build(threads, qps, || setup::mlx5_pair(dev, p.op, buf_len, mode))?;
                *placed = regions(&label, &t);
                bw::run(&mut t, p, &grid, intr)?
            }
            _ => {
                let mut t = build(threads, qps, || {
                    setup::verbs_pair_with(dev, kind, p.op, buf_len, self.events)
                })?;
                *placed = regions(&label, &t);
                bw::run(&mut t, p, &grid, intr)?
            }
        })
    }

    /// Runs `p`; a run too short to mean anything sizes the next one (a fifth over the
    /// minimum; a short first run is slower per message, so a few rounds may be needed), at
    /// most [`BW_RESIZES`] times. Returns the parameters of the last run and its results.
    fn long_enough(&self, mut p: bw::BwParams) -> Result<(bw::BwParams, Vec<bw::ThreadResult>), RunError> {
        let mut rs = self.once(&p)?;
        let min = p.min_duration.as_secs_f64();
        for _ in 0..BW_RESIZES {
            let took = bw::summarize(&rs, p.size, p.cq_mod, self.cal.hz).seconds;
            let Some(n) = bw_resized(p.iters, took, min) else {
                break;
            };
            p.iters = n;
            rs = self.once(&p)?;
        }
        Ok((p, rs))
    }

    /// The result of the run of `p` that gave `rs`.
    fn result(&self, p: &bw::BwParams, rs: &[bw::ThreadResult]) -> BwResult {
        BwResult {
            scenario: "bw".into(),
            backend: self.kind.as_str().into(),
            op: p.op.cli_name().into(),
            verb: p.op.as_str().into(),
            size: p.size,
            threads: self.threads,
            qps_per_thread: self.qps,
            tx_depth: p.tx_depth,
            rx_depth: bw::rx_depth_given(p),
            postlist: p.postlist,
            cq_mod: p.cq_mod,
            bidirectional: p.bidirectional,
            inline: p.inline,
            iters: p.iters,
            min_duration_ms: p.min_duration.as_secs_f64() * 1e3,
            summary: bw::summarize(rs, p.size, p.cq_mod, self.cal.hz),
            completion: self.events.then(|| "events".into()),
            memory_regions: self.regions.borrow().clone(),
        }
    }
}

/// One side of a bandwidth run between two processes: each thread (pinned: a client's from the
/// first CPU up, a server's from the last down) drives its ends in the side's role; all ends of
/// one backend.
pub fn bw_side(
    threads: &mut [Vec<crate::backend::setup::AnyEnd>],
    p: &crate::scenario::bw::BwParams,
    client: bool,
    cal: &Calibration,
    intr: &AtomicBool,
) -> Result<Vec<crate::scenario::bw::ThreadResult>, ScenarioError> {
    use crate::backend::setup::AnyEnd;
    bw::check(p)?;
    let grid = bw::Grid::new(cal.to_ticks(p.window.as_nanos() as f64));
    let grid = &grid;
    // perftest's peak is defined for one stream of posts and completions
    let trace_peak = client && threads.len() == 1 && threads[0].len() == 1 && !p.bidirectional && !p.no_peak;
    let (rc, rs) = bw::roles(p);
    let role = if client { rc } else { rs };
    let mut out: Vec<Option<Result<bw::ThreadResult, ScenarioError>>> = threads.iter().map(|_| None).collect();
    let ids = crate::workers::slot_ids(threads.len(), !client);
    let jobs = threads
        .iter_mut()
        .zip(out.iter_mut())
        .enumerate()
        .map(|(i, (ends, slot))| crate::workers::Placed {
            cpu: if client {
                crate::workers::cpu_from_start(i)
            } else {
                crate::workers::cpu_from_end(i)
            },
            job: Box::new(move || {
                macro_rules! go {
                    ($v:ident) => {{
                        let e: Result<Vec<_>, _> = ends
                            .iter_mut()
                            .map(|x| match x {
                                AnyEnd::$v(b) => Ok((&mut **b, role)),
                                _ => Err(ScenarioError::Invalid(
                                    "ends of one thread differ in backend".into(),
                                )),
                            })
                            .collect();
                        e.and_then(|mut e| bw::drive_ends(&mut e, p, grid, trace_peak, intr))
                    }};
                }
                *slot = Some(match ends.first() {
                    Some(AnyEnd::Verbs(_)) => go!(Verbs),
                    Some(AnyEnd::Model(_)) => go!(Model),
                    Some(AnyEnd::Mlx5(_)) => go!(Mlx5),
                    None => Ok(bw::ThreadResult::default()),
                });
            }),
        })
        .collect();
    let steal = crate::workers::run_with_steal(jobs, p.stall, &ids)?;
    out.into_iter()
        .map(|r| r.unwrap_or(Err(ScenarioError::PeerFailed { side: "bw thread" })))
        .map(|r| r.map(|t| bw::ThreadResult { steal_ns: steal, ..t }))
        .collect()
}

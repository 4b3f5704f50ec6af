//! Post-cost runs: one backend's (and doorbell mode's) blocks of post calls timed on a pinned
//! worker, and the figures per WQE and per call with the timer's own cost taken off.

use super::{AnyPair, RunError};
use crate::backend::setup::Dev;
use crate::backend::BackendKind;
use crate::clock::Calibration;
use crate::mlx5::sq::DbMode;
use crate::report::{Hist, Stats};
use crate::scenario::ScenarioError;

/// The post cost of one configuration: blocks of post calls timed as a whole.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PostCostResult {
    /// `post_cost`.
    pub scenario: String,
    /// Backend name.
    pub backend: String,
    /// Doorbell mode (direct only).
    pub db_mode: Option<String>,
    /// Operation (`write`, `send`, `read`).
    pub op: String,
    /// The verb (the same names here).
    pub verb: String,
    /// Message size.
    #[serde(rename = "size_bytes")]
    pub size: u32,
    /// WQEs per call.
    pub postlist: u32,
    /// Inline payload.
    pub inline: bool,
    /// A completion every this many WQEs (and on each block's last call).
    pub cq_mod: u32,
    /// Post calls in each timed block.
    pub calls_per_block: u32,
    /// WQEs in each timed block.
    pub wqes_per_block: u32,
    /// Per WQE, ns: statistics over the blocks (each block's time, less the timer's cost, over
    /// its WQEs).
    pub per_wqe_ns: Stats,
    /// Per WQE, median, in TSC ticks (the counter's unit, not core cycles).
    pub per_wqe_ticks_p50: f64,
    /// Per post call, ns: statistics over the blocks (block time over its calls).
    pub call_ns: Stats,
    /// Each block's per-WQE figure, ns, in the order measured (`compare`'s samples).
    pub block_per_wqe_ns: Vec<f64>,
    /// HdrHistogram of the per-call figure of each block, ns.
    #[serde(rename = "call_histogram_ns")]
    pub call_histogram: String,
    /// The counter's step, ns: one block is resolved to this, one WQE to this over the block's WQEs.
    pub tsc_step_ns: f64,
    /// The timer's own cost taken off every block, ns (the median empty timed region).
    pub timer_overhead_ns: f64,
    /// The median block, less the timer's own overhead, is within 4 steps of the counter: not a
    /// resolved measurement.
    pub below_overhead: bool,
    /// The rounds the blocks were measured in: with several backends (and doorbell modes) on
    /// one configuration, each round gives every one of them a turn of blocks (the order
    /// rotated), so block i of each ran in the same round; 1: alone; 0 (files from before it
    /// was recorded): not known.
    #[serde(default)]
    pub rounds: u64,
}

/// Rounds a configuration's blocks are split into when several backends measure it
/// ([`run_post_cost_interleaved`]): a change of the host's state lasting longer than a round's
/// turns falls on every backend of the round (`compare`'s in-run control pairs them).
pub const ROUNDS: u64 = 10;

/// Runs the post-cost scenario for one backend (and doorbell mode) on `dev`.
pub fn run_post_cost(
    dev: &Dev,
    kind: BackendKind,
    p: &crate::scenario::post_cost::PostCostParams,
    mode: DbMode,
    cal: &Calibration,
) -> Result<PostCostResult, RunError> {
    let buf = (2 * (p.size as usize).max(64)).next_multiple_of(4096);
    let mut pair = AnyPair::new(dev, kind, p.op, buf, mode)?;
    let s = post_cost_on_worker(&mut pair, p)?;
    Ok(post_cost_result(kind, p, mode, cal, &s, 1)?)
}

/// Runs one post-cost configuration `p` on every one of `members` (backend and doorbell mode)
/// on `dev`, interleaved: the blocks in `ROUNDS` (10) rounds (fewer with fewer blocks), each round
/// a turn of every member, the order rotated from round to round; each member's pair is set up
/// once, and each turn starts with an untimed block as every run does. The results in
/// `members`' order.
pub fn run_post_cost_interleaved(
    dev: &Dev,
    members: &[(BackendKind, DbMode)],
    p: &crate::scenario::post_cost::PostCostParams,
    cal: &Calibration,
) -> Result<Vec<PostCostResult>, RunError> {
    let buf = (2 * (p.size as usize).max(64)).next_multiple_of(4096);
    let mut pairs = members
        .iter()
        .map(|&(k, mode)| AnyPair::new(dev, k, p.op, buf, mode))
        .collect::<Result<Vec<_>, _>>()?;
    let rounds = ROUNDS.min(p.blocks).max(1);
    let mut samples = vec![crate::scenario::post_cost::PostCostSamples::default(); members.len()];
    for round in 0..rounds {
        // the blocks split as evenly as the count allows
        let blocks = p.blocks * (round + 1) / rounds - p.blocks * round / rounds;
        let turn = crate::scenario::post_cost::PostCostParams { blocks, ..*p };
        for j in 0..pairs.len() {
            let i = (j + round as usize) % pairs.len();
            let s = post_cost_on_worker(&mut pairs[i], &turn)?;
            samples[i].block_ticks.extend(s.block_ticks);
            samples[i].calls_per_block = s.calls_per_block;
            samples[i].wqes_per_block = s.wqes_per_block;
        }
    }
    let interleaved = if members.len() > 1 { rounds } else { 1 };
    members
        .iter()
        .zip(&samples)
        .map(|(&(k, mode), s)| Ok(post_cost_result(k, p, mode, cal, s, interleaved)?))
        .collect()
}

/// Times `p`'s blocks of post calls on `pair`, on the process's persistent worker for the first
/// CPU, pinned, as every measurement runs.
fn post_cost_on_worker(
    pair: &mut AnyPair,
    p: &crate::scenario::post_cost::PostCostParams,
) -> Result<crate::scenario::post_cost::PostCostSamples, ScenarioError> {
    use crate::scenario::post_cost;
    let mut res = None;
    crate::workers::run(
        vec![crate::workers::Placed {
            cpu: crate::workers::cpu_from_start(0),
            job: Box::new(|| {
                res = Some(match pair {
                    AnyPair::Verbs(b) => post_cost::run(&mut b.0, &mut b.1, p),
                    AnyPair::Model(b) => post_cost::run(&mut b.0, &mut b.1, p),
                    AnyPair::Mlx5(b) => post_cost::run(&mut b.0, &mut b.1, p),
                })
            }),
        }],
        p.stall,
    )
    .map_err(ScenarioError::from)?;
    res.unwrap_or(Err(ScenarioError::PeerFailed {
        side: "post-cost thread",
    }))
}

/// The post cost of `kind` (doorbell mode `mode`) from its blocks `s`: each block's time less
/// the timer's own cost, per WQE and per call, and whether the counter resolved it.
fn post_cost_result(
    kind: BackendKind,
    p: &crate::scenario::post_cost::PostCostParams,
    mode: DbMode,
    cal: &Calibration,
    s: &crate::scenario::post_cost::PostCostSamples,
    rounds: u64,
) -> Result<PostCostResult, ScenarioError> {
    let over = cal.overhead.median_cycles;
    let block_ns: Vec<f64> = s
        .block_ticks
        .iter()
        .map(|&t| cal.to_ns(t.saturating_sub(over)))
        .collect();
    let per: Vec<f64> = block_ns.iter().map(|&v| v / f64::from(s.wqes_per_block)).collect();
    let call: Vec<f64> = block_ns.iter().map(|&v| v / f64::from(s.calls_per_block)).collect();
    let mut h = Hist::new();
    call.iter().for_each(|&v| h.record(v));
    let empty = || ScenarioError::Invalid("no samples".into());
    let per_stats = Stats::of(&per).ok_or_else(empty)?;
    let raw: Vec<f64> = s.block_ticks.iter().map(|&t| cal.to_ns(t)).collect();
    let raw_p50 = Stats::of(&raw).ok_or_else(empty)?.p50;
    Ok(PostCostResult {
        scenario: "post_cost".into(),
        backend: kind.as_str().into(),
        db_mode: (kind == BackendKind::Direct).then(|| mode.as_str().to_string()),
        op: p.op.cli_name().into(),
        verb: p.op.as_str().into(),
        size: p.size,
        postlist: p.postlist,
        inline: p.inline,
        cq_mod: p.cq_mod,
        calls_per_block: s.calls_per_block,
        wqes_per_block: s.wqes_per_block,
        per_wqe_ticks_p50: per_stats.p50 * cal.hz / 1e9,
        per_wqe_ns: per_stats,
        call_ns: Stats::of(&call).ok_or_else(empty)?,
        block_per_wqe_ns: per,
        call_histogram: h.encode(),
        tsc_step_ns: cal.to_ns(tsc_step()),
        timer_overhead_ns: cal.overhead_ns(),
        // the block less the timer within a few of the counter's steps: not resolved
        below_overhead: raw_p50 - cal.overhead_ns() < 4.0 * cal.to_ns(tsc_step()),
        rounds,
    })
}

/// The TSC's step in ticks, measured once per process.
pub fn tsc_step() -> u64 {
    static STEP: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *STEP.get_or_init(crate::clock::tsc_step_ticks)
}

//! A post-cost measurement from plan to report: every operation, backend, doorbell mode,
//! postlist, inline or not, and completion period.

use super::session;
use crate::backend::setup::{Dev, INLINE};
use crate::backend::{BackendKind, OpKind};
use crate::mlx5::sq::DbMode;
use crate::model::{ExecMode, ModelConfig};
use crate::probe::check::{counters, diag};
use crate::probe::report::{Report, Role, Runs};
use crate::probe::{Observer, Plan, PostCostPlan, ProbeError};
use crate::scenario::post_cost::{PostCostParams, BLOCK_WQES};
use crate::scenario::runner::{run_post_cost_interleaved, tsc_step};
use serde_json::json;
use std::time::Duration;

/// Runs a post-cost plan (see [`crate::probe::run`]): the checks, the device and its backends,
/// the configurations, the clock, the report's head, every configuration's blocks.
pub(in crate::probe) fn run(plan: &Plan, pc: &PostCostPlan, obs: &mut dyn Observer) -> Result<Report, ProbeError> {
    if let Some(bad) = pc.postlists.iter().find(|&&l| l == 0 || l > 48) {
        return Err(ProbeError::Usage(format!(
            "--post-list {bad}: postlists must be within 1..=48"
        )));
    }
    // model0 executes only between timed blocks, so the timed region holds the posts alone
    let model = ModelConfig {
        wire_delay_ns: None,
        exec: ExecMode::Deferred,
        ..Default::default()
    };
    let dev = session::open_device(plan, model, obs)?;
    let kinds = session::backends(&dev, plan.backends)?;
    let configs = configs(pc, &kinds);
    check_memory(pc, configs.len() as u64)?;
    let before = counters::sample(&dev);
    let (cal, env) = session::calibrate(&dev, false)?;
    let mut report = new_report(plan, pc, &dev, &kinds, env, cal);
    obs.started(&report);
    // one configuration on every backend and doorbell mode at a time, interleaved
    for (p, members) in groups(&configs) {
        let rs = run_post_cost_interleaved(&dev, &members, &p, &report.clock)
            .map_err(|e| diag::failed(diag::Bundle::of(plan, &dev, &before, Vec::new()), e.into()))?;
        for r in rs {
            if let Runs::PostCost(v) = &mut report.runs {
                v.push(r);
            }
            obs.finished(&report, report.runs.len() - 1);
        }
    }
    report.counters = counters::CounterDelta::since(before, &dev);
    Ok(report)
}

/// Every configuration measured, in order: each operation, backend, doorbell mode, postlist,
/// without and with inline (inline where the size and operation allow it), a completion for
/// every WQE and every `cq_mod`.
fn configs(pc: &PostCostPlan, kinds: &[BackendKind]) -> Vec<(BackendKind, DbMode, PostCostParams)> {
    let mut v = Vec::new();
    for &op in &pc.ops {
        for k in kinds {
            for &mode in modes(*k) {
                for &postlist in &pc.postlists {
                    for inline in [false, true] {
                        if inline && (pc.size > INLINE || op == OpKind::Read) {
                            continue;
                        }
                        for cq_mod in [1, pc.cq_mod] {
                            let p = PostCostParams {
                                op,
                                size: pc.size,
                                postlist,
                                inline,
                                cq_mod,
                                blocks: pc.blocks,
                                stall: Duration::from_secs(10),
                            };
                            v.push((*k, mode, p));
                        }
                    }
                }
            }
        }
    }
    v
}

/// The configurations grouped by what they measure (operation, postlist, inline, completion
/// period), in their first one's order, each with the backends and doorbell modes that run it.
fn groups(configs: &[(BackendKind, DbMode, PostCostParams)]) -> Vec<(PostCostParams, Vec<(BackendKind, DbMode)>)> {
    let same = |a: &PostCostParams, b: &PostCostParams| {
        (a.op, a.postlist, a.inline, a.cq_mod) == (b.op, b.postlist, b.inline, b.cq_mod)
    };
    let mut g: Vec<(PostCostParams, Vec<(BackendKind, DbMode)>)> = Vec::new();
    for (k, mode, p) in configs {
        match g.iter_mut().find(|(q, _)| same(q, p)) {
            Some((_, m)) => m.push((*k, *mode)),
            None => g.push((*p, vec![(*k, *mode)])),
        }
    }
    g
}

/// Every configuration's blocks are kept (their per-WQE figures are in the report): the memory
/// they take is checked before the run.
fn check_memory(pc: &PostCostPlan, configs: u64) -> Result<(), ProbeError> {
    session::check_memory(pc.blocks.saturating_mul(configs).saturating_mul(BLOCK_BYTES), || {
        format!(
            "-n {} blocks x {configs} configurations ({BLOCK_BYTES} B per block)",
            pc.blocks
        )
    })
}

/// Bytes a post-cost run keeps per block and configuration.
pub(in crate::probe) const BLOCK_BYTES: u64 = 24;

/// The report before the runs: what runs, on what (always in one process).
fn new_report(
    plan: &Plan,
    pc: &PostCostPlan,
    dev: &Dev,
    kinds: &[BackendKind],
    env: crate::report::env::Fingerprint,
    cal: crate::clock::Calibration,
) -> Report {
    let step_ns = cal.to_ns(tsc_step());
    Report {
        plan: plan.clone(),
        role: Role::Loopback,
        device: dev.name(),
        provider: dev.provider(),
        is_model: dev.is_model(),
        backends: kinds.to_vec(),
        warnings: env.warnings(),
        env,
        clock: cal,
        params: json!({ "scenario": "post_cost", "ops": pc.ops.iter().map(|o| o.as_str()).collect::<Vec<_>>(),
                "size_bytes": pc.size, "blocks": pc.blocks, "postlists": pc.postlists, "cq_mod": pc.cq_mod,
                "max_wqes_per_block": BLOCK_WQES, "tsc_step_ns": step_ns }),
        runs: Runs::PostCost(Vec::new()),
        intervals: Vec::new(),
        short_runs: Vec::new(),
        end_error: None,
        counters: None,
        regions: Vec::new(),
    }
}

/// The doorbell modes measured for a backend: every one on the direct path (the doorbell only
/// under `MLX5_SHUT_UP_BF`, as libmlx5), the provider's own on the others.
fn modes(k: BackendKind) -> &'static [DbMode] {
    if k == BackendKind::Direct && crate::backend::setup::Mlx5Env::get().shut_up_bf {
        &[DbMode::Db]
    } else if k == BackendKind::Direct {
        &[DbMode::Bf, DbMode::BfNoFence, DbMode::Db]
    } else {
        &[DbMode::Bf]
    }
}

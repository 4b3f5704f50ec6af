//! A post-cost measurement from plan to report: every operation, backend, doorbell mode,
//! postlist, inline or not, and completion period.

use super::session;
use crate::backend::setup::INLINE;
use crate::backend::{BackendKind, OpKind};
use crate::mlx5::sq::DbMode;
use crate::model::{ExecMode, ModelConfig};
use crate::probe::report::{Report, Role, Runs};
use crate::probe::{Observer, Plan, PostCostPlan, ProbeError};
use crate::scenario::post_cost::{PostCostParams, BLOCK_WQES};
use crate::scenario::runner::{run_post_cost, tsc_step};
use serde_json::json;
use std::time::Duration;

/// Runs a post-cost plan (see [`crate::probe::run`]).
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
    // every configuration's blocks are kept (their per-WQE figures are in the report): checked
    // before the run
    let configs: u64 = pc
        .ops
        .iter()
        .map(|&op| {
            let inlines = if pc.size > INLINE || op == OpKind::Read { 1 } else { 2 };
            kinds.iter().map(|k| modes(*k).len() as u64).sum::<u64>() * pc.postlists.len() as u64 * inlines * 2
        })
        .sum();
    session::check_memory(pc.blocks.saturating_mul(configs).saturating_mul(24), || {
        format!("-n {} blocks x {configs} configurations (24 B per block)", pc.blocks)
    })?;
    let before = crate::probe::check::counters::sample(&dev);
    let (cal, env) = session::calibrate(&dev, false)?;
    let step_ns = cal.to_ns(tsc_step());
    let mut report = Report {
        plan: plan.clone(),
        role: Role::Loopback,
        device: dev.name(),
        provider: dev.provider(),
        is_model: dev.is_model(),
        backends: kinds.clone(),
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
    };
    obs.started(&report);
    for &op in &pc.ops {
        for k in &kinds {
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
                            let r = run_post_cost(&dev, *k, &p, mode, &report.clock).map_err(|e| {
                                let b = crate::probe::check::diag::Bundle {
                                    plan,
                                    dev: &dev,
                                    qp_states: Vec::new(),
                                    before: before.clone(),
                                    error: None,
                                };
                                crate::probe::check::diag::failed(b, e.into())
                            })?;
                            if let Runs::PostCost(v) = &mut report.runs {
                                v.push(r);
                            }
                            obs.finished(&report, report.runs.len() - 1);
                        }
                    }
                }
            }
        }
    }
    report.counters = crate::probe::check::counters::CounterDelta::since(before, &dev);
    Ok(report)
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

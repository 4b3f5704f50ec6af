//! Runs a scenario over one or several backends and turns the samples into results: latency
//! interleaved in blocks so machine drift cancels out (`lat_runs`), bandwidth sized to its
//! minimum duration (`bw_runs`), the post cost (`post_cost_runs`); and one side of a
//! client/server run.

use super::lat::{self, LatParams, LatSamples, PingState};
use super::ScenarioError;
use crate::backend::direct::DirectEnd;
use crate::backend::setup::{self, Dev, SetupError};
use crate::backend::verbs::VerbsEnd;
use crate::backend::{BackendKind, OpKind};
use crate::mlx5::sq::DbMode;
use crate::model::DirectModelQp;
use crate::verbs::direct::DirectQp;
use std::sync::atomic::AtomicBool;

mod bw_runs;
mod lat_runs;
mod nic_anatomy;
mod post_cost_runs;

pub use bw_runs::{bw_resized, bw_side, run_bw, run_bw_with, BwResult, BW_RESIZES, MAX_BW_ITERS};
pub use lat_runs::{
    figures_ns, finish, lat_prime, lat_side, nic_anatomy, nic_anatomy_net, responder_ticks, run_blocks, run_blocks_nic,
    run_interleaved, sample_room, Anatomy, Blocks, LatPair, LatResult, Length, MapSummary, NicAnatomy, OnBlock, RunMap,
};
pub use post_cost_runs::{run_post_cost, run_post_cost_interleaved, tsc_step, PostCostResult};

/// A registered buffer a run uses, named after its backend and end, and where it sits.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Region {
    /// `verbs.A`, `direct.t0.q0.B`, ... (dotted: the table's rows alone have the backend as a
    /// word of its own)
    pub name: String,
    /// Address, page offset, alignment, huge pages, physical address.
    #[serde(flatten)]
    pub placement: crate::backend::MrPlacement,
}

/// A connected pair of any backend (each arm runs with static dispatch).
pub enum AnyPair {
    /// verbs or wr.
    Verbs(Box<(VerbsEnd, VerbsEnd)>),
    /// direct on model0.
    Model(Box<(DirectEnd<DirectModelQp>, DirectEnd<DirectModelQp>)>),
    /// direct on mlx5.
    Mlx5(Box<(DirectEnd<DirectQp>, DirectEnd<DirectQp>)>),
}

impl AnyPair {
    /// The two ends' QP numbers.
    pub fn qpns(&self) -> (u32, u32) {
        use crate::backend::Backend;
        match self {
            AnyPair::Verbs(p) => (p.0.qpn(), p.1.qpn()),
            AnyPair::Model(p) => (p.0.qpn(), p.1.qpn()),
            AnyPair::Mlx5(p) => (p.0.qpn(), p.1.qpn()),
        }
    }

    /// Builds the pair for `kind` on `dev`.
    pub fn new(dev: &Dev, kind: BackendKind, op: OpKind, buf_len: usize, mode: DbMode) -> Result<Self, SetupError> {
        dev.supports(kind)?;
        Ok(match (dev, kind) {
            (Dev::Model(m), BackendKind::Direct) => AnyPair::Model(Box::new(setup::model_pair_with(
                m,
                op,
                buf_len,
                mode,
                m.opts.transport,
            )?)),
            (_, BackendKind::Direct) => AnyPair::Mlx5(Box::new(setup::mlx5_pair(dev, op, buf_len, mode)?)),
            _ => AnyPair::Verbs(Box::new(setup::verbs_pair(dev, kind, op, buf_len)?)),
        })
    }

    /// Both QPs' states as the device reads them back.
    pub fn describe(&self) -> [String; 2] {
        use crate::backend::Backend;
        match self {
            AnyPair::Verbs(p) => [p.0.describe_qp(), p.1.describe_qp()],
            AnyPair::Model(p) => [p.0.describe_qp(), p.1.describe_qp()],
            AnyPair::Mlx5(p) => [p.0.describe_qp(), p.1.describe_qp()],
        }
    }

    /// Where the two ends' buffers sit.
    pub fn placements(&self) -> [crate::backend::MrPlacement; 2] {
        use crate::backend::Backend;
        match self {
            AnyPair::Verbs(p) => [p.0.placement(), p.1.placement()],
            AnyPair::Model(p) => [p.0.placement(), p.1.placement()],
            AnyPair::Mlx5(p) => [p.0.placement(), p.1.placement()],
        }
    }

    /// Largest inline payload of the pair's QPs.
    pub fn max_inline(&self) -> u32 {
        use crate::backend::Backend;
        match self {
            AnyPair::Verbs(p) => p.0.max_inline().min(p.1.max_inline()),
            AnyPair::Model(p) => p.0.max_inline().min(p.1.max_inline()),
            AnyPair::Mlx5(p) => p.0.max_inline().min(p.1.max_inline()),
        }
    }

    fn run(
        &mut self,
        p: &LatParams,
        iters: u64,
        warmup: u64,
        st: &mut PingState,
        intr: &AtomicBool,
    ) -> Result<LatSamples, ScenarioError> {
        match self {
            AnyPair::Verbs(b) => lat::run(&mut b.0, &mut b.1, p, iters, warmup, st, intr),
            AnyPair::Model(b) => lat::run(&mut b.0, &mut b.1, p, iters, warmup, st, intr),
            AnyPair::Mlx5(b) => lat::run(&mut b.0, &mut b.1, p, iters, warmup, st, intr),
        }
    }
}

/// A run that failed while setting up or while measuring.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Device, QP or memory set-up.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The measurement.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
}

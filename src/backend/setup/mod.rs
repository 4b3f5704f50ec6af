//! Opening a device and building connected pairs of ends for each backend (loopback: both ends
//! on one device, as two hosts would be connected).
//!
//! `device`: the device a run uses ([`Dev`]) and what it runs; `qp`: what every scenario QP is
//! made with; `pairs`: connected pairs in one process; `half`: the ends of a connection between
//! two processes ([`HalfEnd`], [`AnyEnd`]).

mod device;
mod half;
mod pairs;
mod qp;

pub use super::path::PathOpts;
pub use device::{open_named, Dev, DevOpts, Mlx5Env, ModelDev, NicClock};
pub use half::{AnyEnd, HalfEnd};
pub use pairs::{mlx5_pair, model_pair, model_pair_with, verbs_pair, verbs_pair_with};
pub use qp::{access_for, kv_connect_opts, rd_atomic, DEPTH, INLINE, MAX_RD_ATOMIC};

use super::BackendError;
use crate::verbs::VerbsError;

/// Errors while choosing or opening a device.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// A verbs failure.
    #[error(transparent)]
    Verbs(Box<VerbsError>),
    /// model0 could not be opened.
    #[error(transparent)]
    Model(Box<crate::model::ModelError>),
    /// A backend failure.
    #[error(transparent)]
    Backend(Box<BackendError>),
}

impl From<VerbsError> for SetupError {
    fn from(e: VerbsError) -> Self {
        SetupError::Verbs(Box::new(e))
    }
}

impl From<crate::model::ModelError> for SetupError {
    fn from(e: crate::model::ModelError) -> Self {
        SetupError::Model(Box::new(e))
    }
}

impl From<BackendError> for SetupError {
    fn from(e: BackendError) -> Self {
        SetupError::Backend(Box::new(e))
    }
}

/// The refusal of completion events (`-e`) for the direct backend: they are libibverbs'
/// completion channel, which only the verbs and wr backends wait on.
pub fn no_events_on_direct() -> SetupError {
    SetupError::from(BackendError::Unsupported {
        backend: "direct",
        why: "completion events (-e) are libibverbs' completion channel: the verbs and wr backends wait for them"
            .into(),
    })
}

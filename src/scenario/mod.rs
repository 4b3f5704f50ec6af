//! Measurement scenarios, generic over the backend (static dispatch). No unsafe code here.
#![forbid(unsafe_code)]

pub mod bw;
pub mod kv;
pub mod lat;
pub mod post_cost;
pub mod runner;

use crate::backend::BackendError;
use std::time::Duration;

/// Why a scenario stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// The backend failed (verb, completion error, refused WQE), at this operation.
    #[error("{side} failed at operation {index}: {source}")]
    Backend {
        /// `client` or `server`.
        side: &'static str,
        /// Index of the operation (warm-up included).
        index: u64,
        /// The error.
        #[source]
        source: BackendError,
    },
    /// Nothing arrived before the deadline.
    #[error("{side}: no progress for {waited:?} at operation {index} ({what}); the peer stopped or the link is down")]
    Stalled {
        /// `client` or `server`.
        side: &'static str,
        /// Index of the operation.
        index: u64,
        /// What was awaited.
        what: &'static str,
        /// How long.
        waited: Duration,
    },
    /// The other side stopped with an error (reported by it).
    #[error("{side}: stopped because the other side failed")]
    PeerFailed {
        /// `client` or `server`.
        side: &'static str,
    },
    /// Interrupted (SIGINT).
    #[error("interrupted")]
    Interrupted,
    /// Bad parameters.
    #[error("{0}")]
    Invalid(String),
    /// The measuring threads could not run the job (could not be made, did not start together
    /// within the deadline, or panicked).
    #[error(transparent)]
    Workers(#[from] crate::workers::WorkerError),
}

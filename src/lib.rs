//! rdmaprobe: an RDMA performance probe. The same scenarios run through `ibv_post_send`, the
//! `ibv_wr_*` API and a direct mlx5 path, timed with one calibrated TSC clock.
//!
//! With `--no-default-features` only the hot core builds (`sys`, `clock`), on `core` alone.
#![cfg_attr(not(feature = "std"), no_std)]
#![warn(missing_docs)]

pub mod clock;
pub mod mlx5;
pub mod sys;

#[cfg(feature = "std")]
pub mod verbs;

#[cfg(feature = "std")]
pub mod model;

#[cfg(feature = "std")]
pub mod backend;

#[cfg(feature = "std")]
pub mod report;

#[cfg(feature = "std")]
pub mod scenario;

#[cfg(feature = "std")]
pub mod oob;

#[cfg(feature = "std")]
pub mod probe;

#[cfg(feature = "std")]
pub mod workers;

#[cfg(feature = "std")]
pub mod signals;

#[cfg(all(feature = "std", target_os = "linux"))]
pub mod uverbs;

#[cfg(all(test, feature = "std", target_os = "linux"))]
mod test_pages;

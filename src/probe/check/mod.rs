//! The acceptance tools: whether this host and device are fit to measure ([`doctor`]: a new
//! host check goes in `doctor/host.rs`, a new device check in `doctor/device.rs`), whether the
//! peer is reachable and the path fast enough ([`ping`]), what the machine offers ([`info`]:
//! `devices`, `clock`), the device's counters over a run ([`counters`]) and the diagnostics
//! bundle of a failed run ([`diag`]).

pub mod counters;
pub mod diag;
pub mod doctor;
pub mod info;
pub mod ping;

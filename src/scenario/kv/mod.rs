//! The key-value workload (HERD over a MICA store, as efficient/rdma_bench runs it;
//! `../shared/docs/herd-mica.md`): HERD's keys and draws ([`keys`]), the 64-byte request slot and
//! the request region's layout ([`op`]), and the MICA store a worker owns ([`store`]).

pub mod engine;
pub mod keys;
pub mod op;
pub mod result;
pub mod run;
pub mod store;

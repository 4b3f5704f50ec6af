//! The key-value workload (HERD over a MICA store, as efficient/rdma_bench runs it;
//! `../shared/docs/herd-mica.md`): HERD's keys and draws ([`keys`]), the 64-byte request slot and
//! the request region's layout ([`op`]), the MICA store a worker owns ([`store`]), HERD's client
//! and worker ([`engine`]), stepped in one thread ([`run`]) or a thread each ([`threads`]).

pub mod engine;
pub mod keys;
pub mod op;
pub mod result;
pub mod run;
pub mod store;
pub mod threads;

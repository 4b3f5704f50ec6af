//! `model0`: a software HCA with the memory interface of an mlx5 queue pair — SQ and RQ rings of
//! WQEBBs, doorbell records, a doorbell/BlueFlame register page, CQ buffers of CQE64 (or, made
//! through libmlx5, 128-byte CQEs) starting INVALID — which the direct path drives with the very code it uses on a ConnectX. Only the
//! doorbell is routed here (the [`RingHook`](crate::mlx5::sq::RingHook) of the send and receive queues).
//!
//! The model decodes WQEs with rdma-core's types (`sys::mlx5_wqe_*`, not our builders' types, so
//! the two check each other), validates them as hardware does and executes them against
//! registered memory, writing the CQEs hardware writes, error CQEs with their syndromes included.
//! Every object lives in shared memory ([`shm`]), so a client process and a server process can
//! run against each other through the model, exchanging QP number, rkey and address as with
//! real hosts. Results on model0 are about the tool and the data path, never about a NIC.
//!
//! Semantics follow mlx5 where the IB spec leaves a choice. Atomics: a ConnectX works on the
//! 64-bit word in host byte order when its `atomic_req_8B_endianness_mode` says so (and only then
//! does the kernel advertise `IBV_ATOMIC_HCA`), else big-endian; model0 does either
//! ([`ModelConfig::atomic_big_endian`], default host order) and its uverbs device advertises
//! the capability that goes with it.

//!
//! The parts: `layout` (the shared headers and their checks), `objects` (the handle, object
//! creation, the handles), `lookup` (the per-thread lookup cache of any process's objects),
//! `decode` (WQEs), `exec` (running a send queue), `register` (the checks of the register page
//! against the WQEs rung), `recv` (the receive side), `cqe` (completions, errors), `wire` (the
//! added delay), `direct` (the direct path's doorbell route and QP), `user` (objects over
//! libmlx5's memory), `config` (knobs and errors), `info` (`rdmaprobe devices`), `clock` (the NIC
//! clock of its CQE timestamps).

pub mod shm;

pub mod clock;
mod config;
mod cqe;
mod decode;
mod direct;
pub mod events;
mod exec;
mod info;
mod layout;
mod lookup;
mod objects;
mod payload;
mod pid;
mod recv;
mod register;
mod srq;
mod user;
mod wire;

#[cfg(test)]
mod trust_tests;

pub use config::{
    ExecMode, ModelConfig, ModelConnect, ModelError, ModelQpCaps, BF_SIZE, DEVICE_NAME, MAX_INLINE, MAX_WIRE_DELAY_NS,
};
pub use cqe::syndrome;
pub use direct::{DirectModelQp, ModelDoorbell, Pending};
pub use info::{info, sweep_dead, ModelInfo};
pub use layout::{state, transport};
pub use lookup::settle_thread;
pub use objects::{Counters, Model, ModelCq, ModelMr, ModelQp};
pub use pid::set_wait_hook;
pub use srq::{ModelSrq, UserSrqLayout};
pub use user::{ModelDbPage, UserQpLayout};
pub use wire::abort_wire_waits;

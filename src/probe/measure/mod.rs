//! The measurements, one module per scenario, each from plan to report: [`session`] is what
//! every one of them sets up (device, backends, clock, the peer's exchange); `lat`, `bw` and
//! `post_cost` are the scenarios; `cm` connects a client/server run's QPs through the RDMA
//! connection manager (-R). A new scenario is a new module here.

pub(in crate::probe) mod bw;
pub(in crate::probe) mod cm;
pub(in crate::probe) mod lat;
pub(in crate::probe) mod post_cost;
pub mod session;

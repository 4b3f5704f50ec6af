//! The measurements, one module per scenario, each from plan to report: [`session`] is what
//! every one of them sets up (device, backends, clock, the peer's exchange); `lat`, `bw` and
//! `post_cost` are the scenarios; `cm` connects a client/server run's QPs through the RDMA
//! connection manager (-R). A new scenario is a new module here.

pub(in crate::probe) mod bw;
pub(in crate::probe) mod cm;
pub(in crate::probe) mod kv;
pub(in crate::probe) mod lat;
pub(in crate::probe) mod post_cost;
pub mod session;

pub(in crate::probe) use kv::threads_said as kv_threads_said;

use crate::oob::Rendezvous;
use crate::probe::{Observer, Plan, ProbeError, Report, Scenario};

/// Measures what `plan` says, with its scenario's module; the peer, when `peer` is `None`, is
/// reached as `plan.peer` says (TCP). Post-cost runs in one process: with a peer it is refused.
/// A `--diag` directory that could not hold the bundle safely is refused first.
pub(super) fn run(
    plan: &Plan,
    peer: Option<&mut (dyn Rendezvous + '_)>,
    obs: &mut dyn Observer,
) -> Result<Report, ProbeError> {
    if let Some(dir) = &plan.diag {
        crate::probe::check::diag::check(dir)?;
    }
    if plan.peer_tool == crate::probe::PeerTool::Perftest {
        return match (&plan.scenario, peer, &plan.peer) {
            (_, _, crate::probe::PeerSpec::Loopback) => Err(ProbeError::Usage(
                "--peer perftest: perftest is another process; give its HOST (it is the server) or none (it is the client)"
                    .into(),
            )),
            (Scenario::Lat(l), None, _) => lat::perftest::run(plan, l, obs),
            (Scenario::Lat(_), Some(_), _) => Err(ProbeError::Invalid(
                "--peer perftest speaks perftest's own exchange over TCP: no other rendezvous".into(),
            )),
            (Scenario::Bw(b), None, _) => bw::perftest::run(plan, b, obs),
            (Scenario::Bw(_), Some(_), _) => Err(ProbeError::Invalid(
                "--peer perftest speaks perftest's own exchange over TCP: no other rendezvous".into(),
            )),
            (Scenario::PostCost(_), ..) => Err(ProbeError::Usage("post-cost runs in one process: no peer".into())),
            (Scenario::Kv(_), ..) => Err(ProbeError::Usage("kv has no perftest peer (perftest has no such test)".into())),
        };
    }
    match (&plan.scenario, peer) {
        (Scenario::Lat(l), peer) => lat::run(plan, l, peer, obs),
        (Scenario::Bw(b), peer) => bw::run(plan, b, peer, obs),
        (Scenario::PostCost(p), None) => post_cost::run(plan, p, obs),
        (Scenario::PostCost(_), Some(_)) => Err(ProbeError::Invalid("post-cost runs in one process: no peer".into())),
        (Scenario::Kv(k), peer) => kv::run(plan, k, peer, obs),
    }
}

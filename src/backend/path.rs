//! The path and QP options of a connection (perftest's -m, -S, -T, -u, --retry_count,
//! --pkey_index), and the check that a connected QP took them.

use super::setup::SetupError;
use crate::verbs::{Context, VerbsError};

/// The path and QP options of a connection (perftest's -m, -S, -T, -u, --retry_count,
/// --pkey_index). model0's own direct QPs have no path: they apply to the verbs QPs (on model0,
/// the verbs and wr backends through libmlx5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathOpts {
    /// Path MTU in bytes (256 to 4096); `None`: the port's active MTU.
    pub mtu: Option<u32>,
    /// Service level (0-15).
    pub sl: u8,
    /// GRH traffic class (RoCE, global routing).
    pub traffic_class: u8,
    /// Local ACK timeout exponent (0-31): 4.096 us x 2^timeout.
    pub timeout: u8,
    /// Transport retries (0-7).
    pub retry_count: u8,
    /// P_Key index.
    pub pkey_index: u16,
    /// At most this many outstanding READs and atomics as the initiator (`max_rd_atomic`);
    /// `None`: as many as the device allows (up to 16). A peer whose responder takes fewer (a
    /// perftest peer's `out_reads`) sets it.
    pub max_rd_atomic: Option<u8>,
}

impl Default for PathOpts {
    /// perftest's defaults: the active MTU, SL 0, traffic class 0, timeout 14, 7 retries,
    /// P_Key index 0.
    fn default() -> Self {
        PathOpts {
            mtu: None,
            sl: 0,
            traffic_class: 0,
            timeout: 14,
            retry_count: 7,
            pkey_index: 0,
            max_rd_atomic: None,
        }
    }
}

/// The path attributes a connected QP reads back must be the ones asked for (-m, -u,
/// --retry_count, and the outstanding READs): a driver that gives another value is an error
/// naming it, not a run with other settings than the ones recorded. (The capabilities may be
/// granted larger: the inline limit is read from the QP.)
pub(super) fn path_taken(ctx: &Context, diffs: Vec<crate::verbs::Granted>) -> Result<(), SetupError> {
    const PATH: [&str; 5] = [
        "path_mtu",
        "timeout",
        "retry_cnt",
        "max_rd_atomic",
        "max_dest_rd_atomic",
    ];
    match diffs.iter().find(|g| PATH.contains(&g.what)) {
        None => Ok(()),
        Some(g) => Err(VerbsError::Invalid {
            ctx: crate::verbs::Ctx::dev(ctx.name()),
            why: format!(
                "the QP took {} = {} where {} was asked for",
                g.what, g.granted, g.requested
            ),
        }
        .into()),
    }
}

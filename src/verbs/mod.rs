//! The verbs layer: RAII resources over libibverbs. Every child keeps its parent alive (an
//! `Arc`), so resources are destroyed in reverse order whatever order the handles are dropped
//! in; every destroy is checked, and the per-device [`Ledger`] records what was created,
//! destroyed and what failed to be destroyed.

pub mod cm;
pub mod cq;
pub mod device;
pub mod direct;
pub mod error;
pub mod mr;
pub mod nic_clock;
pub mod qp;

pub use cq::{CompChannel, Completion, Cq};
pub use device::{Context, DeviceInfo, DeviceList, Gid, GidEntry, GidType, PortInfo};
pub use error::{Ctx, NoDevice, Result, VerbsError};
pub use mr::{Buffer, Mr, MrAccess, MrPlacement, Pd, RemoteBuf, Sge};
pub use nic_clock::{NicClockCaps, NicClockMap, TsCompletion};
pub use qp::Ah;
pub use qp::{ConnectOpts, Endpoint, Granted, Op, Qp, QpCaps, SendFlags, WrBatch};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The kinds of resource the ledger counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `ibv_context`
    Context,
    /// `ibv_pd`
    Pd,
    /// `ibv_mr`
    Mr,
    /// `ibv_cq`
    Cq,
    /// `ibv_qp`
    Qp,
    /// `ibv_td` (thread domain)
    Td,
    /// `ibv_comp_channel`
    Channel,
    /// `ibv_ah`
    Ah,
}

const KINDS: usize = 8;

/// Per-device record of created and destroyed resources and teardown failures. It outlives the
/// device, so a test can check after everything is dropped that nothing leaked.
#[derive(Debug)]
pub struct Ledger {
    device: String,
    live: [AtomicUsize; KINDS],
    created: [AtomicUsize; KINDS],
    failures: Mutex<Vec<String>>,
}

impl Ledger {
    pub(crate) fn new(device: &str) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Ledger {
            device: device.to_string(),
            live: Default::default(),
            created: Default::default(),
            failures: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn created(&self, k: Kind) {
        self.live[k as usize].fetch_add(1, Ordering::Relaxed);
        self.created[k as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Records a destroy's outcome; a failure is kept and printed, since `Drop` cannot return it.
    pub(crate) fn destroyed(&self, k: Kind, r: Result<()>) {
        match r {
            Ok(()) => {
                self.live[k as usize].fetch_sub(1, Ordering::Relaxed);
            }
            Err(e) => {
                eprintln!("rdmaprobe: teardown error: {e}");
                self.failures
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(e.to_string());
            }
        }
    }

    /// Resources of kind `k` created and not (successfully) destroyed.
    pub fn live(&self, k: Kind) -> usize {
        self.live[k as usize].load(Ordering::Relaxed)
    }

    /// Resources of kind `k` created so far.
    pub fn created_count(&self, k: Kind) -> usize {
        self.created[k as usize].load(Ordering::Relaxed)
    }

    /// Sum of live resources of every kind.
    pub fn live_total(&self) -> usize {
        self.live.iter().map(|a| a.load(Ordering::Relaxed)).sum()
    }

    /// Teardown errors so far.
    pub fn failures(&self) -> Vec<String> {
        self.failures.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The device this ledger belongs to.
    pub fn device(&self) -> &str {
        &self.device
    }
}

//! The direct path on model0: the doorbell route the direct path's queues call ([`ModelDoorbell`],
//! with its after-post [`Pending`] flag and what a run checks of the register), and
//! [`DirectModelQp`], a QP driven by the same `Sq`, `Rq` and `Cq` code as on a ConnectX.

use super::exec::execute;
use super::layout::{hdr, QpHdr};
use super::recv::receives_posted;
use super::shm::Shm;
use super::wire::{wire_wait, WIRE_TIMED};
use super::{ExecMode, Model, ModelCq, ModelError, ModelQp, ModelQpCaps};
use crate::mlx5::sq::RingHook;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

/// The doorbell route: what the direct path's queues call after every doorbell. In deferred mode
/// it does nothing (the model reads the doorbell record when [`ModelQp::progress`] runs).
#[derive(Clone)]
pub struct ModelDoorbell {
    pub(super) model: Model,
    pub(super) qp: Arc<Shm>,
    pub(super) exec: ExecMode,
    pub(super) pending: Arc<Pending>,
    /// Doorbells rung through this route (the send queue's), published in `pending.rings`.
    pub(super) rings: u32,
}

/// A QP's "doorbell rung, not yet delivered" flag (after-post execution) and its doorbell count,
/// alone on their cache lines: the flags of a pair's two QPs are written by two threads on every
/// post, and two small allocations side by side would share a line.
#[repr(align(128))]
#[derive(Default)]
pub struct Pending {
    pub(super) flag: AtomicBool,
    /// Doorbells rung so far (written by the poster: a plain store of its own count).
    pub(super) rings: AtomicU32,
    /// `rings` when the register was last checked.
    checked: AtomicU32,
}

impl Pending {
    /// How much of the register a run now can check, and the doorbells rung since the last
    /// check (the QP's `doorbells` counter): with exactly one, the register holds all of it (a
    /// BlueFlame write too); after more, only the last doorbell's first 8 bytes are known to be
    /// there.
    pub(super) fn reg_check(&self) -> (RegCheck, u32) {
        let rings = self.rings.load(Ordering::Acquire);
        let before = self.checked.swap(rings, Ordering::Relaxed);
        let rung = rings.wrapping_sub(before);
        if rung == 1 {
            (RegCheck::BlueFlame, rung)
        } else {
            (RegCheck::Doorbell, rung)
        }
    }
}

/// What a run of a send queue checks of the QP's register page (model0's own QPs: the page the
/// direct path rings).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum RegCheck {
    /// Nothing: not run by the poster after its doorbell (a receive resumed a sender stalled on
    /// RNR), so the register may be between the record's store and its own.
    None,
    /// The last doorbell's first 8 bytes (several doorbells since the last check).
    Doorbell,
    /// One doorbell since the last check: its first 8 bytes, and a BlueFlame write whole.
    BlueFlame,
}

/// What a doorbell sets off: the wire (the data or request travels `D`), then the WQEs execute.
#[inline]
/// `(reg, rung)`: what of the register to check, and the doorbells rung since the last run.
pub(super) fn deliver_now(model: &Model, qp: &Shm, (reg, rung): (RegCheck, u32)) {
    // The wire: everything this doorbell carries arrives D later. The wait comes before any
    // of the model's own work, so the delay shifts the whole operation by D.
    let wire = hdr::<QpHdr>(qp).wire_delay_ns.load(Ordering::Acquire);
    if wire != 0 {
        // A device sees the doorbell once the stores before it are visible: drain the store
        // buffer first (the `sfence`s of the doorbell only order it), so the delay cannot hide
        // that drain and adds exactly D. Without a delay nothing waits on that drain: the kick
        // below (a SeqCst read-modify-write: a locked instruction on x86, an
        // acquire-release one on aarch64) publishes the WQEs to whoever executes them, and the
        // fence here cost the round trip about 10 ns per doorbell.
        fence(Ordering::SeqCst);
        wire_wait(wire & !WIRE_TIMED);
    }
    hdr::<QpHdr>(qp).kicks.fetch_add(1, Ordering::SeqCst);
    execute(model, qp, reg, rung);
}

impl RingHook for ModelDoorbell {
    #[inline]
    fn rung(&mut self, _qpn: u32, _pi: u32) {
        self.rings = self.rings.wrapping_add(1);
        self.pending.rings.store(self.rings, Ordering::Release);
        match self.exec {
            ExecMode::Inline => deliver_now(&self.model, &self.qp, self.pending.reg_check()),
            ExecMode::AfterPost => self.pending.flag.store(true, Ordering::Release),
            ExecMode::Deferred => {}
        }
    }

    fn rung_rq(&mut self, _qpn: u32, _head: u32) {
        receives_posted(&self.model, &self.qp, self.exec);
    }
}

/// A QP on model0 driven by the direct path: the same `Sq`, `Rq` and `Cq` code as on a ConnectX,
/// with the doorbell routed to the model. One CQ takes send and receive completions.
pub struct DirectModelQp {
    /// The send queue.
    pub sq: crate::mlx5::sq::Sq<ModelDoorbell>,
    /// The receive queue.
    pub rq: crate::mlx5::rq::Rq<ModelDoorbell>,
    /// The completion queue.
    pub cq: crate::mlx5::cq::Cq,
    /// The model's side of the QP (connect, state, knobs).
    pub qp: ModelQp,
    _cq: ModelCq,
}

impl DirectModelQp {
    /// Creates the CQ (`cqe` entries) and the QP in `pd` and wraps them.
    pub fn new(
        model: &Model,
        pd: u32,
        caps: ModelQpCaps,
        cqe: u32,
        mode: crate::mlx5::sq::DbMode,
    ) -> Result<Self, ModelError> {
        let cq = model.create_cq(cqe)?;
        let qp = model.create_qp(pd, &cq, &cq, caps)?;
        // SAFETY: the ring, doorbell record and register page live in `qp`'s mapping, kept alive
        // by the `qp` field for as long as the queues exist, and posted to only through them.
        let sq = unsafe { crate::mlx5::sq::Sq::new(qp.sq_config(), mode, qp.doorbell()) }
            .map_err(|e| ModelError::Invalid(e.to_string()))?;
        // SAFETY: as above, for the receive ring.
        let rq = unsafe { crate::mlx5::rq::Rq::new(qp.rq_config(), qp.doorbell()) }
            .map_err(|e| ModelError::Invalid(e.to_string()))?;
        // SAFETY: the CQ buffer and record live in `cq`'s mapping, kept by the `_cq` field.
        let dcq = unsafe { crate::mlx5::cq::Cq::new(cq.config()) }.map_err(|e| ModelError::Invalid(e.0.to_string()))?;
        Ok(DirectModelQp {
            sq,
            rq,
            cq: dcq,
            qp,
            _cq: cq,
        })
    }

    /// CQEs the model dropped because this CQ was full.
    pub fn cq_overruns(&self) -> u32 {
        self._cq.overruns()
    }
}

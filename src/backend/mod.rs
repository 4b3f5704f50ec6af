//! The backends the scenarios run on, behind one trait with static dispatch: `verbs`
//! (`ibv_post_send`), `wr` (`ibv_wr_*`) and `direct` (our mlx5 WQEs, on a ConnectX or on model0).
//! Each end owns a connected RC QP, its CQ and one registered buffer, and knows the peer's buffer.
//! Work requests are prepared once and only patched per post: what is timed is the post path.

pub mod direct;
pub mod kv;
pub mod path;
pub mod setup;
pub mod verbs;

use crate::mlx5::cq::CqeError;
use crate::mlx5::sq::SqError;
/// Where an end's buffer sits (the verbs layer's, for every backend's buffer).
pub use crate::verbs::MrPlacement;
use crate::verbs::VerbsError;
use std::sync::atomic::{AtomicU8, Ordering};

/// The post paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// `ibv_post_send` / `ibv_post_recv` / `ibv_poll_cq`.
    Verbs,
    /// `ibv_wr_start` / `ibv_wr_*` / `ibv_wr_complete`.
    Wr,
    /// Our own WQEs, doorbell and CQE polling.
    Direct,
}

impl BackendKind {
    /// Name as on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Verbs => "verbs",
            BackendKind::Wr => "wr",
            BackendKind::Direct => "direct",
        }
    }
}

/// Operations the scenarios post. Sources and targets are at offset 0 of the local and remote
/// buffers; atomics use the first 8 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// RDMA WRITE.
    Write,
    /// SEND (the peer must have receives posted).
    Send,
    /// RDMA READ.
    Read,
    /// Atomic: fetch-and-add of 1 (or compare-and-swap with -A CMP_AND_SWAP).
    FetchAdd,
    /// Compare-and-swap (0 -> 0: always a hit that leaves the word unchanged).
    CmpSwap,
    /// RDMA WRITE with immediate: the data lands as a WRITE's, and the receiver consumes a
    /// posted receive and sees a completion carrying [`IMM`].
    WriteImm,
    /// SEND with immediate ([`IMM`]).
    SendImm,
}

/// The transport of the QPs (perftest's `-c`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Transport {
    /// Reliable connected.
    #[default]
    Rc,
    /// Unreliable connected: SEND and WRITE (and their immediates); nothing acknowledged.
    Uc,
    /// Unreliable datagram: SEND (and with immediate), each to an address handle, up to the
    /// path MTU; the receive takes a 40-byte GRH area first.
    Ud,
}

/// The Q_Key of rdmaprobe's UD QPs (perftest's `DEF_QKEY`).
pub const QKEY: u32 = 0x1111_1111;

/// A UD receive completion from a QP other than the peer's: another sender with the same Q_Key
/// (perftest's, well known) reached this QP. Counting it as the peer's message would measure
/// the stranger, so the run stops and says so.
pub(crate) fn stray_datagram(backend: &'static str, qpn: u32, src: u32, peer: u32) -> BackendError {
    BackendError::Invalid {
        backend,
        why: format!(
            "QP {qpn:#x}: a datagram from QP {src:#x}, not from the peer's QP {peer:#x} (another sender with Q_Key \
             {QKEY:#x} reached this QP): not counted as the peer's, the run stops"
        ),
    }
}

impl Transport {
    /// As perftest names it.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Ud => "UD",
        }
    }

    /// Whether the transport carries `op`.
    pub fn allows(self, op: OpKind) -> bool {
        match self {
            Transport::Rc => true,
            Transport::Uc => op.carries_payload(),
            Transport::Ud => matches!(op, OpKind::Send | OpKind::SendImm),
        }
    }

    /// Its `IBV_QPT_*`.
    pub fn ibv_qp_type(self) -> u32 {
        match self {
            Transport::Rc => crate::sys::IBV_QPT_RC,
            Transport::Uc => crate::sys::IBV_QPT_UC,
            Transport::Ud => crate::sys::IBV_QPT_UD,
        }
    }

    /// Its model0 transport (`model::transport::*`).
    #[cfg(feature = "std")]
    pub fn model(self) -> u32 {
        match self {
            Transport::Rc => crate::model::transport::RC,
            Transport::Uc => crate::model::transport::UC,
            Transport::Ud => crate::model::transport::UD,
        }
    }
}

/// The immediate data the immediates carry (host order): "RDMA".
pub const IMM: u32 = 0x5244_4d41;

impl OpKind {
    /// Name as on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Write => "write",
            OpKind::Send => "send",
            OpKind::Read => "read",
            OpKind::FetchAdd => "fetch_add",
            OpKind::CmpSwap => "cmp_swap",
            OpKind::WriteImm => "write_imm",
            OpKind::SendImm => "send_imm",
        }
    }

    /// Whether the receiver consumes a posted receive (SEND and the immediates).
    pub fn needs_recv(self) -> bool {
        matches!(self, OpKind::Send | OpKind::SendImm | OpKind::WriteImm)
    }

    /// Whether it carries a payload from the requester (so it may be inline), and the latency
    /// figure is one-way (half the round trip): WRITE, SEND and their immediates.
    pub fn carries_payload(self) -> bool {
        matches!(self, OpKind::Write | OpKind::Send | OpKind::WriteImm | OpKind::SendImm)
    }

    /// An atomic (8 bytes, never inline).
    pub fn is_atomic(self) -> bool {
        matches!(self, OpKind::FetchAdd | OpKind::CmpSwap)
    }

    /// The operation as the command line names it (`write`, `send`, `read`, `atomic`).
    pub fn cli_name(self) -> &'static str {
        match self {
            OpKind::FetchAdd | OpKind::CmpSwap => "atomic",
            OpKind::WriteImm => "write",
            OpKind::SendImm => "send",
            o => o.as_str(),
        }
    }
}

/// Completions seen by one poll.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Polled {
    /// Send-side completions.
    pub sends: u32,
    /// Receive completions.
    pub recvs: u32,
    /// The byte length of the last receive completion of this poll (0 with none): what the
    /// peer's SEND carried.
    pub recv_len: u32,
    /// The NIC clock (ticks) of the last receive completion of this poll, where the end's
    /// completions carry one (the direct path's CQEs; a verbs CQ made with timestamps).
    pub recv_ts: Option<u64>,
}

/// Errors of a backend during a run, with where they happened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// A verb failed, or a completion carried an error status.
    #[error("{backend}: {source}")]
    Verbs {
        /// Which backend.
        backend: &'static str,
        /// The typed verbs error.
        #[source]
        source: Box<VerbsError>,
    },
    /// The direct send queue refused a WQE.
    #[error("direct: {0}")]
    Sq(SqError),
    /// An error CQE on the direct path.
    #[error("direct: {0}")]
    Cqe(CqeError),
    /// The backend cannot run here.
    #[error("{backend}: {why}")]
    Unsupported {
        /// Which backend.
        backend: &'static str,
        /// Why not.
        why: String,
    },
    /// Bad parameters for this backend.
    #[error("{backend}: {why}")]
    Invalid {
        /// Which backend.
        backend: &'static str,
        /// What is wrong.
        why: String,
    },
}

/// A connected end. Implementations prepare their work requests once.
pub trait Backend {
    /// Which post path.
    fn kind(&self) -> BackendKind;
    /// The QP's number.
    fn qpn(&self) -> u32;
    /// Posts `n` copies of `op` of `len` bytes as one batch with one doorbell (postlist); the
    /// last is signalled when `signal_last`. `inline` copies the payload into the WQE.
    fn post(&mut self, op: OpKind, len: u32, n: u32, inline: bool, signal_last: bool) -> Result<(), BackendError>;
    /// Posts `n` receives of `len` bytes into the local buffer.
    fn post_recv(&mut self, len: u32, n: u32) -> Result<(), BackendError>;
    /// Polls the CQ once (up to 16 completions).
    fn poll(&mut self) -> Result<Polled, BackendError>;
    /// Called right after a timed post call returns: a device model that executes posted work
    /// outside the post call (model0's after-post mode) executes it now. Hardware and the
    /// verbs stack do nothing here.
    #[inline]
    fn after_post(&mut self) {}
    /// The local buffer.
    fn mem(&self) -> &MemView;
    /// Largest inline payload of the QP.
    fn max_inline(&self) -> u32;
    /// Where incoming data lands in the local buffer (WRITE targets, receives, READ results,
    /// the atomic word): the second half. Outgoing data starts at 0.
    fn rx_offset(&self) -> usize;

    /// Where the local buffer sits (address, alignment, physical address): by default from its
    /// address as 4 KiB pages; the backends that own a registered buffer say what it is.
    fn placement(&self) -> MrPlacement {
        MrPlacement::at(self.mem().addr(), false)
    }

    /// The QP's state as the device reads it back (for a failure's diagnostics).
    fn describe_qp(&self) -> String {
        "QP state not readable through this backend".into()
    }

    /// Whether this end waits for completion events (`-e`: its CQ is on a completion channel).
    fn has_events(&self) -> bool {
        false
    }

    /// The descriptor of its completion channel (`-e`), for a wait on several ends at once.
    fn event_fd(&self) -> Option<i32> {
        None
    }

    /// Arms the CQ (`ibv_req_notify_cq`): its next completion raises an event.
    fn arm(&mut self) -> Result<(), BackendError> {
        Err(BackendError::Unsupported {
            backend: self.kind().as_str(),
            why: "this end has no completion channel (-e)".into(),
        })
    }

    /// Blocks up to `timeout` for the event of the armed CQ (`ibv_get_cq_event`); false when
    /// none came in time.
    fn wait_event(&mut self, _timeout: std::time::Duration) -> Result<bool, BackendError> {
        Err(BackendError::Unsupported {
            backend: self.kind().as_str(),
            why: "this end has no completion channel (-e)".into(),
        })
    }
}

/// A registered buffer that the device writes while the CPU watches it: byte loads and stores
/// are atomic (relaxed), so a scenario can spin on a byte that a remote WRITE changes.
pub struct MemView {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the view points into a registered buffer owned by the backend end that holds it;
// moving the end to another thread moves the view with it.
unsafe impl Send for MemView {}

impl MemView {
    /// # Safety
    /// `ptr` is valid for `len` bytes for the life of the view (the owner keeps the buffer).
    pub unsafe fn new(ptr: *mut u8, len: usize) -> Self {
        MemView { ptr, len }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Start address.
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn byte(&self, off: usize) -> &AtomicU8 {
        assert!(off < self.len, "offset {off} outside the {}-byte buffer", self.len);
        // SAFETY: off < len, the buffer is live (see `new`); AtomicU8 has u8's layout.
        unsafe { &*(self.ptr.add(off) as *const AtomicU8) }
    }

    /// Reads one byte (the device may be writing it).
    #[inline(always)]
    pub fn load(&self, off: usize) -> u8 {
        self.byte(off).load(Ordering::Acquire)
    }

    /// Writes one byte.
    #[inline(always)]
    pub fn store(&self, off: usize, v: u8) {
        self.byte(off).store(v, Ordering::Release)
    }

    /// Fills `off..off+len` with `v` (bytes, relaxed).
    pub fn fill(&self, off: usize, len: usize, v: u8) {
        for i in off..off + len {
            self.byte(i).store(v, Ordering::Relaxed);
        }
    }
}

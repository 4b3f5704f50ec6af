//! What a user of model0 chooses and is told: its public constants, the knobs (`ModelConfig`,
//! `ExecMode`, `ModelQpCaps`, `ModelConnect`) and the error type.

/// The model's device name.
pub const DEVICE_NAME: &str = "model0";

/// BlueFlame buffer size the model's QPs report (two halves in the register page).
pub const BF_SIZE: u32 = 256;
/// The largest inline payload a model QP grants: what a WQE of `max_sq_desc_sz` (1024 B, a
/// ConnectX-5's) leaves after the send overhead and the inline header.
pub const MAX_INLINE: u32 = 1024 - SQ_OVERHEAD as u32 - 4;
/// The send-WQE overhead libmlx5 reserves on a plain RC QP (the UMR of bind-MW/local-invalidate).
pub(super) const SQ_OVERHEAD: usize = 192;

/// Model errors (object creation and configuration; data-path errors are CQEs).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// Shared-memory file trouble.
    #[error("model0: {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Bad arguments.
    #[error("model0: {0}")]
    Invalid(String),
}

impl ModelError {
    /// The errno of the operating-system error behind this one (a full directory: `ENOSPC`; too
    /// many open files: `EMFILE`, `ENFILE`; no memory: `ENOMEM`), for a device interface that
    /// answers with an errno; `None` for bad arguments.
    pub fn errno(&self) -> Option<i32> {
        let ModelError::Io { source, .. } = self else {
            return None;
        };
        // the object files' errors keep the kind and add the file's name (no raw errno then)
        source.raw_os_error().or(match source.kind() {
            std::io::ErrorKind::StorageFull => Some(libc::ENOSPC),
            std::io::ErrorKind::OutOfMemory => Some(libc::ENOMEM),
            std::io::ErrorKind::PermissionDenied => Some(libc::EACCES),
            std::io::ErrorKind::NotFound => Some(libc::ENOENT),
            std::io::ErrorKind::AlreadyExists => Some(libc::EEXIST),
            std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput => Some(libc::EINVAL),
            _ => None,
        })
    }
}

pub(super) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> ModelError {
    let what = what.into();
    move |source| ModelError::Io { what, source }
}

/// When WQEs execute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExecMode {
    /// In the thread that rings the doorbell, right after the doorbell (default).
    Inline,
    /// Only when [`ModelQp::progress`](super::ModelQp::progress) is called (benchmarks of the post path alone).
    Deferred,
    /// Right after the post call, when the poster asks ([`ModelQp::deliver`](super::ModelQp::deliver), which the
    /// scenarios call once the post call's timestamp is taken), or at the QP's next poll: so a
    /// timed post call measures the post alone, never the model executing the WQE. Receives
    /// wake a sender waiting on them at once, as in `Inline`.
    AfterPost,
}

/// The longest wire delay the model accepts, ns (1 s): a longer one would outlast the scenarios'
/// stall deadlines, and a wait must stay short enough to end on SIGINT.
pub const MAX_WIRE_DELAY_NS: u64 = 1_000_000_000;

/// Model knobs.
#[derive(Clone, Copy, Debug)]
pub struct ModelConfig {
    /// Added wire delay of every message in each direction, in ns (at most
    /// [`MAX_WIRE_DELAY_NS`]): what a doorbell carries arrives this much later at the responder
    /// (a WRITE's or SEND's data, a READ's or atomic's request), and a READ's or atomic's response
    /// takes as long again back (inline and after-post execution). `None`: no wire, no timing
    /// on the doorbell path at all; `Some(0)` times a zero wait on the same path as any delay,
    /// so a baseline and a delayed run differ by the delay alone.
    pub wire_delay_ns: Option<u64>,
    /// When WQEs execute.
    pub exec: ExecMode,
    /// Atomics on big-endian words (a ConnectX in its default endianness mode, whose kernel
    /// driver then advertises no atomic capability), instead of host-order words (`IBV_ATOMIC_HCA`).
    pub atomic_big_endian: bool,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            wire_delay_ns: None,
            exec: ExecMode::Inline,
            atomic_big_endian: false,
        }
    }
}

/// Queue sizes of a model QP.
#[derive(Clone, Copy, Debug)]
pub struct ModelQpCaps {
    /// Send queue depth in WQEs of the largest size (the ring is sized in WQEBBs for them,
    /// rounded up to a power of two).
    pub max_send_wr: u32,
    /// Receive queue depth (rounded up to a power of two).
    pub max_recv_wr: u32,
    /// Scatter entries per receive.
    pub max_recv_sge: u32,
    /// Largest inline payload.
    pub max_inline_data: u32,
}

impl Default for ModelQpCaps {
    fn default() -> Self {
        ModelQpCaps {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_recv_sge: 1,
            max_inline_data: 220,
        }
    }
}

/// Connection parameters the model honours.
#[derive(Clone, Copy, Debug)]
pub struct ModelConnect {
    /// RNR retries (7 = infinite: the SEND waits for a receive).
    pub rnr_retry: u8,
    /// This QP's RNR timer code, as responder (IB encoding).
    pub min_rnr_timer: u8,
}

impl Default for ModelConnect {
    fn default() -> Self {
        ModelConnect {
            rnr_retry: 7,
            min_rnr_timer: 12,
        }
    }
}

//! Typed errors of the verbs layer: every failed verb carries the verb, the errno with its text
//! and the context it failed in (device, port, QP number).

use std::fmt;
use std::io;

/// Where a verb failed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ctx {
    /// Device name, e.g. `mlx5_0`, `rxe0`.
    pub device: String,
    /// Port number, when the verb concerns one.
    pub port: Option<u8>,
    /// QP number, when the verb concerns one.
    pub qpn: Option<u32>,
    /// Anything else worth saying (a GID index, a size).
    pub detail: Option<String>,
}

impl Ctx {
    /// A context naming only the device.
    pub fn dev(device: &str) -> Self {
        Ctx {
            device: device.to_string(),
            ..Default::default()
        }
    }
    /// Adds the port.
    pub fn port(mut self, port: u8) -> Self {
        self.port = Some(port);
        self
    }
    /// Adds the QP number.
    pub fn qpn(mut self, qpn: u32) -> Self {
        self.qpn = Some(qpn);
        self
    }
    /// Adds a detail.
    pub fn detail(mut self, d: impl Into<String>) -> Self {
        self.detail = Some(d.into());
        self
    }
}

impl fmt::Display for Ctx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {}", if self.device.is_empty() { "?" } else { &self.device })?;
        if let Some(p) = self.port {
            write!(f, " port {p}")?;
        }
        if let Some(q) = self.qpn {
            write!(f, " QP {q:#x}")?;
        }
        if let Some(d) = &self.detail {
            write!(f, " ({d})")?;
        }
        Ok(())
    }
}

/// Why there is no RDMA device to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoDevice {
    /// The kernel refuses RDMA (ENOSYS from the RDMA netlink socket): no RDMA support built in.
    KernelWithoutRdma,
    /// RDMA is in the kernel but no device exists (no driver bound, no rxe/siw link added).
    NoDevices,
    /// Devices exist in the kernel but not as user verbs devices (ib_uverbs missing).
    NoUverbs,
    /// `/dev/infiniband/uverbs*` cannot be opened by this user.
    NoPermission,
}

impl NoDevice {
    /// A plain explanation and what to do.
    pub fn explain(self) -> &'static str {
        match self {
            NoDevice::KernelWithoutRdma => {
                "the running kernel has no RDMA support: ibv_get_device_list failed with ENOSYS \
                 (the kernel refuses the RDMA netlink socket and /sys/class/infiniband_verbs is missing).\n\
                 To use real RDMA: boot a kernel built with CONFIG_INFINIBAND and CONFIG_INFINIBAND_USER_ACCESS, \
                 then load your NIC's driver (mlx5_ib for ConnectX) or Soft-RoCE \
                 (modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0).\n\
                 Without either, harness/softroce.sh runs a real verbs stack (Soft-RoCE) in a qemu guest."
            }
            NoDevice::NoDevices => {
                "the kernel supports RDMA but has no RDMA device: no NIC driver is bound and no software device \
                 was added.\nLoad the driver (modprobe mlx5_ib for ConnectX) or add Soft-RoCE \
                 (modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0). `rdma link` lists what the kernel has."
            }
            NoDevice::NoUverbs => {
                "RDMA devices exist in the kernel (/sys/class/infiniband) but none is exposed to user space: \
                 the ib_uverbs module is not loaded, or no user-space provider matches the device.\n\
                 Run: modprobe ib_uverbs; apt-get install ibverbs-providers; then IBV_SHOW_WARNINGS=1 ibv_devices."
            }
            NoDevice::NoPermission => {
                "RDMA devices exist but /dev/infiniband/uverbs* cannot be opened by this user.\n\
                 Run as root, or give your user access (the 'rdma' group / udev rules of rdma-core)."
            }
        }
    }
}

/// Everything that can go wrong in the verbs layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsError {
    /// A verb returned an error.
    #[error("{verb} failed on {ctx}: {source}{hint}", hint = hint(verb, ctx, source))]
    Verb {
        /// The verb, e.g. `ibv_modify_qp(RTR)`.
        verb: &'static str,
        /// Where.
        ctx: Ctx,
        /// The errno, with its text.
        #[source]
        source: io::Error,
    },
    /// No RDMA device can be used, and why.
    #[error("no RDMA device: {}", .0.explain())]
    NoDevice(NoDevice),
    /// A device name that is not in the list.
    #[error("RDMA device '{name}' not found; devices present: {}", if available.is_empty() { "none".to_string() } else { available.join(", ") })]
    UnknownDevice {
        /// What was asked for.
        name: String,
        /// What exists.
        available: Vec<String>,
    },
    /// A port the device does not have, or that is not usable.
    #[error("{ctx}: {why}")]
    Port {
        /// Where.
        ctx: Ctx,
        /// What is wrong with it.
        why: String,
    },
    /// A completion with an error status.
    #[error("completion error on {ctx}: {status_str} (status {status}, vendor error {vendor_err:#x}), wr_id {wr_id}, opcode {opcode}{hint}")]
    Completion {
        /// Where (the QP number is the completion's).
        ctx: Ctx,
        /// `ibv_wc_status`.
        status: u32,
        /// `ibv_wc_status_str(status)`.
        status_str: String,
        /// What the status usually means (with its leading space and parentheses), or "".
        hint: &'static str,
        /// The provider's vendor error (the mlx5 vendor syndrome).
        vendor_err: u32,
        /// The work request id.
        wr_id: u64,
        /// `ibv_wc_opcode` (only meaningful for successful completions; kept for reports).
        opcode: u32,
    },
    /// A QP that did not reach the state it was moved to.
    #[error("{ctx}: QP is in state {state} after {step}, expected {expected}")]
    QpState {
        /// Where.
        ctx: Ctx,
        /// The transition attempted.
        step: &'static str,
        /// State read back.
        state: &'static str,
        /// State expected.
        expected: &'static str,
    },
    /// Nothing completed before the deadline.
    #[error("timed out after {ms} ms waiting for {what} on {ctx}")]
    Timeout {
        /// Where.
        ctx: Ctx,
        /// What was awaited.
        what: String,
        /// The deadline that passed.
        ms: u64,
    },
    /// Bad arguments (sizes, ranges) rejected before any verb is called.
    #[error("{ctx}: {why}")]
    Invalid {
        /// Where.
        ctx: Ctx,
        /// What is wrong.
        why: String,
    },
    /// Memory for a buffer could not be mapped.
    #[error("mapping {len} bytes{kind} failed: {source}{hint}", kind = if *huge { " of 2 MiB huge pages" } else { "" }, hint = if *huge { "; huge pages must be reserved first (sysctl vm.nr_hugepages=N)" } else { "" })]
    Map {
        /// Requested length.
        len: usize,
        /// Whether huge pages were asked for.
        huge: bool,
        /// The errno.
        #[source]
        source: io::Error,
    },
}

/// What the errno of a failed verb usually means, by its cause alone: the locked-memory limit
/// only for a registration's ENOMEM on a device that pins memory (not model0, which maps a file
/// over the pages: its ENOMEM is memory), the open-files limit for EMFILE (model0 keeps a file
/// per object).
fn hint(verb: &str, ctx: &Ctx, e: &io::Error) -> &'static str {
    let model = ctx.device == crate::model::DEVICE_NAME;
    match (verb, e.raw_os_error()) {
        (_, Some(libc::EMFILE)) if model => {
            " (the open-files limit: model0 keeps a shared-memory file open per object; raise `ulimit -n`)"
        }
        (_, Some(libc::EMFILE)) => " (the open-files limit: raise `ulimit -n`)",
        (_, Some(libc::ENFILE)) => " (the system's open-files limit: fs.file-max)",
        ("ibv_reg_mr", Some(libc::ENOMEM)) | ("ibv_reg_mr", Some(libc::EPERM)) if !model => {
            " (locked-memory limit too low? check `ulimit -l`, or run as root)"
        }
        ("ibv_open_device", Some(libc::EACCES)) | ("ibv_open_device", Some(libc::EPERM)) => {
            " (no permission on /dev/infiniband/uverbs*)"
        }
        _ => "",
    }
}

impl VerbsError {
    /// The errno, for errors that carry one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            VerbsError::Verb { source, .. } | VerbsError::Map { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// The completion status, for completion errors.
    pub fn wc_status(&self) -> Option<u32> {
        match self {
            VerbsError::Completion { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// `Result` of the verbs layer.
pub type Result<T, E = VerbsError> = std::result::Result<T, E>;

/// Maps a verb's integer return: 0 is success, a positive value is the errno, a negative value
/// means "see errno" (or is the negated errno, as some providers return).
pub fn check_rc(rc: i32, verb: &'static str, ctx: impl FnOnce() -> Ctx) -> Result<()> {
    if rc == 0 {
        return Ok(());
    }
    let source = if rc > 0 {
        io::Error::from_raw_os_error(rc)
    } else {
        let last = io::Error::last_os_error();
        match last.raw_os_error() {
            Some(e) if e != 0 => last,
            _ => io::Error::from_raw_os_error(-rc),
        }
    };
    Err(VerbsError::Verb {
        verb,
        ctx: ctx(),
        source,
    })
}

/// Maps a verb's pointer return: null means failure with errno set.
pub fn check_ptr<T>(p: *mut T, verb: &'static str, ctx: impl FnOnce() -> Ctx) -> Result<*mut T> {
    if p.is_null() {
        let mut source = io::Error::last_os_error();
        if source.raw_os_error() == Some(0) {
            // Some providers fail without setting errno; say so rather than print "Success".
            source = io::Error::other("failed without setting errno");
        }
        Err(VerbsError::Verb {
            verb,
            ctx: ctx(),
            source,
        })
    } else {
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rc_positive_is_errno() {
        let e = check_rc(libc::EINVAL, "ibv_modify_qp(RTR)", || {
            Ctx::dev("rxe0").port(1).qpn(0x11)
        })
        .unwrap_err();
        assert_eq!(e.errno(), Some(libc::EINVAL));
        let s = e.to_string();
        assert!(
            s.contains("ibv_modify_qp(RTR) failed on device rxe0 port 1 QP 0x11"),
            "{s}"
        );
        assert!(s.contains("Invalid argument"), "{s}");
    }

    #[test]
    fn rc_negative_uses_negated_errno_when_errno_unset() {
        // SAFETY: writes this thread's errno slot.
        unsafe { *libc::__errno_location() = 0 };
        let e = check_rc(-libc::ENOMEM, "ibv_post_send", || Ctx::dev("x")).unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOMEM));
        assert!(check_rc(0, "ibv_post_send", || Ctx::dev("x")).is_ok());
    }

    #[test]
    fn null_pointer_takes_errno_and_hint() {
        // SAFETY: writes this thread's errno slot.
        unsafe { *libc::__errno_location() = libc::ENOMEM };
        let e = check_ptr(std::ptr::null_mut::<u8>(), "ibv_reg_mr", || {
            Ctx::dev("mlx5_0").detail("4096 bytes")
        })
        .unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOMEM));
        let s = e.to_string();
        assert!(s.contains("ulimit -l"), "{s}");
        assert!(s.contains("(4096 bytes)"), "{s}");
        let mut x = 5u8;
        assert!(check_ptr(&mut x as *mut u8, "v", || Ctx::dev("d")).is_ok());
    }

    #[test]
    fn hints_follow_the_cause() {
        let e = |verb, dev, errno| {
            VerbsError::Verb {
                verb,
                ctx: Ctx::dev(dev),
                source: io::Error::from_raw_os_error(errno),
            }
            .to_string()
        };
        // model0 pins nothing: its ENOMEM is no locked-memory limit
        assert!(!e("ibv_reg_mr", "model0", libc::ENOMEM).contains("ulimit -l"));
        assert!(e("ibv_reg_mr", "mlx5_0", libc::ENOMEM).contains("ulimit -l"));
        for dev in ["model0", "mlx5_0"] {
            let s = e("ibv_reg_mr", dev, libc::EMFILE);
            assert!(
                s.contains("Too many open files") && s.contains("ulimit -n") && !s.contains("ulimit -l"),
                "{s}"
            );
        }
        assert!(e("ibv_create_cq", "model0", libc::EMFILE).contains("model0 keeps a shared-memory file"));
    }

    #[test]
    fn no_device_messages_say_what_to_do() {
        let s = VerbsError::NoDevice(NoDevice::KernelWithoutRdma).to_string();
        assert!(
            s.contains("ENOSYS") && s.contains("CONFIG_INFINIBAND") && s.contains("softroce"),
            "{s}"
        );
        assert!(NoDevice::NoUverbs.explain().contains("ib_uverbs"));
        assert!(NoDevice::NoPermission.explain().contains("/dev/infiniband"));
        let u = VerbsError::UnknownDevice {
            name: "mlx5_9".into(),
            available: vec![],
        }
        .to_string();
        assert!(u.contains("'mlx5_9' not found; devices present: none"), "{u}");
    }
}

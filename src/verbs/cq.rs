//! Completion queues and completions.

use super::device::Context;
use super::error::{check_ptr, check_rc, Ctx, Result, VerbsError};
use super::Kind;
use crate::sys;
use std::ffi::CStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) struct CqInner {
    pub(crate) cq: *mut sys::ibv_cq,
    pub(crate) ctx: Context,
    /// Its completion channel (held so it is dropped after the CQ).
    _chan: Option<Arc<ChanInner>>,
    /// Events taken and not yet acknowledged (`ibv_destroy_cq` waits for every one).
    unacked: std::sync::atomic::AtomicU32,
    /// The extended CQ when it was made with `ibv_create_cq_ex` (completion timestamps:
    /// [`super::nic_clock`]), else null.
    pub(crate) ex: *mut sys::ibv_cq_ex,
}

struct ChanInner {
    ch: *mut sys::ibv_comp_channel,
    ctx: Context,
}

// SAFETY: a channel is a descriptor; libibverbs' channel calls are thread-safe.
unsafe impl Send for ChanInner {}
// SAFETY: as above.
unsafe impl Sync for ChanInner {}

impl Drop for ChanInner {
    fn drop(&mut self) {
        // SAFETY: from ibv_create_comp_channel; every CQ on it holds an Arc to us, so none is left.
        let rc = unsafe { sys::ibv_destroy_comp_channel(self.ch) };
        let name = self.ctx.name().to_string();
        self.ctx.inner.ledger.destroyed(
            Kind::Channel,
            check_rc(rc, "ibv_destroy_comp_channel", || Ctx::dev(&name)),
        );
    }
}

/// A completion channel (`ibv_create_comp_channel`): CQs made on it raise events when armed
/// (`Cq::arm`), read with [`CompChannel::wait`].
#[derive(Clone)]
pub struct CompChannel {
    inner: Arc<ChanInner>,
}

impl CompChannel {
    /// The channel's pointer, for a CQ made on it (which then holds the channel).
    pub(crate) fn as_ptr(&self) -> *mut sys::ibv_comp_channel {
        self.inner.ch
    }
}

/// Waits up to `timeout` until one of the completion channels `fds` has an event; returns the
/// descriptors that have one (none after the time, or when a signal came).
pub fn ready_channels(fds: &[i32], timeout: Duration) -> Vec<i32> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: p is a valid array of pollfds for its length.
    let rc = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
    if rc <= 0 {
        return Vec::new();
    }
    p.iter().filter(|x| x.revents != 0).map(|x| x.fd).collect()
}

impl CompChannel {
    /// `ibv_create_comp_channel`.
    pub fn new(ctx: &Context) -> Result<Self> {
        // SAFETY: live context.
        let ch = unsafe { sys::ibv_create_comp_channel(ctx.as_ptr()) };
        let ch = check_ptr(ch, "ibv_create_comp_channel", || ctx.ctx())?;
        ctx.inner.ledger.created(Kind::Channel);
        Ok(CompChannel {
            inner: Arc::new(ChanInner { ch, ctx: ctx.clone() }),
        })
    }

    /// Its descriptor.
    pub fn fd(&self) -> i32 {
        // SAFETY: live channel.
        unsafe { (*self.inner.ch).fd }
    }

    /// Waits up to `timeout` for an event (`poll(2)` on the descriptor, then `ibv_get_cq_event`):
    /// the CQ that raised it (its event is then counted for acknowledgement), or `None` when
    /// none came in time. The caller re-arms the CQ before it waits again.
    pub fn wait(&self, cq: &Cq, timeout: Duration) -> Result<bool> {
        let mut p = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&mut p, 1, ms) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Ok(false);
            }
            return Err(VerbsError::Verb {
                verb: "poll(completion channel)",
                ctx: self.inner.ctx.ctx(),
                source: e,
            });
        }
        if rc == 0 {
            return Ok(false);
        }
        let mut ev_cq = std::ptr::null_mut();
        let mut ev_ctx = std::ptr::null_mut();
        // SAFETY: live channel with an event ready (the read does not block); out-pointers valid.
        let rc = unsafe { sys::ibv_get_cq_event(self.inner.ch, &mut ev_cq, &mut ev_ctx) };
        if rc != 0 {
            return Err(VerbsError::Verb {
                verb: "ibv_get_cq_event",
                ctx: self.inner.ctx.ctx(),
                source: std::io::Error::last_os_error(),
            });
        }
        if ev_cq != cq.inner.cq {
            return Err(VerbsError::Invalid {
                ctx: self.inner.ctx.ctx(),
                why: format!(
                    "a completion event of CQ {ev_cq:p}, not of {:p}, the one waited for",
                    cq.inner.cq
                ),
            });
        }
        cq.took_event();
        Ok(true)
    }
}

// SAFETY: CQ verbs are thread-safe on one context.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        let n = *self.unacked.get_mut();
        if n > 0 {
            // SAFETY: live CQ; these events were taken by ibv_get_cq_event.
            unsafe { sys::ibv_ack_cq_events(self.cq, n) };
        }
        // SAFETY: cq came from ibv_create_cq; QPs using it hold an Arc to us, so none is left.
        let rc = unsafe { sys::ibv_destroy_cq(self.cq) };
        let name = self.ctx.name().to_string();
        self.ctx
            .inner
            .ledger
            .destroyed(Kind::Cq, check_rc(rc, "ibv_destroy_cq", || Ctx::dev(&name)));
    }
}

/// A completion queue. Cheap to clone; destroyed after its last QP.
#[derive(Clone)]
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

/// One completion, decoded from `ibv_wc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The work request id.
    pub wr_id: u64,
    /// `ibv_wc_status` (0 = success).
    pub status: u32,
    /// `ibv_wc_opcode`.
    pub opcode: u32,
    /// Vendor error (the provider's syndrome).
    pub vendor_err: u32,
    /// Bytes received (receive completions).
    pub byte_len: u32,
    /// The QP the completion belongs to.
    pub qp_num: u32,
    /// Immediate data in host order, when the completion carries one.
    pub imm: Option<u32>,
}

impl Completion {
    /// The completion `wc` reports.
    pub fn from_wc(wc: &sys::ibv_wc) -> Self {
        let has_imm = wc.wc_flags & sys::IBV_WC_WITH_IMM != 0;
        Completion {
            wr_id: wc.wr_id,
            status: wc.status,
            opcode: wc.opcode,
            vendor_err: wc.vendor_err,
            byte_len: wc.byte_len,
            qp_num: wc.qp_num,
            // SAFETY: imm_data is the active union member when IBV_WC_WITH_IMM is set.
            imm: has_imm.then(|| u32::from_be(unsafe { wc.__bindgen_anon_1.imm_data })),
        }
    }

    /// Whether the status is success.
    pub fn is_ok(&self) -> bool {
        self.status == sys::IBV_WC_SUCCESS
    }

    /// `Ok` for a successful completion, else the typed completion error.
    pub fn check(&self, device: &str) -> Result<Completion> {
        if self.is_ok() {
            return Ok(*self);
        }
        Err(VerbsError::Completion {
            ctx: Ctx::dev(device).qpn(self.qp_num),
            status: self.status,
            status_str: status_str(self.status),
            hint: status_hint(self.status),
            vendor_err: self.vendor_err,
            wr_id: self.wr_id,
            opcode: self.opcode,
        })
    }
}

/// What a completion status usually means for the one reading the error ("" when the name says
/// it all).
pub fn status_hint(status: u32) -> &'static str {
    match status {
        sys::IBV_WC_RETRY_EXC_ERR => {
            " (the peer never acknowledged: it may have stopped or its QP gone to error, or the path (GID index, MTU, LID) is wrong)"
        }
        sys::IBV_WC_RNR_RETRY_EXC_ERR => " (the peer had no receive posted for as long as the RNR retries lasted)",
        sys::IBV_WC_REM_ACCESS_ERR => {
            " (the peer refused the access: wrong rkey, an address outside its memory region, or a missing access right)"
        }
        sys::IBV_WC_LOC_PROT_ERR => " (a local buffer is outside its memory region, or its lkey is wrong)",
        sys::IBV_WC_LOC_LEN_ERR => " (a message is longer than the receive buffer)",
        sys::IBV_WC_WR_FLUSH_ERR => " (the QP was already in error: the first error before this one is the cause)",
        _ => "",
    }
}

/// `ibv_wc_status_str`.
pub fn status_str(status: u32) -> String {
    // SAFETY: returns a static string for every value (an "unknown" one out of range).
    unsafe { CStr::from_ptr(sys::ibv_wc_status_str(status)) }
        .to_string_lossy()
        .into_owned()
}

impl Cq {
    /// `ibv_create_cq` with room for at least `cqe` completions, no channel.
    pub fn new(ctx: &Context, cqe: u32) -> Result<Self> {
        let n = i32::try_from(cqe).map_err(|_| VerbsError::Invalid {
            ctx: ctx.ctx(),
            why: format!("CQ size {cqe} too large"),
        })?;
        Self::create(ctx, n, None)
    }

    /// `ibv_create_cq` with room for at least `cqe` completions on completion channel `ch`.
    pub fn with_channel(ctx: &Context, cqe: u32, ch: &CompChannel) -> Result<Self> {
        let n = i32::try_from(cqe).map_err(|_| VerbsError::Invalid {
            ctx: ctx.ctx(),
            why: format!("CQ size {cqe} too large"),
        })?;
        Self::create(ctx, n, Some(ch))
    }

    fn create(ctx: &Context, n: i32, ch: Option<&CompChannel>) -> Result<Self> {
        let chp = ch.map_or(std::ptr::null_mut(), |c| c.inner.ch);
        // SAFETY: live context; the channel (if any) lives as long as the CQ (it holds it); no
        // context pointer, vector 0.
        let cq = unsafe { sys::ibv_create_cq(ctx.as_ptr(), n, std::ptr::null_mut(), chp, 0) };
        let cq = check_ptr(cq, "ibv_create_cq", || {
            ctx.ctx().detail(format!(
                "{n} entries{}",
                if ch.is_some() { ", completion channel" } else { "" }
            ))
        })?;
        ctx.inner.ledger.created(Kind::Cq);
        Ok(Cq {
            inner: Arc::new(CqInner {
                cq,
                ctx: ctx.clone(),
                _chan: ch.map(|c| c.inner.clone()),
                unacked: std::sync::atomic::AtomicU32::new(0),
                ex: std::ptr::null_mut(),
            }),
        })
    }

    /// A CQ made by `ibv_create_cq_ex` (`cq` its `ibv_cq_ex_to_cq`) on channel `ch` if any
    /// (held as long as the CQ); counted in the ledger here.
    pub(crate) fn from_ex(
        ctx: &Context,
        cq: *mut sys::ibv_cq,
        ex: *mut sys::ibv_cq_ex,
        ch: Option<&CompChannel>,
    ) -> Self {
        ctx.inner.ledger.created(Kind::Cq);
        Cq {
            inner: Arc::new(CqInner {
                cq,
                ctx: ctx.clone(),
                _chan: ch.map(|c| c.inner.clone()),
                unacked: std::sync::atomic::AtomicU32::new(0),
                ex,
            }),
        }
    }

    /// Arms the CQ (`ibv_req_notify_cq`): its next completion (`solicited`: its next solicited
    /// receive, or error) raises an event on its channel.
    pub fn arm(&self, solicited: bool) -> Result<()> {
        // SAFETY: live CQ.
        let rc = unsafe { sys::inline::req_notify_cq(self.inner.cq, i32::from(solicited)) };
        if rc != 0 {
            return Err(VerbsError::Verb {
                verb: "ibv_req_notify_cq",
                ctx: self.inner.ctx.ctx(),
                source: std::io::Error::from_raw_os_error(rc.abs()),
            });
        }
        Ok(())
    }

    /// Counts an event taken from the channel; acknowledges them in batches of 64
    /// (`ibv_ack_cq_events` takes a mutex; the rest are acknowledged when the CQ goes).
    fn took_event(&self) {
        let n = self.inner.unacked.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if n >= 64 {
            self.inner.unacked.store(0, std::sync::atomic::Ordering::Relaxed);
            // SAFETY: live CQ; n events taken by ibv_get_cq_event.
            unsafe { sys::ibv_ack_cq_events(self.inner.cq, n) };
        }
    }

    /// The raw pointer (valid while `self` lives).
    pub fn as_ptr(&self) -> *mut sys::ibv_cq {
        self.inner.cq
    }

    /// The device.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// Capacity granted by the driver.
    pub fn capacity(&self) -> i32 {
        // SAFETY: live CQ.
        unsafe { (*self.inner.cq).cqe }
    }

    /// Polls once into `wc`; returns how many completions were written.
    #[inline]
    pub fn poll_raw(&self, wc: &mut [sys::ibv_wc]) -> Result<usize> {
        // model0 through libmlx5: nothing watches its doorbells, so it executes when polled
        #[cfg(target_os = "linux")]
        if self.inner.ctx.name() == crate::uverbs::IBDEV {
            crate::uverbs::progress();
        }
        let n = i32::try_from(wc.len()).unwrap_or(i32::MAX);
        // SAFETY: live CQ; `wc` has room for n entries.
        let rc = unsafe { sys::inline::poll_cq(self.inner.cq, n, wc.as_mut_ptr()) };
        if rc < 0 {
            return Err(VerbsError::Verb {
                verb: "ibv_poll_cq",
                ctx: self.inner.ctx.ctx(),
                source: std::io::Error::from_raw_os_error(-rc),
            });
        }
        Ok(rc as usize)
    }

    /// Polls until `n` completions arrived (errors included) or `timeout` passed.
    pub fn wait(&self, n: usize, timeout: Duration) -> Result<Vec<Completion>> {
        let deadline = Instant::now() + timeout;
        let mut out = Vec::with_capacity(n);
        let mut wc = [sys::ibv_wc::default(); 16];
        while out.len() < n {
            let want = (n - out.len()).min(wc.len());
            let got = self.poll_raw(&mut wc[..want])?;
            out.extend(wc[..got].iter().map(Completion::from_wc));
            if got == 0 {
                if Instant::now() >= deadline {
                    return Err(VerbsError::Timeout {
                        ctx: self.inner.ctx.ctx(),
                        what: format!("{} more completion(s) of {n}", n - out.len()),
                        ms: timeout.as_millis() as u64,
                    });
                }
                std::hint::spin_loop();
            }
        }
        Ok(out)
    }

    /// Waits for one completion and returns it if successful, else its typed error.
    pub fn wait_ok(&self, timeout: Duration) -> Result<Completion> {
        let c = self.wait(1, timeout)?;
        c[0].check(self.inner.ctx.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_errors_are_decoded() {
        let c = Completion {
            wr_id: 7,
            status: sys::IBV_WC_REM_ACCESS_ERR,
            opcode: sys::IBV_WC_RDMA_WRITE,
            vendor_err: 0x88,
            byte_len: 0,
            qp_num: 0x1a,
            imm: None,
        };
        let e = c.check("rxe0").unwrap_err();
        assert_eq!(e.wc_status(), Some(sys::IBV_WC_REM_ACCESS_ERR));
        let s = e.to_string();
        assert!(s.contains("remote access error"), "{s}");
        assert!(
            s.contains("device rxe0 QP 0x1a") && s.contains("vendor error 0x88") && s.contains("wr_id 7"),
            "{s}"
        );
        let ok = Completion {
            status: sys::IBV_WC_SUCCESS,
            ..c
        };
        assert_eq!(ok.check("rxe0").unwrap(), ok);
        assert_eq!(status_str(sys::IBV_WC_RNR_RETRY_EXC_ERR), "RNR retry counter exceeded");
    }

    #[test]
    fn retry_exceeded_says_the_peer_may_be_gone() {
        let e = Completion {
            wr_id: 1,
            status: sys::IBV_WC_RETRY_EXC_ERR,
            opcode: sys::IBV_WC_RDMA_WRITE,
            vendor_err: 0x81,
            byte_len: 0,
            qp_num: 0x22,
            imm: None,
        }
        .check("rxe0")
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("transport retry counter exceeded") && e.contains("the peer never acknowledged"),
            "{e}"
        );
        assert_eq!(status_hint(sys::IBV_WC_SUCCESS), "");
        assert_eq!(status_hint(sys::IBV_WC_GENERAL_ERR), "");
    }

    #[test]
    fn immediate_is_host_order() {
        let mut wc = sys::ibv_wc {
            wc_flags: sys::IBV_WC_WITH_IMM,
            ..Default::default()
        };
        wc.__bindgen_anon_1.imm_data = 0x1234_5678u32.to_be();
        assert_eq!(Completion::from_wc(&wc).imm, Some(0x1234_5678));
        wc.wc_flags = 0;
        assert_eq!(Completion::from_wc(&wc).imm, None);
    }
}

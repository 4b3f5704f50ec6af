//! Command framing: a `write()` on the device read as a uverbs command (legacy or extended
//! header, core and driver payloads) and its response written back, core part then driver part.

use super::errno_of;
use crate::sys::kabi as k;
use std::ffi::c_int;
use std::mem::size_of;

/// Reads a `T` at `off` of `b` (zero-filled past the end: a shorter command from an older
/// library leaves the newer fields 0, as the kernel treats them).
pub(super) fn rd<T: Default>(b: &[u8], off: usize) -> T {
    let mut v = T::default();
    let n = size_of::<T>().min(b.len().saturating_sub(off));
    // SAFETY: copies at most size_of::<T>() bytes that exist in `b` into a plain-data struct.
    unsafe { std::ptr::copy_nonoverlapping(b.as_ptr().add(off.min(b.len())), &mut v as *mut T as *mut u8, n) };
    v
}

pub(super) fn bytes<T>(v: &T) -> &[u8] {
    // SAFETY: a plain-data struct viewed as its bytes.
    unsafe { std::slice::from_raw_parts(v as *const T as *const u8, size_of::<T>()) }
}

/// Where a command's response goes: the core part, then the driver part.
pub(super) struct Resp {
    pub(super) ptr: u64,
    pub(super) core: usize,
    pub(super) cap: usize,
}

impl Resp {
    /// Writes the core response and the driver response after it (each cut to its room).
    pub(super) fn put(&self, core: &[u8], drv: &[u8]) -> Result<(), c_int> {
        if self.ptr == 0 {
            return Ok(());
        }
        let n = core.len().min(self.core).min(self.cap);
        // SAFETY: libibverbs hands a response buffer of `cap` bytes at `ptr` (this process).
        unsafe { std::ptr::copy_nonoverlapping(core.as_ptr(), self.ptr as *mut u8, n) };
        let room = self.cap.saturating_sub(self.core);
        let m = drv.len().min(room);
        // SAFETY: as above, the driver part follows the core part.
        unsafe { std::ptr::copy_nonoverlapping(drv.as_ptr(), (self.ptr as *mut u8).add(self.core), m) };
        Ok(())
    }
}

/// A command: its number, whether extended, the core payload, the driver payload, the response.
pub(super) struct Cmd<'a> {
    pub(super) op: u32,
    pub(super) ex: bool,
    pub(super) core: &'a [u8],
    pub(super) drv: &'a [u8],
    pub(super) resp: Resp,
}

pub(super) fn frame(b: &[u8]) -> Result<Cmd<'_>, c_int> {
    let hdr: k::ib_uverbs_cmd_hdr = rd(b, 0);
    if b.len() < size_of::<k::ib_uverbs_cmd_hdr>() {
        return errno_of("command shorter than its header", libc::EINVAL);
    }
    if hdr.command & k::IB_USER_VERBS_CMD_FLAG_EXTENDED != 0 {
        let ex: k::ib_uverbs_ex_cmd_hdr = rd(b, 8);
        let core_len = hdr.in_words as usize * 8;
        let drv_len = ex.provider_in_words as usize * 8;
        let start = 8 + size_of::<k::ib_uverbs_ex_cmd_hdr>();
        if start + core_len + drv_len > b.len() {
            return errno_of("extended command longer than written", libc::EINVAL);
        }
        Ok(Cmd {
            op: hdr.command & k::IB_USER_VERBS_CMD_COMMAND_MASK,
            ex: true,
            core: &b[start..start + core_len],
            drv: &b[start + core_len..start + core_len + drv_len],
            resp: Resp {
                ptr: ex.response,
                core: hdr.out_words as usize * 8,
                cap: hdr.out_words as usize * 8 + ex.provider_out_words as usize * 8,
            },
        })
    } else {
        if hdr.in_words as usize * 4 != b.len() {
            return errno_of(
                format!(
                    "command {}: {} words announced, {} bytes written",
                    hdr.command,
                    hdr.in_words,
                    b.len()
                ),
                libc::EINVAL,
            );
        }
        let body = &b[8..];
        // The core structs of commands with a response start with the response pointer; the
        // split between core and driver parts is per command (`legacy`).
        Ok(Cmd {
            op: hdr.command,
            ex: false,
            core: body,
            drv: &[],
            resp: Resp {
                ptr: 0,
                core: 0,
                cap: hdr.out_words as usize * 4,
            },
        })
    }
}

/// Splits a legacy command's body at the core struct `C` (whose first field is the response
/// pointer when `has_resp`), with `R` the core response.
pub(super) fn legacy<C, R>(c: &mut Cmd<'_>, has_resp: bool) {
    if c.ex {
        return;
    }
    let n = size_of::<C>().min(c.core.len());
    c.drv = &c.core[n..];
    c.core = &c.core[..n];
    if has_resp {
        c.resp.ptr = rd::<u64>(c.core, 0);
        c.resp.core = size_of::<R>();
    }
}

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
    /// Refuses (EFAULT) a response range the program may not write, before the command acts
    /// (as the kernel does not make an object it cannot answer for): the range, zeroed, is
    /// written as the response will be ([`copy_out`]). The whole range is the program's room for
    /// the response, which the kernel too may fill.
    pub(super) fn check(&self) -> Result<(), c_int> {
        if self.ptr == 0 || self.cap == 0 {
            return Ok(());
        }
        copy_out(self.ptr, &vec![0u8; self.cap])
    }

    /// Writes the core response and the driver response after it (each cut to its room); EFAULT
    /// where the program's memory cannot take them (never a fault in this process).
    pub(super) fn put(&self, core: &[u8], drv: &[u8]) -> Result<(), c_int> {
        if self.ptr == 0 {
            return Ok(());
        }
        let n = core.len().min(self.core).min(self.cap);
        copy_out(self.ptr, &core[..n])?;
        let room = self.cap.saturating_sub(self.core);
        let m = drv.len().min(room);
        copy_out(self.ptr.checked_add(self.core as u64).ok_or(libc::EFAULT)?, &drv[..m])
    }
}

/// Copies `src` to the address `dst` of this process as the kernel copies a response out: by a
/// system call, which answers EFAULT for memory that is not mapped writable (unmapped, read-only,
/// inaccessible) where a store would fault. `process_vm_writev` into this process; where it is
/// not allowed (a seccomp filter: EPERM, ENOSYS), through a pipe ([`copy_out_piped`]).
pub(super) fn copy_out(dst: u64, src: &[u8]) -> Result<(), c_int> {
    if src.is_empty() {
        return Ok(());
    }
    if dst.checked_add(src.len() as u64).is_none() {
        return Err(libc::EFAULT);
    }
    let local = libc::iovec {
        iov_base: src.as_ptr() as *mut libc::c_void,
        iov_len: src.len(),
    };
    let remote = libc::iovec {
        iov_base: dst as *mut libc::c_void,
        iov_len: src.len(),
    };
    // SAFETY: reads `src` (ours) and has the kernel write `dst` of this process, checking it as
    // it would another process's memory: no store of ours touches `dst`.
    let n = unsafe { libc::process_vm_writev(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == src.len() as isize {
        return Ok(());
    }
    if n >= 0 {
        // written up to the first page it may not write
        return Err(libc::EFAULT);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EPERM) | Some(libc::ENOSYS) => copy_out_piped(dst, src),
        Some(e) => Err(e),
        None => Err(libc::EFAULT),
    }
}

/// [`copy_out`] through a pipe of its own: `src` written into it, then read out into `dst` by
/// the kernel, which answers EFAULT where it may not write.
pub(super) fn copy_out_piped(dst: u64, src: &[u8]) -> Result<(), c_int> {
    let errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
    let mut fds = [0 as c_int; 2];
    // SAFETY: a two-element array for pipe2.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(errno());
    }
    let mut done = Ok(());
    // a chunk fits in the pipe's buffer (at least a page), so neither end waits
    for (i, chunk) in src.chunks(4096).enumerate() {
        let at = dst + (i * 4096) as u64;
        // SAFETY: writes our chunk into our pipe.
        let w = unsafe { libc::write(fds[1], chunk.as_ptr() as *const libc::c_void, chunk.len()) };
        if w != chunk.len() as isize {
            done = Err(errno());
            break;
        }
        // SAFETY: the kernel writes `dst` of this process (checked as a user copy: EFAULT where
        // it may not); no store of ours touches it.
        let r = unsafe { libc::read(fds[0], at as *mut libc::c_void, chunk.len()) };
        if r != chunk.len() as isize {
            done = Err(if r < 0 { errno() } else { libc::EFAULT });
            break;
        }
    }
    // SAFETY: the pipe's two descriptors, ours.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    done
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
/// A response range the program may not write is refused here (EFAULT), before the command acts.
pub(super) fn legacy<C, R>(c: &mut Cmd<'_>, has_resp: bool) -> Result<(), c_int> {
    if c.ex {
        return Ok(());
    }
    let n = size_of::<C>().min(c.core.len());
    c.drv = &c.core[n..];
    c.core = &c.core[..n];
    if has_resp {
        c.resp.ptr = rd::<u64>(c.core, 0);
        c.resp.core = size_of::<R>();
        c.resp.check()?;
    }
    Ok(())
}

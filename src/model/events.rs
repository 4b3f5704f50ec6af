//! Completion events: model0's completion channels, and CQs armed through their doorbell record
//! as libmlx5's `ibv_req_notify_cq` arms a ConnectX's.
//!
//! A channel is a pipe: the program (libibverbs' `ibv_get_cq_event`) reads 8-byte
//! `ib_uverbs_comp_event_desc`s from its read end, as from the kernel's channel descriptor; the
//! model writes them into its write end. libmlx5 arms a CQ by writing `sn << 28 | cmd | ci` into
//! the CQ's second doorbell record (then its UAR, which the model does not see): a value the
//! record did not hold when the CQ last raised an event is an arm, and the next CQE written to
//! the CQ raises one event and disarms it (a CQ armed for solicited completions only: the next
//! receive of a solicited message, or error). Until the first arm the record holds
//! [`UNARMED`], a value libmlx5 never writes. The model raises an event when the CQE is written:
//! CQEs already in the CQ when it is armed raise none (a program polls after arming, as
//! libibverbs' examples do).
//!
//! The pipe is a FIFO in the model's directory, `ev-PID-CHANNEL` (both in hex), so that a CQE
//! written by another process (a model0 peer, whose post executes the WQE that completes here)
//! raises the event too: it opens the FIFO for writing, without blocking, and writes the event.
//! The FIFO goes with the channel, at exit, or in the sweep once its process is dead. Where no
//! FIFO can be made, the channel is a plain pipe and a peer's events are counted as lost.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The arm record's value before the first arm: libmlx5 sets only bits 24 (solicited), 28-29
/// (sequence) and 0-23 (consumer index).
pub const UNARMED: u32 = 0x0e00_0000;
/// `MLX5_CQ_DB_REQ_NOT_SOL`: armed for solicited completions only.
const SOLICITED_ONLY: u32 = 1 << 24;

struct Channel {
    id: u32,
    read_fd: i32,
    write_fd: i32,
    /// The FIFO other processes write this channel's events into.
    fifo: Option<std::path::PathBuf>,
}

/// The FIFO of channel `chan` of process `pid`.
fn fifo_path(pid: u32, chan: u32) -> std::path::PathBuf {
    super::shm::dir().join(format!("ev-{pid:x}-{chan:x}"))
}

/// A FIFO for channel `id`: (read end, blocking; write end, non-blocking; its path).
fn fifo(id: u32) -> Option<(i32, i32, std::path::PathBuf)> {
    use std::os::unix::ffi::OsStrExt;
    super::shm::secure_dir().ok()?;
    let path = fifo_path(std::process::id(), id);
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let _ = std::fs::remove_file(&path);
    // SAFETY: a NUL-terminated path of ours.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return None;
    }
    let open = |flags: i32| {
        // SAFETY: a NUL-terminated path; forwarded to the kernel.
        unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, c.as_ptr(), flags | libc::O_CLOEXEC, 0) as i32 }
    };
    // the read end first (a non-blocking open for writing needs a reader), then made blocking
    let r = open(libc::O_RDONLY | libc::O_NONBLOCK);
    let w = if r >= 0 {
        open(libc::O_WRONLY | libc::O_NONBLOCK)
    } else {
        -1
    };
    if r < 0 || w < 0 {
        for fd in [r, w].into_iter().filter(|&fd| fd >= 0) {
            // SAFETY: our own descriptor.
            unsafe { libc::syscall(libc::SYS_close, fd) };
        }
        let _ = std::fs::remove_file(&path);
        return None;
    }
    // SAFETY: our own new descriptor: reads block again, as on a kernel's channel.
    unsafe { libc::fcntl(r, libc::F_SETFL, 0) };
    Some((r, w, path))
}

static CHANNELS: Mutex<Vec<Channel>> = Mutex::new(Vec::new());
/// How many channels are open (closing any descriptor costs one load while none is).
static OPEN: AtomicUsize = AtomicUsize::new(0);
static NEXT: AtomicU32 = AtomicU32::new(1);

/// A new channel: its number (for CQs) and the descriptor the program reads events from.
pub fn create() -> std::io::Result<(u32, i32)> {
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let (read_fd, write_fd, fifo) = match fifo(id) {
        Some((r, w, p)) => (r, w, Some(p)),
        None => {
            let mut fds = [0i32; 2];
            // SAFETY: a two-element array for pipe2.
            if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // the model never blocks on a full pipe (a program that does not read its events)
            // SAFETY: our own new descriptor.
            unsafe { libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK) };
            (fds[0], fds[1], None)
        }
    };
    CHANNELS.lock().unwrap_or_else(|p| p.into_inner()).push(Channel {
        id,
        read_fd,
        write_fd,
        fifo,
    });
    OPEN.fetch_add(1, Ordering::Release);
    Ok((id, read_fd))
}

/// The channel whose read end is `fd`.
pub fn by_fd(fd: i32) -> Option<u32> {
    if OPEN.load(Ordering::Acquire) == 0 {
        return None;
    }
    let c = CHANNELS.lock().unwrap_or_else(|p| p.into_inner());
    c.iter().find(|c| c.read_fd == fd).map(|c| c.id)
}

/// The program closes descriptor `fd`: if it is a channel's read end, the channel goes (its
/// write end is closed here).
pub fn closed(fd: i32) {
    if OPEN.load(Ordering::Acquire) == 0 {
        return;
    }
    let mut c = CHANNELS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = c.iter().position(|c| c.read_fd == fd) {
        let ch = c.swap_remove(i);
        OPEN.fetch_sub(1, Ordering::Release);
        // SAFETY: the write end is ours alone.
        unsafe { libc::syscall(libc::SYS_close, ch.write_fd) };
        if let Some(p) = ch.fifo {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Removes the FIFOs of this process's channels (at exit: the descriptors go with the process).
/// With `wait` false a lock held elsewhere makes it give up (the sweep removes them later).
pub fn remove_fifos(wait: bool) {
    if OPEN.load(Ordering::Acquire) == 0 {
        return;
    }
    let c = if wait {
        CHANNELS.lock().unwrap_or_else(|p| p.into_inner())
    } else {
        match CHANNELS.try_lock() {
            Ok(c) => c,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        }
    };
    for p in c.iter().filter_map(|ch| ch.fifo.as_ref()) {
        let _ = std::fs::remove_file(p);
    }
}

/// Whether `name` is the FIFO of a channel of a process that is gone (for the sweep).
pub(super) fn dead_fifo(name: &str) -> bool {
    let Some((pid, _)) = name.strip_prefix("ev-").and_then(|r| r.split_once('-')) else {
        return false;
    };
    u32::from_str_radix(pid, 16).is_ok_and(|pid| pid != 0 && !super::shm::pid_alive(pid))
}

/// Takes the events of the CQ whose handle is `handle` still unread in channel `chan` out of
/// it (the others are put back), and returns how many there were: what DESTROY_CQ must not count
/// as reported (libibverbs waits until every reported event is acknowledged, and the program
/// acknowledges only what it read, as from a kernel's channel).
pub fn take_unread(chan: u32, handle: u64) -> u32 {
    let c = CHANNELS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(ch) = c.iter().find(|c| c.id == chan) else {
        return 0;
    };
    let mut avail: libc::c_int = 0;
    // SAFETY: FIONREAD into a local int, on our own pipe.
    if unsafe { libc::ioctl(ch.read_fd, libc::FIONREAD, &mut avail) } != 0 || avail < 8 {
        return 0;
    }
    let mut buf = vec![0u8; avail as usize / 8 * 8];
    // SAFETY: reading at most what the pipe holds (so the read does not block) into our buffer
    // (a raw system call: this executable's `read` is libc's, but its `write` is the interposer).
    let n = unsafe { libc::syscall(libc::SYS_read, ch.read_fd, buf.as_mut_ptr(), buf.len()) };
    if n <= 0 {
        return 0;
    }
    let mut mine = 0;
    for ev in buf[..n as usize / 8 * 8].chunks_exact(8) {
        let h = u64::from_ne_bytes([ev[0], ev[1], ev[2], ev[3], ev[4], ev[5], ev[6], ev[7]]);
        if h == handle {
            mine += 1;
        } else {
            // SAFETY: 8 bytes back into our own pipe, which has room for what it held.
            unsafe { libc::syscall(libc::SYS_write, ch.write_fd, ev.as_ptr(), 8usize) };
        }
    }
    mine
}

/// Whether a CQE raises an event: the CQ is armed (its record holds a value other than the one
/// that raised the last event, and other than [`UNARMED`]) for every completion, or for
/// solicited ones and this CQE is a solicited receive or an error.
pub(super) fn armed(arm: u32, seen: u32, solicited_or_error: bool) -> bool {
    arm != UNARMED && arm != seen && (arm & SOLICITED_ONLY == 0 || solicited_or_error)
}

/// Writes an event for the CQ whose handle is `handle` into channel `chan` of process `owner`
/// (another process's: through its FIFO); false when it cannot (gone, a plain pipe of another
/// process, or full).
pub(super) fn raise(chan: u32, handle: u64, owner: u32) -> bool {
    if owner != super::pid::own_pid() {
        return raise_in(owner, chan, handle);
    }
    let c = CHANNELS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(ch) = c.iter().find(|c| c.id == chan) else {
        return false;
    };
    let ev = handle.to_ne_bytes();
    // SAFETY: 8 bytes from a local array into our own pipe (a raw system call: this
    // executable's `write` is the uverbs interposer).
    let n = unsafe { libc::syscall(libc::SYS_write, ch.write_fd, ev.as_ptr(), ev.len()) };
    n == 8
}

/// [`raise`] into the FIFO of another process's channel.
fn raise_in(owner: u32, chan: u32, handle: u64) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(fifo_path(owner, chan).as_os_str().as_bytes()) else {
        return false;
    };
    // never blocks: no reader (ENXIO) or a full FIFO is an event lost
    let flags = libc::O_WRONLY | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated path; forwarded to the kernel.
    let fd = unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, c.as_ptr(), flags, 0) } as i32;
    if fd < 0 {
        return false;
    }
    let ev = handle.to_ne_bytes();
    // SAFETY: 8 bytes from a local array into the descriptor just opened, then closed.
    let n = unsafe { libc::syscall(libc::SYS_write, fd, ev.as_ptr(), ev.len()) };
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_close, fd) };
    n == 8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arm_is_a_new_value_of_the_record() {
        // never armed
        assert!(!armed(UNARMED, UNARMED, false));
        // armed for any completion (sequence 0, consumer index 0 is 0)
        assert!(armed(0, UNARMED, false));
        // the same value after its event: disarmed
        assert!(!armed(0, 0, false));
        // re-armed after ibv_get_cq_event (sequence 1)
        assert!(armed(1 << 28 | 5, 0, false));
        // solicited only: a plain completion does not raise it, a solicited receive or an error does
        let sol = SOLICITED_ONLY | 3;
        assert!(!armed(sol, 0, false));
        assert!(armed(sol, 0, true));
    }

    #[test]
    fn events_reach_the_reader_through_its_pipe_or_fifo() {
        let (id, fd) = create().unwrap();
        assert_eq!(by_fd(fd), Some(id));
        assert!(raise(id, 0xdead_beef, std::process::id()));
        assert!(!raise(id, 1, std::process::id().wrapping_add(1)));
        let mut b = [0u8; 8];
        // SAFETY: reading 8 bytes into a local array from our pipe.
        let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), 8) };
        assert_eq!(n, 8);
        assert_eq!(u64::from_ne_bytes(b), 0xdead_beef);
        // two events unread at teardown, one of another CQ: the first is taken, the other stays
        assert!(raise(id, 7, std::process::id()));
        assert!(raise(id, 9, std::process::id()));
        assert!(raise(id, 7, std::process::id()));
        assert_eq!(take_unread(id, 7), 2);
        // SAFETY: reading 8 bytes into a local array from our pipe (one is there).
        let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), 8) };
        assert_eq!((n, u64::from_ne_bytes(b)), (8, 9));
        assert_eq!(take_unread(id, 7), 0);
        // what another process does: the event through the channel's FIFO, by its path
        assert!(raise_in(std::process::id(), id, 0x5eed));
        // SAFETY: reading 8 bytes into a local array from our pipe (one is there).
        let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), 8) };
        assert_eq!((n, u64::from_ne_bytes(b)), (8, 0x5eed));
        let fifo = fifo_path(std::process::id(), id);
        assert!(fifo.exists(), "{}", fifo.display());
        assert!(
            !dead_fifo(&fifo.file_name().unwrap().to_string_lossy()),
            "a live process's FIFO"
        );
        assert!(dead_fifo("ev-7fffffff-1") && !dead_fifo("qp-12") && !dead_fifo("ev-zz-1"));
        closed(fd);
        assert!(!fifo.exists(), "the FIFO goes with the channel");
        assert_eq!(by_fd(fd), None);
        assert!(!raise(id, 1, std::process::id()));
        // SAFETY: the read end is the caller's to close.
        unsafe { libc::close(fd) };
    }
}

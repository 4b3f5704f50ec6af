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
//! libibverbs' examples do). Events reach channels of this process only: a CQE written by
//! another process (a model0 peer) into a CQ with a channel is counted as a lost event.

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
}

static CHANNELS: Mutex<Vec<Channel>> = Mutex::new(Vec::new());
/// How many channels are open (closing any descriptor costs one load while none is).
static OPEN: AtomicUsize = AtomicUsize::new(0);
static NEXT: AtomicU32 = AtomicU32::new(1);

/// A new channel: its number (for CQs) and the descriptor the program reads events from.
pub fn create() -> std::io::Result<(u32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: a two-element array for pipe2.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // the model never blocks on a full pipe (a program that does not read its events)
    // SAFETY: our own new descriptor.
    unsafe { libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK) };
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    CHANNELS.lock().unwrap_or_else(|p| p.into_inner()).push(Channel {
        id,
        read_fd: fds[0],
        write_fd: fds[1],
    });
    OPEN.fetch_add(1, Ordering::Release);
    Ok((id, fds[0]))
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
    }
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

/// Writes an event for the CQ whose handle is `handle` into channel `chan` of process `owner`;
/// false when it cannot (another process's channel, gone, or full).
pub(super) fn raise(chan: u32, handle: u64, owner: u32) -> bool {
    if owner != std::process::id() {
        return false;
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
    fn events_reach_the_reader_of_this_process_only() {
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
        closed(fd);
        assert_eq!(by_fd(fd), None);
        assert!(!raise(id, 1, std::process::id()));
        // SAFETY: the read end is the caller's to close.
        unsafe { libc::close(fd) };
    }
}

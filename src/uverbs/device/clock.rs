//! The NIC clock's two pages, as the mlx5 kernel driver maps them: the core clock page
//! (`MLX5_IB_MMAP_CORE_CLOCK`: the internal timer, big-endian high and low words, read by
//! libmlx5's `ibv_query_rt_values_ex`) and the clock-info page (`MLX5_IB_MMAP_CLOCK_INFO`,
//! version 1: `struct mlx5_ib_clock_info`, read by `mlx5dv_get_clock_info`). Both are read-only
//! to the program (the driver refuses a writable mapping: `EPERM`).
//!
//! On a ConnectX the timer page is a register: every read sees the counter of that moment.
//! Here it is memory, one page of a memfd per process, mapped as often as the program asks:
//! it holds the counter of its last [`refresh`], which runs when a mapping is made and just
//! before every read of it that goes through libmlx5 (`query_rt_values`, wrapped in a foreign
//! program by the preload, called first by rdmaprobe's `Context::nic_clock`). A program that
//! reads the page by other means sees the counter of the last refresh.

use crate::model::clock::{clock_info, core_clock_words, nic_clock};
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use super::PAGE;

/// The process's clock memfd: its descriptor and a writable mapping of its two pages (the
/// timer at 0, the clock info at [`PAGE`]); never unmapped.
struct Pages {
    fd: c_int,
    rw: usize,
}

static PAGES: OnceLock<Pages> = OnceLock::new();
/// Held while the pages are made (a failure is not kept: the next mapping tries again).
static MAKING: Mutex<()> = Mutex::new(());

fn last_errno(otherwise: c_int) -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(otherwise)
}

/// `mmap(NULL, len, prot, MAP_SHARED, fd, off)` as a raw system call (not the interposed
/// `mmap`), every argument widened to a full register first: a variadic call may leave the
/// upper half of a 32-bit argument undefined, and the kernel reads all 64 bits.
///
/// # Safety
/// As `mmap`: a new mapping, placed by the kernel.
unsafe fn sys_mmap(len: usize, prot: c_int, fd: c_int, off: usize) -> *mut c_void {
    let w = |v: c_int| v as libc::c_long;
    // SAFETY: the caller's promise; every argument a full c_long.
    unsafe {
        libc::syscall(
            libc::SYS_mmap,
            0 as libc::c_long,
            len as libc::c_long,
            w(prot),
            w(libc::MAP_SHARED),
            w(fd),
            off as libc::c_long,
        ) as *mut c_void
    }
}

fn make_pages() -> Result<Pages, c_int> {
    // SAFETY: a constant name; a new descriptor.
    let fd = unsafe { libc::memfd_create(c"model0-nic-clock".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(last_errno(libc::EMFILE));
    }
    // SAFETY: our own new descriptor, raw system calls (not the interposed ones).
    let rw = unsafe {
        if libc::ftruncate(fd, 2 * PAGE as libc::off_t) != 0 {
            let e = last_errno(libc::ENOMEM);
            libc::close(fd);
            return Err(e);
        }
        sys_mmap(2 * PAGE, libc::PROT_READ | libc::PROT_WRITE, fd, 0)
    };
    if rw == libc::MAP_FAILED {
        let e = last_errno(libc::ENOMEM);
        // SAFETY: our own descriptor.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    Ok(Pages { fd, rw: rw as usize })
}

fn pages() -> Result<&'static Pages, c_int> {
    if let Some(p) = PAGES.get() {
        return Ok(p);
    }
    let _g = MAKING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = PAGES.get() {
        return Ok(p);
    }
    let made = make_pages()?;
    Ok(PAGES.get_or_init(|| made))
}

/// The timer word of the page (8 bytes at 0, aligned: one store publishes high and low
/// together).
fn timer(p: &Pages) -> &AtomicU64 {
    // SAFETY: the first 8 bytes of a live, never unmapped, page-aligned shared mapping.
    unsafe { &*(p.rw as *const AtomicU64) }
}

fn decode(word: u64) -> u64 {
    let b = word.to_ne_bytes();
    ((u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as u64) << 32) | u32::from_be_bytes([b[4], b[5], b[6], b[7]]) as u64
}

/// Writes the NIC clock of now into the timer page, if this process has one; never backwards
/// (two threads refreshing at once: the later counter stays).
pub fn refresh() {
    let Some(p) = PAGES.get() else { return };
    let now = nic_clock();
    let t = timer(p);
    let mut cur = t.load(Ordering::Acquire);
    while decode(cur) < now {
        match t.compare_exchange_weak(
            cur,
            u64::from_ne_bytes(core_clock_words(now)),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => break,
            Err(c) => cur = c,
        }
    }
}

/// The clock-info page renewed: `sign` odd while it is written, then even and higher (the
/// kernel's protocol, which `mlx5dv_get_clock_info` follows).
fn renew_info(p: &Pages) {
    let at = (p.rw + PAGE) as *mut crate::sys::kabi::mlx5_ib_clock_info;
    // SAFETY: the second page of the live mapping holds one clock-info struct (56 bytes); the
    // sign word is published with release order around the body.
    unsafe {
        let sign = &*(at as *const std::sync::atomic::AtomicU32);
        let s = sign.load(Ordering::Relaxed);
        sign.store(s | 1, Ordering::Release);
        let mut ci = clock_info();
        ci.sign = s | 1;
        std::ptr::write_volatile(at, ci);
        sign.store((s | 1).wrapping_add(1), Ordering::Release);
    }
}

/// A mapping of clock page `cmd` (`MLX5_IB_MMAP_CORE_CLOCK` or `MLX5_IB_MMAP_CLOCK_INFO` with
/// version 1), read-only; `None`: `cmd` is not a clock page.
pub(super) fn map(cmd: u32, index: u64, len: usize, prot: c_int) -> Option<Result<*mut c_void, c_int>> {
    use crate::sys::kabi as k;
    let page = match cmd {
        k::MLX5_IB_MMAP_CORE_CLOCK if index == 0 => 0,
        k::MLX5_IB_MMAP_CLOCK_INFO if index == k::MLX5_IB_CLOCK_INFO_V1 as u64 => 1,
        k::MLX5_IB_MMAP_CORE_CLOCK | k::MLX5_IB_MMAP_CLOCK_INFO => return Some(Err(libc::EINVAL)),
        _ => return None,
    };
    Some(map_page(page, len, prot))
}

fn map_page(page: usize, len: usize, prot: c_int) -> Result<*mut c_void, c_int> {
    if len != PAGE {
        return Err(libc::EINVAL);
    }
    if prot & (libc::PROT_WRITE | libc::PROT_EXEC) != 0 {
        return Err(libc::EPERM);
    }
    let p = pages()?;
    if page == 0 {
        refresh();
    } else {
        renew_info(p);
    }
    // SAFETY: a new read-only shared mapping of our own memfd's page.
    let m = unsafe { sys_mmap(PAGE, libc::PROT_READ, p.fd, page * PAGE) };
    if m == libc::MAP_FAILED {
        return Err(last_errno(libc::ENOMEM));
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::kabi as k;

    #[test]
    fn the_timer_page_reads_as_libmlx5_reads_it_and_moves_on_refresh() {
        let m = map(k::MLX5_IB_MMAP_CORE_CLOCK, 0, PAGE, libc::PROT_READ)
            .expect("a clock page")
            .expect("mapped");
        let read = || {
            // SAFETY: the read-only page just mapped; high word, low word, big-endian.
            let (hi, lo) = unsafe {
                (
                    u32::from_be(std::ptr::read_volatile(m as *const u32)),
                    u32::from_be(std::ptr::read_volatile((m as *const u32).add(1))),
                )
            };
            ((hi as u64) << 32) | lo as u64
        };
        let before = nic_clock();
        refresh();
        let a = read();
        let after = nic_clock();
        assert!(before <= a && a <= after, "{before} <= {a} <= {after}");
        std::thread::sleep(std::time::Duration::from_millis(1));
        assert_eq!(read(), a, "memory: only a refresh moves it");
        refresh();
        assert!(read() >= a + 156, "156.25 ticks a millisecond later");
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(m, PAGE) };
    }

    #[test]
    fn clock_pages_are_read_only_and_only_those_libmlx5_knows() {
        let w = libc::PROT_READ | libc::PROT_WRITE;
        assert_eq!(map(k::MLX5_IB_MMAP_CORE_CLOCK, 0, PAGE, w), Some(Err(libc::EPERM)));
        assert_eq!(map(k::MLX5_IB_MMAP_CLOCK_INFO, 0, PAGE, w), Some(Err(libc::EPERM)));
        assert_eq!(
            map(k::MLX5_IB_MMAP_CLOCK_INFO, 1, PAGE, libc::PROT_READ),
            Some(Err(libc::EINVAL))
        );
        assert_eq!(
            map(k::MLX5_IB_MMAP_CORE_CLOCK, 0, 2 * PAGE, libc::PROT_READ),
            Some(Err(libc::EINVAL))
        );
        assert!(map(k::MLX5_IB_MMAP_WC_PAGE, 0, PAGE, libc::PROT_READ).is_none());
        let m = map(k::MLX5_IB_MMAP_CLOCK_INFO, 0, PAGE, libc::PROT_READ)
            .expect("clock info")
            .expect("mapped");
        // SAFETY: the read-only page just mapped holds one clock-info struct.
        let ci = unsafe { std::ptr::read_volatile(m as *const k::mlx5_ib_clock_info) };
        assert_eq!(ci.sign & 1, 0, "not left mid-update");
        assert!(ci.sign >= 2);
        assert_eq!(
            ci.mult as u64,
            (1_000_000u64 << ci.shift) / crate::model::clock::HCA_CORE_CLOCK_KHZ
        );
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(m, PAGE) };
    }
}

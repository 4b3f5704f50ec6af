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
//!
//! The clock-info page pairs one counter value with real time; `mlx5dv_ts_to_ns` converts within
//! half the counter's 41-bit width of it (about 2 h at 156.25 MHz), so the kernel renews it
//! before then. Here a refresh renews it once it is older than a quarter of the width, and so
//! does every 65536th progress call ([`renew_if_due`]), so a program that only polls keeps it
//! valid.

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
    let fd = unsafe {
        libc::memfd_create(
            c"model0-nic-clock".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    if fd < 0 {
        return Err(last_errno(libc::EMFILE));
    }
    let fail = |e: c_int| {
        // SAFETY: our own descriptor (the interposed close forwards it to the kernel).
        unsafe { libc::close(fd) };
        Err(e)
    };
    // SAFETY: our own new descriptor.
    if unsafe { libc::ftruncate(fd, 2 * PAGE as libc::off_t) } != 0 {
        return fail(last_errno(libc::ENOMEM));
    }
    // SAFETY: a new shared mapping of our own descriptor.
    let rw = unsafe { sys_mmap(2 * PAGE, libc::PROT_READ | libc::PROT_WRITE, fd, 0) };
    if rw == libc::MAP_FAILED {
        return fail(last_errno(libc::ENOMEM));
    }
    // no writable mapping of it after ours, and no read-only one made writable (mprotect), as
    // the driver clears VM_MAYWRITE (kernels before 5.1 lack the seal: there the pages could be
    // made writable)
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_FUTURE_WRITE;
    // SAFETY: our own descriptor; a seal only restricts later mappings.
    unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) };
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
/// (two threads refreshing at once: the later counter stays). Renews the clock-info page when it
/// is older than a quarter of its counter's width.
pub fn refresh() {
    let Some(p) = PAGES.get() else { return };
    let now = nic_clock();
    let mask = crate::model::clock::CLOCK_INFO_MASK;
    if now.wrapping_sub(INFO_AT.load(Ordering::Relaxed)) & mask > mask / 4 {
        renew_info(p);
    }
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

/// The counter value the clock-info page was last paired with.
static INFO_AT: AtomicU64 = AtomicU64::new(0);
/// One writer of the clock-info page at a time (the sign protocol has one writer).
static INFO_WRITER: Mutex<()> = Mutex::new(());

/// For the progress path: every 65536th call, a [`refresh`] (which renews the clock-info page
/// when it is due).
pub fn renew_if_due() {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    if CALLS.fetch_add(1, Ordering::Relaxed) % 65536 == 65535 {
        refresh();
    }
}

/// The clock-info page renewed with the kernel's protocol, which `mlx5dv_get_clock_info`
/// follows: `sign` made odd, a full fence, the fields, then `sign` even and higher with release
/// order; one writer at a time.
fn renew_info(p: &Pages) {
    use crate::sys::kabi::mlx5_ib_clock_info as Info;
    use std::sync::atomic::{fence, AtomicU32};
    let _one = INFO_WRITER.lock().unwrap_or_else(|e| e.into_inner());
    let at = (p.rw + PAGE) as *mut Info;
    let ci = clock_info();
    // SAFETY: the second page of the live mapping holds one clock-info struct (56 bytes, its
    // sign word 4-aligned at its start); only this writer (the lock) writes it; readers copy
    // it between two reads of the sign.
    unsafe {
        let sign = &*(std::ptr::addr_of!((*at).sign) as *const AtomicU32);
        let s = sign.load(Ordering::Relaxed) | 1;
        sign.store(s, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        std::ptr::write_volatile(std::ptr::addr_of_mut!((*at).nsec), ci.nsec);
        std::ptr::write_volatile(std::ptr::addr_of_mut!((*at).cycles), ci.cycles);
        std::ptr::write_volatile(std::ptr::addr_of_mut!((*at).frac), ci.frac);
        std::ptr::write_volatile(std::ptr::addr_of_mut!((*at).mult), ci.mult);
        std::ptr::write_volatile(std::ptr::addr_of_mut!((*at).shift), ci.shift);
        std::ptr::write_volatile(std::ptr::addr_of_mut!((*at).mask), ci.mask);
        std::ptr::write_volatile(std::ptr::addr_of_mut!((*at).overflow_period), ci.overflow_period);
        sign.store(s.wrapping_add(1), Ordering::Release);
    }
    INFO_AT.store(ci.cycles, Ordering::Relaxed);
}

/// A mapping of clock page `cmd` (`MLX5_IB_MMAP_CORE_CLOCK` or `MLX5_IB_MMAP_CLOCK_INFO` with
/// version 1), read-only; `None`: `cmd` is not a clock page.
pub(super) fn map(cmd: u32, index: u64, len: usize, prot: c_int) -> Option<Result<*mut c_void, c_int>> {
    use crate::sys::kabi as k;
    // as the driver: the core clock's index is ignored, a clock-info version other than 1 is
    // EOPNOTSUPP
    let page = match cmd {
        k::MLX5_IB_MMAP_CORE_CLOCK => 0,
        k::MLX5_IB_MMAP_CLOCK_INFO if index == k::MLX5_IB_CLOCK_INFO_V1 as u64 => 1,
        k::MLX5_IB_MMAP_CLOCK_INFO => return Some(Err(libc::EOPNOTSUPP)),
        _ => return None,
    };
    Some(map_page(page, len, prot))
}

fn map_page(page: usize, len: usize, prot: c_int) -> Result<*mut c_void, c_int> {
    if len != PAGE {
        return Err(libc::EINVAL);
    }
    if prot & libc::PROT_WRITE != 0 {
        return Err(libc::EPERM);
    }
    let p = pages()?;
    if page == 0 {
        refresh();
    } else {
        renew_info(p);
    }
    // SAFETY: a new shared mapping, not writable, of our own memfd's page.
    let m = unsafe { sys_mmap(PAGE, prot | libc::PROT_READ, p.fd, page * PAGE) };
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
        refresh();
        // a millisecond at least: 156250 ticks
        assert!(read() >= a + 156_250, "{} after {a}", read());
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(m, PAGE) };
    }

    /// A clock-info page older than a quarter of its counter's width is renewed at the next
    /// refresh (`mlx5dv_ts_to_ns` converts only within half of it).
    #[test]
    fn an_old_clock_info_page_is_renewed_at_a_refresh() {
        let m = map(k::MLX5_IB_MMAP_CLOCK_INFO, 0, PAGE, libc::PROT_READ)
            .expect("clock info")
            .expect("mapped");
        // SAFETY: the read-only page just mapped holds one clock-info struct.
        let page = || unsafe { std::ptr::read_volatile(m as *const k::mlx5_ib_clock_info) };
        let mask = crate::model::clock::CLOCK_INFO_MASK;
        // (not asserted: a fresh page is left alone at a refresh; other tests map the page and
        // renew it meanwhile)
        let sign = page().sign;
        // as if paired a third of the width ago (about 78 min)
        INFO_AT.store(nic_clock().wrapping_sub(mask / 3) & mask, Ordering::Relaxed);
        let before = nic_clock() & mask;
        refresh();
        let ci = page();
        assert!(ci.sign > sign && ci.sign & 1 == 0, "sign {sign} then {}", ci.sign);
        assert!(
            ci.cycles.wrapping_sub(before) & mask < mask / 4,
            "{} paired, {before} before",
            ci.cycles
        );
        assert!(INFO_AT.load(Ordering::Relaxed).wrapping_sub(before) & mask < mask / 4);
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
            Some(Err(libc::EOPNOTSUPP))
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
        // the driver clears VM_MAYWRITE: no making it writable later (the memfd's seal)
        // SAFETY: the read-only mapping made above; mprotect only asks.
        let rc = unsafe { libc::mprotect(m, PAGE, libc::PROT_READ | libc::PROT_WRITE) };
        assert_ne!(rc, 0, "a read-only clock page was made writable");
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(m, PAGE) };
    }
}

//! The libc entry points libibverbs and libmlx5 reach the device through, defined by the
//! executable (`build.rs` exports them) so they take precedence over libc's for every library
//! of the process. A call on model0's device descriptor (or its path) is answered by
//! [`super::device`]; every other call goes to the kernel as a raw system call, untouched. Rust's
//! own I/O of this executable binds to these definitions too, so the forwarding paths are one
//! relaxed load and the system call.

use super::device;
use std::ffi::{c_char, c_int, c_long, c_uint, c_ulong, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

/// Open device descriptors (-1: free slot).
static DEV_FDS: [AtomicI32; 8] = [const { AtomicI32::new(-1) }; 8];
/// How many slots are in use (the common case, no device open, costs one load). A count, not
/// a flag: a flag cleared by one thread's close could hide a descriptor another thread has just
/// opened.
static N_FDS: AtomicUsize = AtomicUsize::new(0);
/// Whether the device's path is answered (set once the fake sysfs is installed).
pub(super) static PATH_ON: AtomicBool = AtomicBool::new(false);

fn set_errno(e: c_int) {
    // SAFETY: glibc's thread-local errno.
    unsafe { *libc::__errno_location() = e };
}

fn ret(r: c_long) -> c_int {
    r as c_int
}

/// Whether `fd` is one of model0's device descriptors.
#[inline]
pub(super) fn is_dev(fd: c_int) -> bool {
    N_FDS.load(Ordering::Acquire) != 0 && DEV_FDS.iter().any(|f| f.load(Ordering::Acquire) == fd)
}

pub(super) fn add_fd(fd: c_int) -> bool {
    for f in &DEV_FDS {
        if f.compare_exchange(-1, fd, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            N_FDS.fetch_add(1, Ordering::AcqRel);
            return true;
        }
    }
    false
}

pub(super) fn remove_fd(fd: c_int) {
    for f in &DEV_FDS {
        if f.compare_exchange(fd, -1, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            N_FDS.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Whether `path` names the device node.
fn is_dev_path(path: *const c_char) -> bool {
    if !PATH_ON.load(Ordering::Acquire) || path.is_null() {
        return false;
    }
    // SAFETY: libc callers pass a NUL-terminated path.
    let p = unsafe { CStr::from_ptr(path) };
    p.to_bytes() == device::DEV_PATH.as_bytes()
}

/// `open(2)`; the mode is read as the third argument (on x86-64 and aarch64 Linux a variadic
/// argument travels where a fixed one would).
///
/// # Safety
/// As libc's `open`.
#[no_mangle]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    if is_dev_path(path) {
        return device::open_device(flags);
    }
    // SAFETY: forwarded as given.
    ret(unsafe { libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path, flags, mode) })
}

/// `openat(2)`.
///
/// # Safety
/// As libc's `openat`.
#[no_mangle]
pub unsafe extern "C" fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    if is_dev_path(path) {
        return device::open_device(flags);
    }
    // SAFETY: forwarded as given.
    ret(unsafe { libc::syscall(libc::SYS_openat, dirfd, path, flags, mode) })
}

/// `stat(2)`: the device node is a character device with the numbers its sysfs `dev` file gives.
///
/// # Safety
/// As libc's `stat`.
#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    if is_dev_path(path) {
        return device::stat_device(buf);
    }
    // SAFETY: forwarded as given.
    ret(unsafe { libc::syscall(libc::SYS_newfstatat, libc::AT_FDCWD, path, buf, 0) })
}

/// `access(2)`: the device node exists, readable and writable (as `/dev/infiniband/uverbs*`
/// are, mode 0666); UCX checks it before it opens a device.
///
/// # Safety
/// As libc's `access`.
#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    if is_dev_path(path) {
        return 0;
    }
    // SAFETY: forwarded as given.
    ret(unsafe { libc::syscall(libc::SYS_faccessat, libc::AT_FDCWD, path, mode) })
}

/// `faccessat(2)` (glibc's, with its flags): as [`access`] for the device node.
///
/// # Safety
/// As libc's `faccessat`.
#[no_mangle]
pub unsafe extern "C" fn faccessat(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int {
    if is_dev_path(path) {
        return 0;
    }
    if flags == 0 {
        // SAFETY: forwarded as given.
        return ret(unsafe { libc::syscall(libc::SYS_faccessat, dirfd, path, mode) });
    }
    // with flags, libc's own (it emulates them where the kernel has no faccessat2)
    type Faccessat = unsafe extern "C" fn(c_int, *const c_char, c_int, c_int) -> c_int;
    static NEXT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // SAFETY: a NUL-terminated name; RTLD_NEXT finds the definition after this one (libc's).
    let f = *NEXT.get_or_init(|| unsafe { libc::dlsym(libc::RTLD_NEXT, c"faccessat".as_ptr()) } as usize);
    if f == 0 {
        set_errno(libc::ENOSYS);
        return -1;
    }
    // SAFETY: libc's faccessat, of this type, with the caller's arguments.
    unsafe { std::mem::transmute::<usize, Faccessat>(f)(dirfd, path, mode, flags) }
}

/// `close(2)`: closing a device descriptor releases the context's objects first.
///
/// # Safety
/// As libc's `close`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if is_dev(fd) {
        device::close_device(fd);
        remove_fd(fd);
    }
    // a completion channel's descriptor: the model's write end goes with it
    {
        let _in = device::inside();
        crate::model::events::closed(fd);
    }
    // SAFETY: forwarded as given.
    ret(unsafe { libc::syscall(libc::SYS_close, fd) })
}

/// `write(2)`: on the device, one uverbs command.
///
/// # Safety
/// As libc's `write`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, len: usize) -> isize {
    if is_dev(fd) {
        if buf.is_null() {
            set_errno(libc::EFAULT);
            return -1;
        }
        // SAFETY: the caller passes `len` readable bytes at `buf`.
        let cmd = unsafe { std::slice::from_raw_parts(buf as *const u8, len) };
        return match device::command(fd, cmd) {
            Ok(()) => len as isize,
            Err(e) => {
                set_errno(e);
                -1
            }
        };
    }
    // SAFETY: forwarded as given.
    unsafe { libc::syscall(libc::SYS_write, fd, buf, len) as isize }
}

/// `ioctl(2)`: the device has no ioctl interface (`ENOTTY` makes libibverbs use the `write()`
/// commands for everything).
///
/// # Safety
/// As libc's `ioctl`.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> c_int {
    if is_dev(fd) {
        set_errno(libc::ENOTTY);
        return -1;
    }
    // SAFETY: forwarded as given.
    ret(unsafe { libc::syscall(libc::SYS_ioctl, fd, req, arg) })
}

/// `mmap(2)`: on the device, the UAR pages libmlx5 maps (its doorbell and BlueFlame stores land
/// there).
///
/// # Safety
/// As libc's `mmap`.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
) -> *mut c_void {
    if fd >= 0 && is_dev(fd) {
        return match device::mmap_device(fd, len, prot, off) {
            Ok(p) => p,
            Err(e) => {
                set_errno(e);
                libc::MAP_FAILED
            }
        };
    }
    // SAFETY: forwarded as given.
    let p = unsafe { libc::syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off) as *mut c_void };
    if flags & libc::MAP_FIXED != 0 && p != libc::MAP_FAILED {
        // a trapped register page mapped over is no longer one
        super::trap::forget(addr as usize, len);
    }
    p
}

/// Opens `/dev/null` as the device's descriptor (a real character device, so `fstat` needs no
/// answer of ours) and records it.
pub(super) fn open_null(flags: c_int) -> c_int {
    let cloexec = flags & libc::O_CLOEXEC;
    // SAFETY: a constant path; forwarded to the kernel.
    let fd = ret(unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            c"/dev/null".as_ptr(),
            libc::O_RDWR | cloexec,
            0,
        )
    });
    if fd < 0 {
        return fd;
    }
    if !add_fd(fd) {
        // SAFETY: our own descriptor.
        unsafe { libc::syscall(libc::SYS_close, fd) };
        set_errno(libc::EMFILE);
        return -1;
    }
    fd
}

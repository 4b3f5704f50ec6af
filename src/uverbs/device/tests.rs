//! The device as a program that writes its own commands meets it: responses into memory that
//! is not this process's to write are answered EFAULT, as the kernel answers them, and the
//! process lives.

use super::frame::copy_out;
use super::DEV_PATH;
use crate::sys::kabi as k;
use std::ffi::{c_int, c_void};
use std::mem::size_of;

use crate::test_pages::Page;

/// Response addresses a kernel answers EFAULT for: below `mmap_min_addr`, in the kernel's half,
/// a page without access, a read-only page, a range that runs from writable memory into a page
/// without access.
fn bad_places(none: &Page, ro: &Page, rw_then_none: u64) -> [(&'static str, u64); 5] {
    [
        ("an unmapped address", 0x1000),
        ("a kernel address", 0xffff_ffff_ff00_0000),
        ("a page without access", none.at()),
        ("a read-only page", ro.at()),
        ("a range running into a page without access", rw_then_none),
    ]
}

/// Two adjacent pages, the first writable and the second without access; and the address 16
/// bytes before their border.
fn straddle() -> (Page, u64) {
    let p = Page::of(8192, libc::PROT_READ | libc::PROT_WRITE);
    // SAFETY: the second of the pages just mapped.
    let rc = unsafe { libc::mprotect(p.0.add(4096) as *mut c_void, 4096, libc::PROT_NONE) };
    assert_eq!(rc, 0);
    let border = p.at() + 4096 - 16;
    (p, border)
}

#[test]
fn copies_out_or_answers_efault() {
    let (none, ro) = (Page::new(libc::PROT_NONE), Page::new(libc::PROT_READ));
    let (_two, border) = straddle();
    for (what, at) in bad_places(&none, &ro, border) {
        assert_eq!(copy_out(at, &[7u8; 64]), Err(libc::EFAULT), "{what}");
        assert_eq!(
            super::frame::copy_out_piped(at, &[7u8; 64]),
            Err(libc::EFAULT),
            "{what} (through a pipe)"
        );
    }
    // SAFETY: a read-only page of ours: reading it is fine, and it was not written
    assert_eq!(unsafe { *ro.0 }, 0);
    let rw = Page::new(libc::PROT_READ | libc::PROT_WRITE);
    let data: Vec<u8> = (0..=255).collect();
    assert_eq!(copy_out(rw.at() + 5, &data), Ok(()));
    assert_eq!(super::frame::copy_out_piped(rw.at() + 300, &data), Ok(()));
    // SAFETY: the page is ours, readable and 4096 bytes long.
    let got = unsafe { std::slice::from_raw_parts(rw.0, 4096) };
    assert_eq!(&got[5..261], &data[..]);
    assert_eq!(&got[300..556], &data[..]);
    assert_eq!(
        copy_out(u64::MAX - 8, &data),
        Err(libc::EFAULT),
        "a range past the end of memory"
    );
}

/// A legacy command: header, then the body (`response` first), `out` bytes of response.
fn legacy(op: u32, body: &[u8], out: usize) -> Vec<u8> {
    let len = 8 + body.len();
    let mut b = Vec::new();
    b.extend_from_slice(&op.to_ne_bytes());
    b.extend_from_slice(&((len / 4) as u16).to_ne_bytes());
    b.extend_from_slice(&((out / 4) as u16).to_ne_bytes());
    b.extend_from_slice(body);
    b
}

/// GET_CONTEXT answering at `response`.
fn get_context(response: u64) -> Vec<u8> {
    let mut body = response.to_ne_bytes().to_vec();
    body.extend_from_slice(&[0u8; size_of::<k::mlx5_ib_alloc_ucontext_req_v2>()]);
    let out = size_of::<k::ib_uverbs_get_context_resp>() + size_of::<k::mlx5_ib_alloc_ucontext_resp>();
    legacy(k::IB_USER_VERBS_CMD_GET_CONTEXT, &body, out)
}

/// The extended QUERY_DEVICE answering at `response`.
fn ex_query_device(response: u64) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&(k::IB_USER_VERBS_CMD_FLAG_EXTENDED | k::IB_USER_VERBS_EX_CMD_QUERY_DEVICE).to_ne_bytes());
    b.extend_from_slice(&1u16.to_ne_bytes());
    b.extend_from_slice(&((size_of::<k::ib_uverbs_ex_query_device_resp>() / 8) as u16).to_ne_bytes());
    b.extend_from_slice(&response.to_ne_bytes());
    b.extend_from_slice(&[0u8; 8]); // no provider words, reserved
    b.extend_from_slice(&[0u8; 8]); // comp_mask, reserved
    b
}

/// `write()` of `cmd` on `fd`: its return and errno.
fn send(fd: c_int, cmd: &[u8]) -> (isize, c_int) {
    // SAFETY: `cmd` is readable for its length; the descriptor is the device's (interposed).
    let n = unsafe { libc::write(fd, cmd.as_ptr() as *const c_void, cmd.len()) };
    (n, std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

/// A program that opens model0's device node (as libibverbs does, through the interposed
/// `open`) and writes commands whose response points where it may not write: each is answered
/// -1/EFAULT and nothing is done (a refused GET_CONTEXT leaves the descriptor without context,
/// so the next one opens it); a good one after them is answered.
#[test]
fn responses_where_the_program_may_not_write_are_efault() {
    if let Err(why) = crate::uverbs::status() {
        eprintln!("responses_where_the_program_may_not_write_are_efault: NOT RUN (libibverbs cannot reach model0 here: {why})");
        return;
    }
    let path = std::ffi::CString::new(DEV_PATH).unwrap();
    // SAFETY: a NUL-terminated path (the interposed open answers it with the device).
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    assert!(fd >= 0, "{}", std::io::Error::last_os_error());
    let (none, ro) = (Page::new(libc::PROT_NONE), Page::new(libc::PROT_READ));
    let (_two, border) = straddle();
    for (what, at) in bad_places(&none, &ro, border) {
        assert_eq!(
            send(fd, &get_context(at)),
            (-1, libc::EFAULT),
            "GET_CONTEXT into {what}"
        );
    }
    let rw = Page::new(libc::PROT_READ | libc::PROT_WRITE);
    let cmd = get_context(rw.at());
    assert_eq!(
        send(fd, &cmd).0,
        cmd.len() as isize,
        "{}",
        std::io::Error::last_os_error()
    );
    // SAFETY: the response GET_CONTEXT wrote, on our page.
    let r: k::ib_uverbs_get_context_resp = unsafe { std::ptr::read(rw.0 as *const _) };
    assert_eq!(r.num_comp_vectors, 1);
    let async_fd = r.async_fd as c_int;
    for (what, at) in bad_places(&none, &ro, border) {
        let q = legacy(
            k::IB_USER_VERBS_CMD_QUERY_DEVICE,
            &at.to_ne_bytes(),
            size_of::<k::ib_uverbs_query_device_resp>(),
        );
        assert_eq!(send(fd, &q), (-1, libc::EFAULT), "QUERY_DEVICE into {what}");
        assert_eq!(
            send(fd, &ex_query_device(at)),
            (-1, libc::EFAULT),
            "extended QUERY_DEVICE into {what}"
        );
    }
    let cmd = ex_query_device(rw.at());
    assert_eq!(send(fd, &cmd).0, cmd.len() as isize);
    // SAFETY: the response QUERY_DEVICE wrote, on our page.
    let r: k::ib_uverbs_ex_query_device_resp = unsafe { std::ptr::read(rw.0 as *const _) };
    assert_eq!(r.base.vendor_id, 0x02c9);
    // SAFETY: the descriptors opened above (the device's, and the event descriptor GET_CONTEXT
    // made).
    unsafe {
        libc::close(async_fd);
        libc::close(fd);
    }
}

/// The preload's signal path (`close_all(false)`) waits for no lock: when the interrupted thread
/// is in model0, or a device table is locked, it gives up and closes nothing.
#[test]
fn the_signal_path_gives_up_rather_than_wait_for_a_lock() {
    use std::sync::mpsc;
    use std::time::Duration;
    let fd = super::open_device(libc::O_RDWR);
    assert!(fd >= 0);
    let listed = || {
        super::CTXS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|c| c.0 == fd)
    };
    {
        let _in = super::inside();
        assert!(!super::close_all(false), "closed from inside model0");
    }
    assert!(listed());
    let (held_tx, held_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let _g = super::QPS.lock().unwrap_or_else(|p| p.into_inner());
        let _ = held_tx.send(());
        let _ = go_rx.recv();
    });
    assert!(held_rx.recv().is_ok());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(super::close_device_with(fd, false));
    });
    // a wait would be until the holder lets go, which it does only after this
    let r = rx.recv_timeout(Duration::from_secs(60));
    let _ = go_tx.send(());
    let _ = holder.join();
    assert_eq!(r, Ok(false), "the QP table held elsewhere: not given up");
    assert!(listed(), "closed with the QP table held");
    assert!(super::close_device_with(fd, false), "every lock free: closed");
    assert!(!listed());
    // SAFETY: the descriptor open_device opened, closed once.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

//! The doorbell trap (`rdmaprobe::uverbs::trap`, `model0 exec --engine trap`) in this process:
//! stores to a trapped page are skipped (a known store) or single-stepped (any other access), the
//! program goes on after each, and an unmapped page is forgotten. The program-level cases (UCX
//! rc_mlx5, a program's own fault handler) are in tests/preload.rs.
#![cfg(target_arch = "x86_64")]

use rdmaprobe::uverbs::trap;
use std::arch::asm;

const PAGE: usize = 4096;

fn page(prot: i32) -> *mut u64 {
    // SAFETY: a fresh anonymous mapping.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGE,
            prot,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    p as *mut u64
}

/// Reads the page's first two words (it is made readable for that, then closed again).
fn peek(p: *mut u64) -> [u64; 2] {
    // SAFETY: our own page, opened for reading only while read.
    unsafe {
        assert_eq!(libc::mprotect(p as *mut _, PAGE, libc::PROT_READ), 0);
        let v = [std::ptr::read_volatile(p), std::ptr::read_volatile(p.add(1))];
        assert_eq!(libc::mprotect(p as *mut _, PAGE, libc::PROT_NONE), 0);
        v
    }
}

#[test]
fn stores_to_a_trapped_page_are_skipped_or_stepped_and_the_program_goes_on() {
    let p = page(libc::PROT_NONE);
    trap::trap_page(p as usize).expect("trapping a page");
    assert!(trap::is_trapped(p as usize + 100));
    let (s0, t0, _) = trap::counts();
    // SAFETY: stores to the trapped page: each faults, and the trap skips it (the asm clobbers
    // nothing else; the handler returns past the instruction).
    unsafe {
        // mov %rax,(%rdi): a doorbell's 8-byte store
        asm!("mov qword ptr [{p}], {v}", p = in(reg) p, v = in(reg) 0x1111_u64);
        // movdqu %xmm0,8(%rdi): an SSE BlueFlame store, with a displacement
        asm!("movdqu xmmword ptr [{p} + 8], xmm0", p = in(reg) p, out("xmm0") _);
    }
    let (s1, t1, _) = trap::counts();
    assert_eq!((s1 - s0, t1 - t0), (2, 0), "two stores skipped");
    assert_eq!(peek(p), [0, 0], "a skipped store leaves the page as it was");
    // SAFETY: an add to memory (a read-modify-write the decoder does not know): single-stepped
    // with the page opened for it, so it lands.
    unsafe { asm!("add qword ptr [{p} + 8], {v}", p = in(reg) p, v = in(reg) 0x2222_u64) };
    let (s2, t2, code) = trap::counts();
    assert_eq!((s2 - s1, t2 - t1), (0, 1), "one store stepped");
    // REX.W (the registers are the compiler's), then add's opcode
    assert!(
        (0x48..=0x4f).contains(&code[0]) && code[1] == 0x01,
        "the first stepped instruction's bytes: {code:02x?}"
    );
    assert_eq!(peek(p), [0, 0x2222], "a stepped instruction runs");
    // closed again after the step: the next store faults and is skipped
    // SAFETY: as above.
    unsafe { asm!("mov qword ptr [{p}], {v}", p = in(reg) p, v = in(reg) 0x3333_u64) };
    assert_eq!(trap::counts().0 - s2, 1);
    assert_eq!(peek(p), [0, 0x2222]);
    // unmapped: no longer a register page
    trap::forget(p as usize, PAGE);
    assert!(!trap::is_trapped(p as usize));
    // SAFETY: our own mapping.
    unsafe { libc::munmap(p as *mut _, PAGE) };
}

#[test]
fn a_page_not_trapped_is_not_the_trap_s() {
    let p = page(libc::PROT_READ | libc::PROT_WRITE);
    assert!(!trap::is_trapped(p as usize));
    // SAFETY: our own mapping.
    unsafe { libc::munmap(p as *mut _, PAGE) };
    // three pages of our own (the other test's page is never in the ranges forgotten here)
    // SAFETY: a fresh anonymous mapping.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            3 * PAGE,
            libc::PROT_NONE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(base, libc::MAP_FAILED);
    let base = base as usize;
    trap::trap_page(base + PAGE).expect("trapping a page");
    // a range that ends before the page, and one after it, leave it trapped
    trap::forget(base, PAGE);
    trap::forget(base + 2 * PAGE, PAGE);
    assert!(trap::is_trapped(base + PAGE));
    // one that overlaps it does not
    trap::forget(base + 100, PAGE);
    assert!(!trap::is_trapped(base + PAGE));
    // SAFETY: our own mapping.
    unsafe { libc::munmap(base as *mut _, 3 * PAGE) };
}

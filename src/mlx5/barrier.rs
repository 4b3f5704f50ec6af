//! Memory barriers named as rdma-core names them (`util/udma_barrier.h`, `util/mmio.h`, which
//! are not installed), one implementation per architecture. Each use in `sq.rs`/`cq.rs` says
//! which two accesses it orders.

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
use core::sync::atomic::Ordering;

/// Orders CPU writes to memory the device reads (WQEs) before a later write that makes the device
/// read them (the doorbell record). x86-64 keeps stores in order: a compiler barrier, as
/// rdma-core's `asm volatile("" ::: "memory")`: an empty `asm!` without `nomem` makes the compiler
/// complete every store to memory it could reach (the ring) before it and issue later ones after
/// it. Unlike `compiler_fence`, which LLVM takes as touching all memory, the asm is treated as a
/// call, so state the compiler can prove private (the queue's own indices, behind `&mut self`)
/// stays in registers across it.
#[inline(always)]
pub fn udma_to_device_barrier() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: an empty instruction sequence; it only constrains the compiler's ordering.
    unsafe {
        core::arch::asm!("", options(nostack, preserves_flags))
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; no memory operands.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    core::sync::atomic::fence(Ordering::SeqCst);
}

/// Orders a read of device-written memory (the CQE owner byte) before later reads of the rest
/// of it. x86-64: `lfence`; aarch64: `dmb oshld`.
#[inline(always)]
pub fn udma_from_device_barrier() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: lfence has no memory operands and is available on every x86-64 CPU.
    unsafe {
        core::arch::x86_64::_mm_lfence()
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; no memory operands.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    core::sync::atomic::fence(Ordering::SeqCst);
}

/// Before stores to write-combining MMIO (BlueFlame / doorbell register): earlier stores (the
/// doorbell record) must be visible first, since WC stores are weakly ordered. x86-64: `sfence`.
/// aarch64: `dsb st`, as rdma-core (util/udma_barrier.h defines `mmio_wc_start()` as
/// `mmio_flush_writes()`, `dsb st`, in 44 and 56 alike): a `dmb oshst` would order the record
/// before the register stores as well, but rdma-core's is the sequence ConnectX firmware is
/// validated against. (`udma_to_device_barrier`/`_from_device_` here are `dmb oshst`/`oshld`,
/// rdma-core 56's; rdma-core 44 had `dsb st`/`dsb ld`.)
#[inline(always)]
pub fn mmio_wc_start() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no memory operands and is available on every x86-64 CPU.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; no memory operands.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    core::sync::atomic::fence(Ordering::SeqCst);
}

#[cfg(all(test, feature = "std"))]
std::thread_local! {
    /// `mmio_flush_writes` calls on this thread (unit tests count the fences a doorbell takes).
    pub static FLUSHES: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
}

/// After write-combining MMIO stores: flush them to the device. x86-64: `sfence`.
#[inline(always)]
pub fn mmio_flush_writes() {
    #[cfg(all(test, feature = "std"))]
    FLUSHES.with(|f| f.set(f.get() + 1));
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no memory operands and is available on every x86-64 CPU.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; no memory operands.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags))
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    core::sync::atomic::fence(Ordering::SeqCst);
}

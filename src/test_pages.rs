//! Pages of this process for unit tests (the uverbs device's and the model's): mapped, then
//! given the protection asked for, unmapped when dropped.

use std::ffi::{c_int, c_void};

/// Pages of this process (`len` bytes), `prot` after they are mapped; unmapped when dropped.
pub(crate) struct Page(pub(crate) *mut u8, pub(crate) usize);

impl Page {
    pub(crate) fn new(prot: c_int) -> Page {
        Page::of(4096, prot)
    }

    pub(crate) fn of(len: usize, prot: c_int) -> Page {
        // SAFETY: fresh anonymous private pages, ours until dropped.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: the pages just mapped.
        assert_eq!(unsafe { libc::mprotect(p, len, prot) }, 0);
        Page(p as *mut u8, len)
    }

    pub(crate) fn at(&self) -> u64 {
        self.0 as u64
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: the pages `of` mapped, unmapped once.
        unsafe { libc::munmap(self.0 as *mut c_void, self.1) };
    }
}

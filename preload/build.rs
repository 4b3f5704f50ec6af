//! Build script of the preload: links the libc entry points model0's uverbs device defines
//! (`src/uverbs/interpose.rs` of the library) into the shared object and exports them, so that,
//! preloaded, they come before libc's for every library of the program.

/// The libc functions model0's uverbs device interposes (as the library's `build.rs` lists them).
const INTERPOSED: &[&str] = &["open", "openat", "stat", "close", "write", "ioctl", "mmap"];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for sym in INTERPOSED {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-u,{sym}");
    }
}

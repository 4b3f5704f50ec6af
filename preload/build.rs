//! Build script of the preload: links the libc entry points model0's uverbs device defines
//! (`src/uverbs/interpose.rs` of the library) into the shared object and exports them, so that,
//! preloaded, they come before libc's for every library of the program.

// INTERPOSED: the libc functions the preload exports for model0's uverbs device
include!("../src/uverbs/interposed.rs");

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../src/uverbs/interposed.rs");
    for sym in INTERPOSED {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-u,{sym}");
    }
}

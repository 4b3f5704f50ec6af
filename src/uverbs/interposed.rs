/// The libc functions model0's uverbs device interposes (`src/uverbs/interpose.rs`), read by
/// both build scripts (the executable's and the preload's), which export them.
const INTERPOSED: &[&str] = &[
    "open",
    "openat",
    "stat",
    "access",
    "faccessat",
    "close",
    "write",
    "ioctl",
    "mmap",
];

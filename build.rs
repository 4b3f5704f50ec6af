//! Build script: finds rdma-core, generates the raw bindings with bindgen and compiles the C
//! wrappers bindgen writes for the headers' `static inline` functions.
//!
//! rdma-core is found with pkg-config (`libibverbs`, `libmlx5`). `RDMAPROBE_RDMA_CORE_PREFIX=DIR`
//! builds against another install instead (a second rdma-core or an OFED tree, e.g. a Debian
//! package unpacked with `dpkg-deb -x`): headers from `DIR/include` (or `DIR/usr/include`),
//! libraries from the first of `lib/x86_64-linux-gnu`, `lib64`, `lib` under it holding
//! `libibverbs.so*`, with an rpath so the binary loads those libraries.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::exit;

const PACKAGES: &str = "libibverbs-dev librdmacm-dev ibverbs-providers libclang-dev clang pkg-config";

fn fail(msg: &str) -> ! {
    eprintln!("\nrdmaprobe build: {msg}\n");
    println!("cargo:warning=rdmaprobe build: {msg}");
    exit(1);
}

struct RdmaCore {
    include: PathBuf,
    libdirs: Vec<PathBuf>,
    /// libibverbs' own version, e.g. `1.14.44.0`; its last two parts are the rdma-core release.
    verbs_version: String,
    origin: String,
}

fn from_prefix(prefix: &Path) -> RdmaCore {
    let include = [prefix.join("include"), prefix.join("usr/include")]
        .into_iter()
        .find(|p| p.join("infiniband/verbs.h").is_file())
        .unwrap_or_else(|| {
            fail(&format!(
                "RDMAPROBE_RDMA_CORE_PREFIX={}: no include/infiniband/verbs.h (or usr/include/...) under it",
                prefix.display()
            ))
        });
    let mut candidates = Vec::new();
    for base in [prefix.to_path_buf(), prefix.join("usr")] {
        for sub in ["lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "lib64", "lib"] {
            candidates.push(base.join(sub));
        }
    }
    let libdir = candidates
        .into_iter()
        .find(|d| d.join("libibverbs.so").exists() || d.join("libibverbs.so.1").exists())
        .unwrap_or_else(|| {
            fail(&format!(
                "RDMAPROBE_RDMA_CORE_PREFIX={}: no libibverbs.so under lib*/",
                prefix.display()
            ))
        });
    // The version: the pkg-config file if present, else the library's real file name.
    let mut verbs_version = String::new();
    if let Ok(pc) = fs::read_to_string(libdir.join("pkgconfig/libibverbs.pc")) {
        if let Some(v) = pc.lines().find_map(|l| l.strip_prefix("Version:")) {
            verbs_version = v.trim().to_string();
        }
    }
    if verbs_version.is_empty() {
        if let Ok(rd) = fs::read_dir(&libdir) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(v) = name.strip_prefix("libibverbs.so.") {
                    if v.matches('.').count() >= 3 {
                        verbs_version = v.to_string();
                    }
                }
            }
        }
    }
    if verbs_version.is_empty() {
        verbs_version = "unknown".into();
    }
    // Without the unversioned .so (no -dev package unpacked), link the soname directly.
    for lib in ["ibverbs", "mlx5", "rdmacm"] {
        if !libdir.join(format!("lib{lib}.so")).exists() && !libdir.join(format!("lib{lib}.so.1")).exists() {
            fail(&format!("lib{lib}.so not found in {}", libdir.display()));
        }
    }
    RdmaCore {
        include,
        libdirs: vec![libdir],
        verbs_version,
        origin: format!("prefix {}", prefix.display()),
    }
}

fn from_pkg_config() -> RdmaCore {
    let verbs = pkg_config::Config::new()
        .cargo_metadata(false)
        .probe("libibverbs")
        .unwrap_or_else(|e| {
            fail(&format!(
            "libibverbs not found by pkg-config ({e}).\n  Install the Debian packages: apt-get install {PACKAGES}\n  \
             (or run harness/setup.sh), or point RDMAPROBE_RDMA_CORE_PREFIX at an rdma-core install."
        ))
        });
    let mlx5 = pkg_config::Config::new()
        .cargo_metadata(false)
        .probe("libmlx5")
        .unwrap_or_else(|e| {
            fail(&format!(
                "libmlx5 (the mlx5dv part of rdma-core) not found by pkg-config ({e}).\n  \
             Install: apt-get install {PACKAGES}"
            ))
        });
    let mut incs: Vec<PathBuf> = verbs.include_paths.clone();
    incs.extend(mlx5.include_paths.iter().cloned());
    incs.push(PathBuf::from("/usr/include"));
    let include = incs
        .into_iter()
        .find(|p| p.join("infiniband/verbs.h").is_file())
        .unwrap_or_else(|| {
            fail(&format!(
                "infiniband/verbs.h not found. Install: apt-get install {PACKAGES}"
            ))
        });
    if !include.join("rdma/rdma_cma.h").is_file() {
        fail(&format!(
            "rdma/rdma_cma.h (librdmacm, for -R) not found in {}. Install: apt-get install {PACKAGES}",
            include.display()
        ));
    }
    if !include.join("infiniband/mlx5dv.h").is_file() {
        fail(&format!(
            "infiniband/mlx5dv.h not found in {}. Install: apt-get install {PACKAGES}",
            include.display()
        ));
    }
    let mut libdirs = verbs.link_paths.clone();
    libdirs.extend(mlx5.link_paths.iter().cloned());
    RdmaCore {
        include,
        libdirs,
        verbs_version: verbs.version,
        origin: "pkg-config".into(),
    }
}

// INTERPOSED: the libc functions the executable exports for model0's uverbs device
include!("src/uverbs/interposed.rs");

/// FNV-1a (64 bits) of `bytes`, continuing from `h`.
fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Every file under `dir`, sorted by path.
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            files_under(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// The identity of the source this binary is built from and how: FNV-1a over the path and the
/// bytes of every file under `src/`, `build.rs`, `wrapper.h`, `Cargo.toml` and `Cargo.lock`
/// (the workspace's), and the profile, optimisation level, RUSTFLAGS and features. Two builds of
/// one source against two rdma-core installs share it (the same direct path); another source,
/// a debug build against a release one, does not. `compare` uses the direct backend as the
/// in-run control only when both sides carry the same.
fn source_id(manifest: &Path) -> String {
    let mut files = Vec::new();
    files_under(&manifest.join("src"), &mut files);
    files.extend(["build.rs", "wrapper.h", "Cargo.toml", "Cargo.lock"].map(|f| manifest.join(f)));
    files.sort();
    let mut h = 0xcbf2_9ce4_8422_2325;
    let mut how: Vec<String> = ["PROFILE", "OPT_LEVEL", "DEBUG", "CARGO_ENCODED_RUSTFLAGS"]
        .iter()
        .map(|v| format!("{v}={}", env::var(v).unwrap_or_default()))
        .collect();
    how.extend(
        env::vars()
            .filter(|(k, _)| k.starts_with("CARGO_FEATURE_"))
            .map(|(k, _)| k),
    );
    how.sort();
    h = fnv1a(h, how.join("\n").as_bytes());
    for f in &files {
        let rel = f.strip_prefix(manifest).unwrap_or(f);
        h = fnv1a(h, rel.to_string_lossy().as_bytes());
        h = fnv1a(h, &fs::read(f).unwrap_or_default());
    }
    format!("fnv1a64:{h:016x}")
}

fn main() {
    println!("cargo:rerun-if-changed=wrapper.h");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=Cargo.toml");
    println!("cargo:rerun-if-changed=Cargo.lock");
    println!("cargo:rerun-if-env-changed=RDMAPROBE_RDMA_CORE_PREFIX");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    println!("cargo:rustc-env=RDMAPROBE_SOURCE_ID={}", source_id(&manifest));

    // Cross-compiling (e.g. `cargo check --target aarch64-unknown-linux-gnu`): rdma-core's
    // headers are architecture-independent, so the host's serve; the target's C library headers
    // come from the cross compiler's sysroot.
    let cross = env::var("TARGET").ok() != env::var("HOST").ok();
    if cross {
        println!("cargo:rerun-if-env-changed=PKG_CONFIG_ALLOW_CROSS");
        // The build script runs one thread here, so changing its environment is sound.
        env::set_var("PKG_CONFIG_ALLOW_CROSS", "1");
    }
    let mut rc = match env::var_os("RDMAPROBE_RDMA_CORE_PREFIX") {
        Some(p) if !p.is_empty() => from_prefix(Path::new(&p)),
        _ => from_pkg_config(),
    };
    if cross && (rc.include == Path::new("/usr/include")) {
        // Only rdma-core's own directories, so the host's C library headers stay out.
        let farm = out.join("cross-include");
        let _ = fs::remove_dir_all(&farm);
        fs::create_dir_all(&farm).unwrap_or_else(|e| fail(&format!("creating {}: {e}", farm.display())));
        for d in ["infiniband", "rdma"] {
            let src = rc.include.join(d);
            if src.is_dir() {
                std::os::unix::fs::symlink(&src, farm.join(d))
                    .unwrap_or_else(|e| fail(&format!("linking {}: {e}", src.display())));
            }
        }
        rc.include = farm;
    }
    for d in &rc.libdirs {
        println!("cargo:rustc-link-search=native={}", d.display());
        if rc.origin.starts_with("prefix") {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{}", d.display());
        }
    }
    println!("cargo:rustc-link-lib=dylib=ibverbs");
    println!("cargo:rustc-link-lib=dylib=mlx5");
    println!("cargo:rustc-link-lib=dylib=rdmacm");

    // rdma-core's release is the last two parts of libibverbs' version (1.14.44.0 -> 44.0).
    let parts: Vec<&str> = rc.verbs_version.split('.').collect();
    let release = if parts.len() >= 4 {
        format!("{}.{}", parts[2], parts[3])
    } else {
        rc.verbs_version.clone()
    };
    println!("cargo:rustc-env=RDMAPROBE_BUILD_RDMA_CORE={release}");
    println!("cargo:rustc-env=RDMAPROBE_BUILD_LIBIBVERBS={}", rc.verbs_version);
    println!("cargo:rustc-env=RDMAPROBE_BUILD_RDMA_INCLUDE={}", rc.include.display());
    println!("cargo:rustc-env=RDMAPROBE_BUILD_RDMA_ORIGIN={}", rc.origin);

    let wrapper = manifest.join("wrapper.h");
    let static_fns = out.join("static_fns");
    let mut clang_args = vec![format!("-I{}", rc.include.display())];
    let target = env::var("TARGET").unwrap_or_default();
    if cross {
        let gnu = target.replace("-unknown-", "-");
        let sysroot = PathBuf::from(format!("/usr/{gnu}"));
        if sysroot.join("include").is_dir() {
            clang_args.push(format!("--sysroot={}", sysroot.display()));
            clang_args.push(format!("-isystem{}/include", sysroot.display()));
        }
    }
    if arch == "x86_64" {
        // mlx5dv's x86 setters are guarded by __SSE3__ but use SSSE3's _mm_shuffle_epi8.
        clang_args.push("-mssse3".into());
    }

    let builder = bindgen::Builder::default()
        .header(wrapper.to_string_lossy())
        .clang_args(&clang_args)
        .use_core()
        .ctypes_prefix("core::ffi")
        .wrap_unsafe_ops(true)
        .derive_default(true)
        .prepend_enum_name(false)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .allowlist_function("ibv_.*")
        .allowlist_function("___ibv_query_port")
        .allowlist_function("mlx5dv_.*")
        // librdmacm (-R): connection set-up through the RDMA connection manager
        .allowlist_function("rdma_.*")
        .allowlist_type("rdma_.*")
        .allowlist_var("RDMA_.*")
        .allowlist_type("ibv_.*")
        // the extended context's create_qp_ex / create_cq_ex, wrapped by model0's preload
        .allowlist_type("verbs_context")
        .allowlist_type("mlx5_.*")
        .allowlist_type("mlx5dv_.*")
        .allowlist_var("IBV_.*")
        .allowlist_var("MLX5_.*")
        // packed + aligned(4) in C; bindgen renders packed(4) with wrong offsets (bindgen #2878).
        // Hand-written in src/sys/mod.rs and checked against the C compiler there.
        .blocklist_type("mlx5_wqe_ctrl_seg")
        .wrap_static_fns(true)
        .wrap_static_fns_path(&static_fns)
        .layout_tests(true)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));

    let generated = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| builder.generate()));
    let bindings = match generated {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => fail(&format!(
            "bindgen could not parse {} against {}: {e}.\n  Install: apt-get install {PACKAGES}",
            wrapper.display(),
            rc.include.display()
        )),
        Err(_) => fail(&format!(
            "bindgen could not load libclang. Install: apt-get install {PACKAGES}"
        )),
    };
    bindings
        .write_to_file(out.join("bindings.rs"))
        .unwrap_or_else(|e| fail(&format!("writing bindings.rs: {e}")));

    // The kernel ABI (legacy uverbs commands, mlx5 driver data) for model0's uverbs device.
    let kabi_h = manifest.join("src/sys/kabi.h");
    println!("cargo:rerun-if-changed=src/sys/kabi.h");
    let kabi = bindgen::Builder::default()
        .header(kabi_h.to_string_lossy())
        .clang_args(&clang_args)
        .use_core()
        .ctypes_prefix("core::ffi")
        .derive_default(true)
        .prepend_enum_name(false)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .allowlist_type("ib_uverbs_.*")
        .allowlist_type("mlx5_ib_.*")
        .allowlist_var("IB_USER_VERBS_.*")
        .allowlist_var("IB_UVERBS_.*")
        .allowlist_var("MLX5_IB_.*")
        .allowlist_var("MLX5_QP_FLAG_.*")
        .allowlist_var("MLX5_USER_.*")
        .layout_tests(true)
        .generate()
        .unwrap_or_else(|e| {
            fail(&format!(
                "bindgen could not parse {}: {e}.\n  Install: apt-get install {PACKAGES}",
                kabi_h.display()
            ))
        });
    kabi.write_to_file(out.join("kabi.rs"))
        .unwrap_or_else(|e| fail(&format!("writing kabi.rs: {e}")));
    // model0's user-space uverbs device answers libibverbs' and libmlx5's system calls on its
    // descriptor from inside the process: the executable exports these symbols (they forward
    // every other descriptor to the kernel), and `-u` pulls their object out of the rlib.
    if env::var_os("CARGO_FEATURE_STD").is_some() && target.contains("linux") {
        for sym in INTERPOSED {
            println!("cargo:rustc-link-arg=-Wl,-u,{sym}");
            println!("cargo:rustc-link-arg=-Wl,--export-dynamic-symbol={sym}");
        }
    }

    // The C wrappers for static inline functions (ibv_post_send, ibv_wr_*, mlx5dv_set_*),
    // plus the layout probe the tests compare our hand-written types with.
    let mut cc = cc::Build::new();
    cc.file(static_fns.with_extension("c"))
        .file(manifest.join("src/sys/layout_probe.c"))
        .include(&rc.include)
        .include(&manifest)
        .warnings(false);
    if arch == "x86_64" {
        cc.flag("-mssse3");
    }
    println!("cargo:rerun-if-changed=src/sys/layout_probe.c");
    cc.compile("rdmaprobe_static_fns");
}

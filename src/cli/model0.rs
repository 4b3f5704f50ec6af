//! `rdmaprobe model0 exec -- PROGRAM ARGS...`: runs an unmodified verbs program (perftest,
//! ibverbs-utils, qperf ...) on model0, with `librdmaprobe_model0.so` preloaded
//! (`rdmaprobe::uverbs::preload`, docs/model0-exec.md), under a deadline.

use anyhow::{Context as _, Result};
use clap::{Args, Subcommand, ValueEnum};
use rdmaprobe::probe::ProbeError;
use rdmaprobe::uverbs::preload::DELAY_VAR;
use rdmaprobe::uverbs::trap::ENGINE_VAR;

/// UCX's switch of its memory-event hooks.
const UCX_EVENTS_VAR: &str = "UCX_MEM_EVENTS";
/// libmlx5's switch of its BlueFlame posts.
const BF_VAR: &str = "MLX5_SHUT_UP_BF";
use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

/// The preload's file name (the `preload/` member crate's cdylib).
const LIB: &str = "librdmaprobe_model0.so";
/// The variable that names the preload instead of the one beside the executable.
const LIB_VAR: &str = "RDMAPROBE_PRELOAD_LIB";

#[derive(Args)]
pub struct Model0Args {
    #[command(subcommand)]
    cmd: Model0Cmd,
}

#[derive(Subcommand)]
enum Model0Cmd {
    /// Run PROGRAM with model0 preloaded: it lists model0 as an mlx5 device (`-d model0`), and
    /// two such programs (a server and a client) reach each other through model0's shared
    /// memory. Programs that post through libibverbs (ibv_post_send, ibv_wr_complete,
    /// ibv_poll_cq) run with `--engine hooks`; programs that ring doorbells themselves (UCX
    /// rc_mlx5) with `--engine trap`. PROGRAM runs in a process group of its own, which
    /// the deadline and a SIGINT, SIGTERM or SIGHUP to rdmaprobe signal; it gets SIGTERM if
    /// rdmaprobe dies. The exit status is PROGRAM's (128+N when a signal N ended it or stopped
    /// rdmaprobe, 124 when the deadline did, 127 when PROGRAM is not found, 126 when it cannot
    /// be executed, 2 for bad arguments).
    Exec(ExecArgs),
}

/// How model0 executes what the program posts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Engine {
    /// In the program's own threads: after each post (ibv_post_send, ibv_post_recv,
    /// ibv_wr_complete) and before each poll (ibv_poll_cq, ibv_start_poll). Deterministic; a
    /// thread starts only when a send waits for a peer that does not answer or has no receive.
    Hooks,
    /// Also the doorbell trap, for programs that write WQEs and ring doorbells themselves (UCX
    /// rc_mlx5, DPDK-style code): model0's register pages have no access, and the fault of a
    /// store to one executes what was rung, in the program's own thread (a few us per doorbell;
    /// docs/model0-exec.md); MLX5_SHUT_UP_BF=1 unless set (libmlx5's BlueFlame copy would be 8
    /// traps). A thread that runs every 50 ms (every 1 ms while a send waits on the far side)
    /// takes what waits there.
    Trap,
}

#[derive(Args)]
struct ExecArgs {
    /// model0's added wire delay of every message in each direction, in ns.
    #[arg(long, value_name = "D")]
    model_delay_ns: Option<u64>,
    /// How model0 executes the program's work requests.
    #[arg(long, value_enum, default_value = "hooks")]
    engine: Engine,
    /// The deadline in seconds: PROGRAM's process group gets SIGTERM then (and SIGKILL 2 s
    /// later), and the exit status is 124.
    #[arg(long, value_name = "S", default_value_t = 600)]
    timeout: u64,
    /// The program and its arguments (after `--`; an option before it is rdmaprobe's).
    #[arg(required = true, trailing_var_arg = true, value_name = "PROGRAM")]
    program: Vec<OsString>,
}

/// Runs the `model0` command.
pub fn model0(a: Model0Args) -> Result<ExitCode> {
    match a.cmd {
        Model0Cmd::Exec(e) => exec(e),
    }
}

fn exec(a: ExecArgs) -> Result<ExitCode> {
    if let Some(d) = a.model_delay_ns.filter(|&d| d > rdmaprobe::model::MAX_WIRE_DELAY_NS) {
        return Err(ProbeError::Usage(format!(
            "--model-delay-ns {d}: more than model0's longest wire delay, {} ns",
            rdmaprobe::model::MAX_WIRE_DELAY_NS
        ))
        .into());
    }
    if a.timeout == 0 {
        return Err(ProbeError::Usage("--timeout 0: give the program at least one second".into()).into());
    }
    let lib = find_lib()?;
    // the fake sysfs, made here so that a machine where model0 cannot be listed says why now;
    // SYSFS_PATH is set in this process and the program inherits it
    let root = match rdmaprobe::uverbs::status() {
        Ok(r) => r.clone(),
        Err(why) => anyhow::bail!("model0 cannot be offered to other programs on this machine: {why}"),
    };
    let mut preload = OsString::from(&lib);
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut cmd = Command::new(&a.program[0]);
    cmd.args(&a.program[1..])
        .env("LD_PRELOAD", preload)
        .env("SYSFS_PATH", &root);
    match a.model_delay_ns {
        Some(d) => cmd.env(DELAY_VAR, d.to_string()),
        None => cmd.env_remove(DELAY_VAR),
    };
    match a.engine {
        Engine::Trap => {
            cmd.env(ENGINE_VAR, "trap");
            // libmlx5's BlueFlame copy is 8 stores, each a trap: its 8-byte doorbell is one (a
            // setting of the user's is kept)
            if std::env::var_os(BF_VAR).is_none() {
                cmd.env(BF_VAR, "1");
            }
        }
        Engine::Hooks => {
            cmd.env_remove(ENGINE_VAR);
        }
    };
    // UCX's memory hooks (its default) patch the code of the first `mmap` they find, the
    // preload's, so that UCX's calls reach the kernel past model0's device (docs/model0-exec.md);
    // a setting of the user's is kept
    if std::env::var_os(UCX_EVENTS_VAR).is_none() {
        cmd.env(UCX_EVENTS_VAR, "no");
    }
    // its own process group, as coreutils' timeout runs it: the deadline and a stop reach
    // everything PROGRAM started; SIGTERM when rdmaprobe dies (a SIGKILL) instead of an orphan
    cmd.process_group(0);
    // SAFETY: our pid, read before the fork (getpid is always safe).
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the child between fork and exec and calls only prctl and
    // getppid, both async-signal-safe system calls.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // rdmaprobe gone before the prctl: the signal would never come
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        })
    };
    rdmaprobe::signals::install();
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            // as env and timeout: 127 not found, 126 found but not executable
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            eprintln!(
                "rdmaprobe: model0 exec: starting {}: {e}",
                Path::new(&a.program[0]).display()
            );
            return Ok(ExitCode::from(code));
        }
    };
    wait(child, Duration::from_secs(a.timeout), &a.program[0])
}

/// The preload: `$RDMAPROBE_PRELOAD_LIB`, else beside the executable (cargo puts both in its
/// target directory), else in `../lib` of it (an install).
fn find_lib() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os(LIB_VAR).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        anyhow::ensure!(p.is_file(), "{LIB_VAR}={}: no such file", p.display());
        // ld.so ignores a preload it cannot load and runs the program without model0
        check_shared_object(&p).map_err(|why| anyhow::anyhow!("{LIB_VAR}={}: {why}", p.display()))?;
        return Ok(std::fs::canonicalize(&p).unwrap_or(p));
    }
    let exe = std::env::current_exe().context("finding rdmaprobe's own executable")?;
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    let tried = [dir.join(LIB), dir.join("../lib").join(LIB)];
    for p in &tried {
        if p.is_file() {
            check_shared_object(p).map_err(|why| anyhow::anyhow!("{}: {why}", p.display()))?;
            return Ok(std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()));
        }
    }
    anyhow::bail!(
        "{LIB} not found (looked in {} and {}): build it with `cargo build -p rdmaprobe-preload` \
         (with --release for a release rdmaprobe), or name it with {LIB_VAR}",
        tried[0].display(),
        tried[1].display()
    )
}

/// Whether `p` starts as an ELF shared object does (the magic, then `e_type` ET_DYN in the
/// file's byte order): the error says what it is not.
fn check_shared_object(p: &Path) -> Result<(), String> {
    use std::io::Read as _;
    let mut h = [0u8; 18];
    let mut f = std::fs::File::open(p).map_err(|e| format!("cannot be read: {e}"))?;
    let n = f.read(&mut h).map_err(|e| format!("cannot be read: {e}"))?;
    if n < h.len() || &h[..4] != b"\x7fELF" {
        return Err("not an ELF file (not a preloadable librdmaprobe_model0.so)".into());
    }
    let ty = match h[5] {
        1 => u16::from_le_bytes([h[16], h[17]]),
        _ => u16::from_be_bytes([h[16], h[17]]),
    };
    if ty != 3 {
        return Err(format!("an ELF file of type {ty}, not a shared object (ET_DYN, 3)"));
    }
    Ok(())
}

/// Waits for the program until `deadline`; a stop asked of rdmaprobe (SIGINT, SIGTERM, SIGHUP:
/// the same signal) or the deadline (SIGTERM) ends its process group, SIGKILL 2 s later. A stop
/// exits 128 + the signal rdmaprobe got, as a shell says of a command it stopped.
fn wait(mut child: Child, deadline: Duration, prog: &OsString) -> Result<ExitCode> {
    use std::os::unix::process::ExitStatusExt;
    let start = Instant::now();
    let pgid = child.id() as libc::pid_t;
    let mut stopped: Option<i32> = None;
    let mut expired = false;
    let mut term_at: Option<Instant> = None;
    loop {
        if let Some(st) = child.try_wait().context("waiting for the program")? {
            if expired {
                eprintln!(
                    "rdmaprobe: model0 exec: {} did not end within {} s: stopped",
                    Path::new(prog).display(),
                    deadline.as_secs()
                );
                return Ok(ExitCode::from(124));
            }
            if let Some(s) = stopped {
                return Ok(ExitCode::from((128 + s).clamp(0, 255) as u8));
            }
            return Ok(match (st.code(), st.signal()) {
                (Some(c), _) => ExitCode::from(c.clamp(0, 255) as u8),
                (None, Some(s)) => ExitCode::from((128 + s).clamp(0, 255) as u8),
                _ => ExitCode::FAILURE,
            });
        }
        let stop = rdmaprobe::signals::interrupted();
        if term_at.is_none() && (stop || start.elapsed() >= deadline) {
            let sig = match rdmaprobe::signals::signal() {
                Some(s @ (libc::SIGINT | libc::SIGTERM | libc::SIGHUP)) if stop => s,
                _ => libc::SIGTERM,
            };
            if stop {
                stopped = Some(sig);
            } else {
                expired = true;
            }
            term_at = Some(Instant::now());
            // SAFETY: a signal to the process group of our child, which leads it and has not
            // been reaped yet (so the group's id is not free to be reused).
            unsafe { libc::kill(-pgid, sig) };
        }
        if term_at.is_some_and(|t| t.elapsed() >= Duration::from_secs(2)) {
            // SAFETY: as above.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

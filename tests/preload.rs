//! The preloadable model0 (`librdmaprobe_model0.so`, `rdmaprobe model0 exec`): unmodified
//! programs of Debian's ibverbs-utils and perftest run on model0, server and client as two
//! processes over 127.0.0.1, each under a deadline; programs that open no device behave as
//! without the preload; a stopped program's objects are removed, a killed one's swept. A test
//! whose program is not installed says so and which package has it, and fails where `CI` is set
//! (harness/setup.sh installs them all); the preload itself is built here when it is missing.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_rdmaprobe");
/// One pair at a time: two busy-polling programs per pair are already all of a 2-CPU machine.
static PAIRS: Mutex<()> = Mutex::new(());
/// The deadline of each program (a debug build of model0 on a loaded 2-CPU machine is slow).
const DEADLINE_S: u64 = 120;

/// The preload beside the executable, built now when it is not there.
fn lib() -> PathBuf {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let p = Path::new(EXE).with_file_name("librdmaprobe_model0.so");
        // built every time (cargo makes it a no-op when up to date): a library left from an
        // older build would run the older model0 under the programs
        {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "--quiet", "-p", "rdmaprobe-preload"]);
            if Path::new(EXE).parent().and_then(|d| d.file_name()) == Some("release".as_ref()) {
                cmd.arg("--release");
            }
            let out = run_until(cmd, Duration::from_secs(900));
            assert!(out.status.success(), "building the preload: {}", text(&out.stderr));
        }
        assert!(p.is_file(), "{} missing after building rdmaprobe-preload", p.display());
        p
    })
    .clone()
}

/// A program a test needs is missing: in CI (`CI` set, as `.ci/run` and harness/test.sh set it) a
/// failure, since harness/setup.sh installs every one; elsewhere the test skips and says why.
fn missing(why: String) -> bool {
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!("{why}; CI must have it (harness/setup.sh installs it)");
    }
    println!("SKIPPED: {why} (CI is unset)");
    false
}

/// Whether `/usr/bin/PROG` is there; if not, says which package has it.
fn have(prog: &str, package: &str) -> bool {
    Path::new("/usr/bin").join(prog).is_file()
        || missing(format!(
            "{prog} is not installed (Debian package {package}; harness/setup.sh installs it)"
        ))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A model directory of this test's own (mode 0700, removed at the end).
struct ModelDir(PathBuf);

impl ModelDir {
    fn new(tag: &str) -> Self {
        use std::os::unix::fs::DirBuilderExt;
        let d = std::env::temp_dir().join(format!("rdmaprobe-preload-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&d)
            .expect("creating a model directory");
        ModelDir(d)
    }

    /// The objects in it (everything but the fake sysfs).
    fn objects(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.retain(|n| n != "sysfs");
        v.sort();
        v
    }
}

impl Drop for ModelDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `rdmaprobe model0 exec -- ARGS` on model directory `d`.
fn exec(d: &ModelDir, args: &[&str]) -> Command {
    exec_with(d, &[], args)
}

/// `rdmaprobe model0 exec OPTS -- ARGS` on model directory `d`.
fn exec_with(d: &ModelDir, opts: &[&str], args: &[&str]) -> Command {
    let mut c = Command::new(EXE);
    c.args(["model0", "exec", "--timeout", &DEADLINE_S.to_string()])
        .args(opts)
        .arg("--")
        .args(args)
        .env("RDMAPROBE_MODEL_DIR", &d.0)
        .env("RDMAPROBE_PRELOAD_LIB", lib())
        .env_remove("SYSFS_PATH")
        .env_remove("LD_PRELOAD");
    c
}

/// Runs `cmd` to its end, killed at `limit` (then the output so far, and a failed status).
fn run_until(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting a program");
    finish(child, limit)
}

fn finish(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    let (mut out, mut err) = (child.stdout.take(), child.stderr.take());
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_end(&mut v);
        }
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_end(&mut v);
        }
        v
    });
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting") {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            break child.wait().expect("waiting");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
    }
}

/// A TCP port free now on 127.0.0.1.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("binding a port");
    l.local_addr().expect("its address").port()
}

/// Whether something listens on TCP `port` (any address), from /proc/net/tcp{,6}.
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).unwrap_or_default().lines().any(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|a| format!("{a} ").ends_with(&want))
                && l.split_whitespace().nth(3) == Some("0A")
        })
    })
}

/// Runs `prog ARGS -p PORT` as the server and `prog ARGS -p PORT 127.0.0.1` as the client,
/// both under `model0 exec` on `d`; returns (server, client) output. The client starts once the
/// server listens.
fn pair(d: &ModelDir, prog: &str, args: &[&str]) -> (Output, Output) {
    pair_with(d, &[], prog, args)
}

/// [`pair`] with `model0 exec` options `opts`.
fn pair_with(d: &ModelDir, opts: &[&str], prog: &str, args: &[&str]) -> (Output, Output) {
    let _one = PAIRS.lock().unwrap_or_else(|p| p.into_inner());
    let port = free_port().to_string();
    let mut sargs = vec![prog];
    sargs.extend_from_slice(args);
    sargs.extend_from_slice(&["-p", &port]);
    let server = exec_with(d, opts, &sargs)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the server");
    let start = Instant::now();
    let limit = Duration::from_secs(DEADLINE_S + 10);
    while !listening(port.parse().unwrap_or(0)) && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut cargs = sargs.clone();
    cargs.push("127.0.0.1");
    let client = run_until(exec_with(d, opts, &cargs), limit);
    let server = finish(server, limit);
    (server, client)
}

fn assert_pair_ok(what: &str, d: &ModelDir, (s, c): &(Output, Output), expect: &str) {
    let show = |o: &Output| format!("status {:?}\n{}{}", o.status, text(&o.stdout), text(&o.stderr));
    assert!(
        s.status.success() && c.status.success(),
        "{what}:\nserver {}\nclient {}",
        show(s),
        show(c)
    );
    assert!(
        text(&c.stdout).contains(expect),
        "{what}: the client printed no {expect:?}:\n{}",
        show(c)
    );
    assert_eq!(d.objects(), Vec::<String>::new(), "{what}: model0 objects left behind");
}

#[test]
fn programs_that_open_no_device_behave_as_without_the_preload() {
    let lib = lib();
    let d = ModelDir::new("plain");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let cases: Vec<Vec<String>> = vec![
        // (not `/`: its entries' times change while other tests run)
        vec!["ls".into(), "-la".into(), "/usr".into(), "/nonexistent".into()],
        vec![
            "python3".into(),
            "-c".into(),
            "import os, sys; print(6 * 7, sorted(os.listdir('/usr'))); sys.stderr.write('e\\n'); sys.exit(3)".into(),
        ],
        vec![cargo, "--version".into()],
    ];
    for args in cases {
        if !have_cmd(&args[0]) {
            continue;
        }
        let mut plain = base(&args);
        plain.env("RDMAPROBE_MODEL_DIR", &d.0);
        let plain = run_until(plain, Duration::from_secs(60));
        // the hooks alone, and the doorbell trap asked for (it waits for a register page)
        for engine in ["hooks", "trap"] {
            let mut pre = base(&args);
            pre.env("LD_PRELOAD", &lib)
                .env("RDMAPROBE_MODEL_DIR", &d.0)
                .env("RDMAPROBE_ENGINE", engine);
            let pre = run_until(pre, Duration::from_secs(60));
            assert_eq!(plain.status.code(), pre.status.code(), "{args:?} {engine}: exit status");
            assert_eq!(text(&plain.stdout), text(&pre.stdout), "{args:?} {engine}: stdout");
            assert_eq!(text(&plain.stderr), text(&pre.stderr), "{args:?} {engine}: stderr");
        }
    }
}

fn base(args: &[String]) -> Command {
    let mut c = Command::new(&args[0]);
    c.args(&args[1..]).env_remove("LD_PRELOAD").env_remove("SYSFS_PATH");
    c
}

fn have_cmd(prog: &str) -> bool {
    Path::new(prog).is_absolute()
        || std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
        || missing(format!("{prog} not found on PATH"))
}

#[test]
fn ibv_devinfo_lists_model0_with_its_port() {
    if !have("ibv_devinfo", "ibverbs-utils") {
        return;
    }
    let d = ModelDir::new("devinfo");
    let o = run_until(exec(&d, &["ibv_devinfo", "-v"]), Duration::from_secs(DEADLINE_S));
    let out = text(&o.stdout);
    assert!(
        o.status.success(),
        "ibv_devinfo -v: {:?}\n{out}{}",
        o.status,
        text(&o.stderr)
    );
    for want in [
        "hca_id:\tmodel0",
        "vendor_id:\t\t\t0x02c9",
        "PORT_ACTIVE (4)",
        "link_layer:\t\tInfiniBand",
    ] {
        assert!(out.contains(want), "ibv_devinfo -v printed no {want:?}:\n{out}");
    }
    assert_eq!(d.objects(), Vec::<String>::new());
    // ibv_devices reads the node GUID from the fake sysfs: the GUID QUERY_DEVICE gives
    assert!(out.contains("node_guid:\t\t\t0000:0000:0000:0001"), "{out}");
    let o = run_until(exec(&d, &["ibv_devices"]), Duration::from_secs(DEADLINE_S));
    let out = text(&o.stdout);
    assert!(
        o.status.success(),
        "ibv_devices: {:?}\n{out}{}",
        o.status,
        text(&o.stderr)
    );
    assert!(
        out.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["model0", "0000000000000001"]),
        "ibv_devices:\n{out}"
    );
}

#[test]
fn ibverbs_pingpongs_run_between_two_processes() {
    if !have("ibv_rc_pingpong", "ibverbs-utils") {
        return;
    }
    let d = ModelDir::new("pingpong");
    for t in ["rc", "uc", "ud"] {
        let prog = format!("ibv_{t}_pingpong");
        let size = if t == "ud" { "1024" } else { "4096" };
        let r = pair(&d, &prog, &["-d", "model0", "-n", "200", "-s", size]);
        assert_pair_ok(&prog, &d, &r, "200 iters in");
    }
    // waiting for completion events (-e): the peer's post raises the event in this process
    let r = pair(&d, "ibv_rc_pingpong", &["-d", "model0", "-n", "200", "-e"]);
    assert_pair_ok("ibv_rc_pingpong -e", &d, &r, "200 iters in");
}

/// `ibv_rc_pingpong -t`: rdma-core's own use of completion timestamps (`ibv_query_device_ex`'s
/// mask, `ibv_create_cq_ex` with the timestamp flag, `ibv_wc_read_completion_ts`) runs on
/// model0's NIC clock, and its mean of the deltas between receive completions, in ticks of the
/// stated 156.25 MHz, is a round trip: no longer than the program's own wall-clock time per
/// iteration (the deltas leave out the first iteration; 1 % and 1 us of slack for the two
/// clocks), no shorter than 500 ns (a round trip between two processes here takes microseconds).
/// A clock written in ns instead of ticks is 6.4 times too long; one 1000 times too slow, too short.
#[test]
fn rc_pingpong_reads_model0_s_completion_timestamps() {
    if !have("ibv_rc_pingpong", "ibverbs-utils") {
        return;
    }
    let d = ModelDir::new("pingpong-ts");
    let r = pair(&d, "ibv_rc_pingpong", &["-d", "model0", "-n", "500", "-t"]);
    assert_pair_ok("ibv_rc_pingpong -t", &d, &r, "Average receive completion clock cycles");
    let out = text(&r.1.stdout);
    let field = |key: &str| -> f64 {
        out.lines()
            .find_map(|l| {
                l.split_once(key)
                    .map(|(_, v)| v.trim().trim_start_matches('=').trim().to_string())
            })
            .and_then(|v| v.split_whitespace().next().and_then(|x| x.parse().ok()))
            .unwrap_or_else(|| panic!("no {key:?} in:\n{out}"))
    };
    let avg_ns = field("Average receive completion clock cycles") * 1e6 / 156_250.0;
    let usec = out
        .lines()
        .find(|l| l.contains("iters in"))
        .and_then(|l| l.split('=').nth(1))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no usec/iter in:\n{out}"));
    assert!(
        avg_ns <= usec * 1000.0 * 1.01 + 1000.0 && avg_ns >= 500.0,
        "mean receive-to-receive {avg_ns:.0} ns against {usec} usec/iter:\n{out}"
    );
}

/// rdma-core's SRQ example: 16 RC QPs of each process take their receives from one shared
/// receive queue; a receive depth of 32 against 500 iterations makes libmlx5's free list of SRQ
/// WQEs wrap many times (each WQE put back at its tail, model0 following the links).
#[test]
fn srq_pingpong_runs_between_two_processes() {
    if !have("ibv_srq_pingpong", "ibverbs-utils") {
        return;
    }
    let d = ModelDir::new("srq");
    let r = pair(&d, "ibv_srq_pingpong", &["-d", "model0", "-n", "500", "-r", "32"]);
    assert_pair_ok("ibv_srq_pingpong", &d, &r, "500 iters in");
}

/// UCX (Debian's ucx-utils 1.13) finds model0 and opens its `rc_verbs` and `ud_verbs`
/// transports; what model0 does not do is named by the device (DC's driver QP; the 128-byte
/// CQEs `rc_mlx5` asks for).
#[test]
fn ucx_lists_model0_and_its_verbs_transports() {
    if !have("ucx_info", "ucx-utils") {
        return;
    }
    let d = ModelDir::new("ucx-info");
    let o = run_until(exec(&d, &["ucx_info", "-d"]), Duration::from_secs(DEADLINE_S));
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "ucx_info -d: {:?}\n{out}{err}", o.status);
    assert!(
        out.contains("# Memory domain: model0"),
        "no model0 memory domain:\n{out}{err}"
    );
    for t in ["rc_verbs", "ud_verbs"] {
        let at = out
            .find(&format!("Transport: {t}"))
            .unwrap_or_else(|| panic!("no {t}:\n{out}"));
        let block = &out[at..out[at..].find("#\n#\n").map_or(out.len(), |e| at + e)];
        assert!(
            block.contains("Device: model0:1") && !block.contains("failed to open interface"),
            "{t} did not open on model0:\n{block}"
        );
    }
    assert!(err.contains("CREATE_QP of type 255"), "DC's QP not named:\n{err}");
    assert_eq!(d.objects(), Vec::<String>::new());
}

/// `ucx_perftest` over UCT's `rc_verbs` and `ud_verbs` between two processes: an
/// active-message ping-pong of 8 bytes (over RC UCX's receives come from a shared receive queue;
/// it checks its connection with a WRITE of no bytes, key 0; its server's QP may not be ready
/// when the client first sends).
#[test]
fn ucx_perftest_runs_rc_verbs_and_ud_verbs_between_two_processes() {
    if !have("ucx_perftest", "ucx-utils") {
        return;
    }
    let d = ModelDir::new("ucx-perftest");
    for tl in ["rc_verbs", "ud_verbs"] {
        let args = ["-d", "model0:1", "-x", tl, "-t", "am_lat", "-n", "2000", "-s", "8"];
        let r = pair(&d, "ucx_perftest", &args);
        assert_pair_ok(&format!("ucx_perftest {tl} am_lat"), &d, &r, "Final:");
    }
}

/// UCX's own mlx5 path rings doorbells itself (no libibverbs call after a post): it runs on the
/// doorbell trap, with UCX's defaults (128-byte CQEs, BlueFlame posts), and the trap says it
/// skipped the stores.
#[test]
fn ucx_perftest_runs_rc_mlx5_and_ud_mlx5_on_the_doorbell_trap() {
    if !have("ucx_perftest", "ucx-utils") {
        return;
    }
    let d = ModelDir::new("ucx-mlx5");
    let cases: &[(&str, &[&str])] = &[
        ("rc_mlx5", &["-t", "am_lat", "-s", "8"]),
        ("rc_mlx5", &["-t", "put_bw", "-s", "65536", "-D", "zcopy"]),
        ("rc_mlx5", &["-t", "get", "-s", "4096", "-D", "zcopy"]),
        ("rc_mlx5", &["-t", "add_lat"]),
        ("ud_mlx5", &["-t", "am_lat", "-s", "8"]),
    ];
    for (tl, test) in cases {
        let mut args = vec![
            "env",
            "RDMAPROBE_UVERBS_DEBUG=1",
            "ucx_perftest",
            "-d",
            "model0:1",
            "-x",
            tl,
            "-n",
            "2000",
        ];
        args.extend_from_slice(test);
        let r = pair_with(&d, &["--engine", "trap"], "env", &args[1..]);
        let what = format!("ucx_perftest {tl} {test:?} --engine trap");
        assert_pair_ok(&what, &d, &r, "Final:");
        let skipped = |o: &Output| -> u64 {
            let e = text(&o.stderr);
            e.split("doorbell trap: ")
                .nth(1)
                .and_then(|t| t.split(' ').next()?.parse().ok())
                .unwrap_or_else(|| panic!("{what}: the trap's count missing:\n{e}"))
        };
        // every post rings at least once (warm-up iterations come on top); the server of a
        // one-sided test posts nothing
        assert!(skipped(&r.1) >= 2000, "{what}: {}", text(&r.1.stderr));
        if test.contains(&"am_lat") {
            assert!(skipped(&r.0) >= 2000, "{what}: {}", text(&r.0.stderr));
        }
    }
}

/// A program that posts through libibverbs runs on the trap too (each post's doorbell is one
/// trapped store, `model0 exec` turning libmlx5's BlueFlame copies off; the hooks still run).
#[test]
fn verbs_programs_run_on_the_doorbell_trap_too() {
    if !have("ib_send_bw", "perftest") || !have("ibv_srq_pingpong", "ibverbs-utils") {
        return;
    }
    let d = ModelDir::new("trap-verbs");
    let runs: &[(&str, &[&str], &str)] = &[
        ("ib_send_bw", &["-d", "model0", "-n", "500", "-s", "4096"], "BW average"),
        ("ib_write_lat", &["-d", "model0", "-n", "500"], "t_typical"),
        ("ibv_srq_pingpong", &["-d", "model0", "-n", "500"], "iters in"),
    ];
    for (prog, args, expect) in runs {
        let mut a = vec!["RDMAPROBE_UVERBS_DEBUG=1", prog];
        a.extend_from_slice(args);
        let r = pair_with(&d, &["--engine", "trap"], "env", &a);
        let what = format!("{prog} --engine trap");
        // ibv_*_pingpong prints its figures on stderr
        let mut c = r.1.clone();
        c.stdout.extend_from_slice(&r.1.stderr);
        assert_pair_ok(&what, &d, &(r.0.clone(), c), expect);
        let e = text(&r.1.stderr);
        assert!(
            e.contains("stores skipped") && !e.contains("doorbell trap: 0 stores"),
            "{what}: no doorbell trapped:\n{e}"
        );
    }
}

/// Under the trap the program's own SIGSEGV handler still sees its own faults (here Python's
/// faulthandler, installed after model0's register pages were mapped), and without one a fault
/// ends the program as it would have: the trap keeps its handler out of the program's way.
#[test]
fn a_program_s_own_faults_go_past_the_trap() {
    if !have("python3", "python3") || !have("ibv_devinfo", "ibverbs-utils") {
        return;
    }
    let d = ModelDir::new("trap-faults");
    // SIGSEGV's bit in /proc/self/status's SigCgt, before and after the device is opened (the
    // trap waits for a register page), then a fault
    let script = |handler: bool| {
        format!(
            r#"
import ctypes, faulthandler, sys
def caught():
    line = [l for l in open('/proc/self/status') if l.startswith('SigCgt:')][0]
    return (int(line.split()[1], 16) >> 10) & 1
before = caught()
v = ctypes.CDLL('libibverbs.so.1')
v.ibv_get_device_list.restype = ctypes.POINTER(ctypes.c_void_p)
v.ibv_open_device.restype = ctypes.c_void_p
v.ibv_open_device.argtypes = [ctypes.c_void_p]
n = ctypes.c_int()
devs = v.ibv_get_device_list(ctypes.byref(n))
ctx = v.ibv_open_device(devs[0]) if n.value else None
print('before', before, 'after', caught(), 'opened', bool(ctx), flush=True)
if {}:
    faulthandler.enable()
ctypes.string_at(0)
print('not reached', flush=True)
"#,
            if handler { "True" } else { "False" }
        )
    };
    for handler in [true, false] {
        let o = run_until(
            exec_with(&d, &["--engine", "trap"], &["python3", "-c", &script(handler)]),
            Duration::from_secs(DEADLINE_S),
        );
        let (out, err) = (text(&o.stdout), text(&o.stderr));
        assert!(
            out.contains("before 0 after 1 opened True"),
            "handler {handler}: {out}{err}"
        );
        assert!(!out.contains("not reached"), "{out}");
        // 128 + SIGSEGV: the default action, after faulthandler's own report when it is there
        assert_eq!(o.status.code(), Some(139), "handler {handler}: {out}{err}");
        assert_eq!(err.contains("Fatal Python error: Segmentation fault"), handler, "{err}");
    }
}

#[test]
fn perftest_runs_between_two_processes() {
    if !have("ib_write_lat", "perftest") {
        return;
    }
    let d = ModelDir::new("perftest");
    let lat = &["-d", "model0", "-n", "200"][..];
    let bw = &["-d", "model0", "-n", "200", "-s", "4096"][..];
    let runs: &[(&str, &[&str], &[&str], &str)] = &[
        ("ib_write_lat", lat, &[], "t_typical"),
        ("ib_send_lat", lat, &[], "t_typical"),
        ("ib_read_lat", lat, &[], "t_typical"),
        ("ib_atomic_lat", lat, &[], "t_typical"),
        ("ib_send_lat", lat, &["-c", "UD"], "t_typical"),
        ("ib_write_lat", &["-d", "model0", "-n", "20"], &["-a"], "8388608"),
        ("ib_write_bw", bw, &[], "BW average"),
        ("ib_send_bw", bw, &[], "BW average"),
        ("ib_read_bw", bw, &[], "BW average"),
        ("ib_write_bw", bw, &["-q", "4"], "BW average"),
    ];
    for (prog, base, extra, expect) in runs {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        let r = pair(&d, prog, &args);
        assert_pair_ok(&format!("{prog} {extra:?}"), &d, &r, expect);
    }
}

#[test]
fn a_stopped_program_s_objects_are_removed_and_a_killed_one_s_swept() {
    if !have("ibv_rc_pingpong", "ibverbs-utils") {
        return;
    }
    let d = ModelDir::new("signals");
    let _one = PAIRS.lock().unwrap_or_else(|p| p.into_inner());
    for (sig, left) in [(libc::SIGTERM, false), (libc::SIGKILL, true)] {
        // the server makes its QP, then waits for a client that never comes
        let port = free_port().to_string();
        // run directly (not under `model0 exec`), so the signal reaches it and not rdmaprobe
        let mut c = Command::new("ibv_rc_pingpong");
        c.args(["-d", "model0", "-p", &port])
            .env("LD_PRELOAD", lib())
            .env("RDMAPROBE_MODEL_DIR", &d.0)
            .env_remove("SYSFS_PATH")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let mut child = c.spawn().expect("starting ibv_rc_pingpong");
        let start = Instant::now();
        while !listening(port.parse().unwrap_or(0)) && start.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(
            d.objects().iter().any(|o| o.starts_with("qp-")),
            "no QP while waiting: {:?}",
            d.objects()
        );
        // SAFETY: a signal to our own child, not yet reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, sig) };
        let st = child.wait().expect("waiting");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            st.signal(),
            Some(sig),
            "ended by the signal itself (the handler re-raises it)"
        );
        assert_eq!(!d.objects().is_empty(), left, "signal {sig}: objects {:?}", d.objects());
    }
    // the next program to open model0 sweeps what the killed one left
    let o = run_until(exec(&d, &["ibv_devinfo"]), Duration::from_secs(DEADLINE_S));
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(d.objects(), Vec::<String>::new(), "not swept");
}

#[test]
fn exec_refuses_what_it_cannot_do_and_keeps_its_deadline() {
    let d = ModelDir::new("cli");
    let model0_exec = |args: &[&str]| {
        let mut c = Command::new(EXE);
        c.args(["model0", "exec"])
            .args(args)
            .env("RDMAPROBE_MODEL_DIR", &d.0)
            .env("RDMAPROBE_PRELOAD_LIB", lib());
        run_until(c, Duration::from_secs(60))
    };
    let o = model0_exec(&["--engine", "thread", "--", "true"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o.stderr).contains("invalid value 'thread'"),
        "{}",
        text(&o.stderr)
    );
    let o = model0_exec(&["--timeout", "1", "--", "sleep", "30"]);
    assert_eq!(o.status.code(), Some(124), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("did not end within 1 s"),
        "{}",
        text(&o.stderr)
    );
    let o = model0_exec(&["--model-delay-ns", "5000000000", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    let o = model0_exec(&["--", "sh", "-c", "exit 7"]);
    assert_eq!(o.status.code(), Some(7), "the program's own status");
    let mut c = Command::new(EXE);
    c.args(["model0", "exec", "--", "true"])
        .env("RDMAPROBE_MODEL_DIR", &d.0)
        .env("RDMAPROBE_PRELOAD_LIB", "/nonexistent/librdmaprobe_model0.so");
    let o = run_until(c, Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("RDMAPROBE_PRELOAD_LIB=/nonexistent"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn qperf_runs_its_rdma_tests_waiting_for_events_and_polling() {
    if !have("qperf", "qperf") {
        return;
    }
    let d = ModelDir::new("qperf");
    let _one = PAIRS.lock().unwrap_or_else(|p| p.into_inner());
    let port = free_port().to_string();
    let mut server = exec(&d, &["qperf", "-lp", &port])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the qperf server");
    let start = Instant::now();
    while !listening(port.parse().unwrap_or(0)) && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    // qperf waits for completion events by default; -cp1 polls the CQs: both
    let tests = [
        "rc_lat",
        "uc_lat",
        "ud_lat",
        "rc_rdma_write_lat",
        "rc_rdma_read_lat",
        "rc_bw",
        "rc_rdma_write_bw",
    ];
    for poll in ["0", "1"] {
        let mut args = vec!["qperf", "-lp", &port, "-t", "1", "-cp", poll, "127.0.0.1"];
        args.extend_from_slice(&tests);
        let c = run_until(exec(&d, &args), Duration::from_secs(DEADLINE_S + 10));
        check_qperf(poll, &c, &tests);
    }
    // SAFETY: a signal to our own child (rdmaprobe, which stops qperf), not yet reaped.
    unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGTERM) };
    let s = finish_child(&mut server);
    assert!(!s.contains("panicked"), "the server: {s}");
    assert_eq!(d.objects(), Vec::<String>::new(), "model0 objects left behind");
}

fn check_qperf(poll: &str, c: &Output, tests: &[&str]) {
    let out = text(&c.stdout);
    assert!(
        c.status.success(),
        "qperf -cp {poll}: {:?}\n{out}{}",
        c.status,
        text(&c.stderr)
    );
    for t in tests {
        assert!(out.contains(&format!("{t}:")), "qperf -cp {poll}: no {t} in:\n{out}");
    }
    // every figure a real one: a latency of 0 ns or a bandwidth of 0 is a test that did not run
    let figures: Vec<&str> = out.lines().filter(|l| l.contains(" = ")).collect();
    assert_eq!(
        figures.len(),
        tests.len(),
        "qperf -cp {poll}: one figure per test:\n{out}"
    );
    for l in figures {
        let v = l.split('=').nth(1).unwrap_or("").trim();
        assert!(!v.starts_with("0 "), "qperf -cp {poll}: {l}\n{out}");
    }
}

fn finish_child(c: &mut Child) -> String {
    let mut s = String::new();
    if let Some(e) = c.stderr.as_mut() {
        let _ = e.read_to_string(&mut s);
    }
    let _ = c.wait();
    s
}

/// Waits for `child` until `limit`; None when it is still running then (it is killed).
fn wait_for(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn a_polling_program_ends_at_sigterm() {
    if !have("ib_send_lat", "perftest") {
        return;
    }
    let d = ModelDir::new("sigpoll");
    let _one = PAIRS.lock().unwrap_or_else(|p| p.into_inner());
    // the handler met the polling thread in model0's progress (its QP table locked) in one of
    // three tries before it gave up rather than wait: several rounds
    for round in 0..6 {
        let port = free_port().to_string();
        let n = "100000000";
        // the server run directly, so the signal reaches it
        let mut server = preloaded_server(&d, "ib_send_lat", &["-d", "model0", "-p", &port, "-n", n], &port);
        let mut client = exec(&d, &["ib_send_lat", "-d", "model0", "-p", &port, "-n", n, "127.0.0.1"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the client");
        // both QPs made, then a moment for the ping-pong to start polling
        until_qps(&d, 2);
        std::thread::sleep(Duration::from_millis(1500));
        // SAFETY: a signal to our own child, not yet reaped.
        unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGTERM) };
        // a deadlock is forever: a bound far beyond a loaded machine's slowness
        let st = wait_for(&mut server, Duration::from_secs(30));
        // SAFETY: as above (rdmaprobe, which stops the client).
        unsafe { libc::kill(client.id() as libc::pid_t, libc::SIGTERM) };
        let _ = wait_for(&mut client, Duration::from_secs(30));
        use std::os::unix::process::ExitStatusExt;
        let st = st.unwrap_or_else(|| panic!("round {round}: the polling server did not end within 30 s of SIGTERM"));
        assert_eq!(st.signal(), Some(libc::SIGTERM), "round {round}: {st:?}");
    }
}

/// The processes running (not zombies) whose command line is exactly `argv`, with their parent.
fn running(argv: &[&str]) -> Vec<(u32, u32)> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read(e.path().join("cmdline")).ok().as_deref() != Some(&want[..]) {
            continue;
        }
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        // after the command's ")": state, parent
        let rest: Vec<&str> = stat
            .rsplit_once(')')
            .map(|r| r.1)
            .unwrap_or("")
            .split_whitespace()
            .collect();
        if rest.first().is_some_and(|s| *s != "Z" && *s != "X") {
            v.push((pid, rest.get(1).and_then(|p| p.parse().ok()).unwrap_or(0)));
        }
    }
    v
}

/// Waits until `f` holds, at most `limit`; whether it did.
fn until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !f() {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[test]
fn exec_signals_the_whole_program_and_says_what_could_not_start() {
    let d = ModelDir::new("group");
    let model0_exec = |args: &[&str]| {
        let mut c = Command::new(EXE);
        c.args(["model0", "exec"])
            .args(args)
            .env("RDMAPROBE_MODEL_DIR", &d.0)
            .env("RDMAPROBE_PRELOAD_LIB", lib());
        c
    };
    // the deadline reaches what PROGRAM started (its process group)
    let tag = format!("{}.25", 40 + std::process::id() % 1000);
    let script = format!("sleep {tag}; echo x");
    let o = run_until(
        model0_exec(&["--timeout", "1", "--", "sh", "-c", &script]),
        Duration::from_secs(60),
    );
    assert_eq!(o.status.code(), Some(124), "{}", text(&o.stderr));
    assert!(!text(&o.stdout).contains('x'));
    assert!(
        until(Duration::from_secs(10), || running(&["sleep", &tag]).is_empty()),
        "sleep {tag} still running after the deadline"
    );
    // rdmaprobe SIGKILLed: its program gets SIGTERM (PR_SET_PDEATHSIG), not orphaned
    let mut c = model0_exec(&["--", "sleep", &tag])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start");
    let me = c.id();
    assert!(until(Duration::from_secs(30), || running(&["sleep", &tag])
        .iter()
        .any(|p| p.1 == me)));
    let _ = c.kill();
    let _ = c.wait();
    assert!(
        until(Duration::from_secs(10), || running(&["sleep", &tag]).is_empty()),
        "sleep {tag} orphaned by a SIGKILLed rdmaprobe"
    );
    // SIGINT to rdmaprobe: stopped, 130 (128 + SIGINT) as a shell says
    let mut c = model0_exec(&["--", "sleep", &tag])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start");
    let me = c.id();
    assert!(until(Duration::from_secs(30), || running(&["sleep", &tag])
        .iter()
        .any(|p| p.1 == me)));
    // SAFETY: a signal to our own child, not yet reaped.
    unsafe { libc::kill(me as libc::pid_t, libc::SIGINT) };
    let st = wait_for(&mut c, Duration::from_secs(30));
    assert_eq!(st.and_then(|s| s.code()), Some(130), "{st:?}");
    // an unknown option before `--` is clap's error, not a program name
    let o = run_until(model0_exec(&["--bogus", "--", "true"]), Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("unexpected argument '--bogus'"),
        "{}",
        text(&o.stderr)
    );
    // a program that cannot start: 127 not found, 126 not executable (as env, timeout)
    let o = run_until(model0_exec(&["--", "/nonexistent/prog"]), Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(127), "{}", text(&o.stderr));
    let o = run_until(model0_exec(&["--", "/etc/passwd"]), Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(126), "{}", text(&o.stderr));
    // a preload that is not a shared object is refused (ld.so would ignore it and run the
    // program without model0)
    let mut c = model0_exec(&["--", "true"]);
    c.env("RDMAPROBE_PRELOAD_LIB", "/etc/passwd");
    let o = run_until(c, Duration::from_secs(60));
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("/etc/passwd: not an ELF file"),
        "{}",
        text(&o.stderr)
    );
}

/// A peer whose process dies (SIGKILL: nothing of it runs, its files stay until a sweep) answers
/// nothing: the client's WRITEs end in retry exceeded (status 12, as on hardware), not landing
/// in the dead process's memory until perftest's final exchange fails (what they did before).
#[test]
fn a_killed_peer_s_writes_end_in_retry_exceeded() {
    if !have("ib_write_bw", "perftest") {
        return;
    }
    let d = ModelDir::new("deadpeer");
    let _one = PAIRS.lock().unwrap_or_else(|p| p.into_inner());
    let port = free_port().to_string();
    let n = "100000000";
    // the server run directly, so SIGKILL reaches it (and nothing cleans up after it)
    let mut server = preloaded_server(
        &d,
        "ib_write_bw",
        &["-d", "model0", "-p", &port, "-s", "8", "-n", n],
        &port,
    );
    let client = exec(
        &d,
        &[
            "ib_write_bw",
            "-d",
            "model0",
            "-p",
            &port,
            "-s",
            "8",
            "-n",
            n,
            "127.0.0.1",
        ],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("starting the client");
    until_qps(&d, 2);
    std::thread::sleep(Duration::from_millis(1000));
    // SAFETY: a signal to our own child, not yet reaped.
    unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGKILL) };
    let _ = server.wait();
    let out = finish(client, Duration::from_secs(DEADLINE_S + 30));
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "the client went on after its peer died:\n{all}");
    assert!(
        all.contains("status 12") || all.contains("status: 12") || all.contains("RETRY_EXC"),
        "the client's WRITEs to a dead peer did not end in retry exceeded:\n{all}"
    );
}

/// `prog ARGS` with the library preloaded by hand (not under `model0 exec`, so a signal sent to
/// it reaches the program itself), on model directory `d`, once it listens on `port` (60 s at
/// most).
fn preloaded_server(d: &ModelDir, prog: &str, args: &[&str], port: &str) -> Child {
    let server = Command::new(prog)
        .args(args)
        .env("LD_PRELOAD", lib())
        .env("RDMAPROBE_MODEL_DIR", &d.0)
        .env_remove("SYSFS_PATH")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {prog}: {e}"));
    let start = Instant::now();
    while !listening(port.parse().unwrap_or(0)) && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

/// Waits (60 s at most) until model directory `d` holds `n` QPs.
fn until_qps(d: &ModelDir, n: usize) {
    let start = Instant::now();
    while d.objects().iter().filter(|o| o.starts_with("qp-")).count() < n && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// perftest's t_typical of its one-size table (µs), and its #iterations.
fn perftest_typical(out: &str) -> Option<(u64, f64)> {
    let mut lines = out.lines().skip_while(|l| !l.contains("t_typical"));
    let row: Vec<&str> = lines.nth(1)?.split_whitespace().collect();
    Some((row.get(1)?.parse().ok()?, row.get(4)?.parse().ok()?))
}

/// rdmaprobe (`rp`: its command but the peer's address) against perftest (`pt`: the program
/// and its flags but the address, under `model0 exec`), `rdmaprobe_serves` choosing the server;
/// rdmaprobe pins its client to the first CPU and its server to the last, perftest goes on the
/// other one. Both run to their end (or the deadline): rdmaprobe's output, then perftest's.
fn against_perftest(
    d: &ModelDir,
    mut rp: Command,
    pt: &[&str],
    port: &str,
    rdmaprobe_serves: bool,
) -> (Output, Output) {
    let limit = Duration::from_secs(DEADLINE_S + 10);
    let cpu = if rdmaprobe_serves { "0" } else { "1" };
    let mut a = vec!["taskset", "-c", cpu];
    a.extend(pt);
    if rdmaprobe_serves {
        a.push("127.0.0.1");
    } else {
        rp.arg("127.0.0.1");
    }
    let perftest = exec(d, &a);
    let (server, client) = if rdmaprobe_serves {
        (rp, perftest)
    } else {
        (perftest, rp)
    };
    let s = { server }
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the server");
    wait_listening(port);
    let c = run_until(client, limit);
    let s = finish(s, limit);
    if rdmaprobe_serves {
        (s, c)
    } else {
        (c, s)
    }
}

/// As [`against_perftest`], for runs whose perftest may never end (a mismatch leaves it
/// spinning, and it has no deadline of its own): rdmaprobe's output once it ended, perftest
/// stopped then.
fn rdmaprobe_against_stuck_perftest(d: &ModelDir, mut rp: Command, pt: &[&str], port: &str, serves: bool) -> Output {
    let limit = Duration::from_secs(DEADLINE_S + 10);
    let mut a = vec!["taskset", "-c", if serves { "0" } else { "1" }];
    a.extend(pt);
    if serves {
        a.push("127.0.0.1");
    } else {
        rp.arg("127.0.0.1");
    }
    let piped = |mut c: Command, what: &str| {
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what}: {e}"))
    };
    let (ours, mut theirs) = if serves {
        let s = piped(rp, "rdmaprobe");
        wait_listening(port);
        (s, piped(exec(d, &a), "perftest"))
    } else {
        let s = piped(exec(d, &a), "perftest");
        wait_listening(port);
        (piped(rp, "rdmaprobe"), s)
    };
    let out = finish(ours, limit);
    let _ = theirs.kill();
    let _ = finish(theirs, limit);
    out
}

/// Waits (60 s at most) until something listens on `port` (perftest's client tries once).
fn wait_listening(port: &str) {
    let start = Instant::now();
    while !listening(port.parse().unwrap_or(0)) && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One perftest latency program against `rdmaprobe lat OP --peer perftest` under `model0 exec`,
/// each side the server in turn, every backend (issue 23): both exit 0 (perftest's closing
/// exchange included), perftest counts its -n, rdmaprobe the round trips perftest's conventions
/// give it (a ping-pong: -n - 1 each side; READ and atomics: -n as the client, none as the
/// server, which the NIC answers), rdmaprobe names the peer, and where both time the same run
/// (the ping-pongs) rdmaprobe's figure of perftest's definition (`perftest_ns.typical`) is
/// perftest's own t_typical within 2x (they time the same ping-pong, each from its own end:
/// measured 0.98-1.04 here; a broken handshake or data path ends in an error or a stall, not in a
/// figure). `extra`: flags both sides take (atomics: -A).
fn perftest_peer_case(op: &str, program: &str, extra: &[&str]) {
    if !have(program, "perftest") || !have("taskset", "util-linux") {
        return;
    }
    let _one = PAIRS.lock().unwrap_or_else(|p| p.into_inner());
    let d = ModelDir::new("perftest-peer");
    let n = "2000";
    let ping_pong = matches!(op, "write" | "send");
    for backend in ["verbs", "wr", "direct"] {
        for rdmaprobe_serves in [true, false] {
            let port = free_port().to_string();
            let json = d.0.join(format!("{op}-{backend}-{rdmaprobe_serves}.json"));
            let mut rp = Command::new(EXE);
            rp.args([
                "lat", op, "--peer", "perftest", "-d", "model0", "-s", "8", "-n", n, "-p", &port,
            ])
            .args(extra)
            .args(["--backend", backend, "--oob-timeout", "60", "--json"])
            .arg(&json)
            .env("RDMAPROBE_MODEL_DIR", &d.0);
            let mut pt = vec![program, "-d", "model0", "-s", "8", "-n", n, "-p", &port];
            pt.extend(extra);
            let (rp_out, pt_out) = &against_perftest(&d, rp, &pt, &port, rdmaprobe_serves);
            let (s, c) = if rdmaprobe_serves {
                (rp_out, pt_out)
            } else {
                (pt_out, rp_out)
            };
            let what = format!(
                "{op} {backend}, rdmaprobe the {}",
                if rdmaprobe_serves { "server" } else { "client" }
            );
            let show = |o: &Output| format!("status {:?}\n{}{}", o.status, text(&o.stdout), text(&o.stderr));
            assert!(
                s.status.success() && c.status.success(),
                "{what}:\nrdmaprobe {}\nperftest {}",
                show(rp_out),
                show(pt_out)
            );
            let doc: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&json).expect("rdmaprobe's JSON")).expect("JSON");
            assert_eq!(doc["params"]["peer_tool"]["name"], "perftest", "{what}");
            assert_eq!(doc["params"]["peer_tool"]["program"], program, "{what}");
            assert!(
                text(&rp_out.stdout).contains(" peer: perftest "),
                "{what}: {}",
                show(rp_out)
            );
            // perftest prints its table where it timed: both ends of a ping-pong, the client of
            // READ and atomics
            let pt_times = ping_pong || rdmaprobe_serves;
            let pt_table = perftest_typical(&text(&pt_out.stdout));
            assert_eq!(
                pt_table.is_some(),
                pt_times,
                "{what}: perftest's table\n{}",
                show(pt_out)
            );
            if let Some((pt_iters, _)) = pt_table {
                assert_eq!(pt_iters, 2000, "{what}");
            }
            let runs = doc["runs"].as_array().expect("runs");
            if !ping_pong && rdmaprobe_serves {
                assert!(runs.is_empty(), "{what}: the passive server timed something: {runs:?}");
                assert_eq!(doc["params"]["peer_tool"]["timed"], 0, "{what}");
            } else {
                let run = &runs[0];
                let expect = if ping_pong { 1999 } else { 2000 };
                assert_eq!(run["iterations"], expect, "{what}");
                assert_eq!(run["backend"], backend, "{what}");
                if let (true, Some((_, typical_us))) = (ping_pong, pt_table) {
                    let ours = run["perftest_ns"]["typical"].as_f64().unwrap_or(0.0);
                    let ratio = ours / (typical_us * 1000.0);
                    assert!(
                        (0.5..=2.0).contains(&ratio),
                        "{what}: rdmaprobe's perftest_ns.typical {ours:.1} ns against perftest's t_typical {typical_us} us\n{}\n{}",
                        show(rp_out),
                        show(pt_out)
                    );
                }
            }
            let _ = std::fs::remove_file(&json);
            assert_eq!(d.objects(), Vec::<String>::new(), "{what}: model0 objects left behind");
        }
    }
}

#[test]
fn rdmaprobe_and_ib_write_lat_run_against_each_other_on_every_backend() {
    perftest_peer_case("write", "ib_write_lat", &[]);
}

#[test]
fn rdmaprobe_and_ib_send_lat_run_against_each_other_on_every_backend() {
    perftest_peer_case("send", "ib_send_lat", &[]);
}

#[test]
fn rdmaprobe_and_ib_send_lat_run_over_ud_on_every_backend() {
    perftest_peer_case("send", "ib_send_lat", &["-c", "UD"]);
}

#[test]
fn rdmaprobe_and_ib_read_lat_run_against_each_other_on_every_backend() {
    perftest_peer_case("read", "ib_read_lat", &[]);
}

#[test]
fn rdmaprobe_and_ib_atomic_lat_run_against_each_other_on_every_backend() {
    perftest_peer_case("atomic", "ib_atomic_lat", &[]);
    perftest_peer_case("atomic", "ib_atomic_lat", &["-A", "CMP_AND_SWAP"]);
}

/// The rows of perftest's table under the header line holding `header`, each split into its
/// fields, up to the first line that is not a row (its first field not a number).
fn perftest_table<'a>(out: &'a str, header: &str) -> Vec<Vec<&'a str>> {
    out.lines()
        .skip_while(|l| !l.contains(header))
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .take_while(|f| f.first().is_some_and(|x| x.parse::<u64>().is_ok()))
        .collect()
}

/// perftest's latency table's rows: size, #iterations, t_typical (µs).
fn perftest_lat_rows(out: &str) -> Vec<(u64, u64, f64)> {
    perftest_table(out, "t_typical")
        .iter()
        .map_while(|f| Some((f[0].parse().ok()?, f.get(1)?.parse().ok()?, f.get(4)?.parse().ok()?)))
        .collect()
}

/// `-a` on both sides (issue 23): perftest's 23 sizes, 2 B to 8 MiB (over UD 12, to the MTU), one after the other with
/// its counters restarted at each (WRITE and READ with nothing between sizes, SEND with a key
/// exchange after its receives are posted). Each tool the server of WRITE and SEND on some
/// backend, rdmaprobe the READ client: both exit 0, perftest's table has a row of -n per size,
/// rdmaprobe's JSON a run per size in perftest's order with the round trips its conventions
/// give it (READ's server, perftest, is passive and prints none), and where both time the same ping-pong, rdmaprobe's figure of perftest's definition
/// is perftest's t_typical within 2x at every size (measured 0.96-1.04 here).
#[test]
fn rdmaprobe_and_perftest_run_every_size_with_a() {
    if !have("ib_write_lat", "perftest") || !have("taskset", "util-linux") {
        return;
    }
    let _one = PAIRS.lock().unwrap_or_else(|p| p.into_inner());
    let d = ModelDir::new("perftest-all");
    for (op, backend, rdmaprobe_serves, conn) in [
        ("write", "verbs", true, "RC"),
        ("write", "direct", false, "RC"),
        ("send", "wr", true, "RC"),
        ("send", "direct", false, "RC"),
        ("read", "verbs", false, "RC"),
        ("send", "verbs", true, "UD"),
        ("send", "direct", false, "UD"),
    ] {
        // over UD both stop at the port's MTU, 4096 B on model0
        let top = if conn == "UD" { 12 } else { 23 };
        let sizes: Vec<u64> = (1..=top).map(|e| 1u64 << e).collect();
        let port = free_port().to_string();
        let json = d.0.join(format!("all-{op}-{backend}-{conn}.json"));
        let mut rp = Command::new(EXE);
        rp.args([
            "lat", op, "--peer", "perftest", "-d", "model0", "-a", "-n", "100", "-p", &port, "-c", conn,
        ])
        .args(["--backend", backend, "--oob-timeout", "60", "--json"])
        .arg(&json)
        .env("RDMAPROBE_MODEL_DIR", &d.0);
        let program = format!("ib_{op}_lat");
        let pt = [
            program.as_str(),
            "-d",
            "model0",
            "-a",
            "-n",
            "100",
            "-p",
            &port,
            "-c",
            conn,
        ];
        let (rp_out, pt_out) = &against_perftest(&d, rp, &pt, &port, rdmaprobe_serves);
        let what = format!("-a {op} -c {conn} {backend}, rdmaprobe serves: {rdmaprobe_serves}");
        let show = |o: &Output| format!("status {:?}\n{}{}", o.status, text(&o.stdout), text(&o.stderr));
        assert!(
            rp_out.status.success() && pt_out.status.success(),
            "{what}:\nrdmaprobe {}\nperftest {}",
            show(rp_out),
            show(pt_out)
        );
        let ping_pong = op != "read";
        let pt_rows = perftest_lat_rows(&text(&pt_out.stdout));
        let pt_sizes: Vec<u64> = pt_rows.iter().map(|r| r.0).collect();
        // the server of READ is passive: its perftest prints no table
        let pt_expect = if ping_pong { sizes.clone() } else { Vec::new() };
        assert_eq!(pt_sizes, pt_expect, "{what}: perftest's table\n{}", show(pt_out));
        assert!(pt_rows.iter().all(|r| r.1 == 100), "{what}: {pt_rows:?}");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).expect("rdmaprobe's JSON")).expect("JSON");
        let runs = doc["runs"].as_array().expect("runs");
        let ours: Vec<u64> = runs.iter().map(|r| r["size_bytes"].as_u64().unwrap_or(0)).collect();
        assert_eq!(ours, sizes, "{what}: rdmaprobe's runs");
        for (i, r) in runs.iter().enumerate() {
            assert_eq!(r["iterations"], if ping_pong { 99 } else { 100 }, "{what}");
            if let Some(pt) = pt_rows.get(i) {
                let typical = r["perftest_ns"]["typical"].as_f64().unwrap_or(0.0);
                let ratio = typical / (pt.2 * 1000.0);
                assert!(
                    (0.5..=2.0).contains(&ratio),
                    "{what}: {} B: rdmaprobe's perftest_ns.typical {typical:.1} ns, perftest's t_typical {} us",
                    pt.0,
                    pt.2
                );
            }
        }
        let _ = std::fs::remove_file(&json);
        assert_eq!(d.objects(), Vec::<String>::new(), "{what}: model0 objects left behind");
    }
}

/// A perftest peer given another -s or -n than rdmaprobe (perftest 6.06 exchanges neither): the
/// run ends with an error naming the flags, within the stall deadline (10 s), never a figure or
/// a hang. ib_send_lat -s 64 against rdmaprobe's -s 8: the first SEND's length; -n 1000
/// against 2000: the stall after perftest's last message; -n 3000 against 2000, SEND and WRITE
/// (which has no closing exchange): perftest does not end when rdmaprobe does.
#[test]
fn a_perftest_peer_given_other_flags_is_named_not_waited_for() {
    if !have("ib_send_lat", "perftest") || !have("ib_write_lat", "perftest") {
        return;
    }
    let _one = PAIRS.lock().unwrap_or_else(|p| p.into_inner());
    let d = ModelDir::new("perftest-mismatch");
    let limit = Duration::from_secs(DEADLINE_S + 10);
    let cases: [(&str, &[&str], &str); 6] = [
        ("send", &["-s", "64", "-n", "2000"], "carried 64 B, this side's -s is 8"),
        (
            "send",
            &["-s", "8", "-n", "1000"],
            "give both sides the same -s, -n and -c",
        ),
        ("send", &["-s", "8", "-n", "3000"], "was it given a larger -n"),
        ("write", &["-s", "8", "-n", "3000"], "was it given a larger -n"),
        // -a on one side only: perftest's first size, 2 B, is not this side's -s 8
        ("write", &["-a", "-n", "2000"], "-a to both or neither"),
        // perftest over UD, this side RC: perftest's first SEND never lands
        ("send", &["-s", "8", "-n", "2000", "-c", "UD"], "the same -s, -n and -c"),
    ];
    for (op, pt_flags, expect) in cases {
        let port = free_port().to_string();
        let program = format!("ib_{op}_lat");
        let mut a = vec![program.as_str(), "-d", "model0", "-p", &port];
        a.extend(pt_flags);
        let s = exec(&d, &a)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting perftest");
        wait_listening(&port);
        let mut rp = Command::new(EXE);
        rp.args([
            "lat", op, "--peer", "perftest", "-d", "model0", "-s", "8", "-n", "2000", "-p", &port,
        ])
        .args(["--backend", "direct", "--oob-timeout", "60", "127.0.0.1"])
        .env("RDMAPROBE_MODEL_DIR", &d.0);
        let started = Instant::now();
        let c = run_until(rp, limit);
        let took = started.elapsed();
        // perftest has no deadline of its own: its side of a ping-pong whose peer left spins until
        // model0 exec's --timeout; ended here
        let mut s = s;
        let _ = s.kill();
        let _ = finish(s, limit);
        let err = text(&c.stderr);
        let what = format!("{program} {pt_flags:?}");
        // the stall deadline (10 s) and the start, not the oob timeout (60 s) nor the exec's
        assert!(took < Duration::from_secs(40), "{what}: took {took:?}");
        assert_eq!(c.status.code(), Some(1), "{what}: {err}");
        assert!(err.contains(expect), "{what}: {err}");
        let out = text(&c.stdout);
        assert!(!out.contains("perftest's t_typical"), "{what}: a figure\n{out}");
        assert!(!out.contains("    8  direct "), "{what}: a row\n{out}");
    }
}

/// perftest's bandwidth table's one row: size, iterations, peak, average, message rate.
fn perftest_bw_row(out: &str) -> Option<(u64, u64, f64, f64, f64)> {
    let mut lines = out.lines().skip_while(|l| !l.contains("BW peak"));
    let row: Vec<&str> = lines.nth(1)?.split_whitespace().collect();
    Some((
        row.first()?.parse().ok()?,
        row.get(1)?.parse().ok()?,
        row.get(2)?.parse().ok()?,
        row.get(3)?.parse().ok()?,
        row.get(4)?.parse().ok()?,
    ))
}

/// One perftest bandwidth program against `rdmaprobe bw OP --peer perftest` under `model0
/// exec`, each side the server in turn, every backend (issue 23): both exit 0 (perftest's
/// report exchange and closing included); the client's figures reach the server intact: as
/// rdmaprobe the client, perftest's server prints exactly the report rdmaprobe sent (its
/// table's figures: `params.peer_tool.report_sent`), and as rdmaprobe the server, the report it
/// took (`params.peer_tool.report`) is what perftest's client printed, to the printed digits.
fn perftest_bw_case(op: &str, program: &str, extra: &[&str]) {
    if !have(program, "perftest") || !have("taskset", "util-linux") {
        return;
    }
    let _one = PAIRS.lock().unwrap_or_else(|p| p.into_inner());
    let d = ModelDir::new("perftest-bw");
    let (size, n) = ("65536", "2000");
    let qps: u64 = extra
        .windows(2)
        .find(|w| w[0] == "-q")
        .and_then(|w| w[1].parse().ok())
        .unwrap_or(1);
    for backend in ["verbs", "wr", "direct"] {
        for rdmaprobe_serves in [true, false] {
            let port = free_port().to_string();
            let json = d.0.join(format!("{op}-{backend}-{rdmaprobe_serves}.json"));
            let mut rp = Command::new(EXE);
            rp.args([
                "bw", op, "--peer", "perftest", "-d", "model0", "-s", size, "-n", n, "-p", &port,
            ])
            .args(extra)
            .args(["--backend", backend, "--oob-timeout", "60", "--json"])
            .arg(&json)
            .env("RDMAPROBE_MODEL_DIR", &d.0);
            let mut pt = vec![program, "-d", "model0", "-s", size, "-n", n, "-p", &port];
            pt.extend(extra);
            let (rp_out, pt_out) = &against_perftest(&d, rp, &pt, &port, rdmaprobe_serves);
            let (s, c) = if rdmaprobe_serves {
                (rp_out, pt_out)
            } else {
                (pt_out, rp_out)
            };
            let what = format!(
                "{op} {extra:?} {backend}, rdmaprobe the {}",
                if rdmaprobe_serves { "server" } else { "client" }
            );
            let show = |o: &Output| format!("status {:?}\n{}{}", o.status, text(&o.stdout), text(&o.stderr));
            assert!(
                s.status.success() && c.status.success(),
                "{what}:\nrdmaprobe {}\nperftest {}",
                show(rp_out),
                show(pt_out)
            );
            let doc: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&json).expect("rdmaprobe's JSON")).expect("JSON");
            let tool = &doc["params"]["peer_tool"];
            assert_eq!(tool["program"], program, "{what}");
            let row = perftest_bw_row(&text(&pt_out.stdout))
                .unwrap_or_else(|| panic!("{what}: no perftest table:\n{}", show(pt_out)));
            let messages = 2000 * qps;
            assert_eq!((row.0, row.1), (65536, messages), "{what}");
            if op == "send" {
                send_bw_figures(&doc, row, messages, rdmaprobe_serves, &what);
                let _ = std::fs::remove_file(&json);
                assert_eq!(d.objects(), Vec::<String>::new(), "{what}: model0 objects left behind");
                continue;
            }
            let rep = if rdmaprobe_serves {
                assert_eq!(
                    doc["runs"].as_array().map(Vec::len),
                    Some(0),
                    "{what}: the server measured"
                );
                &tool["report"]
            } else {
                let run = &doc["runs"][0];
                assert_eq!(run["summary"]["messages"], messages, "{what}");
                let avg = run["summary"]["bw_avg_mib_s"].as_f64().unwrap_or(0.0);
                assert!(avg > 0.0, "{what}");
                assert_eq!(tool["report_sent"]["bw_avg"].as_f64(), Some(avg), "{what}");
                &tool["report_sent"]
            };
            assert_eq!(
                (rep["size"].as_u64(), rep["iters"].as_u64()),
                (Some(65536), Some(messages)),
                "{what}"
            );
            // perftest prints two decimals of MB/s and six of Mpps
            let near = |k: &str, printed: f64, digits: f64| {
                let v = rep[k].as_f64().unwrap_or(f64::NAN);
                assert!(
                    (v - printed).abs() <= 0.51 * digits,
                    "{what}: {k} {v} against perftest's {printed}"
                );
            };
            near("bw_peak", row.2, 0.01);
            near("bw_avg", row.3, 0.01);
            near("msg_rate", row.4, 1e-6);
            let _ = std::fs::remove_file(&json);
            assert_eq!(d.objects(), Vec::<String>::new(), "{what}: model0 objects left behind");
        }
    }
}

/// ib_send_bw exchanges no report: each side prints its own. As the server rdmaprobe took every
/// message (`params.peer_tool.received`, as perftest's server computes its figures) and measured
/// nothing in its table; as the client its table counts every message and perftest's server
/// took them all (its table's row, no peak: perftest's SEND server has none). The two averages
/// time the same transfer from its two ends: within 4x of each other (they differ by where each
/// end starts and stops its clock, not by a unit: a MB/s against Gb/s slip is 8x).
fn send_bw_figures(doc: &serde_json::Value, row: (u64, u64, f64, f64, f64), messages: u64, serves: bool, what: &str) {
    let tool = &doc["params"]["peer_tool"];
    assert!(
        tool["report"].is_null() && tool["report_sent"].is_null(),
        "{what}: {tool}"
    );
    let ours = if serves {
        assert_eq!(
            doc["runs"].as_array().map(Vec::len),
            Some(0),
            "{what}: the server measured"
        );
        assert_eq!(tool["received"].as_array().map(Vec::len), Some(1), "{what}: {tool}");
        let r = &tool["received"][0];
        assert_eq!(
            (r["size"].as_u64(), r["iters"].as_u64()),
            (Some(65536), Some(messages)),
            "{what}"
        );
        r["bw_avg"].as_f64().unwrap_or(0.0)
    } else {
        assert!(tool["received"].is_null(), "{what}");
        assert_eq!(row.2, 0.0, "{what}: perftest's SEND server prints no peak");
        let run = &doc["runs"][0];
        assert_eq!(run["summary"]["messages"], messages, "{what}");
        run["summary"]["bw_avg_mib_s"].as_f64().unwrap_or(0.0)
    };
    assert!(ours > 0.0 && row.3 > 0.0, "{what}: {ours} and perftest's {}", row.3);
    let ratio = ours / row.3;
    assert!(
        (0.25..=4.0).contains(&ratio),
        "{what}: {ours} against perftest's {}",
        row.3
    );
}

#[test]
fn rdmaprobe_and_ib_send_bw_run_against_each_other_on_every_backend() {
    perftest_bw_case("send", "ib_send_bw", &[]);
    perftest_bw_case("send", "ib_send_bw", &["-q", "2"]);
}

#[test]
fn rdmaprobe_and_ib_write_bw_exchange_their_reports_on_every_backend() {
    perftest_bw_case("write", "ib_write_bw", &[]);
    perftest_bw_case("write", "ib_write_bw", &["-q", "4"]);
}

#[test]
fn rdmaprobe_and_ib_read_bw_exchange_their_reports_on_every_backend() {
    perftest_bw_case("read", "ib_read_bw", &[]);
}

/// A perftest bandwidth client given another -n than rdmaprobe's server (perftest 6.06 does not
/// exchange it): the server names both from the report perftest sends, exit 1; a perftest
/// server given a smaller -s than rdmaprobe's client: its first WRITE is refused and the error
/// says that -s must match.
#[test]
fn a_perftest_bandwidth_peer_given_other_flags_is_named() {
    if !have("ib_write_bw", "perftest") {
        return;
    }
    let _one = PAIRS.lock().unwrap_or_else(|p| p.into_inner());
    let d = ModelDir::new("perftest-bw-mismatch");
    let limit = Duration::from_secs(DEADLINE_S + 10);
    let rdmaprobe = |port: &str, client: bool| {
        let mut rp = Command::new(EXE);
        rp.args([
            "bw", "write", "--peer", "perftest", "-d", "model0", "-s", "65536", "-n", "2000", "-p", port,
        ])
        .args(["--backend", "direct", "--oob-timeout", "60"])
        .env("RDMAPROBE_MODEL_DIR", &d.0);
        if client {
            rp.arg("127.0.0.1");
        }
        rp
    };
    // perftest's client with -n 1000
    let port = free_port().to_string();
    let s = rdmaprobe(&port, false)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting rdmaprobe");
    wait_listening(&port);
    let c = run_until(
        exec(
            &d,
            &[
                "ib_write_bw",
                "-d",
                "model0",
                "-s",
                "65536",
                "-n",
                "1000",
                "-p",
                &port,
                "127.0.0.1",
            ],
        ),
        limit,
    );
    let s = finish(s, limit);
    assert!(c.status.success(), "perftest: {}", text(&c.stderr));
    let err = text(&s.stderr);
    assert_eq!(s.status.code(), Some(1), "{err}");
    assert!(
        err.contains("reported 1000 messages of 65536 B, this side was given 2000"),
        "{err}"
    );
    // perftest's server with -s 4096
    let port = free_port().to_string();
    let mut s = exec(
        &d,
        &["ib_write_bw", "-d", "model0", "-s", "4096", "-n", "2000", "-p", &port],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("starting perftest");
    wait_listening(&port);
    let c = run_until(rdmaprobe(&port, true), limit);
    let _ = s.kill();
    let _ = finish(s, limit);
    let err = text(&c.stderr);
    assert_eq!(c.status.code(), Some(1), "{err}");
    assert!(err.contains("refuses this side's messages"), "{err}");
    // another -q: perftest's client with 1 QP, rdmaprobe's server with 2; and the other way
    for (rp_q, pt_q, expect) in [("2", "1", "fewer QPs than this side's -q 2"), ("1", "2", "more QPs")] {
        let port = free_port().to_string();
        let mut rp = rdmaprobe(&port, false);
        rp.args(["-q", rp_q]);
        let s = rp
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting rdmaprobe");
        wait_listening(&port);
        let mut c = exec(
            &d,
            &[
                "ib_write_bw",
                "-d",
                "model0",
                "-s",
                "65536",
                "-n",
                "2000",
                "-q",
                pt_q,
                "-p",
                &port,
                "127.0.0.1",
            ],
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting perftest");
        let s = finish(s, limit);
        let _ = c.kill();
        let _ = finish(c, limit);
        let err = text(&s.stderr);
        assert_eq!(s.status.code(), Some(1), "-q {rp_q} against {pt_q}: {err}");
        assert!(
            err.contains(expect) && err.contains("give both sides the same"),
            "-q {rp_q} against {pt_q}: {err}"
        );
    }
}

/// rdmaprobe's `bw send` against an ib_send_bw given another -n or -s (perftest 6.06 exchanges
/// neither): each ends in an error naming the flag, exit 1, within the stall deadline (3 s
/// here), never a hang. rdmaprobe the server: a client with a larger -n (its end never comes), a
/// smaller -n (no SEND after its last), a smaller -s (each message's length is checked); the
/// client: a server with a smaller -s refuses its SENDs.
#[test]
fn a_perftest_send_bw_peer_given_other_flags_is_named() {
    if !have("ib_send_bw", "perftest") || !have("taskset", "util-linux") {
        return;
    }
    let _one = PAIRS.lock().unwrap_or_else(|p| p.into_inner());
    let d = ModelDir::new("perftest-send-bw-mismatch");
    for (serves, theirs, expect) in [
        (true, ["-s", "4096", "-n", "3000"], "was it given a larger -n"),
        (true, ["-s", "4096", "-n", "1000"], "after 1000 of 2000 per QP"),
        (
            true,
            ["-s", "1024", "-n", "2000"],
            "carried 1024 B (the last of them), this side's size is 4096",
        ),
        (false, ["-s", "1024", "-n", "2000"], "refuses this side's messages"),
    ] {
        let port = free_port().to_string();
        let mut rp = Command::new(EXE);
        rp.args([
            "bw", "send", "--peer", "perftest", "-d", "model0", "-s", "4096", "-n", "2000",
        ])
        .args([
            "-p",
            &port,
            "--backend",
            "direct",
            "--stall-secs",
            "3",
            "--oob-timeout",
            "60",
        ])
        .env("RDMAPROBE_MODEL_DIR", &d.0);
        let mut pt = vec!["ib_send_bw", "-d", "model0", "-p", &port];
        pt.extend(theirs);
        let r = rdmaprobe_against_stuck_perftest(&d, rp, &pt, &port, serves);
        let err = text(&r.stderr);
        let what = format!("rdmaprobe serves {serves}, perftest {theirs:?}");
        assert_eq!(r.status.code(), Some(1), "{what}: {err}");
        assert!(err.contains(expect), "{what}: {err}");
    }
}

/// perftest's bandwidth table's rows: size and iterations.
fn perftest_bw_rows(out: &str) -> Vec<(u64, u64)> {
    perftest_table(out, "BW peak")
        .iter()
        .map_while(|f| Some((f[0].parse().ok()?, f.get(1)?.parse().ok()?)))
        .collect()
}

/// `bw -a` on both sides (issue 23): perftest's 23 sizes, 2 B to 8 MiB, each of -n messages. The
/// client (either tool) measures every size; WRITE and READ go from size to size with nothing
/// between and exchange the last size's report at the end (a passive perftest server prints
/// that one row; rdmaprobe's server takes it, `params.peer_tool.report`); SEND exchanges the key
/// message around each size, and each server takes and times every size (rdmaprobe's:
/// `params.peer_tool.received`, 23 entries).
#[test]
fn rdmaprobe_and_perftest_bw_run_every_size_with_a() {
    if !have("ib_write_bw", "perftest") || !have("taskset", "util-linux") {
        return;
    }
    let _one = PAIRS.lock().unwrap_or_else(|p| p.into_inner());
    let d = ModelDir::new("perftest-bw-all");
    let sizes: Vec<u64> = (1..=23).map(|e| 1u64 << e).collect();
    for (op, backend, serves) in [
        ("write", "direct", false),
        ("write", "verbs", true),
        ("read", "wr", false),
        ("read", "direct", true),
        ("send", "verbs", false),
        ("send", "direct", true),
    ] {
        let port = free_port().to_string();
        let json = d.0.join(format!("bw-all-{op}-{backend}.json"));
        let mut rp = Command::new(EXE);
        rp.args([
            "bw", op, "--peer", "perftest", "-d", "model0", "-a", "-n", "20", "-p", &port,
        ])
        .args(["--backend", backend, "--oob-timeout", "60", "--json"])
        .arg(&json)
        .env("RDMAPROBE_MODEL_DIR", &d.0);
        let program = format!("ib_{op}_bw");
        let pt = [program.as_str(), "-d", "model0", "-a", "-n", "20", "-p", &port];
        let (rp_out, pt_out) = &against_perftest(&d, rp, &pt, &port, serves);
        let what = format!("bw -a {op} {backend}, rdmaprobe serves: {serves}");
        let show = |o: &Output| format!("status {:?}\n{}{}", o.status, text(&o.stdout), text(&o.stderr));
        assert!(
            rp_out.status.success() && pt_out.status.success(),
            "{what}:\nrdmaprobe {}\nperftest {}",
            show(rp_out),
            show(pt_out)
        );
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).expect("rdmaprobe's JSON")).expect("JSON");
        let tool = &doc["params"]["peer_tool"];
        let runs = doc["runs"].as_array().expect("runs");
        let ours: Vec<u64> = runs.iter().map(|r| r["size_bytes"].as_u64().unwrap_or(0)).collect();
        let pt_rows = perftest_bw_rows(&text(&pt_out.stdout));
        let every: Vec<(u64, u64)> = sizes.iter().map(|&s| (s, 20)).collect();
        if serves {
            assert!(ours.is_empty(), "{what}: the server measured {ours:?}");
            assert_eq!(pt_rows, every, "{what}: perftest's client\n{}", show(pt_out));
            if op == "send" {
                let got: Vec<(u64, u64)> = (tool["received"].as_array().expect("received").iter())
                    .map(|r| (r["size"].as_u64().unwrap_or(0), r["iters"].as_u64().unwrap_or(0)))
                    .collect();
                assert_eq!(got, every, "{what}");
            } else {
                let r = &tool["report"];
                assert_eq!(
                    (r["size"].as_u64(), r["iters"].as_u64()),
                    (Some(1 << 23), Some(20)),
                    "{what}"
                );
            }
        } else {
            assert_eq!(ours, sizes, "{what}: rdmaprobe's runs");
            assert!(runs.iter().all(|r| r["summary"]["messages"] == 20), "{what}");
            // a passive perftest server prints the one report it takes, of the last size
            let expect = if op == "send" { every } else { vec![(1 << 23, 20)] };
            assert_eq!(pt_rows, expect, "{what}: perftest's server\n{}", show(pt_out));
        }
        let _ = std::fs::remove_file(&json);
        assert_eq!(d.objects(), Vec::<String>::new(), "{what}: model0 objects left behind");
    }
}

/// perftest given `-a`, rdmaprobe `-s 2` (perftest's first size): SEND exchanges the key message
/// between two sizes as it does at its closing, so that key alone cannot tell rdmaprobe that
/// perftest is done. rdmaprobe waits for perftest's end after it (6.06's "done" and the
/// connection closed) and, where a perftest with more sizes sends its next key or waits for
/// one, ends with an error naming -a, exit 1 within the stall deadline (3 s here), never 0.
#[test]
fn a_perftest_given_a_alone_is_named_not_taken_for_its_end() {
    if !have("ib_send_lat", "perftest") || !have("taskset", "util-linux") {
        return;
    }
    let _one = PAIRS.lock().unwrap_or_else(|p| p.into_inner());
    let d = ModelDir::new("perftest-a-alone");
    for (scen, serves) in [("lat", true), ("lat", false), ("bw", true), ("bw", false)] {
        let port = free_port().to_string();
        let mut rp = Command::new(EXE);
        rp.args([
            scen, "send", "--peer", "perftest", "-d", "model0", "-s", "2", "-n", "100",
        ])
        .args([
            "-p",
            &port,
            "--backend",
            "verbs",
            "--stall-secs",
            "3",
            "--oob-timeout",
            "60",
        ])
        .env("RDMAPROBE_MODEL_DIR", &d.0);
        let program = format!("ib_send_{scen}");
        let pt = [program.as_str(), "-d", "model0", "-a", "-n", "100", "-p", &port];
        let r = rdmaprobe_against_stuck_perftest(&d, rp, &pt, &port, serves);
        let err = text(&r.stderr);
        let what = format!("{scen} send, rdmaprobe serves {serves}");
        assert_eq!(r.status.code(), Some(1), "{what}: {err}");
        assert!(err.contains("was it given -a"), "{what}: {err}");
    }
}

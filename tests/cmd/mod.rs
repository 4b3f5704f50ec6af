//! Running the `rdmaprobe` binary as a user does, for the CLI tests.

use std::process::Command;

/// The backends model0 runs on this host: verbs, wr and direct where libibverbs can reach it
/// (a kernel without RDMA, as on CI), direct alone where the kernel lists RDMA devices.
#[allow(dead_code)]
pub fn model0_backends() -> Vec<&'static str> {
    if rdmaprobe::uverbs::status().is_ok() {
        vec!["verbs", "wr", "direct"]
    } else {
        vec!["direct"]
    }
}

/// Tests that measure run one at a time: each pins its threads to the same CPUs, and two at
/// once would measure each other (one lock per test binary).
#[allow(dead_code)]
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `rdmaprobe ARGS`: (exit status, or -1 when killed by a signal; stdout; stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    run_env(args, &[])
}

/// Runs `rdmaprobe ARGS` with environment variables `env` set.
pub fn run_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    // (a test binary that opened model0 through libibverbs itself has SYSFS_PATH set: the
    // child sets up its own)
    let o = Command::new(env!("CARGO_BIN_EXE_rdmaprobe"))
        .args(args)
        .env_remove("SYSFS_PATH")
        .envs(env.iter().copied())
        .output()
        .expect("run rdmaprobe");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Starts `rdmaprobe ARGS` with its output piped (one side of a client/server pair).
#[allow(dead_code)]
pub fn spawn(args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_rdmaprobe"))
        .args(args)
        .env_remove("SYSFS_PATH")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn rdmaprobe")
}

/// Waits for a child of [`spawn`]: (exit status, or -1 when killed by a signal; stdout; stderr).
#[allow(dead_code)]
pub fn finish(c: std::process::Child) -> (i32, String, String) {
    let o = c.wait_with_output().expect("wait");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

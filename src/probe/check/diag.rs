//! The failure bundle (issue 13 point 4): when a run fails, and on request (`--diag DIR`), one
//! directory with what a vendor's CI captures: the command and the plan, the environment's
//! fingerprint, `devices` and `doctor`, the QPs' states read back, the device's counters before
//! and after, the error (with its syndrome), and the kernel log's tail where readable, with a
//! README saying what each file holds. The error message names the directory.
//!
//! The bundle is private (issue 30 points 1 and 2): written by [`crate::report::private`]
//! into a new directory of an unpredictable name (0700) under the temporary directory, or into
//! the `--diag` directory when it is this user's and nobody else may write in it (checked
//! before the run: [`check`]), files 0600 created exclusively, never through a link.

use super::counters;
use crate::backend::setup::Dev;
use crate::backend::Transport;
use crate::model::Counters;
use crate::probe::{Observer, Plan, ProbeError};
use crate::report::private::{self, PrivateDir};
use crate::scenario::ScenarioError;
use std::path::{Path, PathBuf};

/// What a bundle holds beside what it gathers itself.
pub struct Bundle<'a> {
    /// The plan that ran.
    pub plan: &'a Plan,
    /// The device it ran on.
    pub dev: &'a Dev,
    /// The QPs' states, read back while they still existed.
    pub qp_states: Vec<String>,
    /// The device's counters before the run.
    pub before: Option<(&'static str, Counters)>,
    /// The error, when the run failed.
    pub error: Option<&'a ProbeError>,
}

impl<'a> Bundle<'a> {
    /// A run's bundle: its plan and device, the counters before it and the QPs' states read back
    /// (no error yet: [`failed`] adds it).
    pub fn of(plan: &'a Plan, dev: &'a Dev, before: &Option<(&'static str, Counters)>, qp_states: Vec<String>) -> Self {
        Bundle {
            plan,
            dev,
            qp_states,
            before: before.clone(),
            error: None,
        }
    }
}

/// This process's effective uid: the owner a bundle's directory must have.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Checks, before a run, the directory `--diag` names ([`PrivateDir::named`]'s rules: a
/// directory of this user's that nobody else may write in, or one that does not exist yet);
/// a refusal is a usage error naming `--diag`, the directory and why.
pub fn check(dir: &Path) -> Result<(), ProbeError> {
    private::check_named(dir, euid()).map_err(|why| refused(dir, &why))
}

fn refused(dir: &Path, why: &str) -> ProbeError {
    ProbeError::Usage(format!("--diag {}: {why}", dir.display()))
}

/// The directory a bundle goes into: the one `--diag` names (checked again, held open), else
/// a new one of an unpredictable name under the temporary directory ([`fresh_dir`]).
pub fn bundle_dir(diag: Option<&Path>) -> Result<PrivateDir, String> {
    match diag {
        Some(dir) => PrivateDir::named(dir, euid()).map_err(|why| refused(dir, &why).to_string()),
        None => fresh_dir(),
    }
}

/// Where a failed run's bundle goes without `--diag`: a new directory under the temporary
/// directory (`$TMPDIR`, else `/tmp`), `rdmaprobe-diag-` and 16 random hex digits, created
/// exclusively with mode 0700.
pub fn fresh_dir() -> Result<PrivateDir, String> {
    PrivateDir::fresh(&std::env::temp_dir(), "rdmaprobe-diag-", euid())
}

/// What the bundle's `README.txt` says.
const README: &str = "\
rdmaprobe diagnostics bundle: what a failed run (or one given --diag) left for whoever
looks into it.

Its files are readable by their owner only (mode 0600; a directory rdmaprobe creates is
0700): they hold the command line, the host's configuration and a copy of the kernel log,
which the kernel may keep from other users (kernel.dmesg_restrict=1). Share them knowingly.

README.txt        this file
command.txt       the command line
plan.txt          the plan that ran, every parameter
environment.json  the environment's fingerprint: kernel, CPU, TSC, clocksource, governor,
                  rdma-core, device, provider, firmware, MLX5_*/IBV_* variables
devices.txt       `rdmaprobe devices`: the RDMA devices and their ports
doctor.txt        `rdmaprobe doctor`: the host's and the device's checks
doctor.json       the same as JSON (when doctor ran)
qp_states.txt     the QPs' states as the device read them back
counters.json     the device's counters before the run, after it, and what changed
error.txt         the error with its causes (or that the run succeeded)
kernel_log.txt    the last 100 lines of the kernel log (dmesg), where this user may read it:
                  a copy of what may be restricted to privileged users
";

/// Writes the bundle into `dir` (a file already there is replaced, never followed: see
/// [`crate::report::private`]); the error names the file that could not be written.
pub fn write(dir: &PrivateDir, b: &Bundle<'_>) -> Result<(), String> {
    let put = |name: &str, text: &str| dir.write(name, text.as_bytes());
    put("README.txt", README)?;
    put("command.txt", &(std::env::args().collect::<Vec<_>>().join(" ") + "\n"))?;
    put("plan.txt", &format!("{:#?}\n", b.plan))?;
    put("environment.json", &environment(b.dev))?;
    put(
        "devices.txt",
        &match super::info::devices(false, 16) {
            Ok((t, _)) => t,
            Err(e) => format!("devices failed: {e}\n"),
        },
    )?;
    let d = &b.plan.device;
    let doctor = super::doctor::run(Some(&b.dev.name()).map(|s| s.as_str()).or(d.name.as_deref()), d.port);
    put(
        "doctor.txt",
        &match &doctor {
            Ok(r) => r.text(),
            Err(e) => format!("doctor failed: {e}\n"),
        },
    )?;
    if let Ok(r) = &doctor {
        put("doctor.json", &serde_json::to_string_pretty(r).unwrap_or_default())?;
    }
    put(
        "qp_states.txt",
        &if b.qp_states.is_empty() {
            "no QP states: the QPs were gone or not yet made when this was written\n".into()
        } else {
            b.qp_states.join("\n") + "\n"
        },
    )?;
    put("counters.json", &counters_json(b))?;
    put("error.txt", &error_text(b.error))?;
    put("kernel_log.txt", &kernel_log())?;
    Ok(())
}

/// The environment's fingerprint (the TSC calibrated again, over 100 ms), as JSON; or why it
/// could not be taken.
fn environment(dev: &Dev) -> String {
    let env = crate::clock::Calibration::run(100_000_000)
        .map_err(|e| e.to_string())
        .map(|cal| {
            let mut fp = crate::report::env::Fingerprint::collect(
                &cal,
                &dev.name(),
                &dev.provider(),
                dev.firmware(),
                dev.is_model(),
            );
            fp.provider_library = dev.provider_library();
            fp
        });
    match env {
        Ok(fp) => serde_json::to_string_pretty(&fp).unwrap_or_default(),
        Err(e) => format!("{{\"error\": {:?}}}", e),
    }
}

/// The device's counters before the run and now, and what changed, as JSON.
fn counters_json(b: &Bundle<'_>) -> String {
    let after = counters::sample(b.dev);
    serde_json::to_string_pretty(&serde_json::json!({
        "before": b.before.as_ref().map(|(s, c)| serde_json::json!({"source": s, "counters": c})),
        "after": after.as_ref().map(|(s, c)| serde_json::json!({"source": s, "counters": c})),
        "delta": match (&b.before, &after) {
            (Some((_, x)), Some((_, y))) => Some(counters::delta(x, y)),
            _ => None,
        },
    }))
    .unwrap_or_default()
}

/// The error with its causes, a line each; or that the run succeeded.
fn error_text(error: Option<&ProbeError>) -> String {
    match error {
        Some(e) => {
            let mut s = e.to_string();
            let mut src = std::error::Error::source(e);
            while let Some(c) = src {
                s += &format!("\ncaused by: {c}");
                src = c.source();
            }
            s + "\n"
        }
        None => "no error: the run succeeded (bundle written on request)\n".into(),
    }
}

/// The bundle of a good run, written into `dir` (`--diag`); the observer hears where, or why it
/// was not.
pub fn write_noted(dir: &Path, b: &Bundle<'_>, obs: &mut dyn Observer) {
    match PrivateDir::named(dir, euid()).and_then(|d| write(&d, b)) {
        Ok(()) => obs.note(&format!("diagnostics written to {}", dir.display())),
        Err(why) => obs.note(&format!("diagnostics not written to {}: {why}", dir.display())),
    }
}

/// The kernel log's last 100 lines, or why they could not be read.
fn kernel_log() -> String {
    match std::process::Command::new("dmesg").output() {
        Ok(o) if o.status.success() => {
            let t = String::from_utf8_lossy(&o.stdout);
            let lines: Vec<&str> = t.lines().collect();
            lines[lines.len().saturating_sub(100)..].join("\n") + "\n"
        }
        Ok(o) => format!("dmesg failed: {}\n", String::from_utf8_lossy(&o.stderr).trim()),
        Err(e) => format!("dmesg not available: {e}\n"),
    }
}

/// A run failed with `error` (not one the user stopped): the bundle is written (into the
/// plan's `--diag` directory, else a [`fresh_dir`]) and the error returned names it.
pub fn failed(b: Bundle<'_>, error: ProbeError) -> ProbeError {
    // a run the user stopped did not fail
    if matches!(error, ProbeError::Scenario(ScenarioError::Interrupted)) {
        return error;
    }
    let b = Bundle {
        error: Some(&error),
        ..b
    };
    let written = bundle_dir(b.plan.diag.as_deref()).and_then(|dir| write(&dir, &b).map(|()| dir));
    let note = match perftest_note(&error, b.plan) {
        "" => stall_note(&error, b.plan.transport, b.plan.peer_tool),
        n => n,
    };
    match written {
        Ok(dir) => ProbeError::Bundled {
            source: Box::new(error),
            note,
            dir: dir.path().to_path_buf(),
        },
        Err(why) => ProbeError::Bundled {
            source: Box::new(error),
            note,
            dir: PathBuf::from(format!("(not written: {why})")),
        },
    }
}

/// What a completion error at the first message means against a perftest peer, which does not
/// exchange -s: its receives (lat SEND) and its buffer (bw WRITE, READ: a cycle buffer or one
/// message) are of its own -s, and a larger message is refused (remote invalid request or
/// remote access error on this side).
fn perftest_note(error: &ProbeError, plan: &crate::probe::Plan) -> &'static str {
    if plan.peer_tool != crate::probe::PeerTool::Perftest {
        return "";
    }
    let ProbeError::Scenario(ScenarioError::Backend { index, .. }) = error else {
        return "";
    };
    match &plan.scenario {
        crate::probe::Scenario::Lat(l) if l.op == crate::backend::OpKind::Send && *index == 1 => {
            "; perftest does not exchange -s or -a: a peer given another -s refuses this side's first message so \
             (its receives are of its own -s), and one given no -a has ended after its one size where this side's \
             -a goes on: give both sides the same -s, and -a to both or neither"
        }
        crate::probe::Scenario::Bw(_) => {
            "; perftest does not exchange -s or -a: a peer given a smaller -s, or no -a where this side's -a goes \
             past its size, refuses this side's messages so (its buffer holds its own -s, or a page): give both \
             sides the same -s, and -a to both or neither"
        }
        _ => "",
    }
}

/// What a stall means on an unreliable transport: UC and UD never retransmit, so one message
/// lost (a switch, a full receive queue, a software stack's drop) stops a ping-pong for good.
fn stall_note(error: &ProbeError, transport: Transport, peer: crate::probe::PeerTool) -> &'static str {
    let stalled = matches!(error, ProbeError::Scenario(ScenarioError::Stalled { .. }));
    if stalled && peer == crate::probe::PeerTool::Perftest {
        return "; perftest does not exchange -s, -a, -n and -c: a peer given another size, count or connection \
                stalls the run (at the first message for another -s of WRITE or another -c, after the peer's last for \
                another -n, at the next size where one side has -a and the other not): give both sides the same -s, -n \
                and -c, and -a to both or neither";
    }
    match transport {
        Transport::Uc | Transport::Ud if stalled => {
            "; UC and UD do not retransmit: one message lost stops the run for good (the bundle's counters show where it went)"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::PeerTool;
    use std::time::Duration;

    #[test]
    fn a_stall_on_uc_or_ud_says_they_do_not_retransmit() {
        let stall = || {
            ProbeError::Scenario(ScenarioError::Stalled {
                side: "client",
                index: 220,
                what: "the server's SEND",
                waited: Duration::from_secs(60),
            })
        };
        for t in [Transport::Uc, Transport::Ud] {
            assert!(
                stall_note(&stall(), t, PeerTool::Rdmaprobe).contains("do not retransmit"),
                "{t:?}"
            );
        }
        // RC retransmits: a stall there is the peer or the link, as the error says
        assert_eq!(stall_note(&stall(), Transport::Rc, PeerTool::Rdmaprobe), "");
        // only a stall: another failure on UC is what it says
        assert_eq!(
            stall_note(&ProbeError::Peer("x".into()), Transport::Uc, PeerTool::Perftest),
            ""
        );
        let e = ProbeError::Bundled {
            source: Box::new(stall()),
            note: stall_note(&stall(), Transport::Uc, PeerTool::Rdmaprobe),
            dir: "/tmp/d".into(),
        };
        let text = e.to_string();
        assert!(text.starts_with("client: no progress for 60s at operation 220 (the server's SEND); the peer stopped or the link is down; UC and UD do not retransmit"), "{text}");
        assert!(text.ends_with(" (diagnostics: /tmp/d)"), "{text}");
    }

    #[test]
    fn a_stall_against_perftest_names_the_flags_both_must_share() {
        let stall = ProbeError::Scenario(ScenarioError::Stalled {
            side: "client",
            index: 1001,
            what: "the perftest server's SEND",
            waited: Duration::from_secs(10),
        });
        for t in [Transport::Rc, Transport::Ud] {
            let note = stall_note(&stall, t, PeerTool::Perftest);
            assert!(note.contains("give both sides the same -s, -n and -c"), "{t:?}: {note}");
        }
        // a failure that is not a stall is what it says, perftest or not
        assert_eq!(
            stall_note(&ProbeError::Peer("x".into()), Transport::Rc, PeerTool::Perftest),
            ""
        );
    }

    #[test]
    fn a_refused_first_send_against_perftest_names_the_size() {
        use crate::backend::{BackendError, OpKind};
        use crate::probe::{LatPlan, Plan, Scenario};
        let refused = |index| {
            ProbeError::Scenario(ScenarioError::Backend {
                side: "client",
                index,
                source: BackendError::Invalid {
                    backend: "direct",
                    why: "requester error CQE".into(),
                },
            })
        };
        let plan = |op, tool| Plan {
            peer_tool: tool,
            ..Plan::loopback(Scenario::Lat(LatPlan::new(op, 64)))
        };
        let send = plan(OpKind::Send, PeerTool::Perftest);
        assert!(perftest_note(&refused(1), &send).contains("refuses this side's first message"));
        // later messages, another operation or rdmaprobe's own peer: the error as it is
        assert_eq!(perftest_note(&refused(2), &send), "");
        assert_eq!(perftest_note(&refused(1), &plan(OpKind::Write, PeerTool::Perftest)), "");
        assert_eq!(perftest_note(&refused(1), &plan(OpKind::Send, PeerTool::Rdmaprobe)), "");
        // bw: the first WRITE or READ into a buffer of perftest's -s
        let bw = Plan {
            peer_tool: PeerTool::Perftest,
            ..Plan::loopback(Scenario::Bw(crate::probe::BwPlan::new(OpKind::Write, 65536)))
        };
        assert!(perftest_note(&refused(0), &bw).contains("refuses this side's messages"));
        // any QP's, whichever message (with -q over 1, another QP's may have completed first)
        assert!(perftest_note(&refused(7), &bw).contains("refuses this side's messages"));
        let stall = ProbeError::Scenario(ScenarioError::Stalled {
            side: "client",
            index: 0,
            what: "completions",
            waited: Duration::from_secs(10),
        });
        assert_eq!(perftest_note(&stall, &bw), "");
    }
}

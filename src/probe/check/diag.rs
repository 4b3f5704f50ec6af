//! The failure bundle (issue 13 point 4): when a run fails, and on request (`--diag DIR`), one
//! directory with what a vendor's CI captures: the command and the plan, the environment's
//! fingerprint, `devices` and `doctor`, the QPs' states read back, the device's counters before
//! and after, the error (with its syndrome), and the kernel log's tail where readable. The
//! error message names the directory.

use super::counters;
use crate::backend::setup::Dev;
use crate::model::Counters;
use crate::probe::{Observer, Plan, ProbeError};
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

/// Where a failed run's bundle goes without `--diag`: a new directory under the system's
/// temporary directory, named by time and process.
pub fn default_dir() -> PathBuf {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    std::env::temp_dir().join(format!("rdmaprobe-diag-{t}-{}", std::process::id()))
}

/// Writes the bundle into `dir` (created; files in it replaced); returns what could not be
/// gathered, as notes in `notes.txt` too.
pub fn write(dir: &Path, b: &Bundle<'_>) -> Result<(), String> {
    crate::report::output::make_dir(dir)?;
    let put = |name: &str, text: &str| -> Result<(), String> {
        crate::report::output::write(&dir.join(name), text.as_bytes()).map_err(|e| e.to_string())
    };
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
    match write(dir, b) {
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

/// A run failed with `error` (not one the user stopped): the bundle is written (into the plan's `--diag` directory, else
/// [`default_dir`]) and the error returned names it.
pub fn failed(b: Bundle<'_>, error: ProbeError) -> ProbeError {
    // a run the user stopped did not fail
    if matches!(error, ProbeError::Scenario(crate::scenario::ScenarioError::Interrupted)) {
        return error;
    }
    let dir = b.plan.diag.clone().unwrap_or_else(default_dir);
    let b = Bundle {
        error: Some(&error),
        ..b
    };
    match write(&dir, &b) {
        Ok(()) => ProbeError::Bundled {
            source: Box::new(error),
            dir,
        },
        Err(why) => ProbeError::Bundled {
            source: Box::new(error),
            dir: PathBuf::from(format!("(not written: {why})")),
        },
    }
}

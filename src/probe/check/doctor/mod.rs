//! `rdmaprobe doctor`: what on this host would make RDMA slow or fail, checked one by one. Each
//! check has an id, a status (pass, warn, fail, unknown when it cannot be read, n/a when it does
//! not apply to the device), the evidence read and the fix. Most "slow RDMA" is the host: CPU
//! frequency and idle states, NUMA placement, memory limits, IOMMU, a PCIe slot at half width, an
//! MTU mismatch, a missing RoCE v2 GID, a firewall on UDP 4791.
//!
//! Everything is read from `/sys` and `/proc` through [`Sys`] (a root directory, so tests give a
//! fake tree), and from the device through libibverbs.

use crate::probe::ProbeError;
use crate::verbs::{DeviceList, VerbsError};
use std::fmt::Write;
use std::path::PathBuf;

/// A check's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// As it should be.
    Pass,
    /// Works, but costs latency or stability.
    Warn,
    /// Will fail or mislead.
    Fail,
    /// Could not be read here.
    Unknown,
    /// Does not apply to this device (model0, Soft-RoCE, InfiniBand).
    #[serde(rename = "n/a")]
    NotApplicable,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
            Status::Unknown => "unknown",
            Status::NotApplicable => "n/a",
        }
    }
}

/// One check.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Check {
    /// Stable id (`cpu.governor`, `pcie.link`, ...).
    pub id: &'static str,
    /// The outcome.
    pub status: Status,
    /// What was read.
    pub evidence: String,
    /// What to do (empty on pass).
    pub fix: String,
}

fn check(id: &'static str, status: Status, evidence: impl Into<String>, fix: impl Into<String>) -> Check {
    Check {
        id,
        status,
        evidence: evidence.into(),
        fix: fix.into(),
    }
}

/// What kind of device was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// A NIC (mlx5 or other hardware provider).
    Hardware,
    /// Soft-RoCE (`rdma_rxe`): a software RDMA stack over an Ethernet netdev.
    SoftRoce,
    /// model0, the built-in software model: host checks apply, device checks do not.
    Model0,
}

/// The device as the checks see it.
#[derive(Debug, Clone, Default)]
pub struct DevView {
    /// Its name (`mlx5_0`, `rxe0`, `model0`).
    pub name: String,
    /// Provider (`mlx5`, `rxe`, `model0`).
    pub provider: String,
    /// The port checked.
    pub port: u8,
    /// Port state and physical state (as `ibv_devinfo` names them).
    pub state: String,
    /// Physical state.
    pub phys_state: String,
    /// `InfiniBand` or `Ethernet`.
    pub link_layer: String,
    /// Active MTU in bytes.
    pub active_mtu: u32,
    /// The GID table's first entries: index, RoCE version (`RoCE v2`, ...), IPv4 address.
    pub gids: Vec<(u32, String, Option<std::net::Ipv4Addr>)>,
}

/// The report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Doctor {
    /// The device checked.
    pub device: String,
    /// Its kind.
    pub kind: DeviceKind,
    /// The port.
    pub port: u8,
    /// Every check, host first.
    pub checks: Vec<Check>,
}

impl Doctor {
    /// Whether a check failed (the command line then exits 1).
    pub fn failed(&self) -> bool {
        self.checks.iter().any(|c| c.status == Status::Fail)
    }

    /// As text: one line per check, the fix under it.
    pub fn text(&self) -> String {
        let mut s = format!(
            "rdmaprobe doctor: {} port {} ({})\n",
            self.device,
            self.port,
            match self.kind {
                DeviceKind::Hardware => "hardware",
                DeviceKind::SoftRoce => "Soft-RoCE: a software RDMA stack, its figures are not a NIC's",
                DeviceKind::Model0 =>
                    "model0: the built-in software model, its PCIe, netdev and NUMA checks do not apply",
            }
        );
        for c in &self.checks {
            let _ = writeln!(s, "  {:<8} {:<18} {}", c.status.as_str(), c.id, c.evidence);
            if !c.fix.is_empty() && matches!(c.status, Status::Warn | Status::Fail | Status::Unknown) {
                let _ = writeln!(s, "  {:<8} {:<18} fix: {}", "", "", c.fix);
            }
        }
        let n = |st: Status| self.checks.iter().filter(|c| c.status == st).count();
        let _ = writeln!(
            s,
            "{} pass, {} warn, {} fail, {} unknown, {} n/a",
            n(Status::Pass),
            n(Status::Warn),
            n(Status::Fail),
            n(Status::Unknown),
            n(Status::NotApplicable)
        );
        s
    }
}

/// Where `/sys` and `/proc` are read from (`/` on a real host).
pub struct Sys {
    root: PathBuf,
}

impl Sys {
    /// The host's own.
    pub fn host() -> Self {
        Sys {
            root: PathBuf::from("/"),
        }
    }
    /// A tree under `root` (tests).
    pub fn at(root: impl Into<PathBuf>) -> Self {
        Sys { root: root.into() }
    }
    fn path(&self, p: &str) -> PathBuf {
        self.root.join(p.trim_start_matches('/'))
    }
    fn read(&self, p: &str) -> Option<String> {
        std::fs::read_to_string(self.path(p)).ok().map(|s| s.trim().to_string())
    }
    fn list(&self, p: &str) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.path(p))
            .map(|r| {
                r.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
    fn link_name(&self, p: &str) -> Option<String> {
        std::fs::read_link(self.path(p))
            .ok()
            .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()))
    }
}

/// Runs every check for `device` (`None`: the first RDMA device, else model0) and `port`.
pub fn run(device: Option<&str>, port: u8) -> Result<Doctor, ProbeError> {
    let sys = Sys::host();
    let (view, kind) = open(device, port)?;
    let mut checks = host_checks(&sys);
    checks.push(devices_check(device));
    checks.extend(device_checks(&sys, &view, kind));
    checks.push(clock::nic_clock_check(&view.name));
    Ok(Doctor {
        device: view.name,
        kind,
        port,
        checks,
    })
}

/// `rdma.devices`: the RDMA devices visible to libibverbs, as `rdmaprobe devices` judges them
/// (exit 3 when none): passes naming them; with none, a failure when the device was left to the
/// default (model0 stands in), a warning when model0 was asked for by name (`-d model0`), either
/// with the reason and what to do from the same explanation `devices` prints, and that model0
/// still runs.
fn devices_check(device: Option<&str>) -> Check {
    const MODEL0: &str = "model0 still runs: -d model0; `rdmaprobe devices` exits 3";
    let none = |evidence: String, fix: String| {
        let status = if device.is_some() { Status::Warn } else { Status::Fail };
        check("rdma.devices", status, evidence, fix)
    };
    match DeviceList::get() {
        Ok(l) if !l.names().is_empty() => check(
            "rdma.devices",
            Status::Pass,
            format!("RDMA devices visible to libibverbs: {}", l.names().join(", ")),
            "",
        ),
        Ok(_) => none(
            format!("no RDMA device visible to libibverbs (the device list is empty); {MODEL0}"),
            "load the NIC's driver (modprobe mlx5_ib) or add Soft-RoCE (rdma link add rxe0 type rxe netdev eth0)"
                .into(),
        ),
        Err(VerbsError::NoDevice(why)) => {
            let text = why.explain();
            let (first, rest) = text.split_once('\n').unwrap_or((text, ""));
            none(
                format!("no RDMA device visible to libibverbs: {first} {MODEL0}"),
                rest.replace('\n', " "),
            )
        }
        Err(e) => check(
            "rdma.devices",
            Status::Unknown,
            format!("the RDMA device list cannot be read from libibverbs: {e}"),
            "`rdmaprobe devices` says why",
        ),
    }
}

fn open(device: Option<&str>, port: u8) -> Result<(DevView, DeviceKind), ProbeError> {
    let model = || {
        (
            DevView {
                name: crate::model::DEVICE_NAME.into(),
                provider: "model0".into(),
                port: 1,
                state: "ACTIVE".into(),
                phys_state: "LINK_UP".into(),
                link_layer: "InfiniBand".into(),
                active_mtu: 4096,
                gids: Vec::new(),
            },
            DeviceKind::Model0,
        )
    };
    let name = match device {
        Some(n) if n == crate::model::DEVICE_NAME => return Ok(model()),
        Some(n) => n.to_string(),
        None => match DeviceList::get() {
            Ok(l) => match l.names().into_iter().next() {
                Some(n) => n,
                None => return Ok(model()),
            },
            Err(VerbsError::NoDevice(_)) => return Ok(model()),
            Err(e) => return Err(e.into()),
        },
    };
    let ctx = crate::backend::setup::open_named(&name)?;
    let info = ctx.query()?;
    let p = ctx.query_port(port)?;
    let gids = ctx
        .gids(port, 16)
        .unwrap_or_default()
        .into_iter()
        .map(|g| (g.index, format!("{:?}", g.gid_type), g.ipv4()))
        .collect();
    let kind = if info.provider == "rxe" {
        DeviceKind::SoftRoce
    } else {
        DeviceKind::Hardware
    };
    Ok((
        DevView {
            name,
            provider: info.provider,
            port,
            state: p.state.into(),
            phys_state: p.phys_state.into(),
            link_layer: p.link_layer.into(),
            active_mtu: p.active_mtu,
            gids,
        },
        kind,
    ))
}

mod clock;
mod device;
pub(crate) use device::{drops_4791, nft_ruleset};
mod host;
#[cfg(test)]
mod tests;

pub use device::{cpulist_has, device_checks, firewall};
pub use host::{host_checks, MEMLOCK_NEEDED};

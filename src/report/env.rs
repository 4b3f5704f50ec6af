//! The environment fingerprint written into every result.
#![forbid(unsafe_code)]

use crate::clock::Calibration;
use std::fs;

fn read_trim(p: &str) -> Option<String> {
    fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The environment variable that sets the host name results record: a label of the user's
/// choice, or empty for none (results shared outside the site); unset, the kernel's host name.
pub const HOST_NAME_VAR: &str = "RDMAPROBE_HOST_NAME";

/// The host name to record, given [`HOST_NAME_VAR`]'s value (`var`).
fn host_name(var: Option<std::ffi::OsString>) -> Option<String> {
    match var {
        Some(v) => Some(v.to_string_lossy().trim().to_string()).filter(|v| !v.is_empty()),
        None => read_trim("/proc/sys/kernel/hostname"),
    }
}

/// What the results were measured on.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct Fingerprint {
    /// The machine's host name (`/proc/sys/kernel/hostname`), when it could be read, or the label
    /// [`HOST_NAME_VAR`] gives (empty: none); a file written before it was recorded has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Kernel release.
    pub kernel: String,
    /// CPU model name.
    pub cpu_model: String,
    /// Online CPUs.
    pub cpus: usize,
    /// The CPUs the measuring threads are pinned to, in the order taken (empty: not pinned).
    #[serde(default)]
    pub pinned_cpus: Vec<usize>,
    /// The NUMA node the run was confined to (`--numa-node`).
    #[serde(default)]
    pub numa_node: Option<u32>,
    /// TSC rate in Hz.
    pub tsc_hz: f64,
    /// Where the rate came from.
    pub tsc_source: String,
    /// Invariant TSC.
    pub invariant_tsc: bool,
    /// Kernel clocksource.
    pub clocksource: Option<String>,
    /// cpufreq governor of CPU 0 (none in most VMs).
    pub governor: Option<String>,
    /// rdma-core release built against.
    pub rdma_core_built: String,
    /// libibverbs loaded (path, version).
    pub libibverbs_loaded: String,
    /// libibverbs loaded, version.
    pub libibverbs_version: String,
    /// Device name.
    pub device: String,
    /// Provider (rxe, mlx5, model0, ...).
    pub provider: String,
    /// The provider library libibverbs loaded for the device (resolved path; on model0 the
    /// libmlx5 its `verbs` and `wr` backends run through), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_library: Option<String>,
    /// Firmware version.
    pub firmware: Option<String>,
    /// Whether the device is the software model.
    pub software_model: bool,
    /// Whether the machine runs under a hypervisor (CPUID).
    pub virtualized: bool,
    /// Port attributes (link layer, MTU, speed, width), when a port is used.
    pub port: Option<serde_json::Value>,
    /// `MLX5_*` and `IBV_*` environment variables that change the provider's paths.
    pub env_vars: Vec<(String, String)>,
}

impl Fingerprint {
    /// Collects the machine-wide part; the device part comes from the caller.
    pub fn collect(cal: &Calibration, device: &str, provider: &str, firmware: Option<String>, model: bool) -> Self {
        let (lib, ver) = crate::verbs::device::libibverbs_loaded();
        let cpu_model = read_trim("/proc/cpuinfo")
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split(':').nth(1))
                    .map(|s| s.trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let virtualized = read_trim("/proc/cpuinfo").is_some_and(|s| s.contains(" hypervisor"));
        let mut env_vars: Vec<(String, String)> = std::env::vars()
            .filter(|(k, _)| k.starts_with("MLX5_") || k.starts_with("IBV_") || k.starts_with("RDMAV_"))
            .collect();
        env_vars.sort();
        Fingerprint {
            host: host_name(std::env::var_os(HOST_NAME_VAR)),
            kernel: read_trim("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
            cpu_model,
            cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            pinned_cpus: crate::workers::pinned_ids(),
            numa_node: crate::workers::numa_node(),
            tsc_hz: cal.hz,
            tsc_source: cal.source.as_str().into(),
            invariant_tsc: cal.invariant_tsc,
            clocksource: read_trim("/sys/devices/system/clocksource/clocksource0/current_clocksource"),
            governor: read_trim("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
            rdma_core_built: env!("RDMAPROBE_BUILD_RDMA_CORE").into(),
            libibverbs_loaded: lib,
            libibverbs_version: ver,
            device: device.into(),
            provider: provider.into(),
            provider_library: None,
            firmware,
            software_model: model,
            virtualized,
            port: None,
            env_vars,
        }
    }

    /// Warnings every report repeats.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if self.software_model {
            w.push("device is model0, a software model: figures describe the tool and the data path, not a NIC".into());
        }
        if self.provider == "rxe" {
            w.push("device is Soft-RoCE (rxe): a software RDMA stack, not NIC performance".into());
        }
        if !self.invariant_tsc {
            w.push("the TSC is not invariant: timestamps may drift with power states".into());
        }
        if self.virtualized {
            w.push("running under a hypervisor: timings include virtualisation effects".into());
        }
        // what libmlx5's BlueFlame and signature variables make each post path do
        let var = |k: &str| self.env_vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        if var("MLX5_SHUT_UP_BF").is_some_and(|v| v != "0") {
            w.push(
                "MLX5_SHUT_UP_BF is set: libmlx5 rings the 8-byte doorbell only, never BlueFlame; the direct \
                 path does the same (doorbell mode, whatever --db-mode asks)"
                    .into(),
            );
        }
        if var("MLX5_POST_SEND_PREFER_BF") == Some("0") {
            w.push(
                "MLX5_POST_SEND_PREFER_BF=0: libmlx5 copies only inline WQEs by BlueFlame, the direct path's bf \
                 modes copy every single WQE of up to 256 B: their post costs differ by that"
                    .into(),
            );
        }
        if var("MLX5_QP_SIGNATURE").is_some() {
            w.push(
                "MLX5_QP_SIGNATURE is set: the NIC would verify WQE signatures, which the direct path does not \
                 write: the direct backend is refused"
                    .into(),
            );
        }
        w
    }
}

#[cfg(test)]
mod tests {
    use super::host_name;
    use std::ffi::OsString;

    #[test]
    fn the_host_name_is_the_kernels_unless_the_user_gives_a_label_or_none() {
        assert_eq!(host_name(Some(OsString::from(" lab-a "))), Some("lab-a".into()));
        assert_eq!(host_name(Some(OsString::from(""))), None);
        assert_eq!(host_name(Some(OsString::from("  "))), None);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
        assert_eq!(
            host_name(None),
            kernel.map(|k| k.trim().to_string()).filter(|k| !k.is_empty())
        );
    }
}

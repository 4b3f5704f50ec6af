//! The host's checks: CPU frequency and idle states, NUMA balancing, memory, clock, the
//! hypervisor, the IOMMU, irqbalance, rdma-core.

use super::{check, Check, Status, Sys};

/// The checks of the host: CPU frequency and idle states, NUMA balancing, memory, clock, the
/// hypervisor, the IOMMU, irqbalance, rdma-core.
pub fn host_checks(sys: &Sys) -> Vec<Check> {
    let mut v = vec![governor(sys), cstates(sys)];
    v.push(match sys.read("/proc/sys/kernel/numa_balancing").as_deref() {
        Some("0") => check("numa.balancing", Status::Pass, "kernel.numa_balancing = 0", ""),
        Some(x) => check(
            "numa.balancing",
            Status::Warn,
            format!("kernel.numa_balancing = {x}: pages of a run's buffers may migrate under it"),
            "sysctl -w kernel.numa_balancing=0",
        ),
        None => check("numa.balancing", Status::Pass, "no NUMA balancing in this kernel", ""),
    });
    v.push(hugepages(sys));
    v.push(memlock(sys));
    v.push(match sys.read("/sys/kernel/mm/transparent_hugepage/enabled") {
        Some(t) if t.contains("[always]") => check(
            "thp",
            Status::Warn,
            format!("transparent huge pages: {t} (khugepaged compaction stalls show in tails)"),
            "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled",
        ),
        Some(t) => check("thp", Status::Pass, format!("transparent huge pages: {t}"), ""),
        None => check(
            "thp",
            Status::Unknown,
            "no /sys/kernel/mm/transparent_hugepage/enabled",
            "",
        ),
    });
    v.push(irqbalance(sys));
    v.push(clocksource(sys));
    v.push(hypervisor(sys));
    v.push(iommu(sys));
    let (lib, version) = crate::verbs::device::libibverbs_loaded();
    v.push(check(
        "rdma_core",
        Status::Pass,
        format!(
            "built against rdma-core {}; loaded {} {}",
            env!("RDMAPROBE_BUILD_RDMA_CORE"),
            lib,
            version
        ),
        "",
    ));
    v
}

fn governor(sys: &Sys) -> Check {
    let cpus: Vec<String> = sys
        .list("/sys/devices/system/cpu")
        .into_iter()
        .filter(|c| c.starts_with("cpu") && c[3..].parse::<u32>().is_ok())
        .collect();
    let govs: Vec<(String, String)> = cpus
        .iter()
        .filter_map(|c| {
            sys.read(&format!("/sys/devices/system/cpu/{c}/cpufreq/scaling_governor"))
                .map(|g| (c.clone(), g))
        })
        .collect();
    if govs.is_empty() {
        return check(
            "cpu.governor",
            Status::Unknown,
            "no cpufreq governor (a VM, or frequency fixed by firmware)",
            "check the BIOS power profile (maximum performance) or the hypervisor's CPU pinning",
        );
    }
    let slow: Vec<String> = govs
        .iter()
        .filter(|(_, g)| g != "performance")
        .map(|(c, g)| format!("{c}={g}"))
        .collect();
    if slow.is_empty() {
        check(
            "cpu.governor",
            Status::Pass,
            format!("performance on all {} CPUs", govs.len()),
            "",
        )
    } else {
        check(
            "cpu.governor",
            Status::Warn,
            format!("not performance: {}", slow.join(" ")),
            "cpupower frequency-set -g performance",
        )
    }
}

fn cstates(sys: &Sys) -> Check {
    let cmdline = sys.read("/proc/cmdline").unwrap_or_default();
    let limit = sys.read("/sys/module/intel_idle/parameters/max_cstate");
    let base = "/sys/devices/system/cpu/cpu0/cpuidle";
    let states = sys.list(base);
    if states.is_empty() {
        return check(
            "cpu.cstates",
            Status::Pass,
            "no cpuidle states (none, or a VM idling by halt)",
            "",
        );
    }
    let deep: Vec<String> = states
        .iter()
        .filter_map(|s| {
            let lat: u64 = sys.read(&format!("{base}/{s}/latency"))?.parse().ok()?;
            let off = sys.read(&format!("{base}/{s}/disable")).as_deref() == Some("1");
            let name = sys.read(&format!("{base}/{s}/name")).unwrap_or_else(|| s.clone());
            (lat > 10 && !off).then(|| format!("{name} ({lat} us)"))
        })
        .collect();
    let ev = format!(
        "deep idle states enabled: {}{}{}",
        if deep.is_empty() {
            "none".into()
        } else {
            deep.join(", ")
        },
        limit
            .map(|l| format!("; intel_idle.max_cstate={l}"))
            .unwrap_or_default(),
        if cmdline.contains("max_cstate") {
            "; set on the kernel command line"
        } else {
            ""
        }
    );
    if deep.is_empty() {
        check("cpu.cstates", Status::Pass, ev, "")
    } else {
        check(
            "cpu.cstates",
            Status::Warn,
            ev,
            "boot with intel_idle.max_cstate=1 processor.max_cstate=1, or cpupower idle-set -D 10",
        )
    }
}

fn hugepages(sys: &Sys) -> Check {
    let mi = sys.read("/proc/meminfo").unwrap_or_default();
    let field = |k: &str| {
        mi.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    match (field("HugePages_Total:"), field("HugePages_Free:"), field("Hugepagesize:")) {
        (Some(t), Some(f), Some(sz)) if f > 0 => check(
            "hugepages",
            Status::Pass,
            format!("{f} of {t} huge pages of {sz} kB free"),
            "",
        ),
        (Some(t), Some(_), Some(sz)) => check(
            "hugepages",
            Status::Warn,
            format!("no free huge pages ({t} of {sz} kB reserved): buffers use 4 KiB pages (more TLB misses on large messages)"),
            "sysctl -w vm.nr_hugepages=512",
        ),
        _ => check("hugepages", Status::Unknown, "no HugePages_* in /proc/meminfo", ""),
    }
}

/// What a default run registers at most (a suite's largest buffers on three backends, both
/// ends), bytes.
pub const MEMLOCK_NEEDED: u64 = 64 << 20;

fn memlock(sys: &Sys) -> Check {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct, which lives on this stack frame.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return check("memlock", Status::Unknown, "getrlimit(RLIMIT_MEMLOCK) failed", "");
    }
    // CAP_IPC_LOCK (capability 14) lifts the limit for memory registration
    let ipc_lock = sys
        .read("/proc/self/status")
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("CapEff:").map(|v| v.trim().to_string()))
        })
        .and_then(|v| u64::from_str_radix(&v, 16).ok())
        .is_some_and(|caps| caps & (1 << 14) != 0);
    if ipc_lock {
        return check(
            "memlock",
            Status::Pass,
            format!(
                "CAP_IPC_LOCK held: registration is not bound by RLIMIT_MEMLOCK ({} KiB)",
                lim.rlim_cur >> 10
            ),
            "",
        );
    }
    if lim.rlim_cur == libc::RLIM_INFINITY || lim.rlim_cur >= MEMLOCK_NEEDED {
        let v = if lim.rlim_cur == libc::RLIM_INFINITY {
            "unlimited".into()
        } else {
            format!("{} MiB", lim.rlim_cur >> 20)
        };
        check("memlock", Status::Pass, format!("RLIMIT_MEMLOCK {v}"), "")
    } else {
        check(
            "memlock",
            Status::Fail,
            format!(
                "RLIMIT_MEMLOCK {} KiB, below the {} MiB a suite registers: memory registration fails (ENOMEM)",
                lim.rlim_cur >> 10,
                MEMLOCK_NEEDED >> 20
            ),
            "ulimit -l unlimited (or memlock in /etc/security/limits.conf, LimitMEMLOCK= for a service)",
        )
    }
}

fn irqbalance(sys: &Sys) -> Check {
    let running = sys
        .list("/proc")
        .iter()
        .filter(|p| p.parse::<u32>().is_ok())
        .any(|p| sys.read(&format!("/proc/{p}/comm")).as_deref() == Some("irqbalance"));
    if running {
        check(
            "irqbalance",
            Status::Warn,
            "irqbalance is running: it may move the NIC's interrupts between runs",
            "stop it (systemctl stop irqbalance) and pin the NIC's IRQs to its NUMA node",
        )
    } else {
        check("irqbalance", Status::Pass, "irqbalance is not running", "")
    }
}

fn clocksource(sys: &Sys) -> Check {
    let cs = sys.read("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    let flags = sys.read("/proc/cpuinfo").unwrap_or_default();
    let invariant = flags.contains("constant_tsc") && flags.contains("nonstop_tsc");
    match cs.as_deref() {
        Some("tsc") if invariant => check(
            "clock",
            Status::Pass,
            "clocksource tsc, invariant TSC (constant_tsc nonstop_tsc)",
            "",
        ),
        Some(c) if invariant => check(
            "clock",
            Status::Warn,
            format!("clocksource {c} (the kernel distrusts the TSC); the TSC is invariant, rdmaprobe calibrates it"),
            "look for 'clocksource' in dmesg; tsc=reliable on the kernel command line if the TSC is sound",
        ),
        Some(c) => check(
            "clock",
            Status::Warn,
            format!("clocksource {c}; no invariant TSC flags: timestamps may drift with power states"),
            "enable invariant TSC in the BIOS (or the hypervisor's CPU model)",
        ),
        None => check("clock", Status::Unknown, "no current_clocksource", ""),
    }
}

fn hypervisor(sys: &Sys) -> Check {
    let info = sys.read("/proc/cpuinfo").unwrap_or_default();
    if info
        .lines()
        .any(|l| l.starts_with("flags") && l.split_whitespace().any(|f| f == "hypervisor"))
    {
        let vendor = sys
            .read("/sys/hypervisor/type")
            .or_else(|| sys.read("/sys/class/dmi/id/sys_vendor"))
            .unwrap_or_else(|| "unknown".into());
        check(
            "hypervisor",
            Status::Warn,
            format!("running under a hypervisor ({vendor}): timings include virtualisation effects"),
            "measure on bare metal, or pin vCPUs and pass the NIC through (SR-IOV VF)",
        )
    } else {
        check("hypervisor", Status::Pass, "bare metal (no hypervisor flag)", "")
    }
}

fn iommu(sys: &Sys) -> Check {
    let cmdline = sys.read("/proc/cmdline").unwrap_or_default();
    let units = sys.list("/sys/class/iommu");
    let pt = cmdline
        .split_whitespace()
        .any(|a| a == "iommu=pt" || a == "iommu.passthrough=1");
    if units.is_empty() {
        check("iommu", Status::Pass, "no IOMMU active", "")
    } else if pt {
        check(
            "iommu",
            Status::Pass,
            format!("IOMMU {} in passthrough (iommu=pt)", units.join(",")),
            "",
        )
    } else {
        check(
            "iommu",
            Status::Warn,
            format!(
                "IOMMU {} translating DMA (no iommu=pt): IOTLB misses cost on large transfers",
                units.join(",")
            ),
            "boot with iommu=pt (intel_iommu=on iommu=pt for SR-IOV)",
        )
    }
}

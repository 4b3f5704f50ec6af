//! The checks against fake /sys and /proc trees.

use super::*;

fn tree(files: &[(&str, &str)]) -> (tempdir::Dir, Sys) {
    let d = tempdir::Dir::new();
    for (p, c) in files {
        let f = d.0.join(p.trim_start_matches('/'));
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, c).unwrap();
    }
    let s = Sys::at(&d.0);
    (d, s)
}

mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new() -> Self {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "rdmaprobe-doctor-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn find<'a>(v: &'a [Check], id: &str) -> &'a Check {
    v.iter().find(|c| c.id == id).unwrap_or_else(|| panic!("no check {id}"))
}

#[test]
fn host_findings_are_read_and_judged() {
    let (_d, s) = tree(&[
        ("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "powersave\n"),
        ("/sys/devices/system/cpu/cpu1/cpufreq/scaling_governor", "performance\n"),
        ("/sys/devices/system/cpu/cpu0/cpuidle/state0/name", "POLL"),
        ("/sys/devices/system/cpu/cpu0/cpuidle/state0/latency", "0"),
        ("/sys/devices/system/cpu/cpu0/cpuidle/state2/name", "C6"),
        ("/sys/devices/system/cpu/cpu0/cpuidle/state2/latency", "133"),
        ("/sys/devices/system/cpu/cpu0/cpuidle/state2/disable", "0"),
        ("/proc/sys/kernel/numa_balancing", "1"),
        (
            "/proc/meminfo",
            "MemTotal: 1 kB\nHugePages_Total: 0\nHugePages_Free: 0\nHugepagesize: 2048 kB\n",
        ),
        ("/sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never"),
        ("/proc/4242/comm", "irqbalance\n"),
        (
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            "hpet",
        ),
        ("/proc/cpuinfo", "flags : fpu tsc constant_tsc nonstop_tsc hypervisor\n"),
        ("/sys/class/iommu/dmar0/x", ""),
        ("/proc/cmdline", "root=/dev/sda1 quiet"),
    ]);
    let v = host_checks(&s);
    assert_eq!(find(&v, "cpu.governor").status, Status::Warn);
    assert!(find(&v, "cpu.governor").evidence.contains("cpu0=powersave"));
    assert_eq!(find(&v, "cpu.cstates").status, Status::Warn);
    assert!(find(&v, "cpu.cstates").evidence.contains("C6 (133 us)"));
    assert_eq!(find(&v, "numa.balancing").status, Status::Warn);
    assert_eq!(find(&v, "hugepages").status, Status::Warn);
    assert_eq!(find(&v, "thp").status, Status::Warn);
    assert_eq!(find(&v, "irqbalance").status, Status::Warn);
    assert_eq!(find(&v, "clock").status, Status::Warn);
    assert_eq!(find(&v, "hypervisor").status, Status::Warn);
    assert_eq!(find(&v, "iommu").status, Status::Warn);
    let (_d, s) = tree(&[
        ("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "performance"),
        ("/proc/sys/kernel/numa_balancing", "0"),
        ("/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never"),
        (
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
            "tsc",
        ),
        ("/proc/cpuinfo", "flags : fpu tsc constant_tsc nonstop_tsc\n"),
        ("/proc/cmdline", "iommu=pt"),
        ("/sys/class/iommu/dmar0/x", ""),
    ]);
    let v = host_checks(&s);
    for id in [
        "cpu.governor",
        "cpu.cstates",
        "numa.balancing",
        "thp",
        "irqbalance",
        "clock",
        "hypervisor",
        "iommu",
    ] {
        assert_eq!(find(&v, id).status, Status::Pass, "{id}: {:?}", find(&v, id));
    }
}

#[test]
fn device_findings_are_read_and_judged() {
    let (_d, s) = tree(&[
        (
            "/sys/class/infiniband/mlx5_0/device/current_link_speed",
            "8.0 GT/s PCIe",
        ),
        ("/sys/class/infiniband/mlx5_0/device/max_link_speed", "8.0 GT/s PCIe"),
        ("/sys/class/infiniband/mlx5_0/device/current_link_width", "8"),
        ("/sys/class/infiniband/mlx5_0/device/max_link_width", "16"),
        ("/sys/class/infiniband/mlx5_0/device/numa_node", "-1"),
        ("/sys/class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0", "eth9"),
        ("/sys/class/net/eth9/mtu", "1500"),
    ]);
    let d = DevView {
        name: "mlx5_0".into(),
        provider: "mlx5".into(),
        port: 1,
        state: "ACTIVE".into(),
        phys_state: "LINK_UP".into(),
        link_layer: "Ethernet".into(),
        active_mtu: 4096,
        gids: vec![(0, "RoceV1".into(), None), (1, "RoceV2".into(), None)],
    };
    let v = device_checks(&s, &d, DeviceKind::Hardware);
    assert_eq!(
        find(&v, "pcie.link").status,
        Status::Fail,
        "{:?}",
        find(&v, "pcie.link")
    );
    assert!(find(&v, "pcie.link")
        .evidence
        .contains("x8 (the device can do 8.0 GT/s PCIe x16)"));
    assert_eq!(find(&v, "mtu").status, Status::Warn);
    assert!(find(&v, "mtu").evidence.contains("falls back to 1024"));
    assert_eq!(find(&v, "roce.gid").status, Status::Fail);
    assert_eq!(find(&v, "port.state").status, Status::Pass);
    let down = DevView {
        state: "DOWN".into(),
        phys_state: "DISABLED".into(),
        ..d.clone()
    };
    assert_eq!(
        find(&device_checks(&s, &down, DeviceKind::Hardware), "port.state").status,
        Status::Fail
    );
    let v = device_checks(&s, &d, DeviceKind::Model0);
    assert!(["pcie.link", "mtu", "roce.gid", "roce.qos", "firewall", "numa.device"]
        .iter()
        .all(|id| find(&v, id).status == Status::NotApplicable));
}

#[test]
fn a_firewall_that_drops_roce_is_found() {
    let rules = Some("table inet filter {\n chain input {\n  udp dport 4791 drop\n }\n}\n".to_string());
    assert_eq!(firewall(&rules).status, Status::Fail);
    assert_eq!(firewall(&Some("udp dport 4791 accept".into())).status, Status::Pass);
    assert_eq!(firewall(&None).status, Status::Unknown);
    assert!(cpulist_has("0-3,8,10-11", 11) && cpulist_has("0-3,8", 8) && !cpulist_has("0-3,8", 5));
}

/// `nic.clock`: rxe's answer (no timestamps) is n/a, a clock at its stated rate passes with the
/// mapping's error, a clock off its stated rate fails naming both rates, an unreadable raw clock
/// warns.
#[test]
fn nic_clock_judges_what_the_device_states_against_what_was_measured() {
    use crate::verbs::{NicClockCaps, NicClockMap, VerbsError};
    let caps = |mask, khz| {
        Ok(NicClockCaps {
            timestamp_mask: mask,
            hca_core_clock_khz: khz,
        })
    };
    // a 156.25 MHz clock against a 2.6 GHz TSC, 21 pairs over 100 ms, reads 80 ns wide
    let pairs: Vec<(u64, u64, u64)> = (0..21u64).map(|i| (i * 13_000_000, 1 + i * 781_250, 208)).collect();
    let c = super::clock::judge("rxe0", caps(0, 0), None);
    assert_eq!(c.status, Status::NotApplicable, "{c:?}");
    assert!(c.evidence.contains("no completion timestamps"), "{c:?}");
    // timestamps of no stated rate: they cannot be converted
    let c = super::clock::judge("x", caps(u64::MAX >> 1, 0), None);
    assert_eq!(c.status, Status::Warn, "{c:?}");
    assert!(c.evidence.contains("states no rate"), "{c:?}");
    let m = NicClockMap::fit(&pairs, 2.6e9, 156_250).unwrap();
    let c = super::clock::judge("mlx5_0", caps(u64::MAX >> 1, 156_250), Some(Ok(m)));
    assert_eq!(c.status, Status::Pass, "{c:?}");
    assert!(
        c.evidence.contains("156250.0 kHz measured") && c.evidence.contains("one read spans 80 ns"),
        "{c:?}"
    );
    assert!(!c.evidence.contains("not a crystal"), "{c:?}");
    // 0.032 ppm slow (pairs 5 s apart): printed +0.0, not -0.0; model0's line says what its pass means
    let slow: Vec<(u64, u64, u64)> = (0..21u64)
        .map(|i| (i * 13_000_000_000, 1 + i * 781_249_975, 208))
        .collect();
    let m = NicClockMap::fit(&slow, 2.6e9, 156_250).unwrap();
    assert!(m.rate_error_ppm < 0.0 && m.rate_error_ppm > -0.05, "{m:?}");
    let c = super::clock::judge("model0", caps(u64::MAX >> 1, 156_250), Some(Ok(m)));
    assert!(
        c.evidence.contains("(+0.0 ppm)") && c.evidence.contains("not a crystal"),
        "{c:?}"
    );
    let m = NicClockMap::fit(&pairs, 2.6e9, 1_000_000).unwrap();
    let c = super::clock::judge("mlx5_0", caps(u64::MAX >> 1, 1_000_000), Some(Ok(m)));
    assert_eq!(c.status, Status::Fail, "{c:?}");
    assert!(
        c.evidence.contains("156250.0 kHz") && c.evidence.contains("states 1000000 kHz"),
        "{c:?}"
    );
    let e = VerbsError::Invalid {
        ctx: crate::verbs::Ctx::dev("mlx5_0"),
        why: "ibv_query_rt_values_ex: Operation not supported".into(),
    };
    let c = super::clock::judge("mlx5_0", caps(u64::MAX >> 1, 156_250), Some(Err(e)));
    assert_eq!(c.status, Status::Warn, "{c:?}");
}

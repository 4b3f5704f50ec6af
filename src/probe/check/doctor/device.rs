//! The device's checks: its port, NUMA node, PCIe link, MTU, RoCE v2 GID, PFC/ECN, the
//! firewall, the driver.

use super::{check, Check, DevView, DeviceKind, Status, Sys};

/// The checks of the device and its port: NUMA placement, PCIe link, port state, MTU, RoCE GID,
/// PFC/ECN, the firewall, the kernel driver. A new device check is a function here, called in
/// its place below (and said not to apply on model0, in `model0_checks`).
pub fn device_checks(sys: &Sys, d: &DevView, kind: DeviceKind) -> Vec<Check> {
    if kind == DeviceKind::Model0 {
        return model0_checks();
    }
    let na = |id: &'static str, why: &str| check(id, Status::NotApplicable, why.to_string(), "");
    let dev = format!("/sys/class/infiniband/{}", d.name);
    let mut v = vec![port_state(d), numa_device(sys, &dev, kind)];
    v.push(if kind == DeviceKind::SoftRoce {
        na("pcie.link", "Soft-RoCE runs over a netdev: no PCIe device of its own")
    } else {
        pcie(sys, &dev)
    });
    let ethernet = d.link_layer == "Ethernet";
    let netdev = sys
        .read(&format!("{dev}/ports/{}/gid_attrs/ndevs/0", d.port))
        .or_else(|| sys.list(&format!("{dev}/device/net")).into_iter().next());
    v.push(if !ethernet {
        na("mtu", "InfiniBand: no netdev MTU to match")
    } else {
        mtu(sys, d, netdev.as_deref())
    });
    v.push(if !ethernet {
        na("roce.gid", "InfiniBand: LID routed, no RoCE GID")
    } else {
        roce_gid(sys, d, netdev.as_deref())
    });
    v.push(if !ethernet {
        na("roce.qos", "InfiniBand: lossless by credit flow control")
    } else {
        qos(sys, netdev.as_deref(), kind)
    });
    v.push(if !ethernet {
        na("firewall", "InfiniBand: no UDP")
    } else {
        firewall(&nft_ruleset())
    });
    v.push(driver(sys, &dev, d, kind));
    v
}

/// model0's device checks: its port always active, its driver built in, the others not
/// applicable (no PCIe device, netdev or NUMA node).
fn model0_checks() -> Vec<Check> {
    let na = |id: &'static str, why: &str| check(id, Status::NotApplicable, why.to_string(), "");
    let why = "model0 is a software model: no PCIe device, netdev or NUMA node";
    vec![
        check("port.state", Status::Pass, "model0's port 1 is always ACTIVE", ""),
        na("numa.device", why),
        na("pcie.link", why),
        na("mtu", why),
        na("roce.gid", why),
        na("roce.qos", why),
        na("firewall", why),
        check(
            "driver",
            Status::Pass,
            "model0 (built in); verbs and wr through the machine's libmlx5 on its user-space uverbs device",
            "",
        ),
    ]
}

/// The port is active and its link up.
fn port_state(d: &DevView) -> Check {
    // libibverbs' names: ACTIVE (or ACTIVE_DEFER), LINK_UP
    let active = matches!(d.state.as_str(), "ACTIVE" | "ACTIVE_DEFER" | "PORT_ACTIVE");
    if active && d.phys_state.contains("LINK_UP") {
        check(
            "port.state",
            Status::Pass,
            format!("port {}: {} ({})", d.port, d.state, d.phys_state),
            "",
        )
    } else {
        check(
            "port.state",
            Status::Fail,
            format!("port {}: {} ({})", d.port, d.state, d.phys_state),
            "check the cable and the switch port; for RoCE: ip link set NETDEV up; for IB: a subnet manager (opensm)",
        )
    }
}

/// The kernel driver bound to the device (Soft-RoCE: rdma_rxe, which has no device link).
fn driver(sys: &Sys, dev: &str, d: &DevView, kind: DeviceKind) -> Check {
    match sys.link_name(&format!("{dev}/device/driver")) {
        Some(drv) => check(
            "driver",
            Status::Pass,
            format!("kernel driver {drv}, provider {}", d.provider),
            "",
        ),
        None if kind == DeviceKind::SoftRoce => {
            check("driver", Status::Pass, format!("rdma_rxe, provider {}", d.provider), "")
        }
        None => check("driver", Status::Unknown, format!("no {dev}/device/driver link"), ""),
    }
}

fn numa_device(sys: &Sys, dev: &str, kind: DeviceKind) -> Check {
    if kind == DeviceKind::SoftRoce {
        return check(
            "numa.device",
            Status::NotApplicable,
            "Soft-RoCE: no device memory or DMA",
            "",
        );
    }
    let node: i64 = match sys
        .read(&format!("{dev}/device/numa_node"))
        .and_then(|n| n.parse().ok())
    {
        Some(n) => n,
        None => return check("numa.device", Status::Unknown, format!("no {dev}/device/numa_node"), ""),
    };
    if node < 0 {
        return check("numa.device", Status::Pass, "one NUMA node (numa_node -1)", "");
    }
    let cpus = sys
        .read(&format!("/sys/devices/system/node/node{node}/cpulist"))
        .unwrap_or_default();
    let ours = affinity();
    let local = ours.iter().all(|c| cpulist_has(&cpus, *c));
    if local {
        check(
            "numa.device",
            Status::Pass,
            format!("device on node {node} (CPUs {cpus}); this process's CPUs are all there"),
            "",
        )
    } else {
        check(
            "numa.device",
            Status::Warn,
            format!(
                "device on node {node} (CPUs {cpus}); this process may run on {ours:?}: remote memory and PCIe hops"
            ),
            format!("run pinned to the device's node: numactl --cpunodebind={node} --membind={node} rdmaprobe ..."),
        )
    }
}

fn affinity() -> Vec<usize> {
    core_affinity::get_core_ids()
        .map(|v| v.into_iter().map(|c| c.id).collect())
        .unwrap_or_default()
}

/// Whether a kernel CPU list (`0-3,8,10-11`) holds `cpu`.
pub fn cpulist_has(list: &str, cpu: usize) -> bool {
    list.split(',').filter(|s| !s.is_empty()).any(|r| match r.split_once('-') {
        Some((a, b)) => matches!((a.trim().parse::<usize>(), b.trim().parse::<usize>()), (Ok(a), Ok(b)) if (a..=b).contains(&cpu)),
        None => r.trim().parse::<usize>() == Ok(cpu),
    })
}

fn pcie(sys: &Sys, dev: &str) -> Check {
    let r = |f: &str| sys.read(&format!("{dev}/device/{f}"));
    match (
        r("current_link_speed"),
        r("max_link_speed"),
        r("current_link_width"),
        r("max_link_width"),
    ) {
        (Some(cs), Some(ms), Some(cw), Some(mw)) => {
            let ev = format!("PCIe {cs} x{cw} (the device can do {ms} x{mw})");
            if cs != ms || cw != mw {
                check(
                    "pcie.link",
                    Status::Fail,
                    ev,
                    "reseat the card in a slot of full width and generation; check the BIOS (ASPM, bifurcation)",
                )
            } else {
                check("pcie.link", Status::Pass, ev, "")
            }
        }
        _ => check(
            "pcie.link",
            Status::Unknown,
            format!("no {dev}/device/*_link_* in sysfs"),
            "lspci -vv: LnkSta against LnkCap",
        ),
    }
}

fn mtu(sys: &Sys, d: &DevView, netdev: Option<&str>) -> Check {
    let Some(nd) = netdev else {
        return check("mtu", Status::Unknown, "no netdev found for the port", "rdma link show");
    };
    let Some(m) = sys
        .read(&format!("/sys/class/net/{nd}/mtu"))
        .and_then(|m| m.parse::<u32>().ok())
    else {
        return check("mtu", Status::Unknown, format!("no /sys/class/net/{nd}/mtu"), "");
    };
    // a RoCE v2 packet carries the IB payload MTU plus IP, UDP, BTH and ICRC headers
    let need = d.active_mtu + 58;
    if m >= need {
        check(
            "mtu",
            Status::Pass,
            format!("active MTU {} on {nd} (MTU {m})", d.active_mtu),
            "",
        )
    } else {
        let fits = [4096u32, 2048, 1024, 512, 256]
            .into_iter()
            .find(|x| x + 58 <= m)
            .unwrap_or(256);
        check(
            "mtu",
            Status::Warn,
            format!(
                "active MTU {} needs a netdev MTU of {need}, {nd} has {m}: the port falls back to {fits}",
                d.active_mtu
            ),
            format!("ip link set {nd} mtu 9000 (jumbo frames end to end, the switch too)"),
        )
    }
}

fn roce_gid(sys: &Sys, d: &DevView, netdev: Option<&str>) -> Check {
    let v2: Vec<&(u32, String, Option<std::net::Ipv4Addr>)> = d
        .gids
        .iter()
        .filter(|g| g.1.contains("V2") || g.1.contains("v2"))
        .collect();
    match v2.iter().find(|g| g.2.is_some()) {
        Some((i, _, Some(ip))) => check(
            "roce.gid",
            Status::Pass,
            format!("RoCE v2 GID index {i} for {ip} (-x {i})"),
            "",
        ),
        _ => {
            let addr = netdev.and_then(|n| sys.read(&format!("/sys/class/net/{n}/operstate")));
            check(
                "roce.gid",
                Status::Fail,
                format!(
                    "no RoCE v2 GID with an IPv4 address among the first {} entries (netdev {}, {})",
                    d.gids.len(),
                    netdev.unwrap_or("?"),
                    addr.unwrap_or_else(|| "state unknown".into())
                ),
                "give the netdev an IPv4 address (ip addr add ... dev NETDEV); the GID appears with it",
            )
        }
    }
}

fn qos(sys: &Sys, netdev: Option<&str>, kind: DeviceKind) -> Check {
    if kind == DeviceKind::SoftRoce {
        return check(
            "roce.qos",
            Status::NotApplicable,
            "Soft-RoCE: PFC/ECN are the netdev's, not a NIC's",
            "",
        );
    }
    let Some(nd) = netdev else {
        return check("roce.qos", Status::Unknown, "no netdev", "mlnx_qos -i NETDEV");
    };
    match sys.read(&format!("/sys/class/net/{nd}/ecn/roce_np/enable/3")) {
        Some(e) => check(
            "roce.qos",
            if e == "1" { Status::Pass } else { Status::Warn },
            format!("ECN (notification point) on priority 3: {e}"),
            "echo 1 > /sys/class/net/NETDEV/ecn/roce_np/enable/3; PFC: mlnx_qos -i NETDEV --pfc 0,0,0,1,0,0,0,0 --trust dscp",
        ),
        None => check(
            "roce.qos",
            Status::Unknown,
            format!("PFC, ECN and trust of {nd} are not readable here"),
            format!("mlnx_qos -i {nd} (PFC and trust), cat /sys/class/net/{nd}/ecn/roce_np/enable/*"),
        ),
    }
}

/// `nft list ruleset`'s output, `None` where nft is missing or not permitted.
pub(crate) fn nft_ruleset() -> Option<String> {
    let o = std::process::Command::new("nft")
        .args(["list", "ruleset"])
        .output()
        .ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

/// The rules of an `nft list ruleset` output that drop or reject UDP 4791 (RoCE v2).
pub(crate) fn drops_4791(rules: &str) -> Vec<&str> {
    rules
        .lines()
        .map(str::trim)
        .filter(|l| l.contains("4791") && (l.contains("drop") || l.contains("reject")))
        .collect()
}

/// The firewall check from `nft list ruleset`'s output (`None`: nft unavailable).
pub fn firewall(ruleset: &Option<String>) -> Check {
    let Some(rules) = ruleset else {
        return check(
            "firewall",
            Status::Unknown,
            "nft is not available (or not permitted)",
            "nft list ruleset | grep 4791; iptables -S | grep 4791",
        );
    };
    let bad = drops_4791(rules);
    if bad.is_empty() {
        check(
            "firewall",
            Status::Pass,
            "no nftables rule drops UDP 4791 (RoCE v2)",
            "",
        )
    } else {
        check(
            "firewall",
            Status::Fail,
            format!("nftables drops RoCE v2 (UDP 4791): {}", bad.join(" | ")),
            "remove the rule, or accept udp dport 4791 before it",
        )
    }
}

//! What the machine offers, as `rdmaprobe devices` and `rdmaprobe clock` show it: the RDMA
//! devices and their ports (like `ibv_devinfo`) with model0, and the calibrated TSC with the
//! timer's overhead.

use crate::clock::{Calibration, TscSource};
use crate::model;
use crate::probe::ProbeError;
use crate::verbs::device::{self, libibverbs_loaded};
use crate::verbs::{DeviceInfo, DeviceList, GidEntry, NoDevice, PortInfo, VerbsError};
use serde_json::json;
use std::fmt::Write;

/// Exit status of `devices` when the machine has no usable RDMA device (explained in the text).
pub const EXIT_NO_DEVICE: u8 = 3;

fn build_info() -> serde_json::Value {
    let (lib, lib_version) = libibverbs_loaded();
    json!({
        "tool_version": env!("CARGO_PKG_VERSION"),
        "rdma_core_built_against": env!("RDMAPROBE_BUILD_RDMA_CORE"),
        "libibverbs_built_against": env!("RDMAPROBE_BUILD_LIBIBVERBS"),
        "libibverbs_loaded": lib,
        "libibverbs_loaded_version": lib_version,
    })
}

/// A device and its ports, each with the first entries of its GID table.
type DeviceDoc = (DeviceInfo, Vec<(PortInfo, Vec<GidEntry>)>);

/// `rdmaprobe devices`: the RDMA devices and their ports, like ibv_devinfo, then model0 (text,
/// or JSON with `as_json`), and the exit status: 0 when a hardware device exists, 3 when none
/// does (with the reason and what to do).
pub fn devices(as_json: bool, max_gids: u32) -> Result<(String, u8), ProbeError> {
    let model = model_info();
    let list = match DeviceList::get() {
        Ok(l) => l,
        Err(VerbsError::NoDevice(why)) => return Ok((no_device(as_json, why, &model)?, EXIT_NO_DEVICE)),
        Err(e) => return Err(e.into()),
    };
    let docs = read_devices(&list, max_gids)?;
    if as_json {
        return Ok((devices_json(&docs, &model)?, 0));
    }
    let mut o = String::new();
    let (lib, lib_version) = libibverbs_loaded();
    let _ = writeln!(
        o,
        "rdma-core: built against {} (libibverbs {}), loaded {} ({})",
        env!("RDMAPROBE_BUILD_RDMA_CORE"),
        env!("RDMAPROBE_BUILD_LIBIBVERBS"),
        lib_version,
        lib
    );
    for (info, ports) in &docs {
        print_device(&mut o, info);
        for (p, gids) in ports {
            print_port(&mut o, p, gids);
        }
    }
    print_model(&mut o, &model);
    Ok((o, 0))
}

/// model0, and whether its verbs and wr backends run (through the machine's libibverbs and
/// libmlx5, as its user-space uverbs device).
fn model_info() -> Result<model::ModelInfo, String> {
    model::info().map_err(|e| e.to_string()).map(|mut i| {
        match crate::verbs::Context::open_model0() {
            Ok(ctx) => {
                i.backends = vec!["verbs", "wr", "direct"];
                i.provider_library = ctx.provider_library();
            }
            Err(e) => i.verbs_unavailable = Some(e.to_string()),
        }
        i
    })
}

/// No RDMA device: why, and what to do, then model0 (the default device then).
fn no_device(as_json: bool, why: NoDevice, model: &Result<model::ModelInfo, String>) -> Result<String, ProbeError> {
    let mut o = String::new();
    if as_json {
        let doc = json!({
            "build": build_info(),
            "devices": [],
            "hardware_device": false,
            "no_device_reason": format!("{why:?}"),
            "explanation": why.explain(),
            "model": model_json(model),
            "default_device": model.as_ref().ok().map(|m| m.name),
        });
        let _ = writeln!(o, "{}", serde_json::to_string_pretty(&doc)?);
    } else {
        let _ = writeln!(o, "No RDMA device.\n\n{}\n", why.explain());
        print_model(&mut o, model);
        if model.is_ok() {
            let _ = writeln!(
                o,
                "\nWithout an RDMA device, {} is the default device.",
                model::DEVICE_NAME
            );
        }
    }
    Ok(o)
}

/// Every device of `list` queried: its attributes, each port's, the first `max_gids` GIDs.
fn read_devices(list: &DeviceList, max_gids: u32) -> Result<Vec<DeviceDoc>, ProbeError> {
    let mut docs = Vec::new();
    for name in list.names() {
        let ctx = list.open(&name)?;
        let info = ctx.query()?;
        let mut ports = Vec::new();
        for p in 1..=info.phys_port_cnt {
            let port = ctx.query_port(p)?;
            let gids = ctx.gids(p, max_gids)?;
            ports.push((port, gids));
        }
        docs.push((info, ports));
    }
    Ok(docs)
}

/// The devices as JSON: each port with its GIDs and (Ethernet) the RoCE v2 GID index to use.
fn devices_json(docs: &[DeviceDoc], model: &Result<model::ModelInfo, String>) -> Result<String, ProbeError> {
    let devs: Vec<_> = docs
        .iter()
        .map(|(info, ports)| {
            let ports: Vec<_> = ports
                .iter()
                .map(|(p, g)| {
                    let mut v = serde_json::to_value(p).unwrap_or_default();
                    v["gids"] = serde_json::to_value(g).unwrap_or_default();
                    v["roce_gid_index"] = json!(if p.is_ethernet() {
                        device::pick_gid_index(g)
                    } else {
                        None
                    });
                    v
                })
                .collect();
            let mut v = serde_json::to_value(info).unwrap_or_default();
            v["ports"] = json!(ports);
            v
        })
        .collect();
    let doc = json!({ "build": build_info(), "devices": devs, "hardware_device": true, "model": model_json(model) });
    Ok(format!("{}\n", serde_json::to_string_pretty(&doc)?))
}

/// A device's attributes, as ibv_devinfo prints them, and whether the direct backend runs.
fn print_device(o: &mut String, info: &DeviceInfo) {
    let _ = writeln!(o, "hca_id:\t{}", info.name);
    let _ = writeln!(o, "\tprovider:\t\t{}", info.provider);
    let _ = writeln!(
        o,
        "\tfw_ver:\t\t\t{}",
        if info.fw_ver.is_empty() { "-" } else { &info.fw_ver }
    );
    let _ = writeln!(o, "\tnode_guid:\t\t{}", info.node_guid);
    let _ = writeln!(o, "\tvendor_id:\t\t{:#06x}", info.vendor_id);
    let _ = writeln!(o, "\tvendor_part_id:\t\t{}", info.vendor_part_id);
    let _ = writeln!(o, "\thw_ver:\t\t\t{:#x}", info.hw_ver);
    let _ = writeln!(o, "\tphys_port_cnt:\t\t{}", info.phys_port_cnt);
    let _ = writeln!(o, "\tatomic_cap:\t\t{}", info.atomic_cap);
    let _ = writeln!(
        o,
        "\tdirect backend:\t\t{}",
        if info.mlx5dv {
            "yes (mlx5dv)"
        } else {
            "no (not an mlx5 device)"
        }
    );
    let clock = match (&info.nic_clock, &info.nic_clock_unknown) {
        (Some(c), _) if c.usable() => format!(
            "mask {:#x}, hca_core_clock {} kHz",
            c.timestamp_mask, c.hca_core_clock_khz
        ),
        (Some(c), _) if c.timestamp_mask != 0 => {
            format!("mask {:#x}, of unknown rate (hca_core_clock 0)", c.timestamp_mask)
        }
        (Some(c), _) => format!(
            "none (completion_timestamp_mask {:#x}, hca_core_clock {} kHz)",
            c.timestamp_mask, c.hca_core_clock_khz
        ),
        (None, e) => format!("unknown ({})", e.as_deref().unwrap_or("not asked")),
    };
    let _ = writeln!(o, "	completion timestamps:	{clock}");
}

/// A port's attributes and GIDs, as ibv_devinfo prints them; on Ethernet, the GID index to use.
fn print_port(o: &mut String, p: &PortInfo, gids: &[GidEntry]) {
    let _ = writeln!(o, "\t\tport:\t{}", p.port);
    let _ = writeln!(o, "\t\t\tstate:\t\t\t{} ({})", p.state, p.state_raw);
    let _ = writeln!(o, "\t\t\tphys_state:\t\t{}", p.phys_state);
    let _ = writeln!(o, "\t\t\tlink_layer:\t\t{}", p.link_layer);
    let _ = writeln!(o, "\t\t\tmax_mtu:\t\t{}", p.max_mtu);
    let _ = writeln!(o, "\t\t\tactive_mtu:\t\t{}", p.active_mtu);
    let _ = writeln!(o, "\t\t\tactive_speed:\t\t{}", p.speed);
    let _ = writeln!(o, "\t\t\tactive_width:\t\t{}", p.width);
    let _ = writeln!(o, "\t\t\tport_lid:\t\t{}", p.lid);
    let _ = writeln!(o, "\t\t\tmax_msg_sz:\t\t{:#x}", p.max_msg_sz);
    let _ = writeln!(o, "\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len);
    for g in gids {
        let v4 = g.ipv4().map(|a| format!(", {a}")).unwrap_or_default();
        let _ = writeln!(o, "\t\t\tGID[{:>4}]:\t\t{}, {}{}", g.index, g.gid, g.gid_type, v4);
    }
    if p.is_ethernet() {
        match device::pick_gid_index(gids) {
            Some(i) => {
                let _ = writeln!(o, "\t\t\tuse GID index:\t\t{i} (-x {i})");
            }
            None => {
                let _ = writeln!(o, "\t\t\tuse GID index:\t\tnone found among the first {}", gids.len());
            }
        }
    }
}

fn model_json(m: &Result<model::ModelInfo, String>) -> serde_json::Value {
    match m {
        Ok(i) => serde_json::to_value(i).unwrap_or_default(),
        Err(e) => json!({ "name": model::DEVICE_NAME, "error": e }),
    }
}

fn print_model(o: &mut String, m: &Result<model::ModelInfo, String>) {
    match m {
        Ok(i) => {
            let _ = writeln!(o, "hca_id:\t{}\t(SOFTWARE MODEL, not hardware)", i.name);
            let _ = writeln!(o, "\tdescription:\t\t{}", i.description);
            let _ = writeln!(o, "\tshared memory:\t\t{}", i.shm_dir);
            let _ = writeln!(o, "\tbackends:\t\t{}", i.backends.join(", "));
            if let Some(p) = &i.provider_library {
                let _ = writeln!(o, "\tprovider:\t\t{p} (verbs and wr run through it)");
            }
            if let Some(why) = &i.verbs_unavailable {
                let _ = writeln!(o, "\tverbs, wr:\t\tunavailable: {why}");
            }
            let _ = writeln!(o, "\tmax_qp_wr:\t\t{}", i.max_qp_wr);
            let _ = writeln!(o, "\tmax_inline_data:\t{} (device limit)", i.max_inline_data);
            let _ = writeln!(o, "\tbf_size:\t\t{}", i.bf_size);
            let _ = writeln!(
                o,
                "\tcompletion timestamps:\tmask {:#x}, hca_core_clock {} kHz (a counter of CLOCK_MONOTONIC_RAW at that rate, stamped when model0 writes the CQE)",
                i.timestamp_mask, i.hca_core_clock_khz
            );
            if i.swept > 0 {
                let _ = writeln!(o, "\tcleaned up:\t\t{} objects of processes that died", i.swept);
            }
        }
        Err(e) => {
            let _ = writeln!(o, "hca_id:\t{}\t(SOFTWARE MODEL) unavailable: {e}", model::DEVICE_NAME);
        }
    }
}

fn current_clocksource() -> Option<String> {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .ok()
        .map(|s| s.trim().to_string())
}

/// `rdmaprobe clock`: the TSC calibrated over `window_ms`, the timer's overhead, and what
/// speaks against the clock (text, or JSON with `as_json`).
pub fn clock(as_json: bool, window_ms: u64) -> Result<String, ProbeError> {
    let c = Calibration::run(window_ms * 1_000_000)?;
    let cs = current_clocksource();
    let warnings = clock_warnings(&c, cs.as_deref());
    if as_json {
        clock_json(&c, cs.as_deref(), &warnings)
    } else {
        Ok(clock_text(&c, cs.as_deref(), &warnings))
    }
}

/// What speaks against the clock: no TSC, a TSC that is not invariant, a calibration far from
/// CPUID's rate, a kernel that does not use the TSC (`cs`, its clocksource).
fn clock_warnings(c: &Calibration, cs: Option<&str>) -> Vec<String> {
    let mut warnings = Vec::new();
    if c.source == TscSource::ClockGettime {
        warnings.push("no TSC on this architecture: timestamps are clock_gettime(CLOCK_MONOTONIC_RAW)".to_string());
    } else if !c.invariant_tsc {
        warnings.push(
            "the TSC is not invariant (CPUID 0x80000007 EDX[8] clear): its rate may change with power states".into(),
        );
    }
    if let Some(h) = c.cpuid_hz {
        let d = (h as f64 - c.calibrated_hz).abs() / h as f64;
        if d > 1e-3 {
            warnings.push(format!(
                "CPUID 0x15 gives {h} Hz but calibration measured {:.0} Hz ({:.2}% apart)",
                c.calibrated_hz,
                d * 100.0
            ));
        }
    }
    if c.source != TscSource::ClockGettime && cs.is_some_and(|s| s != "tsc") {
        warnings.push(format!(
            "the kernel's clocksource is {} (not tsc): the kernel does not trust the TSC here",
            cs.unwrap_or("?")
        ));
    }
    warnings
}

/// The clock as JSON.
fn clock_json(c: &Calibration, cs: Option<&str>, warnings: &[String]) -> Result<String, ProbeError> {
    let doc = json!({
        "tsc_hz": c.hz,
        "source": c.source.as_str(),
        "invariant_tsc": c.invariant_tsc,
        "cpuid_hz": c.cpuid_hz,
        "calibrated_hz": c.calibrated_hz,
        "calibration_window_ns": c.calibration_window_ns,
        "calibration_residual_max_ns": c.calibration_residual_ns,
        "timed_region_overhead": {
            "min_ticks": c.overhead.min_cycles,
            "median_ticks": c.overhead.median_cycles,
            "p99_ticks": c.overhead.p99_cycles,
            "samples": c.overhead.samples,
            "min_ns": c.to_ns(c.overhead.min_cycles),
            "median_ns": c.to_ns(c.overhead.median_cycles),
        },
        "kernel_clocksource": cs,
        "warnings": warnings,
    });
    Ok(format!("{}\n", serde_json::to_string_pretty(&doc)?))
}

/// The clock as text.
fn clock_text(c: &Calibration, cs: Option<&str>, warnings: &[String]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "TSC rate:          {:.6} MHz ({})", c.hz / 1e6, c.source.as_str());
    if let Some(h) = c.cpuid_hz {
        let _ = writeln!(o, "CPUID 0x15 rate:   {:.6} MHz", h as f64 / 1e6);
    }
    let _ = writeln!(
        o,
        "calibration:       {:.6} MHz against CLOCK_MONOTONIC_RAW over {} ms, max residual {:.0} ns",
        c.calibrated_hz / 1e6,
        c.calibration_window_ns / 1_000_000,
        c.calibration_residual_ns
    );
    let _ = writeln!(o, "invariant TSC:     {}", if c.invariant_tsc { "yes" } else { "no" });
    let _ = writeln!(o, "kernel clocksource: {}", cs.unwrap_or("unknown"));
    let _ = writeln!(
        o,
        "timed-region overhead: min {} TSC ticks ({:.1} ns), median {} ticks ({:.1} ns), p99 {} ticks, {} samples",
        c.overhead.min_cycles,
        c.to_ns(c.overhead.min_cycles),
        c.overhead.median_cycles,
        c.to_ns(c.overhead.median_cycles),
        c.overhead.p99_cycles,
        c.overhead.samples
    );
    for w in warnings {
        let _ = writeln!(o, "warning: {w}");
    }
    o
}

//! The rdmaprobe command line.

use anyhow::Result;
use clap::{Parser, Subcommand};
use rdmaprobe::clock::{Calibration, TscSource};
use rdmaprobe::model;
use rdmaprobe::verbs::device::{self, libibverbs_loaded};
use rdmaprobe::verbs::{DeviceList, VerbsError};
use serde_json::json;
use std::process::ExitCode;

/// Exit status of `devices` when the machine has no usable RDMA device (explained on stdout).
const EXIT_NO_DEVICE: u8 = 3;

#[derive(Parser)]
#[command(
    name = "rdmaprobe",
    version,
    about = "RDMA performance probe: verbs, ibv_wr_* and direct mlx5 post paths on one TSC clock"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List RDMA devices and their ports, like ibv_devinfo, then the built-in model0. Exit 0 when
    /// a hardware device exists, 3 when none does (with the reason and what to do), 1 on error.
    Devices {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// How many GID table entries to show per port.
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=1024))]
        gids: u32,
    },
    /// Calibrate the TSC and measure the cost of an empty timed region.
    Clock {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        /// Calibration window in milliseconds (at least 100).
        #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(100..=10_000))]
        window_ms: u64,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Devices { json, gids } => devices(json, gids),
        Cmd::Clock { json, window_ms } => clock(json, window_ms),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rdmaprobe: error: {e:#}");
            ExitCode::from(1)
        }
    }
}

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

fn devices(as_json: bool, max_gids: u32) -> Result<ExitCode> {
    let model = model::info().map_err(|e| e.to_string());
    let list = match DeviceList::get() {
        Ok(l) => l,
        Err(VerbsError::NoDevice(why)) => {
            if as_json {
                let doc = json!({
                    "build": build_info(),
                    "devices": [],
                    "hardware_device": false,
                    "no_device_reason": format!("{why:?}"),
                    "explanation": why.explain(),
                    "model": model_json(&model),
                    "default_device": model.as_ref().ok().map(|m| m.name),
                });
                println!("{}", serde_json::to_string_pretty(&doc)?);
            } else {
                println!("No RDMA device.\n\n{}\n", why.explain());
                print_model(&model);
                if model.is_ok() {
                    println!(
                        "\nWithout an RDMA device, {} is the default device.",
                        model::DEVICE_NAME
                    );
                }
            }
            return Ok(ExitCode::from(EXIT_NO_DEVICE));
        }
        Err(e) => return Err(e.into()),
    };
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
    if as_json {
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
        let doc =
            json!({ "build": build_info(), "devices": devs, "hardware_device": true, "model": model_json(&model) });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(ExitCode::SUCCESS);
    }
    let (lib, lib_version) = libibverbs_loaded();
    println!(
        "rdma-core: built against {} (libibverbs {}), loaded {} ({})",
        env!("RDMAPROBE_BUILD_RDMA_CORE"),
        env!("RDMAPROBE_BUILD_LIBIBVERBS"),
        lib_version,
        lib
    );
    for (info, ports) in &docs {
        println!("hca_id:\t{}", info.name);
        println!("\tprovider:\t\t{}", info.provider);
        println!(
            "\tfw_ver:\t\t\t{}",
            if info.fw_ver.is_empty() { "-" } else { &info.fw_ver }
        );
        println!("\tnode_guid:\t\t{}", info.node_guid);
        println!("\tvendor_id:\t\t{:#06x}", info.vendor_id);
        println!("\tvendor_part_id:\t\t{}", info.vendor_part_id);
        println!("\thw_ver:\t\t\t{:#x}", info.hw_ver);
        println!("\tphys_port_cnt:\t\t{}", info.phys_port_cnt);
        println!("\tatomic_cap:\t\t{}", info.atomic_cap);
        println!(
            "\tdirect backend:\t\t{}",
            if info.mlx5dv {
                "yes (mlx5dv)"
            } else {
                "no (not an mlx5 device)"
            }
        );
        for (p, gids) in ports {
            println!("\t\tport:\t{}", p.port);
            println!("\t\t\tstate:\t\t\t{} ({})", p.state, p.state_raw);
            println!("\t\t\tphys_state:\t\t{}", p.phys_state);
            println!("\t\t\tlink_layer:\t\t{}", p.link_layer);
            println!("\t\t\tmax_mtu:\t\t{}", p.max_mtu);
            println!("\t\t\tactive_mtu:\t\t{}", p.active_mtu);
            println!("\t\t\tactive_speed:\t\t{}", p.speed);
            println!("\t\t\tactive_width:\t\t{}", p.width);
            println!("\t\t\tport_lid:\t\t{}", p.lid);
            println!("\t\t\tmax_msg_sz:\t\t{:#x}", p.max_msg_sz);
            println!("\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len);
            for g in gids {
                let v4 = g.ipv4().map(|a| format!(", {a}")).unwrap_or_default();
                println!("\t\t\tGID[{:>4}]:\t\t{}, {}{}", g.index, g.gid, g.gid_type, v4);
            }
            if p.is_ethernet() {
                match device::pick_gid_index(gids) {
                    Some(i) => println!("\t\t\tuse GID index:\t\t{i} (-x {i})"),
                    None => println!("\t\t\tuse GID index:\t\tnone found among the first {}", gids.len()),
                }
            }
        }
    }
    print_model(&model);
    Ok(ExitCode::SUCCESS)
}

fn model_json(m: &Result<model::ModelInfo, String>) -> serde_json::Value {
    match m {
        Ok(i) => serde_json::to_value(i).unwrap_or_default(),
        Err(e) => json!({ "name": model::DEVICE_NAME, "error": e }),
    }
}

fn print_model(m: &Result<model::ModelInfo, String>) {
    match m {
        Ok(i) => {
            println!("hca_id:\t{}\t(SOFTWARE MODEL, not hardware)", i.name);
            println!("\tdescription:\t\t{}", i.description);
            println!("\tshared memory:\t\t{}", i.shm_dir);
            println!("\tbackends:\t\t{}", i.backends.join(", "));
            println!("\tmax_qp_wr:\t\t{}", i.max_qp_wr);
            println!("\tmax_inline_data:\t{}", i.max_inline_data);
            println!("\tbf_size:\t\t{}", i.bf_size);
            if i.swept > 0 {
                println!("\tcleaned up:\t\t{} objects of processes that died", i.swept);
            }
        }
        Err(e) => println!("hca_id:\t{}\t(SOFTWARE MODEL) unavailable: {e}", model::DEVICE_NAME),
    }
}

fn current_clocksource() -> Option<String> {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .ok()
        .map(|s| s.trim().to_string())
}

fn clock(as_json: bool, window_ms: u64) -> Result<ExitCode> {
    let c = Calibration::run(window_ms * 1_000_000)?;
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
    let cs = current_clocksource();
    if c.source != TscSource::ClockGettime && cs.as_deref().is_some_and(|s| s != "tsc") {
        warnings.push(format!(
            "the kernel's clocksource is {} (not tsc): the kernel does not trust the TSC here",
            cs.as_deref().unwrap_or("?")
        ));
    }
    if as_json {
        let doc = json!({
            "tsc_hz": c.hz,
            "source": c.source.as_str(),
            "invariant_tsc": c.invariant_tsc,
            "cpuid_hz": c.cpuid_hz,
            "calibrated_hz": c.calibrated_hz,
            "calibration_window_ns": c.calibration_window_ns,
            "calibration_residual_max_ns": c.calibration_residual_ns,
            "timed_region_overhead": {
                "min_cycles": c.overhead.min_cycles,
                "median_cycles": c.overhead.median_cycles,
                "p99_cycles": c.overhead.p99_cycles,
                "samples": c.overhead.samples,
                "min_ns": c.to_ns(c.overhead.min_cycles),
                "median_ns": c.to_ns(c.overhead.median_cycles),
            },
            "kernel_clocksource": cs,
            "warnings": warnings,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("TSC rate:          {:.6} MHz ({})", c.hz / 1e6, c.source.as_str());
        if let Some(h) = c.cpuid_hz {
            println!("CPUID 0x15 rate:   {:.6} MHz", h as f64 / 1e6);
        }
        println!(
            "calibration:       {:.6} MHz against CLOCK_MONOTONIC_RAW over {} ms, max residual {:.0} ns",
            c.calibrated_hz / 1e6,
            c.calibration_window_ns / 1_000_000,
            c.calibration_residual_ns
        );
        println!("invariant TSC:     {}", if c.invariant_tsc { "yes" } else { "no" });
        println!("kernel clocksource: {}", cs.as_deref().unwrap_or("unknown"));
        println!(
            "timed-region overhead: min {} cycles ({:.1} ns), median {} cycles ({:.1} ns), p99 {} cycles, {} samples",
            c.overhead.min_cycles,
            c.to_ns(c.overhead.min_cycles),
            c.overhead.median_cycles,
            c.to_ns(c.overhead.median_cycles),
            c.overhead.p99_cycles,
            c.overhead.samples
        );
        for w in &warnings {
            println!("warning: {w}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

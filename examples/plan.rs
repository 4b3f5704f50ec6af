//! Builds a latency plan and runs it through the library: the way a program embeds rdmaprobe.
//!
//! `cargo run --release --example plan [DEVICE]` (default: the first RDMA device, else model0):
//! an 8-byte RDMA WRITE ping-pong on every backend the device runs, both ends in this process;
//! prints each backend's p50 and p99, and the report's warnings.

use rdmaprobe::backend::OpKind;
use rdmaprobe::probe::{self, DeviceSpec, LatPlan, Plan, Quiet, Runs, Scenario};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut lat = LatPlan::new(OpKind::Write, 8);
    lat.iters = 20_000;
    let plan = Plan {
        device: DeviceSpec {
            name: std::env::args().nth(1),
            ..DeviceSpec::default()
        },
        ..Plan::loopback(Scenario::Lat(lat))
    };
    let report = probe::run(&plan, &mut Quiet)?;
    println!("device {} ({})", report.device, report.provider);
    if let Runs::Lat(runs) = &report.runs {
        for r in runs {
            println!(
                "{:>7}: p50 {:.1} ns, p99 {:.1} ns over {} iterations",
                r.backend, r.latency.p50, r.latency.p99, r.iterations
            );
        }
    }
    for w in &report.warnings {
        println!("warning: {w}");
    }
    // the same document `rdmaprobe lat --json` writes
    let doc = report.json()?;
    println!("schema version {}", doc["schema_version"]);
    Ok(())
}

//! The key-value workload's figures: Mops, and the latency p50 and p99, against the number of
//! clients (or, where only the window varies, against the window), a line per backend and per
//! value of whatever else differs between the runs.

use super::{add, line, sorted_lines, Axes, Pts, Run};
use crate::report::axis::Scale;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The fields of a key-value run that name its line when they differ between the runs drawn.
const SHAPE: [&str; 9] = [
    "threads",
    "workers",
    "window",
    "postlist",
    "update_pct",
    "size_bytes",
    "keys",
    "zipf_theta",
    "clients",
];

/// A key-value run checked for what its figures and the report's table read: a backend, whole
/// client and window counts, positive Mops and latency p50 and p99; where given, whole counts
/// (postlist, GET hits and misses, PUTs), the per-client and per-worker Mops as lists of
/// numbers, a histogram that decodes.
pub(super) fn check(run: &Run<'_>) -> Result<(), String> {
    let r = run.r;
    if !r["backend"].is_string() {
        return Err(run.bad("backend", "a string"));
    }
    for f in ["clients", "window"] {
        if matches!(r[f].as_u64(), None | Some(0)) {
            return Err(run.bad(f, "a whole number above 0"));
        }
    }
    let positive = |v: &Value| v.as_f64().is_some_and(|x| x.is_finite() && x > 0.0);
    if !positive(&r["mops"]) {
        return Err(run.bad("mops", "a positive number"));
    }
    for q in ["p50", "p99"] {
        if !positive(&r["latency_ns"][q]) {
            return Err(run.bad(&format!("latency_ns.{q}"), "a positive number"));
        }
    }
    for f in ["postlist", "get_hits", "get_misses", "puts"] {
        if !r[f].is_null() && !r[f].is_u64() {
            return Err(run.bad(f, "a whole number"));
        }
    }
    for f in ["client_mops", "worker_mops"] {
        let numbers = |a: &Vec<Value>| a.iter().all(|x| x.as_f64().is_some_and(|v| v.is_finite() && v >= 0.0));
        if !r[f].is_null() && !r[f].as_array().is_some_and(numbers) {
            return Err(run.bad(f, "a list of numbers, 0 or more"));
        }
    }
    if !r["histogram_ns"].is_null() {
        let h = r["histogram_ns"]
            .as_str()
            .ok_or_else(|| run.bad("histogram_ns", "a string"))?;
        crate::report::Hist::decode(h)
            .map_err(|e| run.bad("histogram_ns", &format!("a histogram that decodes ({e})")))?;
    }
    Ok(())
}

/// The figures of the key-value runs `rs`: against clients where the runs have two client
/// counts or more, else against the window where they have two windows or more, else none.
pub(super) fn figures(out: &mut Vec<super::Figure>, dev: &str, rs: &[&Value]) -> Result<(), String> {
    let distinct = |f: &str| rs.iter().map(|r| r[f].to_string()).collect::<BTreeSet<_>>().len();
    let (axis, x_desc) = if distinct("clients") > 1 {
        ("clients", "clients")
    } else if distinct("window") > 1 {
        ("window", "window (requests a client writes before it waits)")
    } else {
        return Ok(());
    };
    // what else differs names the lines
    let varying: Vec<&str> = SHAPE
        .iter()
        .copied()
        .filter(|f| *f != axis && distinct(f) > 1)
        .collect();
    let label = |r: &Value| {
        let mut s = line(r);
        for f in &varying {
            s += &format!(" {f}={}", r[*f].to_string().trim_matches('"'));
        }
        s
    };
    let mut mops: BTreeMap<String, Pts> = BTreeMap::new();
    let mut lat: BTreeMap<String, Pts> = BTreeMap::new();
    for r in rs {
        let (Some(x), Some(m), Some(p50), Some(p99)) = (
            r[axis].as_f64(),
            r["mops"].as_f64(),
            r["latency_ns"]["p50"].as_f64(),
            r["latency_ns"]["p99"].as_f64(),
        ) else {
            continue;
        };
        let l = label(r);
        mops.entry(l.clone()).or_default().push((x, m));
        lat.entry(format!("{l} p50")).or_default().push((x, p50));
        lat.entry(format!("{l} p99")).or_default().push((x, p99));
    }
    let axes = |y_desc| Axes {
        x_desc,
        y_desc,
        x: Scale::Pow2,
        y: Scale::Decimal,
        markers: true,
    };
    if let Some(lines) = sorted_lines(mops) {
        let title = format!("key-value throughput versus {axis}, {dev}");
        add(
            out,
            format!("kv-mops-vs-{axis}.svg"),
            title,
            &axes("Mops (million requests answered per second)"),
            &lines,
        )?;
    }
    if let Some(lines) = sorted_lines(lat) {
        let title = format!("key-value latency (post to response) versus {axis}, {dev}");
        add(
            out,
            format!("kv-latency-vs-{axis}.svg"),
            title,
            &axes("latency (ns)"),
            &lines,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    /// A key-value run of `backend` at `clients` and `window` (and `update` % PUTs).
    fn run(backend: &str, clients: u32, window: u32, update: u32, mops: f64) -> Value {
        json!({"scenario": "kv", "op": "herd", "backend": backend, "workers": 2, "clients": clients,
            "window": window, "postlist": 32, "update_pct": update, "size_bytes": 32, "keys": 4096,
            "zipf_theta": null, "threads": "one", "mops": mops,
            "latency_ns": {"p50": 1000.0 * f64::from(window), "p99": 3000.0 * f64::from(window)}})
    }

    fn files(runs: Vec<Value>) -> Result<Vec<(String, String)>, String> {
        let doc = json!({"environment": {"device": "model0", "provider": "model0"}, "runs": runs});
        Ok(super::super::figures(&doc)?
            .into_iter()
            .map(|f| (f.file, f.svg))
            .collect())
    }

    /// Against the clients where the runs have two client counts, against the window where only
    /// the window varies, no figure of one point a line; a line per backend, and per value of
    /// what else differs.
    #[test]
    fn the_axis_is_what_varies() {
        let by_clients = files(vec![
            run("verbs", 1, 32, 0, 0.5),
            run("direct", 1, 32, 0, 0.6),
            run("verbs", 2, 32, 0, 0.7),
            run("direct", 2, 32, 0, 0.9),
        ])
        .unwrap();
        let names: Vec<&str> = by_clients.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(names, ["kv-mops-vs-clients.svg", "kv-latency-vs-clients.svg"]);
        for b in ["verbs", "direct", "verbs p99", "direct p50"] {
            assert!(by_clients[1].1.contains(b), "no {b}");
        }
        let by_window = files(vec![run("wr", 1, 4, 0, 0.5), run("wr", 1, 16, 0, 0.4)]).unwrap();
        let names: Vec<&str> = by_window.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(names, ["kv-mops-vs-window.svg", "kv-latency-vs-window.svg"]);
        assert!(files(vec![run("wr", 1, 4, 0, 0.5), run("verbs", 1, 4, 0, 0.4)])
            .unwrap()
            .is_empty());
        let mixed = files(vec![
            run("wr", 1, 32, 0, 0.5),
            run("wr", 2, 32, 0, 0.6),
            run("wr", 1, 32, 50, 0.4),
            run("wr", 2, 32, 50, 0.5),
        ])
        .unwrap();
        assert!(mixed[0].1.contains("wr update_pct=0"), "{}", mixed[0].1);
        assert!(mixed[0].1.contains("wr update_pct=50"));
    }

    /// A key-value run missing what its figures read is a damaged file, refused naming the run
    /// and the field.
    #[test]
    fn a_damaged_run_is_refused_naming_the_field() {
        for (field, value, says) in [
            ("mops", json!("fast"), "mops is not a positive number"),
            ("clients", json!(0), "clients is not a whole number above 0"),
            ("window", json!(-1), "window is not a whole number above 0"),
            ("backend", json!(7), "backend is not a string"),
            ("get_hits", json!(-5), "get_hits is not a whole number"),
            ("postlist", json!(1.5), "postlist is not a whole number"),
            ("worker_mops", json!("x"), "worker_mops is not a list of numbers"),
            ("client_mops", json!(["a"]), "client_mops is not a list of numbers"),
            (
                "histogram_ns",
                json!("garbage!!"),
                "histogram_ns is not a histogram that decodes",
            ),
        ] {
            let mut r = run("verbs", 1, 32, 0, 0.5);
            r[field] = value;
            let e = files(vec![run("verbs", 2, 32, 0, 0.5), r]).unwrap_err();
            assert!(e.starts_with("run 2 (kv herd "), "{e}");
            assert!(e.contains(says), "{e}");
        }
        let mut r = run("verbs", 1, 32, 0, 0.5);
        r["latency_ns"]["p99"] = json!(null);
        assert!(files(vec![r])
            .unwrap_err()
            .contains("latency_ns.p99 is not a positive number"));
    }
}

//! The result document's schema, and reading older versions. Version 2: every run names its
//! scenario; `op` is the operation as the command line names it (`atomic`, not `fetch_add`) with
//! the verb beside it (`verb`); units in the field names (`size_bytes`, `latency_ns`, `post_ns`,
//! `completion_wait_ns`, `histogram_ns`, `post_histogram_ns`, `call_histogram_ns`,
//! `per_wqe_ticks_p50`). Version 1 files are upgraded in memory when read, so `compare` and
//! `plot` read both and see one shape.
#![forbid(unsafe_code)]

use serde_json::Value;

/// Field renames from version 1 to 2, for every run.
const RENAMES: [(&str, &str); 8] = [
    ("size", "size_bytes"),
    ("latency", "latency_ns"),
    ("post", "post_ns"),
    ("completion_wait", "completion_wait_ns"),
    ("histogram", "histogram_ns"),
    ("post_histogram", "post_histogram_ns"),
    ("call_histogram", "call_histogram_ns"),
    ("per_wqe_cycles_p50", "per_wqe_ticks_p50"),
];

/// Brings a loaded document of any version this rdmaprobe reads up to the current one, in place.
/// Its `schema_version` becomes the current one and `upgraded_from` keeps the file's own.
pub fn upgrade(doc: &mut Value) {
    let from = doc["schema_version"].as_u64().unwrap_or(0);
    if from >= 2 {
        return;
    }
    let scenario = doc["params"]["scenario"].clone();
    let op = doc["params"]["op"].clone();
    if let Some(runs) = doc["runs"].as_array_mut() {
        for r in runs.iter_mut() {
            let Some(o) = r.as_object_mut() else { continue };
            for (old, new) in RENAMES {
                if let Some(v) = o.remove(old) {
                    o.entry(new).or_insert(v);
                }
            }
            // version 1's peak was the best of about 50 windows of messages
            if let Some(sm) = o.get_mut("summary").and_then(|x| x.as_object_mut()) {
                if let Some(v) = sm.remove("bw_peak_mib_s") {
                    sm.entry("bw_peak_window_mib_s").or_insert(v);
                }
            }
            if !o.contains_key("scenario") && scenario.is_string() && scenario != "suite" {
                o.insert("scenario".into(), scenario.clone());
            }
            if !o.contains_key("op") && op.is_string() {
                o.insert("op".into(), op.clone());
            }
            if let Some(verb) = o.get("op").and_then(|v| v.as_str()).map(str::to_string) {
                let cli = if matches!(verb.as_str(), "fetch_add" | "cmp_swap") {
                    "atomic"
                } else {
                    verb.as_str()
                };
                o.insert("op".into(), Value::from(cli));
                o.entry("verb").or_insert(Value::from(verb.clone()));
            }
        }
    }
    doc["upgraded_from"] = Value::from(from);
    doc["schema_version"] = Value::from(super::SCHEMA_VERSION);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_version_1_file_reads_as_version_2() {
        let mut d = json!({
            "schema_version": 1,
            "params": {"scenario": "lat", "op": "fetch_add"},
            "runs": [{"backend": "direct", "op": "fetch_add", "size": 8, "latency": {"p50": 1.0},
                      "post": {"p50": 0.5}, "completion_wait": {}, "histogram": "h", "post_histogram": "p"}]
        });
        upgrade(&mut d);
        let r = &d["runs"][0];
        assert_eq!(d["schema_version"], super::super::SCHEMA_VERSION);
        assert_eq!(d["upgraded_from"], 1);
        assert_eq!(
            (r["scenario"].as_str(), r["op"].as_str(), r["verb"].as_str()),
            (Some("lat"), Some("atomic"), Some("fetch_add"))
        );
        assert_eq!(r["size_bytes"], 8);
        assert_eq!(r["latency_ns"]["p50"], 1.0);
        assert_eq!(r["post_ns"]["p50"], 0.5);
        assert_eq!(
            (r["histogram_ns"].as_str(), r["post_histogram_ns"].as_str()),
            (Some("h"), Some("p"))
        );
        for old in [
            "size",
            "latency",
            "post",
            "histogram",
            "post_histogram",
            "completion_wait",
        ] {
            assert!(r.get(old).is_none(), "{old} left");
        }
        // a suite's runs carry their own scenario; post-cost v1 cycles become ticks
        let mut d = json!({"schema_version": 1, "params": {"scenario": "suite"},
            "runs": [{"scenario": "post_cost", "op": "write", "size": 8, "per_wqe_cycles_p50": 5.0, "call_histogram": "c"}]});
        upgrade(&mut d);
        let r = &d["runs"][0];
        assert_eq!(
            (r["scenario"].as_str(), r["op"].as_str(), r["verb"].as_str()),
            (Some("post_cost"), Some("write"), Some("write"))
        );
        assert_eq!(
            (r["per_wqe_ticks_p50"].as_f64(), r["call_histogram_ns"].as_str()),
            (Some(5.0), Some("c"))
        );
        // version 2 stays as it is
        let mut v2 = json!({"schema_version": 2, "runs": [{"size_bytes": 8, "op": "atomic"}]});
        let before = v2.clone();
        upgrade(&mut v2);
        assert_eq!(v2, before);
    }
}

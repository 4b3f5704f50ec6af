//! Input: result files read and checked (schema, every value a run gives), and each side's
//! runs gathered into rows by run key and metric.

use super::CompareError;
use crate::report::{read, schema, SCHEMA_VERSION};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Reads and checks a result file (schema versions 1 up to this rdmaprobe's): a regular file of
/// at most [`read::MAX_RESULT_BYTES`], never waiting on a FIFO or reading a device
/// ([`read::file`]).
pub fn load(path: &str) -> Result<Value, CompareError> {
    let unreadable = |why: String| CompareError::Unreadable { path: path.into(), why };
    let bytes = read::file(std::path::Path::new(path), read::MAX_RESULT_BYTES).map_err(|e| unreadable(e.why))?;
    let text = String::from_utf8(bytes).map_err(|e| unreadable(format!("not UTF-8 text ({e})")))?;
    parse(&text, path)
}

/// Reads a result document from `text` (named `path` in errors), as [`load`] does.
pub fn parse(text: &str, path: &str) -> Result<Value, CompareError> {
    let foreign = |why: String| CompareError::Foreign { path: path.into(), why };
    if text.trim().is_empty() {
        return Err(foreign("empty file".into()));
    }
    let v: Value =
        serde_json::from_str(text).map_err(|e| foreign(format!("not valid JSON ({e}): truncated or corrupt?")))?;
    if v["tool"]["name"] != "rdmaprobe" {
        return Err(foreign("not an rdmaprobe result (no tool.name = rdmaprobe)".into()));
    }
    match v["schema_version"].as_u64() {
        Some(n) if (1..=u64::from(SCHEMA_VERSION)).contains(&n) => {}
        _ => {
            return Err(foreign(format!(
                "schema version {} (this rdmaprobe reads 1 to {})",
                v["schema_version"], SCHEMA_VERSION
            )))
        }
    }
    if !v["runs"].is_array() {
        return Err(foreign("no runs".into()));
    }
    if v["params"]["rows_from"] == "client" {
        return Err(foreign(
            "a latency server's file: its rows are the client's measurement (params.rows_from); compare the client's file"
                .into(),
        ));
    }
    let mut v = v;
    schema::upgrade(&mut v);
    Ok(v)
}

pub(super) fn key(doc: &Value, r: &Value) -> String {
    // schema 2: every run says its scenario; schema 1 single-scenario files say it once
    let scen = r["scenario"]
        .as_str()
        .or_else(|| doc["params"]["scenario"].as_str())
        .unwrap_or("?");
    let size = r["size_bytes"].as_u64().unwrap_or(0);
    let mut k = format!(
        "{scen} {} {} {size}B",
        r["op"].as_str().or_else(|| doc["params"]["op"].as_str()).unwrap_or("?"),
        r["backend"].as_str().unwrap_or("?"),
    );
    // compare-and-swap and fetch-and-add are both `atomic`; their runs are not the same run
    // (fetch-and-add keeps the key it always had)
    // (and so are a WRITE or SEND with immediate and without, and the transports)
    if let Some(t) = r["transport"]
        .as_str()
        .or_else(|| doc["params"]["transport"].as_str())
        .filter(|t| *t != "RC")
    {
        k.push_str(&format!(" transport={t}"));
    }
    if let Some(v @ ("cmp_swap" | "write_imm" | "send_imm")) = r["verb"].as_str() {
        k.push_str(&format!(" verb={v}"));
    }
    // the server's stamps of --anatomy lie on its round trips: not the same run as one without
    if r["anatomy"].is_object() {
        k.push_str(" anatomy");
    }
    for f in [
        "db_mode",
        "postlist",
        "inline",
        "cq_mod",
        "threads",
        "qps_per_thread",
        "tx_depth",
        "rx_depth",
        "bidirectional",
        "completion",
        // the key-value workload's shape
        "workers",
        "clients",
        "window",
        "update_pct",
        "keys",
        "zipf_theta",
    ] {
        if let Some(x) = r.get(f).filter(|x| !x.is_null()) {
            k.push_str(&format!(" {f}={}", x.to_string().trim_matches('"')));
        }
    }
    k
}

/// One process run's figure for one metric.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSample {
    /// The run's value (its p50, p99 or average bandwidth; a contrast's: the backend's figure
    /// minus its control's: the median over its rounds of blocks).
    pub value: f64,
    /// Per-block samples of the same statistic (empty: none); a contrast's: per round of
    /// blocks, the backend's block minus the control's block of the same round.
    pub blocks: Vec<f64>,
    /// A contrast's: the backend's own figure in the run (the lower quartile of its blocks, or
    /// its value), the scale its change is told in.
    pub level: Option<f64>,
}

/// The in-run control of a backend: the backend whose rows in the same run it is measured
/// against (interleaved with it block by block where the scenario does so).
pub fn control_of(backend: &str) -> Option<&'static str> {
    match backend {
        "verbs" | "wr" => Some("direct"),
        _ => None,
    }
}

/// The control run's key of run `r` (its control backend; on the direct path of a post-cost
/// run, the BlueFlame doorbell libmlx5 uses), and the contrast row's key: `r`'s key with the
/// backend written `backend-control`.
fn control_keys(doc: &Value, r: &Value) -> Option<(String, String)> {
    // a run waiting for completion events (`-e`) has no direct twin: direct only polls
    if r["completion"] == "events" {
        return None;
    }
    let b = r["backend"].as_str()?;
    let c = control_of(b)?;
    let mut cr = r.clone();
    cr["backend"] = Value::from(c);
    if c == "direct" && r["scenario"] == "post_cost" {
        cr["db_mode"] = Value::from("bf");
    }
    let own = key(doc, r);
    let contrast_key = own.replacen(&format!(" {b} "), &format!(" {b}-{c} "), 1);
    Some((key(doc, &cr), contrast_key))
}

/// Whether run `r` interleaved its backends block by block, so that block `i` of one backend
/// and block `i` of another ran in the same round: latency runs (one block of each backend per
/// round, the order rotated) and post-cost runs that say they ran in several rounds (`rounds`,
/// a turn of every backend each, since this rdmaprobe). Bandwidth runs measure one backend after
/// another.
pub fn interleaved(doc: &Value, r: &Value) -> bool {
    match r["scenario"].as_str().or_else(|| doc["params"]["scenario"].as_str()) {
        Some("lat") => true,
        Some("post_cost") => r["rounds"].as_u64().is_some_and(|n| n > 1),
        _ => false,
    }
}

/// The lower quartile (nearest rank): a backend's figure in its fastest rounds, which the
/// host's slow states (they add to some rounds) move least. NaN when empty.
pub(super) fn lower_quartile(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    crate::report::percentile(&v, 0.25)
}

/// A backend's contrast to its control in one run. Interleaved, with as many blocks on both:
/// per round, the backend's block minus the control's, and the run's value the median of these
/// (a level change of the host that lasts some blocks falls on both members of a round and
/// cancels; on model0 such changes double a block's figure, and how many blocks they take moves
/// a whole run's percentile). Otherwise the run's figures' difference, no blocks.
fn contrast(own: &RunSample, control: &RunSample, interleaved: bool) -> RunSample {
    let paired = interleaved && !own.blocks.is_empty() && own.blocks.len() == control.blocks.len();
    // the median of the rounds' differences is the summary's overhead statistic
    if let Some(p) = paired
        .then(|| super::paired_difference(&control.blocks, &own.blocks, 0))
        .flatten()
    {
        RunSample {
            value: p.median,
            blocks: own.blocks.iter().zip(&control.blocks).map(|(a, b)| a - b).collect(),
            level: Some(lower_quartile(&own.blocks)),
        }
    } else {
        RunSample {
            value: own.value - control.value,
            blocks: Vec::new(),
            level: Some(own.value),
        }
    }
}

/// A metric of a run: name, value, per-block samples, larger is worse.
type Metric = (String, RunSample, bool);

/// Per-block samples: absent is allowed (files from before they were recorded); present, each
/// must be a finite number above 0 (bandwidth windows: at least 0), and not all 0.
fn samples(x: Option<&Value>, field: &str, zero_ok: bool) -> Result<Vec<f64>, String> {
    let x = match x {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(x) => x,
    };
    let a = x.as_array().ok_or_else(|| format!("{field} is {x}: not an array"))?;
    let mut out = Vec::with_capacity(a.len());
    for (i, e) in a.iter().enumerate() {
        match e.as_f64() {
            Some(v) if v.is_finite() && (v > 0.0 || (zero_ok && v == 0.0)) => out.push(v),
            Some(v) => {
                return Err(format!(
                    "{field}[{i}] is {v}: must be a finite number {}",
                    if zero_ok { "of at least 0" } else { "above 0" }
                ))
            }
            None => return Err(format!("{field}[{i}] is {e}: not a number")),
        }
    }
    if !out.is_empty() && out.iter().sum::<f64>() <= 0.0 {
        return Err(format!("{field}: every sample is 0"));
    }
    Ok(out)
}

/// The metrics of a run, every value checked.
fn metrics(r: &Value, wanted: &[String]) -> Result<Vec<Metric>, String> {
    let want = |m: &str| wanted.iter().any(|w| w == m);
    let value = |obj: &Value, obj_name: &str, f: &str| -> Result<f64, String> {
        let x = &obj[f];
        match x.as_f64() {
            Some(v) if v.is_finite() && v > 0.0 => Ok(v),
            Some(v) => Err(format!(
                "{obj_name}.{f} is {v}: a value must be a finite number above 0"
            )),
            None if x.is_null() => Err(format!(
                "{obj_name}.{f} is missing or null (a non-finite number is written as null)"
            )),
            None => Err(format!("{obj_name}.{f} is {x}: not a number")),
        }
    };
    let mut out = Vec::new();
    let lat = [("latency_ns", false), ("per_wqe_ns", true)]
        .into_iter()
        .find(|(f, _)| r[*f].is_object());
    if let Some((obj_name, post_cost)) = lat {
        for m in ["p50", "p99"].into_iter().filter(|m| want(m)) {
            let v = value(&r[obj_name], obj_name, m)?;
            let b = match (post_cost, m) {
                (false, "p50") => samples(r.get("block_medians_ns"), "block_medians_ns", false)?,
                (false, _) => samples(r.get("block_p99_ns"), "block_p99_ns", false)?,
                (true, "p50") => samples(r.get("block_per_wqe_ns"), "block_per_wqe_ns", false)?,
                (true, _) => Vec::new(),
            };
            out.push((
                m.to_string(),
                RunSample {
                    value: v,
                    blocks: b,
                    level: None,
                },
                true,
            ));
        }
    }
    // --anatomy: the median of the server's turnaround (`turn`) and of the rest of the round
    // trip (`rest`); with the NIC split, of its wire/NIC, responder and polling components;
    // one figure a run (no blocks)
    for (m, field) in super::ANATOMY_METRICS {
        let (obj, name) = match field.strip_prefix("nic.") {
            Some(f) => (&r["anatomy"]["nic"], f),
            None => (&r["anatomy"], field),
        };
        if want(m) && obj.is_object() {
            let v = value(&obj[name], &format!("anatomy.{field}"), "p50")?;
            out.push((
                m.to_string(),
                RunSample {
                    value: v,
                    blocks: Vec::new(),
                    level: None,
                },
                true,
            ));
        }
    }
    // the key-value workload's throughput is its `bw` metric: requests answered per microsecond
    // (no windows: one figure a run)
    if want("bw") && r["scenario"] == "kv" {
        let v = value(r, "run", "mops")?;
        out.push((
            "bw".into(),
            RunSample {
                value: v,
                blocks: Vec::new(),
                level: None,
            },
            false,
        ));
    }
    if want("bw") && r["summary"].is_object() {
        let v = value(&r["summary"], "summary", "bw_avg_mib_s")?;
        let w = samples(r["summary"].get("window_mib_s"), "summary.window_mib_s", true)?;
        out.push((
            "bw".into(),
            RunSample {
                value: v,
                blocks: w,
                level: None,
            },
            false,
        ));
    }
    Ok(out)
}

/// A side's rows by (key, metric): the runs' samples, larger is worse.
pub(super) type Rows = BTreeMap<(String, String), (Vec<RunSample>, bool)>;

/// A contrast row's key -> (the backend's own key, its control's key).
pub(super) type Controls = BTreeMap<String, (String, String)>;

/// One side's rows; every run key; its contrast rows (a backend against its control in the
/// same file, under the key [`control_keys`] gives) and what each is made of.
pub(super) struct SideRows {
    pub rows: Rows,
    pub keys: BTreeSet<String>,
    pub contrasts: Rows,
    pub controls: Controls,
}

/// Reads one side's files into rows, checking every value and that no file repeats a run.
pub(super) fn side(files: &[(String, Value)], wanted: &[String]) -> Result<SideRows, CompareError> {
    let mut rows: Rows = BTreeMap::new();
    let mut keys = BTreeSet::new();
    let (mut contrast_rows, mut controls): (Rows, Controls) = (BTreeMap::new(), BTreeMap::new());
    for (path, doc) in files {
        let mut seen = BTreeSet::new();
        let mut of_file: BTreeMap<String, (Vec<Metric>, bool)> = BTreeMap::new();
        let mut pairs = Vec::new();
        for r in doc["runs"].as_array().into_iter().flatten() {
            let k = key(doc, r);
            if !seen.insert(k.clone()) {
                return Err(CompareError::DuplicateRun {
                    path: path.clone(),
                    run: k,
                });
            }
            // a run must carry the figures of its scenario (an object), or it would drop out of
            // the comparison unseen
            let carries = ["latency_ns", "per_wqe_ns", "summary"]
                .iter()
                .any(|f| r[*f].is_object());
            if !carries {
                return Err(CompareError::BadValue {
                    path: path.clone(),
                    run: k,
                    why: "no figures (latency_ns, per_wqe_ns or summary is missing or not an object)".into(),
                });
            }
            let ms = metrics(r, wanted).map_err(|why| CompareError::BadValue {
                path: path.clone(),
                run: k.clone(),
                why,
            })?;
            for (m, s, worse_up) in &ms {
                rows.entry((k.clone(), m.clone()))
                    .or_insert_with(|| (Vec::new(), *worse_up))
                    .0
                    .push(s.clone());
            }
            if let Some((ck, contrast_key)) = control_keys(doc, r) {
                pairs.push((k.clone(), ck, contrast_key));
            }
            of_file.insert(k.clone(), (ms, interleaved(doc, r)));
            keys.insert(k);
        }
        for (own, ck, contrast_key) in pairs {
            let (Some((oms, oi)), Some((cms, ci))) = (of_file.get(&own), of_file.get(&ck)) else {
                continue;
            };
            let paired = *oi && *ci;
            // --anatomy's turn and rest are judged on their own: the server's turnaround of
            // verbs less direct's is no driver's overhead (a host state moves direct's alone)
            for (m, s, worse_up) in oms
                .iter()
                .filter(|(m, _, _)| !super::ANATOMY_METRICS.iter().any(|(a, _)| a == m))
            {
                if let Some((_, c, _)) = cms.iter().find(|(cm, _, _)| cm == m) {
                    contrast_rows
                        .entry((contrast_key.clone(), m.clone()))
                        .or_insert_with(|| (Vec::new(), *worse_up))
                        .0
                        .push(contrast(s, c, paired));
                }
            }
            controls.insert(contrast_key, (own, ck));
        }
    }
    Ok(SideRows {
        rows,
        keys,
        contrasts: contrast_rows,
        controls,
    })
}

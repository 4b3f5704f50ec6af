//! `report.html`: one self-contained page (inline CSS and SVG, nothing fetched) of a results
//! document: when and where it was measured and its warnings at the top, then the results
//! (the summary tables and the plots), then what they were measured on (the environment, the
//! device's counters, the memory regions, collapsed). Labels are words ("round trip", "TSC
//! rate"), not the document's field names; operations are named as the command line names them.

use super::plot::{device_label, human, series, Figure};
use serde_json::Value;
use std::fmt::Write;

/// Escapes text for HTML.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '&' => o.push_str("&amp;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "—".into(),
        Value::String(s) => esc(s),
        Value::Array(a) if a.is_empty() => "—".into(),
        Value::Number(n) => n
            .as_f64()
            .filter(|f| f.fract() != 0.0)
            .map(|f| format!("{f:.3}"))
            .unwrap_or_else(|| n.to_string()),
        other => esc(&other.to_string()),
    }
}

fn ns(v: &Value) -> String {
    fixed(v, 0)
}

/// A number to `d` decimals, `—` when there is none.
fn fixed(v: &Value, d: usize) -> String {
    v.as_f64().map(|f| format!("{f:.d$}")).unwrap_or_else(|| "—".into())
}

/// `yes` or `no`, `—` when the value is not a boolean.
fn yes_no(v: &Value) -> &'static str {
    match v.as_bool() {
        Some(true) => "yes",
        Some(false) => "no",
        None => "—",
    }
}

const CSS: &str = "body{font-family:sans-serif;margin:2em;color:#222;max-width:1150px}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}td{white-space:nowrap}\
th{background:#eee}td.l,th.l{text-align:left}.warn{background:#fff3cd;border:1px solid #e0b400;padding:.6em 1em}\
figure{margin:1.5em 0}figcaption{font-size:90%;color:#555}td.ref{color:#777}\
summary{cursor:pointer;font-weight:bold;margin:1em 0}";

/// The page. `figs` are the plots to inline (from [`super::plot::figures`]).
pub fn report(doc: &Value, figs: &[Figure]) -> String {
    // an older schema reads as the current one
    let mut up = doc.clone();
    super::schema::upgrade(&mut up);
    let doc = &up;
    let mut h = String::new();
    head(&mut h, doc);
    warnings(&mut h, doc);
    // the results first
    let runs: &[Value] = doc["runs"].as_array().map(|a| a.as_slice()).unwrap_or(&[]);
    let of = |s: &str| -> Vec<&Value> { runs.iter().filter(|r| r["scenario"].as_str() == Some(s)).collect() };
    latency(&mut h, &of("lat"));
    anatomy(&mut h, &of("lat"));
    bandwidth(&mut h, &of("bw"));
    post_cost(&mut h, &of("post_cost"));
    key_value(&mut h, &of("kv"));
    plots(&mut h, figs);
    // then what they were measured on
    environment(&mut h, doc);
    counters(&mut h, doc);
    regions(&mut h, doc);
    // After layout, the page records what rendered (tables with rows of non-zero size, plots
    // with drawn lines) in <body data-rendered>: a headless browser's --dump-dom shows it, so a
    // test can tell a page that renders from one that only parses. Inline, nothing fetched.
    h.push_str(RENDER_CHECK);
    h.push_str("</body></html>\n");
    h
}

/// The page's head and title (the device); when and on which host it was measured, the
/// tool's version and the command.
fn head(h: &mut String, doc: &Value) {
    let dev = device_label(doc);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>rdmaprobe report: {}</title>\
         <style>{CSS}{}</style></head><body>\n<h1>rdmaprobe report: {}</h1>\n",
        esc(&dev),
        super::pdf::PRINT_CSS,
        esc(&dev)
    );
    let when = match doc["created_unix"].as_u64().filter(|t| *t > 0) {
        Some(t) => utc(t),
        None => "at a time not recorded".into(),
    };
    let host = match doc["environment"]["host"].as_str() {
        Some(host) => format!("on host <b>{}</b>", esc(host)),
        None => "on a host not recorded".into(),
    };
    let _ = writeln!(
        h,
        "<p id=\"measured\">measured {when} {host} · rdmaprobe {} · command <code>{}</code></p>",
        esc(doc["tool"]["version"].as_str().unwrap_or("?")),
        esc(&doc["command"]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str()).collect::<Vec<_>>().join(" "))
            .unwrap_or_default())
    );
}

/// `secs` since the epoch as `YYYY-MM-DD HH:MM:SS UTC` (the civil calendar from the day count,
/// as in Howard Hinnant's `civil_from_days`).
pub(crate) fn utc(secs: u64) -> String {
    let z = (secs / 86400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let s = secs % 86400;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

/// The document's warnings, when it has some.
fn warnings(h: &mut String, doc: &Value) {
    let warnings: Vec<&str> = doc["warnings"]
        .as_array()
        .map(|a| a.iter().filter_map(|w| w.as_str()).collect())
        .unwrap_or_default();
    if !warnings.is_empty() {
        h.push_str("<div class=\"warn\" id=\"warnings\"><b>Warnings</b><ul>");
        for w in warnings {
            let _ = write!(h, "<li>{}</li>", esc(w));
        }
        h.push_str("</ul></div>\n");
    }
}

/// The device's counters over the run (sysfs or model0's own), when the document has them.
fn counters(h: &mut String, doc: &Value) {
    if let Some(delta) = doc["counters"]["delta"].as_object() {
        let _ = write!(
            h,
            "<h2>Device counters</h2>\n<p>change over the run, from {}</p>\n<table id=\"counters\"><thead><tr><th class=\"l\">counter</th><th>change</th></tr></thead><tbody>",
            esc(doc["counters"]["source"].as_str().unwrap_or("?"))
        );
        for (k, v) in delta {
            let _ = write!(
                h,
                "<tr><td class=\"l\">{}</td><td>{}</td></tr>",
                esc(&human(k)),
                esc(&v.to_string())
            );
        }
        h.push_str("</tbody></table>\n");
    }
}

/// At most this many of a bandwidth run's regions in the page (the document has them all).
const RUN_REGIONS: usize = 4;

/// The registered buffers and where they sit, when the document has them: the run's (`memory_regions`)
/// and each bandwidth run's own (made afresh for every run), the first [`RUN_REGIONS`] of each;
/// collapsed (a line of its own for each, two dozen in a quick suite).
fn regions(h: &mut String, doc: &Value) {
    let none = Vec::new();
    let top = doc["memory_regions"].as_array().unwrap_or(&none);
    let mut rows: Vec<(String, &Value)> = top.iter().map(|r| (String::new(), r)).collect();
    let mut more = 0;
    for run in doc["runs"].as_array().unwrap_or(&none) {
        let rs = run["memory_regions"].as_array().unwrap_or(&none);
        let what = format!(
            "{} B {}: ",
            cell(&run["size_bytes"]),
            run["backend"].as_str().unwrap_or("?")
        );
        rows.extend(rs.iter().take(RUN_REGIONS).map(|r| (what.clone(), r)));
        more += rs.len().saturating_sub(RUN_REGIONS);
    }
    if rows.is_empty() {
        return;
    }
    let _ = write!(
        h,
        "<details id=\"memory-regions\"><summary>Memory regions ({} registered buffers)</summary>\n\
         <p>where each registered buffer sits (alignment: the largest power of two \
         dividing the address; the physical address, from /proc/self/pagemap, needs root)</p>\n<table id=\"regions\">\
         <thead><tr><th class=\"l\">region</th><th>address</th><th>page offset</th><th>alignment [B]</th><th>huge pages</th>\
         <th>physical address</th></tr></thead><tbody>",
        rows.len()
    );
    let hex = |v: &Value| v.as_u64().map(|a| format!("{a:#x}"));
    for (what, r) in rows {
        let phys = hex(&r["phys_addr"]).unwrap_or_else(|| {
            format!(
                "unreadable ({})",
                r["phys_unreadable"].as_str().unwrap_or("no reason given")
            )
        });
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&what),
            esc(r["name"].as_str().unwrap_or("?")),
            esc(&hex(&r["addr"]).unwrap_or_else(|| "?".into())),
            cell(&r["page_offset"]),
            cell(&r["align"]),
            yes_no(&r["huge"]),
            esc(&phys)
        );
    }
    h.push_str("</tbody></table>\n");
    if more > 0 {
        let _ = writeln!(
            h,
            "<p>and {more} more regions of the bandwidth runs, in the document</p>"
        );
    }
    h.push_str("</details>\n");
}

/// The environment's items in the page's order, each with its label; an item the document has
/// beyond these follows them, its name in words.
#[rustfmt::skip]
const ENV_ITEMS: [(&str, &str); 22] = [
    ("host", "host"),
    ("device", "device"),
    ("provider", "provider"),
    ("provider_library", "provider library"),
    ("firmware", "firmware"),
    ("software_model", "software model"),
    ("port", "port"),
    ("cpu_model", "CPU"),
    ("cpus", "CPUs online"),
    ("pinned_cpus", "measuring threads pinned to CPUs"),
    ("numa_node", "NUMA node"),
    ("virtualized", "under a hypervisor"),
    ("kernel", "kernel"),
    ("clocksource", "kernel clocksource"),
    ("governor", "cpufreq governor"),
    ("tsc_hz", "TSC rate"),
    ("tsc_source", "TSC rate from"),
    ("invariant_tsc", "invariant TSC"),
    ("rdma_core_built", "rdma-core built against"),
    ("libibverbs_loaded", "libibverbs loaded"),
    ("libibverbs_version", "libibverbs version"),
    ("env_vars", "provider environment variables"),
];

/// The environment's table, with the timer overhead, after the results.
fn environment(h: &mut String, doc: &Value) {
    h.push_str(
        "<h2>Environment</h2>\n<table id=\"environment\"><thead><tr><th class=\"l\">item</th><th class=\"l\">value</th></tr></thead><tbody>",
    );
    if let Some(env) = doc["environment"].as_object() {
        let known = ENV_ITEMS
            .iter()
            .filter_map(|(k, l)| env.get(*k).map(|v| (*k, l.to_string(), v)));
        let other = env
            .iter()
            .filter(|(k, _)| !ENV_ITEMS.iter().any(|(n, _)| n == k))
            .map(|(k, v)| (k.as_str(), human(k), v));
        for (k, label, v) in known.chain(other) {
            let _ = write!(
                h,
                "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>",
                esc(&label),
                esc(&env_value(k, v))
            );
        }
    }
    if let Some(o) = doc["timer_overhead_ns"].as_f64() {
        let _ = write!(
            h,
            "<tr><td class=\"l\">timer overhead</td><td class=\"l\">{o:.1} ns</td></tr>"
        );
    }
    h.push_str("</tbody></table>\n");
}

/// An environment item's value as text (not yet escaped): the TSC rate in GHz or MHz, yes or
/// no, lists joined, the port's attributes in words.
fn env_value(key: &str, v: &Value) -> String {
    match (key, v) {
        ("tsc_hz", Value::Number(n)) => n.as_f64().map(hz).unwrap_or_default(),
        ("pinned_cpus", Value::Array(a)) if a.is_empty() => "not pinned".into(),
        ("env_vars", Value::Array(a)) if a.is_empty() => "none set".into(),
        (_, Value::Null) => "—".into(),
        (_, Value::Bool(_)) => yes_no(v).into(),
        (_, Value::String(s)) => s.clone(),
        // a variable and its value
        (_, Value::Array(a)) if a.iter().all(|x| x.as_array().is_some_and(|p| p.len() == 2)) => a
            .iter()
            .map(|p| format!("{}={}", env_value("", &p[0]), env_value("", &p[1])))
            .collect::<Vec<_>>()
            .join(", "),
        (_, Value::Array(a)) if a.is_empty() => "—".into(),
        (_, Value::Array(a)) => a.iter().map(|x| env_value("", x)).collect::<Vec<_>>().join(", "),
        (_, Value::Object(o)) => o
            .iter()
            .map(|(k, x)| format!("{} {}", human(k), env_value(k, x)))
            .collect::<Vec<_>>()
            .join(", "),
        (_, Value::Number(_)) => cell(v),
    }
}

/// A rate in Hz as GHz to the MHz, or MHz to a tenth (a TSC rate is calibrated to better than
/// that; more digits would only be noise to read past).
fn hz(f: f64) -> String {
    if f >= 1e9 {
        format!("{:.3} GHz", f / 1e9)
    } else if f >= 1e6 {
        format!("{:.1} MHz", f / 1e6)
    } else {
        format!("{f:.0} Hz")
    }
}

/// The latency runs' table: the spread (min, mean, standard deviation) beside the percentiles,
/// and each backend's p50 against direct's when a direct run is among them (without one, as
/// with `--backends verbs`, no column for it), when there are runs.
fn latency(h: &mut String, lat: &[&Value]) {
    if lat.is_empty() {
        return;
    }
    let has_direct = lat.iter().any(|r| r["backend"] == "direct");
    h.push_str(if has_direct {
        "<h2>Latency</h2>\n<p>ns; the driver's overhead (− direct) is, over the rounds of blocks (the \
         backends interleaved, one block each per round), the median of the backend's block p50 minus \
         direct's in the same round, with the 95 % bootstrap interval of that median in brackets, for \
         the same operation and size.</p>\n"
    } else {
        "<h2>Latency</h2>\n<p>ns; no direct run among them, so no driver's overhead.</p>\n"
    });
    h.push_str(
        "<table id=\"latency\"><thead><tr><th class=\"l\">op</th><th>size (B)</th>\
         <th class=\"l\">figure</th><th class=\"l\">backend</th><th>min</th><th>p50</th><th>mean</th><th>stdev</th>\
         <th>p99</th><th>p99.9</th><th>max</th><th>samples</th>",
    );
    h.push_str(if has_direct {
        "<th>− direct (p50) [95 % interval]</th></tr></thead><tbody>"
    } else {
        "</tr></thead><tbody>"
    });
    for r in lat {
        let l = &r["latency_ns"];
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>",
            esc(&series(r)),
            cell(&r["size_bytes"]),
            esc(&human(r["figure"].as_str().unwrap_or("—"))),
            esc(&backend_line(r)),
        );
        for q in ["min", "p50", "mean", "stdev", "p99", "p99_9", "max"] {
            let _ = write!(h, "<td>{}</td>", ns(&l[q]));
        }
        let _ = write!(h, "<td>{}</td>", cell(&l["count"]));
        if has_direct {
            h.push_str(&overhead_cell(r, lat));
        }
        h.push_str("</tr>");
    }
    h.push_str("</tbody></table>\n");
}

/// `--anatomy` runs: each round trip split at the server's turnaround, medians, and a bar per
/// run stacking the two (turn, then rest) in proportion (each bar the same length: a run
/// waiting for events, 100 times longer, would shrink the others to nothing on one scale).
fn anatomy(h: &mut String, lat: &[&Value]) {
    let rows: Vec<&&Value> = lat.iter().filter(|r| r["anatomy"].is_object()).collect();
    if rows.is_empty() {
        return;
    }
    h.push_str(
        "<h2>Latency anatomy</h2>\n<p>ns, round trips (not halved), medians over the samples: the server's \
         turnaround (from seeing the request to its reply's post returning, on its own clock) and the rest of \
         each round trip (the client's post, both messages through the NICs and the wire, each end's polling); \
         the bar stacks the two medians (turn dark, rest light) in proportion. The server's stamps lie on the \
         round trips (on model0 they measured 50-80 ns a round trip): compare a run without --anatomy for the \
         figures. Samples whose turnaround exceeded their round trip (impossible on one clock: two hosts, or an emulated guest's CPUs) are \
         counted in the last column, their rest as 0.</p>\n\
         <table id=\"anatomy\"><thead><tr><th class=\"l\">op</th><th>size (B)</th><th class=\"l\">backend</th>\
         <th>round trip p50</th><th>turn p50</th><th>turn p99</th><th>rest p50</th><th>rest p99</th>\
         <th class=\"l\">turn | rest</th><th>turn &gt; round trip</th></tr></thead><tbody>",
    );
    let p50 = |r: &Value, k: &str| r["anatomy"][k]["p50"].as_f64().filter(|v| v.is_finite() && *v >= 0.0);
    for r in rows {
        let a = &r["anatomy"];
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td>",
            esc(&series(r)),
            cell(&r["size_bytes"]),
            esc(&backend_line(r))
        );
        for (k, q) in [
            ("round_trip_ns", "p50"),
            ("turnaround_ns", "p50"),
            ("turnaround_ns", "p99"),
            ("rest_ns", "p50"),
            ("rest_ns", "p99"),
        ] {
            let _ = write!(h, "<td>{}</td>", ns(&a[k][q]));
        }
        let (t, rest) = (p50(r, "turnaround_ns"), p50(r, "rest_ns"));
        let scale = t.unwrap_or(0.0) + rest.unwrap_or(0.0);
        let width = |v: Option<f64>| v.filter(|_| scale > 0.0).map_or(0.0, |v| 300.0 * v / scale);
        let _ = write!(
            h,
            "<td class=\"l\"><span style=\"display:inline-block;height:10px;width:{:.0}px;background:#a33\"></span>\
             <span style=\"display:inline-block;height:10px;width:{:.0}px;background:#9bd\"></span></td><td>{}</td></tr>",
            width(t),
            width(rest),
            cell(&a["turnaround_over_round_trip"])
        );
    }
    h.push_str("</tbody></table>\n");
    nic_anatomy(h, lat);
}

/// `--anatomy` runs with the NIC split: its components' medians and a bar per run stacking
/// them (post, wire/NIC, responder, poll) in proportion.
fn nic_anatomy(h: &mut String, lat: &[&Value]) {
    let rows: Vec<&&Value> = lat.iter().filter(|r| r["anatomy"]["nic"].is_object()).collect();
    if rows.is_empty() {
        return;
    }
    const PARTS: [(&str, &str); 4] = [
        ("post_ns", "#555"),
        ("wire_ns", "#9bd"),
        ("responder_ns", "#a33"),
        ("poll_ns", "#db7"),
    ];
    h.push_str(
        "<h3>NIC split</h3>\n<p>ns, round trips, medians over the samples, from the NICs' completion timestamps \
         (the NIC clock mapped to the TSC over each run): the client's post call (grey); wire/NIC, its doorbell \
         to its NIC completing the reply less the responder (both messages through the NICs and the wire; blue); \
         the responder, from the server's NIC completing the request to its reply's post (its polling and its \
         turnaround; red); the client's polling, from its NIC completing the reply to seeing it (yellow). They \
         add up to each round trip; a sample with a mapped timestamp outside its causal window is counted in \
         the last column.</p>\n<table id=\"nic-anatomy\"><thead><tr><th class=\"l\">op</th><th>size (B)</th>\
         <th class=\"l\">backend</th><th>post</th><th>wire/NIC</th><th>responder</th><th>poll</th>\
         <th class=\"l\">post | wire | responder | poll</th><th>+- ns</th><th>outside</th></tr></thead><tbody>",
    );
    for r in rows {
        let n = &r["anatomy"]["nic"];
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td>",
            esc(&series(r)),
            cell(&r["size_bytes"]),
            esc(&backend_line(r))
        );
        for (k, _) in PARTS {
            let _ = write!(h, "<td>{}</td>", ns(&n[k]["p50"]));
        }
        let v = |k: &str| {
            n[k]["p50"]
                .as_f64()
                .filter(|v| v.is_finite() && *v > 0.0)
                .unwrap_or(0.0)
        };
        let scale: f64 = PARTS.iter().map(|(k, _)| v(k)).sum();
        h.push_str("<td class=\"l\">");
        for (k, color) in PARTS {
            let w = if scale > 0.0 { 300.0 * v(k) / scale } else { 0.0 };
            let _ = write!(
                h,
                "<span style=\"display:inline-block;height:10px;width:{w:.0}px;background:{color}\"></span>"
            );
        }
        let _ = write!(
            h,
            "</td><td>{}</td><td>{}</td></tr>",
            ns(&n["error_ns"]),
            cell(&n["outside_window"])
        );
    }
    h.push_str("</tbody></table>\n");
}

/// A run's backend as its line in the plots: `-e` when it waited for completion events.
fn backend_line(r: &Value) -> String {
    match r["completion"].as_str() {
        Some("events") => format!("{}-e", r["backend"].as_str().unwrap_or("?")),
        _ => r["backend"].as_str().unwrap_or("?").to_string(),
    }
}

/// The − direct cell of latency run `r`: its overhead over the direct twin with the interval,
/// `reference` on the direct run itself, `—` without a twin.
fn overhead_cell(r: &Value, lat: &[&Value]) -> String {
    if r["backend"] == "direct" && r["completion"].is_null() {
        return "<td class=\"ref\">reference</td>".into();
    }
    // a block that is not a number (a NaN is written as null) unpairs the rounds: none then
    let blocks = |v: &Value| -> Vec<f64> {
        v["block_medians_ns"]
            .as_array()
            .and_then(|a| a.iter().map(Value::as_f64).collect::<Option<Vec<f64>>>())
            .unwrap_or_default()
    };
    let text = match (direct_twin(r, lat), r["latency_ns"]["p50"].as_f64()) {
        (Some(d), Some(p)) => d["latency_ns"]["p50"]
            .as_f64()
            .map(|dp| crate::report::overhead_text((dp, &blocks(d)), (p, &blocks(r)))),
        _ => None,
    };
    format!("<td>{}</td>", esc(&text.unwrap_or_else(|| "—".into())))
}

/// The run of `lat` on the direct path (polling) with `r`'s operation, verb, transport, size
/// and figure.
fn direct_twin<'a>(r: &Value, lat: &[&'a Value]) -> Option<&'a Value> {
    lat.iter().copied().find(|d| {
        d["backend"] == "direct"
            && d["op"] == r["op"]
            && d["verb"] == r["verb"]
            && d["transport"] == r["transport"]
            && d["size_bytes"] == r["size_bytes"]
            && d["figure"] == r["figure"]
            && d["completion"].is_null()
    })
}

/// The bandwidth runs' table, when there are some.
fn bandwidth(h: &mut String, bw: &[&Value]) {
    if bw.is_empty() {
        return;
    }
    h.push_str(
        "<h2>Bandwidth</h2>\n<table id=\"bandwidth\"><thead><tr><th class=\"l\">op</th><th>size (B)</th><th class=\"l\">backend</th>\
         <th>Gbit/s</th><th>MiB/s</th><th>peak (perftest) MiB/s</th><th>slowest window MiB/s</th><th>window ms</th>\
         <th>Mpps</th><th>threads × QPs</th></tr></thead><tbody>",
    );
    for r in bw {
        let s = &r["summary"];
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{} × {}</td></tr>",
            esc(&series(r)),
            if r["bidirectional"].as_bool() == Some(true) { " (both directions)" } else { "" },
            cell(&r["size_bytes"]),
            esc(&backend_line(r)),
            fixed(&s["bw_avg_gbit_s"], 3),
            fixed(&s["bw_avg_mib_s"], 1),
            fixed(&s["bw_peak_perftest_mib_s"], 1),
            fixed(&s["bw_min_window_mib_s"], 1),
            fixed(&s["window_ms"], 3),
            fixed(&s["msg_rate_mpps"], 3),
            cell(&r["threads"]),
            cell(&r["qps_per_thread"]),
        );
    }
    h.push_str("</tbody></table>\n");
}

/// The post-cost runs' table, when there are some: ns and TSC ticks per WQE to a tenth each
/// (the ns were whole beside ticks to a thousandth).
fn post_cost(h: &mut String, pc: &[&Value]) {
    if pc.is_empty() {
        return;
    }
    h.push_str(
        "<h2>Post cost</h2>\n<table id=\"post_cost\"><thead><tr><th class=\"l\">op</th><th>postlist</th>\
         <th class=\"l\">backend</th><th class=\"l\">doorbell</th><th>ns per WQE p50</th><th>p99</th>\
         <th>TSC ticks per WQE p50</th><th>below timer overhead</th></tr></thead><tbody>",
    );
    for r in pc {
        let ticks = if r["per_wqe_ticks_p50"].is_null() {
            &r["per_wqe_cycles_p50"]
        } else {
            &r["per_wqe_ticks_p50"]
        };
        let _ = write!(
            h,
            "<tr><td class=\"l\">{} B{} {}</td><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            cell(&r["size_bytes"]),
            if r["inline"].as_bool() == Some(true) {
                " inline"
            } else {
                ""
            },
            esc(&series(r)),
            cell(&r["postlist"]),
            esc(&backend_line(r)),
            esc(r["db_mode"].as_str().unwrap_or("—")),
            fixed(&r["per_wqe_ns"]["p50"], 1),
            fixed(&r["per_wqe_ns"]["p99"], 1),
            fixed(ticks, 1),
            yes_no(&r["below_overhead"]),
        );
    }
    h.push_str("</tbody></table>\n");
}

/// The key-value runs' table, when there are some: the workload's shape, Mops (all, and the
/// range over the clients and over the workers), the latency percentiles and the counts the
/// clients checked; under it the doorbell batching's gain of each run that has a twin at
/// postlist 1.
fn key_value(h: &mut String, kv: &[&Value]) {
    if kv.is_empty() {
        return;
    }
    h.push_str(
        "<h2>Key-value (HERD over MICA stores)</h2>\n<table id=\"kv\"><thead><tr><th class=\"l\">backend</th>\
         <th>workers</th><th>clients</th><th>window</th><th>postlist</th><th>PUT %</th><th>value (B)</th>\
         <th class=\"l\">threads</th><th>Mops</th><th>Mops per client</th><th>Mops per worker</th><th>p50 ns</th>\
         <th>p99 ns</th><th>p99.9 ns</th><th>max ns</th><th>responses per post</th>\
         <th>GET hits</th><th>GET misses</th><th>PUTs</th></tr></thead><tbody>",
    );
    for r in kv {
        let l = &r["latency_ns"];
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"l\">{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&backend_line(r)),
            cell(&r["workers"]),
            cell(&r["clients"]),
            cell(&r["window"]),
            cell(&r["postlist"]),
            cell(&r["update_pct"]),
            cell(&r["size_bytes"]),
            esc(r["threads"].as_str().unwrap_or("—")),
            fixed(&r["mops"], 3),
            range(&r["client_mops"]),
            range(&r["worker_mops"]),
            ns(&l["p50"]),
            ns(&l["p99"]),
            ns(&l["p99_9"]),
            ns(&l["max"]),
            fixed(&r["mean_batch"], 2),
            cell(&r["get_hits"]),
            cell(&r["get_misses"]),
            cell(&r["puts"]),
        );
    }
    h.push_str("</tbody></table>\n");
    let gains: Vec<String> = kv.iter().filter_map(|r| batching_gain(r, kv)).collect();
    if !gains.is_empty() {
        let _ = writeln!(
            h,
            "<p>Doorbell batching: Mops at the postlist over Mops at postlist 1 (a post per response), the same \
             backend and shape: {}</p>",
            esc(&gains.join(", "))
        );
    }
}

/// `min–max` of a list of numbers (one number: itself), to three decimals; `—` when it is not
/// one.
fn range(v: &Value) -> String {
    let Some(xs) = v
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect::<Vec<_>>())
    else {
        return "—".into();
    };
    let (lo, hi) = xs.iter().fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    match xs.len() {
        0 => "—".into(),
        1 => format!("{lo:.3}"),
        _ => format!("{lo:.3}–{hi:.3}"),
    }
}

/// The gain of key-value run `r` (postlist above 1) over its twin at postlist 1 in `kv` (the
/// same backend and shape), as `verbs 1.93x (4 clients)`.
fn batching_gain(r: &Value, kv: &[&Value]) -> Option<String> {
    let shape = [
        "backend",
        "workers",
        "clients",
        "window",
        "update_pct",
        "size_bytes",
        "keys",
        "zipf_theta",
        "threads",
    ];
    if r["postlist"].as_u64()? < 2 {
        return None;
    }
    let twin = kv
        .iter()
        .find(|o| o["postlist"].as_u64() == Some(1) && shape.iter().all(|f| o[*f] == r[*f]))?;
    let (m, m1) = (r["mops"].as_f64()?, twin["mops"].as_f64().filter(|m| *m > 0.0)?);
    Some(format!(
        "{} {:.2}x at postlist {} ({} clients)",
        r["backend"].as_str()?,
        m / m1,
        r["postlist"],
        r["clients"]
    ))
}

/// The plots, each SVG inline (its XML declaration left out) with its caption.
fn plots(h: &mut String, figs: &[Figure]) {
    if figs.is_empty() {
        return;
    }
    h.push_str("<h2>Plots</h2>\n");
    for f in figs {
        let svg = f.svg.trim_start_matches(|c| c != '<');
        let svg = if svg.starts_with("<?xml") {
            svg.split_once("?>").map(|x| x.1).unwrap_or(svg)
        } else {
            svg
        };
        let _ = writeln!(
            h,
            "<figure class=\"plot\" id=\"{}\">{}<figcaption>{} ({})</figcaption></figure>",
            esc(&f.file),
            svg.trim(),
            esc(&f.title),
            esc(&f.file)
        );
    }
}

const RENDER_CHECK: &str = "<script>window.addEventListener('load',function(){\
var t=[].map.call(document.querySelectorAll('table'),function(e){var r=e.getBoundingClientRect();\
return {id:e.id,rows:e.rows.length,w:Math.round(r.width),h:Math.round(r.height)};});\
var p=[].map.call(document.querySelectorAll('figure.plot'),function(f){var s=f.querySelector('svg');\
var r=s?s.getBoundingClientRect():{width:0,height:0};var lines=0;\
if(s){[].forEach.call(s.querySelectorAll('polyline,path'),function(l){var b=l.getBBox();\
var c=(l.getAttribute('stroke')||'').toUpperCase();\
if(c&&c!=='#000000'&&c!=='NONE'&&b.width>50&&l.getTotalLength()>50)lines++;});}\
return {id:f.id,w:Math.round(r.width),h:Math.round(r.height),lines:lines};});\
document.body.setAttribute('data-rendered',JSON.stringify({tables:t,plots:p}));});</script>\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(esc("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
    }

    #[test]
    fn page_holds_the_warnings_and_tables_of_the_document() {
        let doc = serde_json::json!({
            "environment": {"device": "model0", "software_model": true, "provider": "model0"},
            "warnings": ["<model0> is a model"],
            "runs": [
                {"scenario": "lat", "op": "write", "size": 8, "backend": "direct", "figure": "one_way", "latency": {"p50": 100.0, "p99": 150.0}},
                {"scenario": "lat", "op": "write", "size": 8, "backend": "verbs", "figure": "one_way", "latency": {"p50": 130.0, "p99": 190.0}}
            ]
        });
        let page = report(&doc, &[]);
        assert!(page.contains("&lt;model0&gt; is a model"));
        assert!(page.contains("model0 (software model, not hardware)"));
        assert!(
            page.contains("<td>+30 (p50s: blocks not paired)</td>"),
            "verbs - direct p50 shown"
        );
        assert!(page.contains("id=\"latency\""));
        assert!(!page.contains("id=\"bandwidth\""));
    }

    /// The report's overhead column is the summary's statistic: the paired median of the block
    /// p50s with its interval, the point inside it (the pooled p50s here differ by 5).
    #[test]
    fn the_overhead_column_is_the_paired_median_with_its_interval() {
        let doc = serde_json::json!({
            "environment": {"device": "model0"},
            "runs": [
                {"scenario": "lat", "op": "write", "size": 8, "backend": "direct", "figure": "one_way",
                 "latency": {"p50": 100.0, "p99": 150.0}, "block_medians_ns": [100.0, 101.0, 99.0, 100.0, 100.0]},
                {"scenario": "lat", "op": "write", "size": 8, "backend": "verbs", "figure": "one_way",
                 "latency": {"p50": 105.0, "p99": 190.0}, "block_medians_ns": [110.0, 111.0, 109.0, 110.0, 110.0]}
            ]
        });
        let page = report(&doc, &[]);
        assert!(page.contains("<td>+10 [+10, +10]</td>"), "{page}");
        assert!(page.contains("− direct (p50) [95 % interval]"));
    }

    /// A quick suite's document in small: a latency run of each figure (the atomic one with the
    /// verb `fetch_add`), a bandwidth run, a post-cost run, the environment, counters, regions.
    fn suite_doc() -> Value {
        let st = |p50: f64| {
            serde_json::json!({"count": 2000, "min": p50 * 0.7, "p50": p50, "mean": p50 * 1.1,
            "stdev": 123.4, "p90": p50 * 1.2, "p99": p50 * 3.0, "p99_9": p50 * 9.0, "max": p50 * 20.0})
        };
        let lat = |op: &str, verb: &str, fig: &str, b: &str, p50: f64| {
            serde_json::json!({"scenario": "lat", "op": op,
            "verb": verb, "size_bytes": 8, "backend": b, "figure": fig, "transport": "RC", "latency_ns": st(p50),
            "block_medians_ns": [p50, p50 + 1.0, p50 - 1.0, p50, p50]})
        };
        serde_json::json!({
            "schema_version": 2, "created_unix": 1796292607u64, "command": ["rdmaprobe", "suite", "--quick"],
            "tool": {"name": "rdmaprobe", "version": "0.1.0"}, "timer_overhead_ns": 37.0,
            "environment": {"host": "lab-7", "device": "model0", "provider": "model0", "software_model": true,
                "tsc_hz": 2000000014.0765843, "tsc_source": "calibrated-monotonic-raw", "invariant_tsc": true,
                "cpu_model": "Intel(R) Xeon(R) Processor", "cpus": 2, "pinned_cpus": [0, 1], "numa_node": null,
                "libibverbs_loaded": "/usr/lib/libibverbs.so.1", "rdma_core_built": "44.0", "env_vars": [],
                "port": {"link_layer": "Ethernet", "active_mtu": 4096}, "some_new_item": "x"},
            "counters": {"source": "model0", "delta": {"wqes_executed": 10, "doorbell_record_moves_seen": 3}},
            "memory_regions": [{"name": "direct.A", "addr": 4096, "page_offset": 0, "align": 4096, "huge": false,
                "phys_addr": null, "phys_unreadable": "needs root"}],
            "runs": [
                lat("write", "write", "one_way", "verbs", 633.0), lat("write", "write", "one_way", "direct", 473.0),
                lat("atomic", "fetch_add", "round_trip", "verbs", 432.0),
                lat("atomic", "fetch_add", "round_trip", "direct", 279.0),
                {"scenario": "bw", "op": "write", "verb": "write", "size_bytes": 64, "backend": "direct",
                 "threads": 1, "qps_per_thread": 1, "summary": {"bw_avg_gbit_s": 2.74, "bw_avg_mib_s": 326.7}},
                {"scenario": "post_cost", "op": "write", "verb": "write", "size_bytes": 8, "inline": true,
                 "backend": "verbs", "postlist": 1, "db_mode": null, "below_overhead": false,
                 "per_wqe_ns": {"p50": 53.281249624991, "p99": 130.76041574633666}, "per_wqe_ticks_p50": 106.5625}
            ]
        })
    }

    /// The page's text a person reads: no script, style or code (the command line, identifiers),
    /// no markup.
    fn visible(page: &str) -> String {
        let mut t = page.to_string();
        for (open, close) in [
            ("<script", "</script>"),
            ("<style", "</style>"),
            ("<code", "</code>"),
            ("<", ">"),
        ] {
            while let Some(a) = t.find(open) {
                let b = t[a..].find(close).map(|b| a + b + close.len()).unwrap_or(t.len());
                t.replace_range(a..b, " ");
            }
        }
        t
    }

    /// Issue 29 item 17: the results come first; when and on which host at the top; the
    /// environment, the counters and the regions (collapsed) after the results.
    #[test]
    fn results_come_first_with_the_date_and_host_at_the_top() {
        let page = report(&suite_doc(), &[]);
        let at = |s: &str| page.find(s).unwrap_or_else(|| panic!("no {s}: {page}"));
        let measured = at("measured 2026-12-03 10:10:07 UTC on host <b>lab-7</b>");
        assert!(measured < at("id=\"latency\""));
        assert!(at("id=\"latency\"") < at("id=\"bandwidth\""));
        assert!(
            at("id=\"post_cost\"") < at("id=\"environment\""),
            "the environment before a result"
        );
        assert!(at("id=\"environment\"") < at("id=\"counters\""));
        assert!(
            at("<details id=\"memory-regions\"><summary>Memory regions (1 registered buffers)") < at("id=\"regions\"")
        );
        assert!(at("id=\"counters\"") < at("id=\"regions\""));
        // an older file: no time, no host, said so
        let mut d = suite_doc();
        d["environment"].as_object_mut().map(|e| e.remove("host"));
        d.as_object_mut().map(|o| o.remove("created_unix"));
        assert!(report(&d, &[]).contains("measured at a time not recorded on a host not recorded"));
        assert_eq!(utc(951_868_799), "2000-02-29 23:59:59 UTC");
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
    }

    /// Every table's header row in a `<thead>` (a printed page, report.pdf, repeats it at the
    /// top of each page a long table runs onto), its rows in a `<tbody>`.
    #[test]
    fn every_table_has_its_header_in_a_thead_and_its_rows_in_a_tbody() {
        let page = report(&suite_doc(), &[]);
        let tables: Vec<&str> = page.split("<table").skip(1).collect();
        assert!(tables.len() >= 5, "{page}");
        for t in tables {
            let t = &t[..t.find("</table>").expect("a closed table")];
            let head = t.find("<thead><tr><th").unwrap_or_else(|| panic!("no thead: {t}"));
            let body = t.find("</thead><tbody>").unwrap_or_else(|| panic!("no tbody: {t}"));
            assert!(head < body && t.ends_with("</tbody>"), "{t}");
            assert!(!t[body..].contains("<th"), "a header cell among the rows: {t}");
        }
        assert!(crate::report::pdf::PRINT_CSS.contains("thead{display:table-header-group}"));
    }

    /// Issue 29 item 17: the TSC rate in GHz (not 2000000014.077), latency with min, mean and
    /// stdev beside the percentiles, the overhead column with its interval, post cost in ns and
    /// ticks to a tenth each, the operation as the command line names it (`atomic`, not
    /// `fetch_add`), figures in words.
    #[test]
    fn numbers_and_names_read_as_the_command_line_and_units_say() {
        let page = report(&suite_doc(), &[]);
        assert!(
            page.contains("<td class=\"l\">TSC rate</td><td class=\"l\">2.000 GHz</td>"),
            "{page}"
        );
        assert!(!page.contains("2000000014"), "the raw rate");
        assert!(page.contains("<th>min</th><th>p50</th><th>mean</th><th>stdev</th><th>p99</th>"));
        // write verbs: min 443, p50 633, mean 696, stdev 123, p99 1899; +160 over direct, every round
        assert!(
            page.contains("<td>443</td><td>633</td><td>696</td><td>123</td><td>1899</td>"),
            "{page}"
        );
        assert!(page.contains("<td>+160 [+160, +160]</td>"), "{page}");
        assert!(page.contains("<td class=\"ref\">reference</td>"));
        assert!(
            page.contains("<td class=\"l\">atomic</td><td>8</td><td class=\"l\">round trip</td>"),
            "{page}"
        );
        assert!(!page.contains("fetch_add") && !page.contains("round_trip") && !page.contains("one_way"));
        assert!(
            page.contains("<td>53.3</td><td>130.8</td><td>106.6</td><td>no</td>"),
            "{page}"
        );
        assert!(page.contains("<td class=\"l\">port</td><td class=\"l\">active MTU 4096, link layer Ethernet</td>"));
        assert!(page.contains("<td class=\"l\">measuring threads pinned to CPUs</td><td class=\"l\">0, 1</td>"));
    }

    /// Issue 29 item 17: no label in snake_case (`round_trip`, `tsc_hz`, `wqes_executed`): what a
    /// person reads is words; identifiers stay in code (the command line).
    #[test]
    fn labels_are_words_not_field_names() {
        let text = visible(&report(&suite_doc(), &[]));
        let b = text.as_bytes();
        let snake: Vec<&str> = (1..b.len().saturating_sub(1))
            .filter(|&i| b[i] == b'_' && b[i - 1].is_ascii_lowercase() && b[i + 1].is_ascii_lowercase())
            .map(|i| &text[i.saturating_sub(20)..(i + 20).min(text.len())])
            .collect();
        assert!(snake.is_empty(), "snake_case in the page: {snake:?}");
        assert!(
            text.contains("WQEs executed") && text.contains("some new item"),
            "{text}"
        );
    }

    #[test]
    fn page_holds_the_memory_regions_table() {
        let doc = serde_json::json!({
            "environment": {"device": "model0"},
            "runs": [],
            "memory_regions": [
                {"name": "direct.A", "addr": 0x7f00_0000_1000u64, "page_offset": 0, "align": 4096, "huge": false,
                 "phys_addr": null, "phys_unreadable": "needs root"},
                {"name": "verbs.B", "addr": 0x7f00_0020_0000u64, "page_offset": 0, "align": 2097152, "huge": true,
                 "phys_addr": 0x1234_5000u64, "phys_unreadable": null}
            ]
        });
        let page = report(&doc, &[]);
        assert!(page.contains("id=\"regions\""), "{page}");
        assert!(page.contains("<td class=\"l\">direct.A</td><td>0x7f0000001000</td><td>0</td><td>4096</td><td>no</td><td>unreadable (needs root)</td>"), "{page}");
        assert!(
            page.contains("<td>2097152</td><td>yes</td><td>0x12345000</td>"),
            "{page}"
        );
        assert!(!report(&serde_json::json!({"runs": []}), &[]).contains("id=\"regions\""));
        // a bandwidth run's own regions, the first few of each
        let r = serde_json::json!({"name": "direct.t0.q0.A", "addr": 4096, "page_offset": 0, "align": 4096,
                                   "huge": false, "phys_addr": null, "phys_unreadable": "page not mapped in yet"});
        let doc = serde_json::json!({"runs": [{"scenario": "bw", "backend": "direct", "size_bytes": 64,
                                               "memory_regions": [r, r, r, r, r, r]}]});
        let page = report(&doc, &[]);
        assert_eq!(
            page.matches("<td class=\"l\">64 B direct: direct.t0.q0.A</td>").count(),
            4,
            "{page}"
        );
        assert!(page.contains("and 2 more regions"), "{page}");
    }

    /// Issue 27 points 3 and 4: a key-value run is a row of its own table, the shape, Mops (all,
    /// per client and per worker), the latency percentiles and the counts as measured; a run
    /// with a twin at postlist 1 has its doorbell batching gain under the table; a damaged
    /// field is a dash, never a panic.
    #[test]
    fn key_value_runs_have_their_table() {
        let run = |postlist: u32, mops: f64| {
            serde_json::json!({"scenario": "kv", "op": "herd", "backend": "direct", "workers": 2, "clients": 4,
             "window": 32, "postlist": postlist, "update_pct": 5, "size_bytes": 32, "keys": 4096, "threads": "one",
             "mops": mops, "client_mops": [0.25, 0.2375, 0.2401, 0.26], "worker_mops": [0.4756],
             "latency_ns": {"p50": 31496.8, "p99": 73689.5, "p99_9": 80123.0, "max": 90001.0},
             "mean_batch": 3.25, "get_hits": 75999, "get_misses": 1, "puts": 4000})
        };
        let doc = serde_json::json!({"runs": [run(32, 0.9512), run(1, 0.5),
            {"scenario": "kv", "backend": "<verbs>", "mops": "x", "client_mops": "y"}]});
        let page = report(&doc, &[]);
        assert!(page.contains("<h2>Key-value (HERD over MICA stores)</h2>"), "{page}");
        assert!(
            page.contains(
                "<td class=\"l\">direct</td><td>2</td><td>4</td><td>32</td><td>32</td><td>5</td><td>32</td><td class=\"l\">one</td>\
                 <td>0.951</td><td>0.237–0.260</td><td>0.476</td><td>31497</td><td>73690</td><td>80123</td><td>90001</td>\
                 <td>3.25</td><td>75999</td><td>1</td><td>4000</td>"
            ),
            "{page}"
        );
        assert!(
            page.contains("Doorbell batching: Mops at the postlist over Mops at postlist 1 (a post per response), the same backend and shape: direct 1.90x at postlist 32 (4 clients)</p>"),
            "{page}"
        );
        assert!(page.contains("<td class=\"l\">&lt;verbs&gt;</td>"), "{page}");
        assert!(!page.contains("<verbs>"));
    }

    #[test]
    fn anatomy_runs_have_their_table_and_stacked_bars() {
        let run = |backend: &str, turn: f64, rest: f64| {
            serde_json::json!({"scenario": "lat", "op": "send", "backend": backend, "size_bytes": 64,
                "figure": "one_way", "latency_ns": {"p50": (turn + rest) / 2.0},
                "anatomy": {"round_trip_ns": {"p50": turn + rest}, "turnaround_ns": {"p50": turn, "p99": 2.0 * turn},
                            "rest_ns": {"p50": rest, "p99": 2.0 * rest}}})
        };
        let doc = serde_json::json!({"runs": [run("verbs", 100.0, 900.0), run("direct", 50.0, 250.0),
            {"scenario": "lat", "op": "send", "backend": "wr", "size_bytes": 64, "latency_ns": {"p50": 1.0}}]});
        let page = report(&doc, &[]);
        assert!(page.contains("<h2>Latency anatomy</h2>"), "{page}");
        // each bar 300 px, in proportion: verbs 30 + 270
        assert!(
            page.contains(
                "<td class=\"l\">verbs</td><td>1000</td><td>100</td><td>200</td><td>900</td><td>1800</td><td class=\"l\">\
                 <span style=\"display:inline-block;height:10px;width:30px;background:#a33\"></span>\
                 <span style=\"display:inline-block;height:10px;width:270px;background:#9bd\"></span>"
            ),
            "{page}"
        );
        assert!(
            page.contains("width:50px;background:#a33") && page.contains("width:250px;background:#9bd"),
            "{page}"
        );
        // the run without --anatomy has no row there
        let table = &page[page.find("<table id=\"anatomy\">").expect("the table")..];
        assert!(!page.contains("NIC split"), "no NIC split without one");
        let table = &table[..table.find("</table>").expect("its end")];
        assert!(!table.contains(">wr<"), "{table}");
        // no anatomy at all: no section
        let plain = serde_json::json!({"runs": [doc["runs"][2].clone()]});
        assert!(!report(&plain, &[]).contains("Latency anatomy"));
        // with the NIC split: its table, a bar of four parts in proportion (100 + 300 + 400 + 200)
        let mut nic = run("direct", 150.0, 850.0);
        nic["anatomy"]["nic"] = serde_json::json!({"post_ns": {"p50": 100.0}, "wire_ns": {"p50": 300.0},
            "responder_ns": {"p50": 400.0}, "poll_ns": {"p50": 200.0}, "error_ns": 80.0, "outside_window": 0});
        let page = report(&serde_json::json!({"runs": [nic]}), &[]);
        assert!(page.contains("<h3>NIC split</h3>"), "{page}");
        assert!(
            page.contains(
                "<td class=\"l\">direct</td><td>100</td><td>300</td><td>400</td><td>200</td><td class=\"l\">\
                 <span style=\"display:inline-block;height:10px;width:30px;background:#555\"></span>\
                 <span style=\"display:inline-block;height:10px;width:90px;background:#9bd\"></span>\
                 <span style=\"display:inline-block;height:10px;width:120px;background:#a33\"></span>\
                 <span style=\"display:inline-block;height:10px;width:60px;background:#db7\"></span></td><td>80</td><td>0</td>"
            ),
            "{page}"
        );
    }
}

//! `report.html`: one self-contained page (inline CSS and SVG, nothing fetched) with the
//! environment, the warnings, the summary tables and the plots of a results document.

use super::plot::{device_label, Figure};
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
    v.as_f64().map(|f| format!("{f:.0}")).unwrap_or_else(|| "—".into())
}

const CSS: &str = "body{font-family:sans-serif;margin:2em;color:#222;max-width:1000px}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}\
th{background:#eee}td.l,th.l{text-align:left}.warn{background:#fff3cd;border:1px solid #e0b400;padding:.6em 1em}\
figure{margin:1.5em 0}figcaption{font-size:90%;color:#555}";

/// The page. `figs` are the plots to inline (from [`super::plot::figures`]).
pub fn report(doc: &Value, figs: &[Figure]) -> String {
    // an older schema reads as the current one
    let mut up = doc.clone();
    super::schema::upgrade(&mut up);
    let doc = &up;
    let mut h = String::new();
    head(&mut h, doc);
    warnings(&mut h, doc);
    counters(&mut h, doc);
    regions(&mut h, doc);
    environment(&mut h, doc);
    let runs: &[Value] = doc["runs"].as_array().map(|a| a.as_slice()).unwrap_or(&[]);
    let of = |s: &str| -> Vec<&Value> { runs.iter().filter(|r| r["scenario"].as_str() == Some(s)).collect() };
    latency(&mut h, &of("lat"));
    bandwidth(&mut h, &of("bw"));
    post_cost(&mut h, &of("post_cost"));
    plots(&mut h, figs);
    // After layout, the page records what rendered (tables with rows of non-zero size, plots
    // with drawn lines) in <body data-rendered>: a headless browser's --dump-dom shows it, so a
    // test can tell a page that renders from one that only parses. Inline, nothing fetched.
    h.push_str(RENDER_CHECK);
    h.push_str("</body></html>\n");
    h
}

/// The page's head and title (the device), the tool's version and the command.
fn head(h: &mut String, doc: &Value) {
    let dev = device_label(doc);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>rdmaprobe report: {}</title>\
         <style>{CSS}</style></head><body>\n<h1>rdmaprobe report: {}</h1>\n",
        esc(&dev),
        esc(&dev)
    );
    let _ = writeln!(
        h,
        "<p>rdmaprobe {} · command <code>{}</code></p>",
        esc(doc["tool"]["version"].as_str().unwrap_or("?")),
        esc(&doc["command"]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s.as_str()).collect::<Vec<_>>().join(" "))
            .unwrap_or_default())
    );
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
            "<h2>Counters</h2>\n<p>change over the run, from {}</p>\n<table id=\"counters\"><tr><th class=\"l\">counter</th><th>change</th></tr>",
            esc(doc["counters"]["source"].as_str().unwrap_or("?"))
        );
        for (k, v) in delta {
            let _ = write!(
                h,
                "<tr><td class=\"l\">{}</td><td>{}</td></tr>",
                esc(k),
                esc(&v.to_string())
            );
        }
        h.push_str("</table>\n");
    }
}

/// At most this many of a bandwidth run's regions in the page (the document has them all).
const RUN_REGIONS: usize = 4;

/// The registered buffers and where they sit, when the document has them: the run's (`memory_regions`)
/// and each bandwidth run's own (made afresh for every run), the first [`RUN_REGIONS`] of each.
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
    h.push_str(
        "<h2>Memory regions</h2>\n<p>where each registered buffer sits (alignment: the largest power of two \
         dividing the address; the physical address, from /proc/self/pagemap, needs root)</p>\n<table id=\"regions\">\
         <tr><th class=\"l\">region</th><th>address</th><th>page offset</th><th>alignment [B]</th><th>huge pages</th>\
         <th>physical address</th></tr>",
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
            if r["huge"].as_bool() == Some(true) { "yes" } else { "no" },
            esc(&phys)
        );
    }
    h.push_str("</table>\n");
    if more > 0 {
        let _ = writeln!(
            h,
            "<p>and {more} more regions of the bandwidth runs, in the document</p>"
        );
    }
}

/// The environment's table, with the timer overhead.
fn environment(h: &mut String, doc: &Value) {
    h.push_str(
        "<h2>Environment</h2>\n<table id=\"environment\"><tr><th class=\"l\">item</th><th class=\"l\">value</th></tr>",
    );
    if let Some(env) = doc["environment"].as_object() {
        for (k, v) in env {
            let _ = write!(
                h,
                "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td></tr>",
                esc(k),
                cell(v)
            );
        }
    }
    if let Some(o) = doc["timer_overhead_ns"].as_f64() {
        let _ = write!(
            h,
            "<tr><td class=\"l\">timer overhead</td><td class=\"l\">{o:.1} ns</td></tr>"
        );
    }
    h.push_str("</table>\n");
}

/// The latency runs' table, each backend's p50 against direct's when a direct run is among them
/// (without one, as with `--backends verbs`, no column for it), when there are runs.
fn latency(h: &mut String, lat: &[&Value]) {
    if lat.is_empty() {
        return;
    }
    let has_direct = lat.iter().any(|r| r["backend"] == "direct");
    h.push_str(if has_direct {
        "<h2>Latency</h2>\n<p>ns; the driver's overhead (− direct) is, over the rounds of blocks (the \
         backends interleaved, one block each per round), the median of the backend's block p50 minus \
         direct's in the same round, with the 95 % bootstrap interval of that median, for the same \
         operation and size.</p>\n"
    } else {
        "<h2>Latency</h2>\n<p>ns; no direct run among them, so no driver's overhead.</p>\n"
    });
    h.push_str(
        "<table id=\"latency\"><tr><th class=\"l\">op</th><th>size (B)</th>\
         <th class=\"l\">figure</th><th class=\"l\">backend</th><th>p50</th><th>p99</th><th>p99.9</th><th>max</th>\
         <th>samples</th>",
    );
    h.push_str(if has_direct {
        "<th>− direct [95 %]</th></tr>"
    } else {
        "</tr>"
    });
    for r in lat {
        let mut what = r["verb"].as_str().or(r["op"].as_str()).unwrap_or("?").to_string();
        if let Some(t) = r["transport"].as_str().filter(|t| *t != "RC") {
            what = format!("{what} {t}");
        }
        let backend = match r["completion"].as_str() {
            Some("events") => format!("{}-e", r["backend"].as_str().unwrap_or("?")),
            _ => r["backend"].as_str().unwrap_or("?").to_string(),
        };
        // a block that is not a number (a NaN is written as null) unpairs the rounds: none then
        let blocks = |v: &Value| -> Vec<f64> {
            v["block_medians_ns"]
                .as_array()
                .and_then(|a| a.iter().map(Value::as_f64).collect::<Option<Vec<f64>>>())
                .unwrap_or_default()
        };
        let diff = match (direct_twin(r, lat), r["latency_ns"]["p50"].as_f64()) {
            (Some(d), Some(p)) if r["backend"] != "direct" => d["latency_ns"]["p50"]
                .as_f64()
                .map(|dp| esc(&crate::report::overhead_text((dp, &blocks(d)), (p, &blocks(r)))))
                .unwrap_or_default(),
            _ => String::new(),
        };
        let l = &r["latency_ns"];
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td>",
            esc(&what),
            cell(&r["size_bytes"]),
            cell(&r["figure"]),
            esc(&backend),
            ns(&l["p50"]),
            ns(&l["p99"]),
            ns(&l["p99_9"]),
            ns(&l["max"]),
            cell(&l["count"]),
        );
        if has_direct {
            let _ = write!(h, "<td>{diff}</td>");
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>\n");
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
        "<h2>Bandwidth</h2>\n<table id=\"bandwidth\"><tr><th class=\"l\">op</th><th>size (B)</th><th class=\"l\">backend</th>\
         <th>Gbit/s</th><th>MiB/s</th><th>peak (perftest) MiB/s</th><th>slowest window MiB/s</th><th>window ms</th>\
         <th>Mpps</th><th>threads × QPs</th></tr>",
    );
    for r in bw {
        let s = &r["summary"];
        let f = |v: &Value, d: usize| v.as_f64().map(|x| format!("{x:.d$}")).unwrap_or_else(|| "—".into());
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}{}</td><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{} × {}</td></tr>",
            cell(&r["op"]),
            if r["bidirectional"].as_bool() == Some(true) { " (bidir)" } else { "" },
            cell(&r["size_bytes"]),
            cell(&r["backend"]),
            f(&s["bw_avg_gbit_s"], 3),
            f(&s["bw_avg_mib_s"], 1),
            f(&s["bw_peak_perftest_mib_s"], 1),
            f(&s["bw_min_window_mib_s"], 1),
            f(&s["window_ms"], 3),
            f(&s["msg_rate_mpps"], 3),
            cell(&r["threads"]),
            cell(&r["qps_per_thread"]),
        );
    }
    h.push_str("</table>\n");
}

/// The post-cost runs' table, when there are some.
fn post_cost(h: &mut String, pc: &[&Value]) {
    if pc.is_empty() {
        return;
    }
    h.push_str(
        "<h2>Post cost</h2>\n<table id=\"post_cost\"><tr><th>postlist</th><th class=\"l\">backend</th>\
         <th>ns per WQE p50</th><th>p99</th><th>TSC ticks per WQE p50</th><th>below timer overhead</th></tr>",
    );
    for r in pc {
        let _ = write!(
            h,
            "<tr><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            cell(&r["postlist"]),
            cell(&r["backend"]),
            ns(&r["per_wqe_ns"]["p50"]),
            ns(&r["per_wqe_ns"]["p99"]),
            cell(if r["per_wqe_ticks_p50"].is_null() {
                &r["per_wqe_cycles_p50"]
            } else {
                &r["per_wqe_ticks_p50"]
            }),
            cell(&r["below_overhead"]),
        );
    }
    h.push_str("</table>\n");
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
        assert!(page.contains("− direct [95 %]"));
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
}

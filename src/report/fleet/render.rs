//! The report as text, JSON and one self-contained HTML page.

use super::{FleetReport, Mark};
use crate::report::html::esc;
use serde_json::{json, Value};
use std::fmt::Write;

pub(super) fn fig(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(x) if x.abs() >= 1e12 => format!("{x:.3e}"),
        Some(x) => format!("{x:.0}"),
    }
}

/// Text for a terminal: control and invisible characters (from the files read) shown as `?`.
fn clean(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c != '\n' && (c.is_control() || crate::oob::invisible(c)) {
                '?'
            } else {
                c
            }
        })
        .collect()
}

impl FleetReport {
    /// The exit status: 0 when no node failed and every planned pair left a result, else 1.
    pub fn exit_code(&self) -> u8 {
        u8::from(!self.failed.is_empty() || !self.missing_pairs.is_empty())
    }

    /// As JSON.
    pub fn json(&self) -> Value {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        v["tool"] = json!("rdmaprobe fleet-report");
        v
    }

    /// As text: the nodes' table, the pairs' table, the verdict.
    pub fn text(&self) -> String {
        let mut s = format!(
            "rdmaprobe fleet-report: {} nodes, {} pairs (pairing: {}), {}\n",
            self.nodes.len(),
            self.pairs.len(),
            self.pairing,
            self.measured()
        );
        let _ = writeln!(
            s,
            "{:<16} {:<9} {:<6} {:<5} {:<5} {:<5} {:>12} {:>12}  verdict",
            "node", "reachable", "doctor", "L1", "L2", "L3", "lat p50 ns", "bw MiB/s"
        );
        for n in &self.nodes {
            let doctor = if !n.doctor_ran {
                if n.reachable {
                    "none"
                } else {
                    "-"
                }
            } else if n.doctor_fail.is_empty() {
                "pass"
            } else {
                "FAIL"
            };
            let _ = writeln!(
                s,
                "{:<16} {:<9} {:<6} {:<5} {:<5} {:<5} {:>12} {:>12}  {}",
                n.node,
                if n.reachable { "yes" } else { "NO" },
                doctor,
                n.layers[0].as_str(),
                n.layers[1].as_str(),
                n.layers[2].as_str(),
                fig(n.lat_p50_ns),
                fig(n.bw_avg_mib_s),
                if n.failed { "FAIL" } else { "pass" }
            );
        }
        for (name, sp, unit) in [
            ("latency p50", &self.lat_p50_ns, "ns"),
            ("bandwidth", &self.bw_avg_mib_s, "MiB/s"),
        ] {
            if let Some(x) = sp {
                let _ = writeln!(
                    s,
                    "fleet {name}: median {:.0} {unit}, MAD {:.0} {unit} over {} node(s)",
                    x.median, x.mad, x.nodes
                );
            }
        }
        let _ = writeln!(s, "pairs (server--client):");
        for p in &self.pairs {
            let _ = writeln!(
                s,
                "  {:<30} L1 {:<5} L2 {:<5} L3 {:<5} lat {:>8} ns  bw {:>8} MiB/s",
                format!("{}--{}", p.server, p.client),
                p.layers[0].as_str(),
                p.layers[1].as_str(),
                p.layers[2].as_str(),
                fig(p.lat_p50_ns),
                fig(p.bw_avg_mib_s)
            );
            for f in &p.findings {
                let _ = writeln!(s, "      {f}");
            }
        }
        for n in &self.notes {
            let _ = writeln!(s, "note: {n}");
        }
        if !self.missing_pairs.is_empty() {
            let _ = writeln!(
                s,
                "INCOMPLETE: the plan's pairs {} left no result (an interrupted run?)",
                self.missing_pairs.join(", ")
            );
        }
        if self.failed.is_empty() {
            s.push_str("no node failed\n");
        } else {
            let _ = writeln!(s, "FAILED nodes: {}", self.failed.join(", "));
            for n in self.nodes.iter().filter(|n| n.failed) {
                for r in &n.reasons {
                    let _ = writeln!(s, "  {}: {r}", n.node);
                }
                for e in &n.evidence {
                    let _ = writeln!(s, "  {}:   evidence: {e}", n.node);
                }
            }
        }
        clean(&s)
    }

    /// One self-contained HTML page (inline CSS, nothing fetched).
    pub fn html(&self) -> String {
        let mut h = String::new();
        self.html_verdict(&mut h);
        self.html_nodes(&mut h);
        self.html_spreads(&mut h);
        self.html_pairs(&mut h);
        for n in &self.notes {
            let _ = writeln!(h, "<p>Note: {}</p>", esc(n));
        }
        h.push_str("</body></html>\n");
        h
    }

    /// The page's head, the rules applied and the verdict: the missing pairs, the failed nodes.
    fn html_verdict(&self, h: &mut String) {
        let _ = write!(
            h,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>rdmaprobe fleet report</title>\
             <style>{CSS}{}</style></head><body>\n<h1>rdmaprobe fleet report</h1>\n<p id=\"measured\">{}</p>\n<p>{} nodes, {} pairs, pairing {}. \
             Outlier: worse than the fleet median by more than {} robust standard deviations (1.4826 x MAD) and \
             by more than {} %.</p>\n",
            crate::report::pdf::PRINT_CSS,
            esc(&self.measured()),
            self.nodes.len(),
            self.pairs.len(),
            esc(&self.pairing),
            self.rules["mad_k"],
            self.rules["min_deviation_pct"]
        );
        if !self.missing_pairs.is_empty() {
            let _ = writeln!(
                h,
                "<p><b>Incomplete: the plan's pairs {} left no result.</b></p>",
                esc(&self.missing_pairs.join(", "))
            );
        }
        if self.failed.is_empty() {
            h.push_str("<p><b>No node failed.</b></p>\n");
        } else {
            let _ = writeln!(h, "<p><b>Failed nodes: {}</b></p>", esc(&self.failed.join(", ")));
        }
    }

    /// The nodes' table, then the evidence of each failed node.
    fn html_nodes(&self, h: &mut String) {
        h.push_str(
            "<h2>Nodes</h2>\n<table><thead><tr><th class=\"l\">node</th><th>reachable</th><th>doctor</th><th>L1 device</th>\
             <th>L2 connection</th><th>L3 performance</th><th>lat p50 (ns)</th><th>bw (MiB/s)</th><th>verdict</th>\
             <th class=\"l\">why</th></tr></thead><tbody>\n",
        );
        for n in &self.nodes {
            let doctor = if !n.doctor_ran {
                if n.reachable {
                    Mark::Fail
                } else {
                    Mark::NotRun
                }
            } else if n.doctor_fail.is_empty() {
                Mark::Pass
            } else {
                Mark::Fail
            };
            let why: String = n.reasons.iter().map(|r| format!("<li>{}</li>", esc(r))).collect();
            let figure = |field: &str, v: Option<f64>| {
                let c = if n.outliers.contains(&field) {
                    " class=\"fail\""
                } else {
                    ""
                };
                format!("<td{c}>{}</td>", fig(v))
            };
            let _ = writeln!(
                h,
                "<tr><td class=\"l\">{}</td><td>{}</td>{}{}{}{}{}{}{}<td class=\"l\"><ul>{why}</ul></td></tr>",
                esc(&n.node),
                if n.reachable { "yes" } else { "NO" },
                mark(doctor),
                mark(n.layers[0]),
                mark(n.layers[1]),
                mark(n.layers[2]),
                figure("lat_p50_ns", n.lat_p50_ns),
                figure("bw_avg_mib_s", n.bw_avg_mib_s),
                mark(if n.failed { Mark::Fail } else { Mark::Pass }),
            );
        }
        h.push_str("</tbody></table>\n");
        for n in self.nodes.iter().filter(|n| n.failed && !n.evidence.is_empty()) {
            let ev: String = n.evidence.iter().map(|e| format!("<li>{}</li>", esc(e))).collect();
            let _ = writeln!(h, "<h3>Evidence: {}</h3>\n<ul>{ev}</ul>", esc(&n.node));
        }
    }

    /// The fleet's median and MAD of each figure.
    fn html_spreads(&self, h: &mut String) {
        for (name, sp, unit) in [
            ("Latency p50", &self.lat_p50_ns, "ns"),
            ("Bandwidth", &self.bw_avg_mib_s, "MiB/s"),
        ] {
            if let Some(x) = sp {
                let _ = writeln!(
                    h,
                    "<p>{name}: fleet median {:.0} {unit}, MAD {:.0} {unit}, over {} node(s).</p>",
                    x.median, x.mad, x.nodes
                );
            }
        }
    }

    /// The pairs' table.
    fn html_pairs(&self, h: &mut String) {
        h.push_str(
            "<h2>Pairs</h2>\n<table><thead><tr><th class=\"l\">server</th><th class=\"l\">client</th><th>L1</th><th>L2</th>\
             <th>L3</th><th>lat p50 (ns)</th><th>bw (MiB/s)</th><th class=\"l\">findings</th></tr></thead><tbody>\n",
        );
        for p in &self.pairs {
            let f: String = p.findings.iter().map(|x| format!("<li>{}</li>", esc(x))).collect();
            let _ = writeln!(
                h,
                "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td>{}{}{}<td>{}</td><td>{}</td><td class=\"l\"><ul>{f}</ul></td></tr>",
                esc(&p.server),
                esc(&p.client),
                mark(p.layers[0]),
                mark(p.layers[1]),
                mark(p.layers[2]),
                fig(p.lat_p50_ns),
                fig(p.bw_avg_mib_s)
            );
        }
        h.push_str("</tbody></table>\n");
    }
}

/// The page's style.
const CSS: &str = "body{font-family:sans-serif;margin:2em;color:#222;max-width:1100px}\
    table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}\
    th{background:#eee}td.l,th.l{text-align:left}td.fail{background:#f8d7da}td.pass{background:#d4edda}\
    td{vertical-align:top}ul{margin:.2em 0;padding-left:1.2em}";

/// A layer's cell, coloured by its outcome.
fn mark(m: Mark) -> String {
    let c = match m {
        Mark::Pass => "pass",
        Mark::Fail => "fail",
        Mark::NotRun => "l",
    };
    format!("<td class=\"{c}\">{}</td>", m.as_str())
}

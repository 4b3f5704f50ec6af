//! Rendering: a report as plain text, Markdown (CI summaries) and JUnit XML.

use super::{Needed, Report, Role, Row, Verdict};

/// Text from the files (run keys, environment values, paths) made safe for a terminal: control
/// characters (escape sequences, newlines) are written as escapes.
fn clean(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let e: Vec<char> = if c.is_control() || crate::oob::invisible(c) {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            e
        })
        .collect()
}

/// As [`clean`], for Markdown (a CI summary, a pull-request comment): `|` would end a table
/// cell, and HTML (`<!--` hides the rest of a comment, a tag runs) is written as entities.
fn md(s: &str) -> String {
    clean(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('|', "\\|")
}

/// A fraction as a signed percentage to two decimals; one that rounds to zero is `+0.00%`,
/// never `-0.00%`.
fn pct(x: f64) -> String {
    let s = format!("{:+.2}%", x * 100.0);
    if s == "-0.00%" {
        "+0.00%".into()
    } else {
        s
    }
}

fn iv(r: &Row) -> String {
    r.interval
        .map(|(a, b)| format!("[{}, {}]", pct(a), pct(b)))
        .unwrap_or_else(|| "n/a".into())
}

fn pv(p: Option<f64>) -> String {
    match p {
        Some(p) if p < 0.0001 => "<0.0001".into(),
        Some(p) => format!("{p:.4}"),
        None => "n/a".into(),
    }
}

/// A row's verdict with its part in the whole; a row that counts ends with its verdict (what
/// scripts grep for: ` REGRESSION$`), a row shown beside them is in parentheses with why.
fn verdict_text(r: &Row) -> String {
    let v = match (r.decided, r.verdict) {
        (Some(false), Verdict::Same) => "undecided",
        _ => r.verdict.as_str(),
    };
    match (r.role, r.counts) {
        (Role::Control, true) => format!("control: {v}"),
        (_, true) => v.to_string(),
        (Role::Contrast, false) => format!("({v}; shown)"),
        (Role::ByContrast, _) => format!("({v}; judged by its contrast)"),
        (Role::Control, false) | (Role::Own, false) => format!("({v})"),
    }
}

/// A contrast's scale: the backend's own figure its change is told over.
fn of(r: &Row) -> String {
    r.level.map(|l| format!("{l:.2}")).unwrap_or_else(|| "-".into())
}

/// A row's figure, to two decimals (a contrast's signed).
fn fig(r: &Row, x: f64) -> String {
    if r.role == Role::Contrast {
        format!("{x:+.2}")
    } else {
        format!("{x:.2}")
    }
}

/// The smallest change the row finds with 80 % power, as a magnitude.
fn detects(r: &Row) -> String {
    r.detectable
        .map(|d| {
            if d.is_finite() {
                format!("{:.1}%", d * 100.0)
            } else {
                "never".into()
            }
        })
        .unwrap_or_else(|| "n/a".into())
}

/// The runs per side a row needs for the target effect.
fn needed(r: &Row) -> String {
    match r.needed {
        Some(Needed::Runs(n)) => n.to_string(),
        Some(Needed::MoreThan(n)) => format!(">{n}"),
        Some(Needed::BelowThreshold) => "never".into(),
        Some(Needed::Unknown) => "unknown".into(),
        None => "n/a".into(),
    }
}

fn runs(r: &Row) -> String {
    format!("{}/{}", r.runs_base, r.runs_new)
}

/// Plain text.
pub fn text(r: &Report) -> String {
    let mut s = String::new();
    s.push_str("environment differences:\n");
    if r.env_diff.is_empty() {
        s.push_str("  none\n");
    }
    for (f, a, b) in &r.env_diff {
        s.push_str(&format!("  {}: {} -> {}\n", clean(f), clean(a), clean(b)));
    }
    for (side, f, path) in &r.side_diff {
        s.push_str(&format!(
            "  within {side}: {} has another {} than the side's first file\n",
            clean(path),
            clean(f)
        ));
    }
    s.push('\n');
    for n in r.notes() {
        s.push_str(&format!("note: {n}\n"));
    }
    let w = r.rows.iter().map(|x| clean(&x.key).len()).max().unwrap_or(0).max(3);
    let target = r.target_effect_pct.map(|t| format!("runs@{t}%"));
    s.push_str(&format!(
        "\n{:<w$} {:>6} {:>5} {:>12} {:>12} {:<6} {:>9} {:>22} {:>9} {:>6} {:>7}{} {:>9}  verdict\n",
        "run",
        "metric",
        "runs",
        "base",
        "new",
        "unit",
        "change",
        "95% interval",
        "p adj",
        "thresh",
        "detects",
        target.as_ref().map(|t| format!(" {t:>8}")).unwrap_or_default(),
        "over"
    ));
    for x in &r.rows {
        s.push_str(&format!(
            "{:<w$} {:>6} {:>5} {:>12} {:>12} {:<6} {:>9} {:>22} {:>9} {:>5.0}% {:>7}{} {:>9}  {}\n",
            clean(&x.key),
            x.metric,
            runs(x),
            fig(x, x.base),
            fig(x, x.new),
            x.unit,
            pct(x.change),
            iv(x),
            pv(x.p_adjusted),
            x.threshold * 100.0,
            detects(x),
            target
                .as_ref()
                .map(|_| format!(" {:>8}", needed(x)))
                .unwrap_or_default(),
            of(x),
            verdict_text(x)
        ));
    }
    for k in &r.only_base {
        s.push_str(&format!("only in BASE: {}\n", clean(k)));
    }
    for k in &r.only_new {
        s.push_str(&format!("only in NEW: {}\n", clean(k)));
    }
    s.push_str(&format!("\n{}\n", r.verdict_line()));
    s
}

/// Markdown (for CI summaries).
pub fn markdown(r: &Report) -> String {
    let mut s = format!("**{}**\n\n### Environment differences\n\n", r.verdict_line());
    if r.env_diff.is_empty() && r.side_diff.is_empty() {
        s.push_str("none\n");
    } else {
        s.push_str("| field | base | new |\n|---|---|---|\n");
        for (f, a, b) in &r.env_diff {
            s.push_str(&format!("| {} | {} | {} |\n", md(f), md(a), md(b)));
        }
        for (side, f, path) in &r.side_diff {
            s.push_str(&format!("| {} | within {side}: {} differs | |\n", md(f), md(path)));
        }
    }
    s.push_str("\n### How the verdicts were reached\n\n");
    for n in r.notes() {
        s.push_str(&format!("- {}\n", clean(&n)));
    }
    s.push_str(
        "\n### Runs\n\n| run | metric | runs base/new | base | new | unit | change | 95% interval | p adj | threshold | detects | runs needed | over | verdict |\n\
         |---|---|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---|\n",
    );
    for x in &r.rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.0}% | {} | {} | {} | {} |\n",
            md(&x.key),
            x.metric,
            runs(x),
            fig(x, x.base),
            fig(x, x.new),
            x.unit,
            pct(x.change),
            iv(x),
            pv(x.p_adjusted),
            x.threshold * 100.0,
            detects(x),
            needed(x),
            of(x),
            if x.verdict == Verdict::Regression && x.counts {
                format!("**{}**", verdict_text(x))
            } else {
                verdict_text(x)
            }
        ));
    }
    for k in &r.only_base {
        s.push_str(&format!("\nonly in base: {}", md(k)));
    }
    for k in &r.only_new {
        s.push_str(&format!("\nonly in new: {}", md(k)));
    }
    s.push('\n');
    s
}

/// XML attribute and text content: the five entities, and control characters (not allowed in
/// XML 1.0, bar tab and newlines) written as escapes.
fn xml(s: &str) -> String {
    clean(s)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// JUnit XML: one test case per row, a failure per regression, a skipped case per row not
/// judged; the notes as properties, each row's figures in its system-out.
pub fn junit(r: &Report) -> String {
    let fails = r
        .rows
        .iter()
        .filter(|x| x.counts && x.verdict == Verdict::Regression)
        .count();
    let skipped = r
        .rows
        .iter()
        .filter(|x| !x.counts || x.verdict == Verdict::NoInterval || x.decided == Some(false))
        .count();
    let mut s = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"rdmaprobe compare\" tests=\"{}\" failures=\"{fails}\" skipped=\"{skipped}\">\n  <properties>\n",
        r.rows.len()
    );
    for (i, n) in r.notes().iter().enumerate() {
        s.push_str(&format!(
            "    <property name=\"note{}\" value=\"{}\"/>\n",
            i + 1,
            xml(n)
        ));
    }
    s.push_str("  </properties>\n");
    for x in &r.rows {
        let name = xml(&format!("{} {}", x.key, x.metric));
        let figures = format!(
            "{} -> {} {} ({}, 95% interval {}, adjusted p {}, runs base/new {}, threshold {:.0}%, detects {}): {}",
            fig(x, x.base),
            fig(x, x.new),
            x.unit,
            pct(x.change),
            iv(x),
            pv(x.p_adjusted),
            runs(x),
            x.threshold * 100.0,
            detects(x),
            verdict_text(x)
        );
        s.push_str(&format!("  <testcase classname=\"rdmaprobe\" name=\"{name}\">"));
        match (x.counts, x.verdict) {
            (true, Verdict::Regression) => s.push_str(&format!("<failure message=\"{}\"/>", xml(&figures))),
            (false, _) | (_, Verdict::NoInterval) => s.push_str(&format!("<skipped message=\"{}\"/>", xml(&figures))),
            _ if x.decided == Some(false) => s.push_str(&format!("<skipped message=\"{}\"/>", xml(&figures))),
            _ => {}
        }
        s.push_str(&format!("<system-out>{}</system-out>", xml(&figures)));
        s.push_str("</testcase>\n");
    }
    s.push_str("</testsuite>\n");
    s
}

//! `--pdf` (issue 29 item 21): `suite` and `plot` write report.pdf, `fleet-report` writes
//! fleet-report.pdf, printed by headless Chromium; each PDF is read back with poppler (pdfinfo:
//! pages and A4; pdftoppm: the first page as a PNG that is not blank and shows its colours;
//! pdftotext: the title, every figure with its caption on one page, the page numbers, a long
//! table's header again on the next page). Without Chromium or poppler the tests that need them
//! skip with the reason, except in CI (`CI` set), where harness/setup.sh --browser installs them
//! and their absence fails. Without a browser, `--pdf` is a clear error and exit 2, and nothing
//! is written; without `--pdf` no browser is looked for.

use std::path::{Path, PathBuf};
use std::process::Command;

mod cmd;
use cmd::{run, run_env};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rdmaprobe-pdf-test-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    d
}

fn on_path(p: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(p).is_file()))
}

/// Whether Chromium and poppler's tools are here. When one is missing: in CI a failure, else
/// `false` with the reason printed (the test then skips).
fn tools(test: &str) -> bool {
    let mut missing: Vec<String> = ["pdfinfo", "pdftoppm", "pdftotext"]
        .into_iter()
        .filter(|t| !on_path(t))
        .map(|t| format!("{t} (Debian's poppler-utils)"))
        .collect();
    if let Err(e) = rdmaprobe::report::pdf::find_browser() {
        missing.push(e.to_string());
    }
    if missing.is_empty() {
        return true;
    }
    let why = format!("missing: {}", missing.join("; "));
    if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
        panic!("{test}: {why}; CI must have them (harness/setup.sh --browser installs chromium and poppler-utils)");
    }
    println!("SKIPPED {test}: {why} (CI is unset)");
    false
}

fn tool(name: &str, args: &[&str]) -> String {
    let o = Command::new(name)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(
        o.status.success(),
        "{name} {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What a PDF is: its page count and its pages' text (poppler's).
struct Pdf {
    pages: usize,
    text: Vec<String>,
}

/// Reads `pdf` back: a whole PDF of A4 pages (pdfinfo), its first page at 60 dpi not blank, its
/// top inked (the title) and, with `colour`, holding pixels of that colour (pdftoppm); each
/// page's text (pdftotext).
fn read_back(pdf: &Path, colour: Option<(u8, u8, u8)>) -> Pdf {
    let bytes = std::fs::read(pdf).unwrap_or_else(|e| panic!("{}: {e}", pdf.display()));
    assert!(
        bytes.starts_with(b"%PDF-") && bytes.len() > 10_000,
        "{} bytes",
        bytes.len()
    );
    let p = pdf.to_str().unwrap();
    let info = tool("pdfinfo", &[p]);
    let field = |k: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(k))
            .map(str::trim)
            .unwrap_or_else(|| panic!("pdfinfo has no {k}: {info}"))
            .to_string()
    };
    let pages: usize = field("Pages:").parse().unwrap();
    assert!(pages >= 1, "{info}");
    // "594.96 x 841.92 pts (A4)": A4 is 595.28 x 841.89 pt
    let size = field("Page size:");
    let wh: Vec<f64> = size.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    assert!(
        wh.len() == 2 && (wh[0] - 595.3).abs() < 2.0 && (wh[1] - 841.9).abs() < 2.0,
        "not A4: {size}"
    );
    // pdftoppm adds .png to the prefix
    let prefix = format!("{}-page1", pdf.with_extension("").display());
    tool(
        "pdftoppm",
        &["-png", "-r", "60", "-f", "1", "-l", "1", "-singlefile", p, &prefix],
    );
    let png = PathBuf::from(prefix + ".png");
    let pm = resvg::tiny_skia::Pixmap::decode_png(&std::fs::read(&png).unwrap()).unwrap();
    // A4 at 60 dpi: 496 x 702
    assert!(
        (pm.width(), pm.height()) == (496, 702) || (pm.width(), pm.height()) == (496, 701),
        "{}x{}",
        pm.width(),
        pm.height()
    );
    let (mut ink, mut top, mut hue) = (0usize, 0usize, 0usize);
    for y in 0..pm.height() {
        for x in 0..pm.width() {
            let c = pm.pixel(x, y).unwrap();
            let (r, g, b) = (c.red(), c.green(), c.blue());
            if u32::from(r) + u32::from(g) + u32::from(b) < 600 {
                ink += 1;
                top += usize::from(y < 70);
            }
            if let Some((cr, cg, cb)) = colour {
                let d = |a: u8, b: u8| i32::from(a).abs_diff(i32::from(b));
                hue += usize::from(d(r, cr) + d(g, cg) + d(b, cb) < 12);
            }
        }
    }
    let all = (pm.width() * pm.height()) as usize;
    assert!(
        ink > all / 100 && ink < all / 2,
        "page 1 blank or black: {ink} of {all} pixels inked"
    );
    assert!(top > 300, "no title at the top of page 1: {top} inked pixels");
    if let Some(c) = colour {
        assert!(hue > 50, "no pixels of {c:?} on page 1: {hue}");
    }
    let text = (1..=pages)
        .map(|i| tool("pdftotext", &["-f", &i.to_string(), "-l", &i.to_string(), p, "-"]))
        .collect();
    Pdf { pages, text }
}

/// `s` without whitespace and hyphens (pdftotext breaks lines where the page does, and joins a
/// word broken after a hyphen without it).
fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace() && *c != '-').collect()
}

/// The report's PDF: its title, page numbers, and each plot of `dir` on one page with its
/// caption (the figure's title in the plot and in the caption, the file's name in the caption).
fn report_pdf_holds_every_figure(dir: &Path) {
    let pdf = read_back(&dir.join("report.pdf"), Some((0xff, 0xf3, 0xcd))); // the warnings' box
    assert!(pdf.pages >= 2, "{} pages", pdf.pages);
    assert!(pdf.text[0].contains("rdmaprobe report: model0"), "{}", pdf.text[0]);
    // the memory regions, folded in a <details> on screen, printed open
    let all = pdf.text.join("\n");
    assert!(
        all.contains("page offset") && all.contains("direct.t0.q0.A"),
        "no memory regions: {all}"
    );
    for (i, t) in pdf.text.iter().enumerate() {
        assert!(
            t.contains(&format!("page {} of {}", i + 1, pdf.pages)),
            "page {}: {t}",
            i + 1
        );
    }
    let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
    let figures: Vec<(String, String)> = page
        .split("<figcaption>")
        .skip(1)
        .filter_map(|c| c.split("</figcaption>").next())
        .filter_map(|c| c.rsplit_once(" ("))
        .map(|(title, file)| (title.replace("&#39;", "'"), file.trim_end_matches(')').to_string()))
        .collect();
    assert!(figures.len() >= 2, "{figures:?}");
    for (title, file) in &figures {
        let on: Vec<usize> = (0..pdf.pages)
            .filter(|&i| squash(&pdf.text[i]).contains(&squash(&format!("({file})"))))
            .collect();
        assert_eq!(on.len(), 1, "{file}'s caption on pages {on:?}");
        // the plot's own title and the caption's, on the caption's page: the figure is whole
        let t = squash(&pdf.text[on[0]]);
        assert!(
            t.matches(&squash(title)).count() >= 2,
            "{file} split from its caption: page {}",
            on[0] + 1
        );
    }
}

#[test]
fn suite_and_plot_write_a_report_pdf_that_reads_back() {
    if !tools("suite_and_plot_write_a_report_pdf_that_reads_back") {
        return;
    }
    let dir = tmp("suite");
    let (c, o, e) = run(&[
        "suite",
        "--quick",
        "-d",
        "model0",
        "--out",
        dir.to_str().unwrap(),
        "--pdf",
    ]);
    assert_eq!(c, 0, "{o}{e}");
    assert!(o.contains("report.pdf"), "{o}");
    report_pdf_holds_every_figure(&dir);
    let again = tmp("plot");
    let (c, o, e) = run(&[
        "plot",
        dir.join("results.json").to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
        "--pdf",
    ]);
    assert_eq!(c, 0, "{o}{e}");
    assert!(o.contains("report.html, report.pdf"), "{o}");
    report_pdf_holds_every_figure(&again);
    if std::env::var_os("KEEP").is_none() {
        std::fs::remove_dir_all(&dir).ok();
        std::fs::remove_dir_all(&again).ok();
    }
}

/// A fleet run's directory: `count` nodes (at least 4), every pair; n4 unreachable (its pairs
/// skipped), n2's doctor failing a check, n3's latency an outlier.
fn fleet(dir: &Path, count: usize) {
    use serde_json::{json, Value};
    let _ = std::fs::remove_dir_all(dir);
    let w = |p: PathBuf, v: &Value| {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, v.to_string()).unwrap();
    };
    let nodes: Vec<String> = (1..=count).map(|i| format!("n{i}")).collect();
    let reachable: Vec<&str> = nodes.iter().map(String::as_str).filter(|n| *n != "n4").collect();
    let rc: serde_json::Map<String, Value> = reachable
        .iter()
        .map(|n| (n.to_string(), json!(i32::from(*n == "n2"))))
        .collect();
    w(
        dir.join("fleet.json"),
        &json!({"nodes": nodes, "pairing": "all", "reachable": reachable, "doctor_rc": rc}),
    );
    let ok = json!({"checks": [{"id": "memlock", "status": "pass", "evidence": "unlimited"}]});
    let bad = json!({"checks": [{"id": "pcie_link", "status": "fail",
                                 "evidence": "mlx5_0 at 8GT/s x8, expected 16GT/s x16"}]});
    for n in &reachable {
        let doctor = if *n == "n2" { &bad } else { &ok };
        w(dir.join("nodes").join(n).join("doctor.json"), doctor);
    }
    let layers: Vec<Value> = (1..=3)
        .map(|l| json!({"layer": l, "status": "pass", "findings": []}))
        .collect();
    let ladder = json!({"role": "client", "layers": layers});
    for (i, a) in nodes.iter().enumerate() {
        for b in &nodes[i + 1..] {
            let p = dir.join("pairs").join(format!("{a}--{b}"));
            let ends = [a.as_str(), b.as_str()];
            if ends.contains(&"n4") {
                w(
                    p.join("status.json"),
                    &json!({"server": a, "client": b, "skipped": "n4 unreachable"}),
                );
                continue;
            }
            w(
                p.join("status.json"),
                &json!({"server": a, "client": b, "ping_rc": 0, "lat_rc": 0, "bw_rc": 0,
                        "server_rc": {"ping": 0, "lat": 0, "bw": 0}}),
            );
            w(p.join("ping-server.json"), &ladder);
            w(p.join("ping-client.json"), &ladder);
            let lat = if ends.contains(&"n3") { 2600.0 } else { 600.0 };
            w(p.join("lat.json"), &json!({"runs": [{"latency_ns": {"p50": lat}}]}));
            w(
                p.join("bw.json"),
                &json!({"runs": [{"summary": {"bw_avg_mib_s": 9000.0}}]}),
            );
        }
    }
}

#[test]
fn fleet_report_writes_a_pdf_that_reads_back() {
    if !tools("fleet_report_writes_a_pdf_that_reads_back") {
        return;
    }
    let dir = tmp("fleet");
    fleet(&dir, 12);
    let (c, o, e) = run(&["fleet-report", dir.to_str().unwrap(), "--pdf"]);
    assert_eq!(c, 1, "n2, n3 and n4 fail: {o}{e}");
    assert!(
        o.contains("FAILED nodes: n2, n3, n4") && o.contains("fleet-report.pdf"),
        "{o}"
    );
    // the FAIL cells' red printed
    let pdf = read_back(&dir.join("fleet-report.pdf"), Some((0xf8, 0xd7, 0xda)));
    let all = squash(&pdf.text.join("\n"));
    for want in [
        "rdmaprobe fleet report",
        "Failed nodes: n2, n3, n4",
        "pcie_link",
        "not run: n4 unreachable",
    ] {
        assert!(all.contains(&squash(want)), "{want}: {all}");
    }
    // 66 pairs run onto a second page, under the pairs' header again
    assert!(pdf.pages >= 2, "{} pages", pdf.pages);
    let last = &pdf.text[pdf.pages - 1];
    assert!(
        last.contains("findings") && last.contains("n12"),
        "no header on the last page: {last}"
    );
    // beside a named --html
    let named = dir.join("out").join("sign-off.html");
    std::fs::create_dir_all(named.parent().unwrap()).unwrap();
    let (c, o, e) = run(&[
        "fleet-report",
        dir.to_str().unwrap(),
        "--html",
        named.to_str().unwrap(),
        "--pdf",
    ]);
    assert_eq!(c, 1, "{o}{e}");
    read_back(&named.with_extension("pdf"), None);
    if std::env::var_os("KEEP").is_none() {
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// Without a browser `--pdf` says so and what to do, exits 2 and writes nothing; without `--pdf`
/// the same commands do not look for one.
#[test]
fn pdf_without_a_browser_is_a_clear_error_and_writes_nothing() {
    let dir = tmp("nobrowser");
    std::fs::create_dir_all(&dir).unwrap();
    let result = dir.join("lat.json");
    let (c, o, e) = run(&[
        "lat",
        "write",
        "--loopback",
        "-d",
        "model0",
        "-n",
        "200",
        "--json",
        result.to_str().unwrap(),
    ]);
    assert_eq!(c, 0, "{o}{e}");
    let none = [("RDMAPROBE_CHROMIUM", "/nonexistent/chromium")];
    let plots = dir.join("plots");
    let p = plots.to_str().unwrap();
    let r = result.to_str().unwrap();
    let (c, o, e) = run_env(&["plot", r, "--out", p, "--pdf"], &none);
    assert_eq!(c, 2, "{o}{e}");
    assert!(
        e.contains("--pdf needs headless Chromium: RDMAPROBE_CHROMIUM=/nonexistent/chromium is not an executable file")
            && e.contains("apt-get install chromium"),
        "{e}"
    );
    assert!(!plots.exists(), "plot --pdf wrote without a browser");
    let (c, o, e) = run_env(&["plot", r, "--out", p], &none);
    assert_eq!(c, 0, "{o}{e}");
    assert!(plots.join("report.html").exists() && !plots.join("report.pdf").exists());
    // suite: refused before it runs
    let t = std::time::Instant::now();
    let out = dir.join("suite");
    let (c, o, e) = run_env(
        &["suite", "-d", "model0", "--out", out.to_str().unwrap(), "--pdf"],
        &none,
    );
    assert_eq!(c, 2, "{o}{e}");
    assert!(e.contains("--pdf needs headless Chromium") && !out.exists(), "{e}");
    assert!(
        t.elapsed().as_secs() < 10,
        "suite ran before refusing: {:?}",
        t.elapsed()
    );
    // fleet-report: neither the JSON nor the page written
    let f = dir.join("fleet");
    fleet(&f, 4);
    let (c, o, e) = run_env(&["fleet-report", f.to_str().unwrap(), "--pdf"], &none);
    assert_eq!(c, 2, "{o}{e}");
    assert!(e.contains("--pdf needs headless Chromium"), "{e}");
    assert!(!f.join("fleet-report.json").exists() && !f.join("fleet-report.html").exists());
    let (c, o, e) = run_env(&["fleet-report", f.to_str().unwrap()], &none);
    assert_eq!(c, 1, "{o}{e}");
    assert!(!f.join("fleet-report.pdf").exists());
    std::fs::remove_dir_all(&dir).ok();
}

/// A browser that fails: exit 2, the error names the command and what it said, the other files
/// written (they are whole).
#[test]
fn a_failing_browser_is_exit_2_naming_the_command_and_its_stderr() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tmp("failing");
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("broken-chromium");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'Trace/breakpoint trap: no display' >&2\nexit 133\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = dir.join("fleet");
    fleet(&f, 4);
    let (c, o, e) = run_env(
        &["fleet-report", f.to_str().unwrap(), "--pdf"],
        &[("RDMAPROBE_CHROMIUM", fake.to_str().unwrap())],
    );
    assert_eq!(c, 2, "{o}{e}");
    assert!(e.contains("fleet-report.pdf not written"), "{e}");
    assert!(
        e.contains("broken-chromium --headless") && e.contains("--print-to-pdf="),
        "{e}"
    );
    assert!(e.contains("exit status: 133") && e.contains("no display"), "{e}");
    assert!(f.join("fleet-report.html").exists() && !f.join("fleet-report.pdf").exists());
    // the fleet's verdict is printed all the same (it was lost with the PDF)
    let (_, o2, _) = run_env(&["fleet-report", f.to_str().unwrap()], &[]);
    let verdict = o2.lines().next().unwrap_or("").to_string();
    assert!(!verdict.is_empty() && o.contains(&verdict), "{verdict:?} not in:\n{o}");
    std::fs::remove_dir_all(&dir).ok();
}

//! Plots and report.html: `suite` and `plot` write every figure, the page renders in a real
//! headless browser (Debian's chromium: its tables laid out, every plot drawn with its data
//! lines), and bad input gives exit 2 with nothing written.

use std::path::{Path, PathBuf};
use std::process::Command;

mod cmd;
use cmd::run;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rdmaprobe-report-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&d).ok();
    d
}

fn suite(dir: &Path) {
    let (c, o, e) = run(&["suite", "--quick", "-d", "model0", "--out", dir.to_str().unwrap()]);
    assert_eq!(c, 0, "{o}{e}");
}

fn svgs(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".svg"))
        .collect();
    v.sort();
    v
}

#[test]
fn suite_and_plot_write_every_figure() {
    let dir = tmp("suite");
    suite(&dir);
    let expected = [
        "bw-send-vs-size.svg",
        "bw-write-vs-size.svg",
        "kv-latency-vs-clients.svg",
        "kv-mops-vs-clients.svg",
        "lat-atomic-cdf.svg",
        "lat-atomic-spectrum.svg",
        "lat-read-cdf.svg",
        "lat-read-spectrum.svg",
        "lat-read-vs-size.svg",
        "lat-send-cdf.svg",
        "lat-send-spectrum.svg",
        "lat-send-vs-size.svg",
        "lat-write-cdf.svg",
        "lat-write-spectrum.svg",
        "lat-write-vs-size.svg",
        "post-cost-write-8B-inline-vs-postlist.svg",
    ];
    assert_eq!(svgs(&dir), expected);
    for f in expected {
        let s = std::fs::read_to_string(dir.join(f)).unwrap();
        assert!(s.contains("<svg"), "{f}");
        // the direct backend's line, and the title saying what the device is
        assert!(s.contains("stroke=\"#0072B2\""), "{f}: no data line");
        assert!(
            s.contains("software model, not hardware"),
            "{f}: model0 not named as a model"
        );
    }
    pngs_match_the_svgs(&dir, &expected);
    let page = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(page.contains("device is model0, a software model"));
    assert_eq!(page.matches("<figure class=\"plot\"").count(), expected.len());
    // self-contained: nothing to fetch
    for attr in ["src=", "href=", "@import", "url("] {
        assert!(
            !page.contains(attr),
            "report.html refers to something outside it: {attr}"
        );
    }
    // `plot` of the same results writes the same set
    let again = tmp("plot");
    let (c, o, e) = run(&[
        "plot",
        dir.join("results.json").to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
    ]);
    assert_eq!(c, 0, "{o}{e}");
    assert_eq!(svgs(&again), expected);
    pngs_match_the_svgs(&again, &expected);
    assert!(again.join("report.html").exists());
    std::fs::remove_dir_all(&dir).ok();
    std::fs::remove_dir_all(&again).ok();
}

/// Each figure has its PNG twin: a PNG of the SVG's size (900x520) with the direct backend's line
/// drawn in its colour, and the title's and axes' text in dark pixels in the top band.
fn pngs_match_the_svgs(dir: &Path, svgs: &[&str]) {
    use rdmaprobe::report::png::text_family;
    assert!(
        text_family().is_some(),
        "no font for the PNGs' text on this machine (harness/setup.sh installs fonts-dejavu-core)"
    );
    for f in svgs {
        let png = f.replace(".svg", ".png");
        let bytes = std::fs::read(dir.join(&png)).unwrap_or_else(|e| panic!("{png}: {e}"));
        let pm = resvg::tiny_skia::Pixmap::decode_png(&bytes).unwrap_or_else(|e| panic!("{png}: {e}"));
        assert_eq!((pm.width(), pm.height()), (900, 520), "{png}");
        let (mut line, mut title_ink) = (0, 0);
        for y in 0..pm.height() {
            for x in 0..pm.width() {
                let c = pm.pixel(x, y).unwrap();
                let (r, g, b) = (c.red() as i32, c.green() as i32, c.blue() as i32);
                if r.abs() + (g - 114).abs() + (b - 178).abs() < 40 {
                    line += 1;
                }
                if y < 40 && r + g + b < 200 {
                    title_ink += 1;
                }
            }
        }
        assert!(line > 100, "{png}: the direct line is missing ({line} pixels)");
        assert!(title_ink > 200, "{png}: the title is missing ({title_ink} dark pixels)");
    }
}

fn chromium() -> String {
    if let Ok(c) = std::env::var("RDMAPROBE_CHROMIUM") {
        return c;
    }
    for c in ["chromium", "chromium-browser", "google-chrome"] {
        if Command::new("sh")
            .args(["-c", &format!("command -v {c}")])
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return c.to_string();
        }
    }
    panic!("no headless browser: install Debian's chromium (harness/setup.sh does) or set RDMAPROBE_CHROMIUM");
}

#[test]
fn report_renders_in_headless_chromium() {
    let dir = tmp("browser");
    suite(&dir);
    let page = dir.join("report.html");
    let url = format!("file://{}", page.display());
    let browser = chromium();
    let profile = dir.join("chromium-profile");
    let base = [
        "120".to_string(),
        browser,
        "--headless".into(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--no-first-run".into(),
        format!("--user-data-dir={}", profile.display()),
        "--window-size=1100,4000".into(),
    ];
    let o = Command::new("timeout")
        .args(&base)
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(o.status.success(), "chromium: {}", String::from_utf8_lossy(&o.stderr));
    let dom = String::from_utf8_lossy(&o.stdout);
    let attr = dom
        .split("data-rendered=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap_or_else(|| panic!("the page's render check did not run: {}", &dom[..dom.len().min(400)]));
    let json = attr.replace("&quot;", "\"").replace("&amp;", "&");
    let r: serde_json::Value = serde_json::from_str(&json).expect("render record");
    let tables = r["tables"].as_array().unwrap();
    for id in ["environment", "latency", "bandwidth", "post_cost", "kv"] {
        let t = tables
            .iter()
            .find(|t| t["id"] == id)
            .unwrap_or_else(|| panic!("no {id} table: {r}"));
        assert!(t["rows"].as_u64().unwrap() >= 4, "{id}: {t}");
        assert!(
            t["w"].as_u64().unwrap() > 200 && t["h"].as_u64().unwrap() > 60,
            "{id} not laid out: {t}"
        );
    }
    let plots = r["plots"].as_array().unwrap();
    assert_eq!(plots.len(), svgs(&dir).len(), "{r}");
    for p in plots {
        assert!(
            p["w"].as_u64().unwrap() >= 800 && p["h"].as_u64().unwrap() >= 400,
            "{p}"
        );
        let want = if p["id"].as_str().unwrap().contains("vs-size") && p["id"].as_str().unwrap().starts_with("lat") {
            2 // a p50 line per backend (each p99 is dashed: short pieces, not counted)
        } else {
            1
        };
        assert!(p["lines"].as_u64().unwrap() >= want, "plot without its data lines: {p}");
    }
    // a screenshot, for a person to look at (left in the output directory when KEEP is set)
    let shot = dir.join("report.png");
    let o = Command::new("timeout")
        .args(&base)
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(o.status.success(), "chromium: {}", String::from_utf8_lossy(&o.stderr));
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 20_000, "{} bytes", png.len());
    if std::env::var_os("KEEP").is_none() {
        std::fs::remove_dir_all(&dir).ok();
    }
}

#[test]
fn plot_refuses_bad_input_and_writes_nothing() {
    let dir = tmp("bad");
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good");
    suite(&good);
    let text = std::fs::read_to_string(good.join("results.json")).unwrap();
    let cases = [
        (
            "truncated.json",
            text[..text.len() / 2].to_string(),
            "truncated or corrupt",
        ),
        ("empty.json", String::new(), "empty file"),
        ("foreign.json", "{\"hello\": 1}".to_string(), "not an rdmaprobe result"),
    ];
    for (name, body, why) in cases {
        let p = dir.join(name);
        std::fs::write(&p, body).unwrap();
        let out = dir.join(format!("out-{name}"));
        let (c, o, e) = run(&["plot", p.to_str().unwrap(), "--out", out.to_str().unwrap()]);
        assert_eq!(c, 2, "{name}: {o}{e}");
        assert!(e.contains(why), "{name}: {e}");
        assert!(!out.join("report.html").exists(), "{name}: report written");
    }
    // a damaged histogram inside an otherwise valid file
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let i = v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .position(|r| r["histogram_ns"].is_string())
        .unwrap();
    v["runs"][i]["histogram_ns"] = serde_json::json!("HISTFAAAnot-base64!");
    let p = dir.join("damaged.json");
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
    let out = dir.join("out-damaged");
    let (c, _, e) = run(&["plot", p.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    assert_eq!(c, 2, "{e}");
    assert!(e.contains("does not decode"), "{e}");
    assert!(!out.join("report.html").exists());
    // an output directory that cannot be created (a path below a regular file)
    let blocked = dir.join("empty.json").join("sub");
    let (c, _, e) = run(&[
        "plot",
        good.join("results.json").to_str().unwrap(),
        "--out",
        blocked.to_str().unwrap(),
    ]);
    assert_eq!(c, 2, "{e}");
    assert!(e.contains("creating") && e.contains("sub"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Runs `rdmaprobe ARGS` under `ulimit -v KIB` (and `timeout 60`): (exit status, or 128 + the
/// signal; stderr; seconds).
fn run_limited(kib: u64, args: &[&str]) -> (i32, String, f64) {
    let t = std::time::Instant::now();
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {kib} && exec timeout 60 \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_rdmaprobe"))
        .args(args)
        .output()
        .expect("run rdmaprobe under ulimit");
    use std::os::unix::process::ExitStatusExt;
    let code = o.status.code().unwrap_or_else(|| 128 + o.status.signal().unwrap_or(0));
    (
        code,
        String::from_utf8_lossy(&o.stderr).into_owned(),
        t.elapsed().as_secs_f64(),
    )
}

/// A V2 histogram header (40 bytes) claiming a payload of `len` bytes.
fn v2_header(len: u32, digits: u32, low: u64, high: u64) -> Vec<u8> {
    let mut v = Vec::new();
    for x in [0x1c84_9313u32, len, 0, digits] {
        v.extend(x.to_be_bytes());
    }
    v.extend(low.to_be_bytes());
    v.extend(high.to_be_bytes());
    v.extend(1f64.to_be_bytes());
    v
}

/// The V2-deflate form of `v2`, its compressed length given as `claimed` (or the true one).
fn v2_deflated(v2: &[u8], claimed: Option<u32>) -> Vec<u8> {
    use std::io::Write;
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(v2).unwrap();
    let z = z.finish().unwrap();
    let mut out = 0x1c84_9314u32.to_be_bytes().to_vec();
    out.extend(claimed.unwrap_or(z.len() as u32).to_be_bytes());
    out.extend(z);
    out
}

/// A results document of one latency run (its `op` and histogram given).
fn one_run(op: &str, hist: &[u8]) -> String {
    use base64::Engine;
    serde_json::json!({"schema_version": 2, "tool": {"name": "rdmaprobe", "version": "0"},
        "environment": {"device": "model0"},
        "runs": [{"scenario": "lat", "op": op, "backend": "direct", "size_bytes": 8, "figure": "one_way",
                  "latency_ns": {"p50": 200.0, "p99": 300.0},
                  "histogram_ns": base64::engine::general_purpose::STANDARD.encode(hist)}]})
    .to_string()
}

/// A histogram bomb (issue 30 point 3): a results file of a few hundred bytes whose histogram
/// claims a 0xFFFFFFFF-byte payload (plain and deflated), a compressed length beyond the bytes
/// there, a stream that inflates to 64 MiB, or a range of 6 million counters. Before: `plot` took
/// 16 s and 4.2 GB, and under `ulimit -v 3000000` died of SIGABRT ("memory allocation of
/// 4294967295 bytes failed"). Now each is refused at once under that limit, exit 2, naming the
/// file, the run and what the header claims; `compare` (which decodes no histogram) reads them
/// under the limit too.
#[test]
fn plot_refuses_histogram_bombs_under_a_memory_limit() {
    let dir = tmp("bomb");
    std::fs::create_dir_all(&dir).unwrap();
    let zeros = {
        let mut b = v2_header(64 << 20, 3, 1, 3_600_000_000_000);
        b.resize(40 + (64 << 20), 0);
        b
    };
    let cases = [
        (
            "plain",
            v2_header(u32::MAX, 3, 1, 3_600_000_000_000),
            "claims a 4294967295-byte payload",
        ),
        (
            "deflated",
            v2_deflated(&v2_header(u32::MAX, 3, 1, 3_600_000_000_000), None),
            "claims a 4294967295-byte payload",
        ),
        (
            "compressed-length",
            v2_deflated(&v2_header(0, 3, 1, 3_600_000_000_000), Some(u32::MAX)),
            "claims 4294967295 bytes",
        ),
        ("inflates", v2_deflated(&zeros, None), "inflates to more than 16 MiB"),
        ("counters", v2_header(0, 5, 1, u64::MAX), "counters"),
    ];
    for (name, hist, why) in cases {
        let f = dir.join(format!("{name}.json"));
        std::fs::write(&f, one_run("write", &hist)).unwrap();
        let out = dir.join(format!("out-{name}"));
        let (c, e, s) = run_limited(
            3_000_000,
            &["plot", f.to_str().unwrap(), "--out", out.to_str().unwrap()],
        );
        assert_eq!(c, 2, "{name}: {e}");
        assert!(
            e.contains(f.to_str().unwrap()) && e.contains("run 1 (lat write 8 B direct)") && e.contains(why),
            "{name}: {e}"
        );
        assert!(s < 10.0, "{name}: {s:.1} s");
        assert!(!out.exists(), "{name}: a refused plot left its directory");
        let (c, e, _) = run_limited(3_000_000, &["compare", f.to_str().unwrap(), f.to_str().unwrap()]);
        assert!(c == 0 || c == 2, "compare {name}: {c} {e}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// File names from a result's `op` (issue 30 point 4): an `op` of `x/../../../../DIR/escape`
/// with a `lat-x/` directory in `--out` wrote four files outside `--out`, exit 0; an `op` of
/// `x/y` with a new `--out` failed after creating it and left it empty. Now both are refused
/// before anything is written (exit 2, naming the run), and `--out` is not created.
#[test]
fn plot_names_its_files_from_its_own_vocabulary() {
    let dir = tmp("names");
    let outside = dir.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let hist = {
        let mut h = rdmaprobe::report::Hist::new();
        (1..=100).for_each(|i| h.record(1000.0 + i as f64));
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.decode(h.encode()).unwrap()
    };
    let out = dir.join("out");
    std::fs::create_dir_all(out.join("lat-x")).unwrap();
    let op = format!("x/../../../../../../../../{}/escape", outside.display());
    let f = dir.join("traversal.json");
    std::fs::write(&f, one_run(&op, &hist)).unwrap();
    let (c, _, e) = run(&["plot", f.to_str().unwrap(), "--out", out.to_str().unwrap()]);
    let escaped: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(escaped.is_empty(), "written outside --out: {escaped:?}\n{e}");
    assert_eq!(c, 2, "{e}");
    assert!(
        e.contains("run 1 (lat x/../")
            && e.contains("op is not an operation rdmaprobe writes (write, send, read, atomic)"),
        "{e}"
    );
    // a run whose name cannot be a file name: refused before --out is made
    let f = dir.join("slash.json");
    std::fs::write(&f, one_run("x/y", &hist)).unwrap();
    let fresh = dir.join("fresh");
    let (c, _, e) = run(&["plot", f.to_str().unwrap(), "--out", fresh.to_str().unwrap()]);
    assert_eq!(c, 2, "{e}");
    assert!(!fresh.exists(), "an empty --out left behind: {e}");
    std::fs::remove_dir_all(&dir).ok();
}

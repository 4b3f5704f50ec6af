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
    for id in ["environment", "latency", "bandwidth", "post_cost"] {
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
            2 // p50 and p99
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

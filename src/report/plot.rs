//! Plots of a results document (the `results.json` that `suite`, `lat` and `bw` write), drawn
//! as SVG with plotters: the latency percentile spectrum in the HdrHistogram style (x axis
//! 1/(1-q) on a log scale), the latency CDF (y axis 1/(1-q) likewise), latency versus size and
//! bandwidth versus size (power-of-two size ticks, a marker at each measured point), the post
//! cost versus the postlist, the key-value workload's Mops and latency versus clients or window
//! (the `kv` module), one line per backend; every axis's ticks from the `axis` module. Every
//! title names the device, and says so when it is the software model (model0) or an emulation
//! (Soft-RoCE).

mod kv;

use super::axis::{Axis, Scale};
use super::Hist;
use plotters::coord::combinators::{LogCoord, WithKeyPoints};
use plotters::prelude::*;
use serde_json::Value;
use std::collections::BTreeMap;

/// One plot: its file name, its title and the SVG text.
pub struct Figure {
    /// File name (`lat-send-spectrum.svg`, ...).
    pub file: String,
    /// Title shown above the plot.
    pub title: String,
    /// The SVG document.
    pub svg: String,
}

const W: u32 = 900;
const H: u32 = 520;

/// The operations a run's `op` may name, as rdmaprobe writes them (`OpKind::cli_name`): the
/// plots' file names are made of them, so nothing else reaches a file name.
pub const OPS: [&str; 4] = ["write", "send", "read", "atomic"];

/// The transports a run's `transport` may name (`Transport::as_str`).
pub const TRANSPORTS: [&str; 3] = ["RC", "UC", "UD"];

/// The plots' series of a run: its operation, the verb where it is not the operation's own
/// (`write_imm`, `send_imm`, `cmp_swap`), and the transport other than RC (`send-UD`); every part
/// from [`OPS`], those three verbs and [`TRANSPORTS`] (checked by `Plotted::of`). The command
/// line's names (`atomic`, not `fetch_add`), as the report's tables name a run's operation too.
pub fn series(r: &Value) -> String {
    let mut s = match r["verb"].as_str() {
        Some(v @ ("write_imm" | "send_imm" | "cmp_swap")) => v.to_string(),
        _ => str_of(r, "op").to_string(),
    };
    if let Some(t) = r["transport"].as_str().filter(|t| *t != "RC") {
        s = format!("{s}-{t}");
    }
    s
}

/// A run's line in its plot: the backend, `-e` when it waited for completion events.
fn line(r: &Value) -> String {
    match r["completion"].as_str() {
        Some("events") => format!("{}-e", str_of(r, "backend")),
        _ => str_of(r, "backend").to_string(),
    }
}

fn colour(backend: &str) -> RGBColor {
    match backend {
        "direct" => RGBColor(0, 114, 178),
        "verbs" => RGBColor(213, 94, 0),
        "wr" => RGBColor(0, 158, 115),
        // waiting for completion events: the backend's colour, darker
        "verbs-e" => RGBColor(140, 60, 0),
        "wr-e" => RGBColor(0, 100, 70),
        _ => RGBColor(80, 80, 80),
    }
}

/// A name from the document as words: `round_trip` as "round trip", `wqes_executed` as "WQEs
/// executed" (the abbreviations in capitals).
pub fn human(name: &str) -> String {
    const ABBREVIATIONS: [&str; 11] = [
        "cqe", "wqe", "rnr", "qp", "mtu", "cpu", "tsc", "numa", "gid", "lid", "mr",
    ];
    let word = |w: &str| {
        let (stem, plural) = match w.strip_suffix('s') {
            Some(stem) if ABBREVIATIONS.contains(&stem) => (stem, "s"),
            _ => (w, ""),
        };
        if ABBREVIATIONS.contains(&stem) {
            format!("{}{plural}", stem.to_uppercase())
        } else {
            w.to_string()
        }
    };
    name.split('_').map(word).collect::<Vec<_>>().join(" ")
}

/// What the results were measured on, for every title: the device, marked as the software
/// model or an emulation where it is one.
pub fn device_label(doc: &Value) -> String {
    let env = &doc["environment"];
    let dev = env["device"].as_str().unwrap_or("unknown device");
    let provider = env["provider"].as_str().unwrap_or("");
    if env["software_model"].as_bool() == Some(true) {
        format!("{dev} (software model, not hardware)")
    } else if provider == "rxe" || provider == "siw" {
        format!("{dev} ({provider}: software emulation)")
    } else {
        dev.to_string()
    }
}

/// Points of a line.
type Pts = Vec<(f64, f64)>;

/// A named line: label, colour and points.
type Line = (String, RGBColor, Pts);

/// A figure's axes: what each says and measures, and whether every point gets a marker (the
/// lines through a few measured points, sizes or postlists: two points joined by a line looked
/// measured all along it), not the curves of a histogram's quantiles.
struct Axes {
    x_desc: &'static str,
    y_desc: &'static str,
    x: Scale,
    y: Scale,
    markers: bool,
}

/// The chart's coordinates: log on both axes, with the ticks of [`Axis`].
type Coord = Cartesian2d<WithKeyPoints<LogCoord<f64>>, WithKeyPoints<LogCoord<f64>>>;

/// A p99 line: dashed with triangles, beside its p50 (solid with circles) in the same colour.
fn is_p99(label: &str) -> bool {
    label.ends_with("p99")
}

/// Draws the figure and adds it to `out`; a figure with no point it can draw (no samples, or
/// nothing positive on a log axis) is left out rather than drawn empty.
fn add(out: &mut Vec<Figure>, file: String, title: String, axes: &Axes, lines: &[Line]) -> Result<(), String> {
    let drawable = |p: &&(f64, f64)| p.0.is_finite() && p.1.is_finite() && p.0 > 0.0 && p.1 > 0.0;
    let lines: Vec<Line> = lines
        .iter()
        .map(|(l, c, pts)| (l.clone(), *c, pts.iter().filter(drawable).copied().collect()))
        .collect();
    let all = || lines.iter().flat_map(|l| l.2.iter());
    let (Some(x), Some(y)) = (
        Axis::of(axes.x, all().map(|p| p.0)),
        Axis::of(axes.y, all().map(|p| p.1)),
    ) else {
        return Ok(());
    };
    let svg = draw(&title, axes, &lines, &x, &y)?;
    out.push(Figure { file, title, svg });
    Ok(())
}

/// Where the legend covers the least of the lines: the corner (upper left first on a tie) whose
/// box, a third of the width by two fifths of the height, holds the fewest of the lines' points
/// and of ten steps along each segment between them, on the chart's log axes.
fn legend_corner(lines: &[Line], x: &Axis, y: &Axis) -> SeriesLabelPosition {
    let t = |a: &Axis, v: f64| (v.ln() - a.lo.ln()) / (a.hi.ln() - a.lo.ln()).max(f64::MIN_POSITIVE);
    let mut pts = Vec::new();
    for (_, _, p) in lines {
        for w in p.windows(2) {
            let (a, b) = ((t(x, w[0].0), t(y, w[0].1)), (t(x, w[1].0), t(y, w[1].1)));
            pts.extend((0..10).map(|k| {
                let f = f64::from(k) / 10.0;
                (a.0 + (b.0 - a.0) * f, a.1 + (b.1 - a.1) * f)
            }));
        }
        pts.extend(p.iter().map(|&(px, py)| (t(x, px), t(y, py))));
    }
    let (w, h) = (1.0 / 3.0, 0.4);
    let corners = [
        (SeriesLabelPosition::UpperLeft, 0.0, 1.0 - h),
        (SeriesLabelPosition::UpperRight, 1.0 - w, 1.0 - h),
        (SeriesLabelPosition::LowerRight, 1.0 - w, 0.0),
        (SeriesLabelPosition::LowerLeft, 0.0, 0.0),
    ];
    let inside = |x0: f64, y0: f64| {
        pts.iter()
            .filter(|p| p.0 >= x0 && p.0 <= x0 + w && p.1 >= y0 && p.1 <= y0 + h)
            .count()
    };
    corners
        .into_iter()
        .map(|(c, x0, y0)| (inside(x0, y0), c))
        .min_by_key(|(n, _)| *n)
        .map(|(_, c)| c)
        .unwrap_or(SeriesLabelPosition::UpperLeft)
}

fn draw(title: &str, axes: &Axes, lines: &[Line], x: &Axis, y: &Axis) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        let e = |e: DrawingAreaErrorKind<_>| format!("{title}: {e:?}");
        root.fill(&WHITE).map_err(e)?;
        let range = |a: &Axis| {
            (a.lo..a.hi)
                .log_scale()
                .with_key_points(a.ticks())
                .with_light_points(a.minor.clone())
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            // room for the last x label (a percentile's is wide), centred on the frame's end
            .margin_right(30)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(range(x), range(y))
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc(axes.x_desc)
            .y_desc(axes.y_desc)
            .x_label_formatter(&|v: &f64| x.label(*v))
            .y_label_formatter(&|v: &f64| y.label(*v))
            .bold_line_style(BLACK.mix(0.25))
            .light_line_style(BLACK.mix(0.07))
            .draw()
            .map_err(e)?;
        // the direct path's lines last, on top: the reference stays visible where the
        // backends' lines coincide (a 2-pixel line drawn first was all but covered)
        let is_direct = |l: &&Line| l.0.starts_with("direct");
        for l in lines
            .iter()
            .filter(|l| !is_direct(l))
            .chain(lines.iter().filter(is_direct))
        {
            draw_line(&mut chart, l, axes.markers).map_err(e)?;
        }
        chart
            .configure_series_labels()
            .position(legend_corner(lines, x, y))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(e)?;
        root.present().map_err(e)?;
    }
    Ok(svg)
}

/// One line with its legend entry: a p99 dashed with triangles, any other solid with circles,
/// at the measured points and in the legend when `markers`.
fn draw_line<'a, DB: DrawingBackend + 'a>(
    chart: &mut ChartContext<'a, DB, Coord>,
    (label, c, pts): &Line,
    markers: bool,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let c = *c;
    let dash = move |(x, y): (i32, i32)| {
        EmptyElement::at((x, y))
            + PathElement::new(vec![(0, 0), (6, 0)], c.stroke_width(2))
            + PathElement::new(vec![(10, 0), (16, 0)], c.stroke_width(2))
    };
    let solid =
        move |(x, y): (i32, i32)| EmptyElement::at((x, y)) + PathElement::new(vec![(0, 0), (16, 0)], c.stroke_width(2));
    if is_p99(label) {
        let s = chart
            .draw_series(DashedLineSeries::new(pts.clone(), 6, 4, c.stroke_width(2)))?
            .label(label.as_str());
        if markers {
            s.legend(move |p| dash(p) + TriangleMarker::new((8, 0), 4, c.stroke_width(1)));
            chart.draw_series(pts.iter().map(|p| TriangleMarker::new(*p, 5, c.stroke_width(2))))?;
        } else {
            s.legend(dash);
        }
    } else {
        let s = chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))?
            .label(label.as_str());
        if markers {
            s.legend(move |p| solid(p) + Circle::new((8, 0), 3, c.filled()));
            chart.draw_series(pts.iter().map(|p| Circle::new(*p, 4, c.filled())))?;
        } else {
            s.legend(solid);
        }
    }
    Ok(())
}

/// The spectrum points of a histogram: (1/(1-q), latency in ns), the maximum placed at
/// x = count (the last sample's quantile) as HdrHistogram's plots do.
fn spectrum(h: &Hist) -> Vec<(f64, f64)> {
    let n = h.len() as f64;
    let mut pts = Vec::new();
    for v in h.inner().iter_quantiles(5) {
        let q = v.quantile_iterated_to();
        let x = if q >= 1.0 { n } else { (1.0 / (1.0 - q)).min(n) };
        pts.push((x, h.inner().highest_equivalent(v.value_iterated_to()) as f64));
    }
    pts
}

/// The CDF points of a histogram: (latency in ns, 1/(1 − q)) where q is the fraction of samples
/// at or below it, the log of 1 − q as the spectrum's x (on a linear axis the tail was squashed
/// into the top line); the last sample's q = 1 placed at count, as the spectrum does.
fn cdf(h: &Hist) -> Vec<(f64, f64)> {
    let n = h.len() as f64;
    let mut seen = 0u64;
    let mut pts = Vec::new();
    for v in h.inner().iter_recorded() {
        seen += v.count_at_value();
        let q = seen as f64 / n;
        let y = if q >= 1.0 { n } else { (1.0 / (1.0 - q)).min(n) };
        pts.push((h.inner().highest_equivalent(v.value_iterated_to()) as f64, y));
    }
    pts
}

fn str_of<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or("?")
}

/// Every figure the document's runs support. Runs without the fields a plot needs are skipped;
/// a histogram that does not decode is an error (the file is damaged).
pub fn figures(doc: &Value) -> Result<Vec<Figure>, String> {
    // an older schema reads as the current one
    let mut up = doc.clone();
    super::schema::upgrade(&mut up);
    let doc = &up;
    let runs = doc["runs"].as_array().ok_or("the document has no \"runs\" array")?;
    check_document(doc)?;
    let dev = device_label(doc);
    let plotted = Plotted::of(runs)?;
    let mut out = Vec::new();
    for (op, by_size) in &plotted.lat {
        // spectrum and CDF at the smallest size (where the post path weighs most)
        if let Some((size, rs)) = by_size.iter().next() {
            spectrum_and_cdf(&mut out, &dev, op, *size, rs)?;
        }
        if by_size.len() >= 2 {
            latency_vs_size(&mut out, &dev, op, by_size)?;
        }
    }
    for (op, rs) in &plotted.bw {
        bandwidth_vs_size(&mut out, &dev, op, rs)?;
    }
    for ((op, size, inline), rs) in &plotted.pc {
        post_cost_vs_postlist(&mut out, &dev, (op, *size, *inline), rs)?;
    }
    kv::figures(&mut out, &dev, &plotted.kv)?;
    Ok(out)
}

/// The document's own fields of the wrong type are refused too, not shown as "?".
fn check_document(doc: &Value) -> Result<(), String> {
    if !doc["environment"].is_null() && !doc["environment"].is_object() {
        return Err("environment is not an object".into());
    }
    for f in ["device", "provider"] {
        let v = &doc["environment"][f];
        if !v.is_null() && !v.is_string() {
            return Err(format!("environment.{f} is not a string"));
        }
    }
    if !doc["warnings"].is_null()
        && !doc["warnings"]
            .as_array()
            .is_some_and(|w| w.iter().all(|x| x.is_string()))
    {
        return Err("warnings is not a list of strings".into());
    }
    Ok(())
}

/// The runs the figures draw: latency by series and size, bandwidth (one direction) by series.
struct Plotted<'a> {
    /// Latency runs: series -> size -> runs (one per line).
    lat: BTreeMap<String, BTreeMap<u64, Vec<Numbered<'a>>>>,
    /// Bandwidth runs of one direction: series -> runs.
    bw: BTreeMap<String, Vec<&'a Value>>,
    /// Post-cost runs: (operation, size, inline) -> runs.
    pc: BTreeMap<(String, u64, bool), Vec<&'a Value>>,
    /// Key-value runs.
    kv: Vec<&'a Value>,
}

/// A run and its place in the document (from 1).
type Numbered<'a> = (usize, &'a Value);

/// One run of the document, `no` its place (from 1) and `scenario` what it measured.
struct Run<'a> {
    no: usize,
    scenario: &'a str,
    r: &'a Value,
}

impl Run<'_> {
    /// A field of the wrong type: a damaged file, refused naming the run.
    fn bad(&self, field: &str, want: &str) -> String {
        format!("{}: {field} is not {want}", self.name())
    }

    /// `run 3 (lat write 8 B direct)`, what the file says escaped.
    fn name(&self) -> String {
        let r = self.r;
        crate::oob::escape(&format!(
            "run {} ({} {} {} B {})",
            self.no,
            self.scenario,
            str_of(r, "op"),
            r["size_bytes"],
            str_of(r, "backend")
        ))
    }

    /// Its `op` and `transport` from the vocabulary the plots' file names are made of.
    fn check_names(&self) -> Result<(), String> {
        let r = self.r;
        if !OPS.contains(&str_of(r, "op")) {
            return Err(self.bad("op", &format!("an operation rdmaprobe writes ({})", OPS.join(", "))));
        }
        if !(r["transport"].is_null() || r["transport"].as_str().is_some_and(|t| TRANSPORTS.contains(&t))) {
            return Err(self.bad(
                "transport",
                &format!("a transport rdmaprobe writes ({})", TRANSPORTS.join(", ")),
            ));
        }
        Ok(())
    }
}

impl<'a> Plotted<'a> {
    /// Every run checked and sorted into its figures; a field of the wrong type is a damaged
    /// file: refused, naming the run, never skipped.
    fn of(runs: &'a [Value]) -> Result<Self, String> {
        let mut p = Plotted {
            lat: BTreeMap::new(),
            bw: BTreeMap::new(),
            pc: BTreeMap::new(),
            kv: Vec::new(),
        };
        for (i, r) in runs.iter().enumerate() {
            let scenario = r["scenario"]
                .as_str()
                .unwrap_or(if r.get("latency_ns").is_some() { "lat" } else { "" });
            let run = Run { no: i + 1, scenario, r };
            for f in ["backend", "op"] {
                if matches!(scenario, "lat" | "bw" | "post_cost") && !r[f].is_string() {
                    return Err(run.bad(f, "a string"));
                }
            }
            if !r["iterations"].is_null() && !r["iterations"].is_u64() {
                return Err(run.bad("iterations", "a whole number"));
            }
            if matches!(scenario, "lat" | "bw" | "post_cost") {
                run.check_names()?;
            }
            match scenario {
                "lat" => p.add_latency(&run)?,
                "bw" => p.add_bandwidth(&run)?,
                "post_cost" => p.add_post_cost(&run)?,
                "kv" => {
                    kv::check(&run)?;
                    p.kv.push(r);
                }
                _ => {}
            }
        }
        Ok(p)
    }

    /// A latency run: an encoded histogram, a size, positive percentiles where given.
    fn add_latency(&mut self, run: &Run<'a>) -> Result<(), String> {
        let r = run.r;
        if !r["histogram_ns"].is_string() {
            return Err(run.bad("histogram_ns", "a string (an encoded histogram)"));
        }
        let size = r["size_bytes"]
            .as_u64()
            .ok_or_else(|| run.bad("size_bytes", "a whole number"))?;
        for q in ["p50", "p99"] {
            let v = &r["latency_ns"][q];
            let given = r["latency_ns"].as_object().is_some_and(|o| o.contains_key(q));
            if given && !v.as_f64().is_some_and(|x| x.is_finite() && x > 0.0) {
                return Err(run.bad(&format!("latency_ns.{q}"), "a positive number"));
            }
        }
        self.lat
            .entry(series(r))
            .or_default()
            .entry(size)
            .or_default()
            .push((run.no, r));
        Ok(())
    }

    /// A post-cost run: a postlist, a size, the p50 per WQE a positive number.
    fn add_post_cost(&mut self, run: &Run<'a>) -> Result<(), String> {
        let r = run.r;
        r["postlist"]
            .as_u64()
            .ok_or_else(|| run.bad("postlist", "a whole number"))?;
        let size = r["size_bytes"]
            .as_u64()
            .ok_or_else(|| run.bad("size_bytes", "a whole number"))?;
        if !r["per_wqe_ns"]["p50"]
            .as_f64()
            .is_some_and(|v| v.is_finite() && v > 0.0)
        {
            return Err(run.bad("per_wqe_ns.p50", "a positive number"));
        }
        let key = (str_of(r, "op").to_string(), size, r["inline"].as_bool() == Some(true));
        self.pc.entry(key).or_default().push(r);
        Ok(())
    }

    /// A bandwidth run: a number, a size; a bidirectional one is checked and not drawn.
    fn add_bandwidth(&mut self, run: &Run<'a>) -> Result<(), String> {
        let r = run.r;
        if !r["summary"]["bw_avg_gbit_s"].is_number() {
            return Err(run.bad("summary.bw_avg_gbit_s", "a number"));
        }
        r["size_bytes"]
            .as_u64()
            .ok_or_else(|| run.bad("size_bytes", "a whole number"))?;
        match &r["bidirectional"] {
            Value::Bool(true) => {}
            Value::Bool(false) | Value::Null => self.bw.entry(series(r)).or_default().push(r),
            _ => return Err(run.bad("bidirectional", "true or false")),
        }
        Ok(())
    }
}

/// The percentile spectrum and the CDF of series `op` at `size`, one line per run of `rs` with
/// samples; a histogram that does not decode is an error naming the run.
fn spectrum_and_cdf(out: &mut Vec<Figure>, dev: &str, op: &str, size: u64, rs: &[Numbered<'_>]) -> Result<(), String> {
    let mut sp = Vec::new();
    let mut cd = Vec::new();
    for &(no, r) in rs {
        let b = &line(r);
        let h = Hist::decode(str_of(r, "histogram_ns")).map_err(|e| {
            let b = crate::oob::escape(b);
            format!("run {no} (lat {op} {size} B {b}): the histogram does not decode: {e}")
        })?;
        if h.is_empty() {
            continue;
        }
        sp.push((format!("{b} (n={})", h.len()), colour(b), spectrum(&h)));
        cd.push((b.to_string(), colour(b), cdf(&h)));
    }
    let fig = human(str_of(rs[0].1, "figure"));
    let title = format!("{op} {size} B latency ({fig}) percentile spectrum, {dev}");
    let axes = Axes {
        x_desc: "percentile",
        y_desc: "latency (ns)",
        x: Scale::Percentile,
        y: Scale::Decimal,
        markers: false,
    };
    add(out, format!("lat-{op}-spectrum.svg"), title, &axes, &sp)?;
    let title = format!("{op} {size} B latency ({fig}) CDF, {dev}");
    let axes = Axes {
        x_desc: "latency (ns)",
        y_desc: "samples at or below (percent, log of 1 − q)",
        x: Scale::Decimal,
        y: Scale::Percentile,
        markers: false,
    };
    add(out, format!("lat-{op}-cdf.svg"), title, &axes, &cd)
}

/// Latency p50 and p99 versus size of series `op`, one pair of lines per backend.
fn latency_vs_size(
    out: &mut Vec<Figure>,
    dev: &str,
    op: &str,
    by_size: &BTreeMap<u64, Vec<Numbered<'_>>>,
) -> Result<(), String> {
    let mut per: BTreeMap<String, (Pts, Pts)> = BTreeMap::new();
    for (size, rs) in by_size {
        for &(_, r) in rs {
            let e = per.entry(line(r)).or_default();
            if let (Some(p50), Some(p99)) = (r["latency_ns"]["p50"].as_f64(), r["latency_ns"]["p99"].as_f64()) {
                e.0.push((*size as f64, p50));
                e.1.push((*size as f64, p99));
            }
        }
    }
    let mut lines = Vec::new();
    for (b, (p50, p99)) in per {
        lines.push((format!("{b} p50"), colour(&b), p50));
        lines.push((format!("{b} p99"), colour(&b), p99));
    }
    let title = format!("{op} latency versus size, {dev}");
    let axes = Axes {
        x_desc: "message size (bytes)",
        y_desc: "latency (ns)",
        x: Scale::Bytes,
        y: Scale::Decimal,
        markers: true,
    };
    add(out, format!("lat-{op}-vs-size.svg"), title, &axes, &lines)
}

/// The lines of a figure over x, each sorted by x and coloured by its label's backend (the first
/// word); `None` when no line has two points.
fn sorted_lines(per: BTreeMap<String, Pts>) -> Option<Vec<Line>> {
    if per.values().all(|v| v.len() < 2) {
        return None;
    }
    let lines = per.into_iter().map(|(b, mut v)| {
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        let c = colour(b.split(' ').next().unwrap_or(&b));
        (b, c, v)
    });
    Some(lines.collect())
}

/// Bandwidth versus size of series `op`, one line per backend; none when no backend has two
/// sizes.
fn bandwidth_vs_size(out: &mut Vec<Figure>, dev: &str, op: &str, rs: &[&Value]) -> Result<(), String> {
    let mut per: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rs {
        if let (Some(size), Some(g)) = (r["size_bytes"].as_u64(), r["summary"]["bw_avg_gbit_s"].as_f64()) {
            per.entry(line(r)).or_default().push((size as f64, g));
        }
    }
    let Some(lines) = sorted_lines(per) else {
        return Ok(());
    };
    let title = format!("{op} bandwidth versus size, {dev}");
    let axes = Axes {
        x_desc: "message size (bytes)",
        y_desc: "bandwidth (Gbit/s)",
        x: Scale::Bytes,
        y: Scale::Decimal,
        markers: true,
    };
    add(out, format!("bw-{op}-vs-size.svg"), title, &axes, &lines)
}

/// The post cost (ns per WQE, p50) versus the postlist of one configuration, a line per backend
/// and doorbell mode; none when no line has two postlists.
fn post_cost_vs_postlist(
    out: &mut Vec<Figure>,
    dev: &str,
    (op, size, inline): (&str, u64, bool),
    rs: &[&Value],
) -> Result<(), String> {
    let mut per: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rs {
        let name = match r["db_mode"].as_str() {
            Some(m) => format!("{} {m}", line(r)),
            None => line(r),
        };
        if let (Some(l), Some(ns)) = (r["postlist"].as_u64(), r["per_wqe_ns"]["p50"].as_f64()) {
            per.entry(name).or_default().push((l as f64, ns));
        }
    }
    let Some(lines) = sorted_lines(per) else {
        return Ok(());
    };
    let how = if inline { " inline" } else { "" };
    let title = format!("post cost of {size} B{how} {op}s versus postlist, {dev}");
    let axes = Axes {
        x_desc: "postlist (WQEs per post call)",
        y_desc: "ns per WQE (p50)",
        x: Scale::Pow2,
        y: Scale::Decimal,
        markers: true,
    };
    let file = format!(
        "post-cost-{op}-{size}B{}-vs-postlist.svg",
        if inline { "-inline" } else { "" }
    );
    add(out, file, title, &axes, &lines)
}

/// Writes the figures of a results document into `out` (created) as SVG and PNG, and
/// report.html; returns the file names and the warnings (no font: no PNGs). On failure, when
/// `out` was created here, what was written and the directory are removed again.
pub fn write_all(doc: &Value, out: &std::path::Path) -> Result<(Vec<String>, Vec<String>), String> {
    let figs = figures(doc).map_err(|e| format!("plotting: {e}"))?;
    write_figures(doc, &figs, out)
}

/// [`write_all`] after the figures are drawn.
fn write_figures(doc: &Value, figs: &[Figure], out: &std::path::Path) -> Result<(Vec<String>, Vec<String>), String> {
    use super::output::{make_dir_new, remove_made};
    let made = make_dir_new(out)?;
    let mut names = Vec::new();
    let done = write_into(doc, figs, out, &mut names);
    if done.is_err() && !made.is_empty() {
        for n in &names {
            let _ = std::fs::remove_file(out.join(n));
        }
        remove_made(&made);
    }
    done.map(|warnings| (names, warnings))
}

/// The files of [`write_all`] into the existing `out`, each name added to `names` once written;
/// the warnings.
fn write_into(
    doc: &Value,
    figs: &[Figure],
    out: &std::path::Path,
    names: &mut Vec<String>,
) -> Result<Vec<String>, String> {
    use super::output::write;
    let mut warnings = Vec::new();
    let mut png = true;
    for f in figs {
        write(&out.join(&f.file), f.svg.as_bytes()).map_err(|e| e.to_string())?;
        names.push(f.file.clone());
        if !png {
            continue;
        }
        // the same figure as PNG (for slides, issue trackers, mail)
        let file = f.file.trim_end_matches(".svg").to_string() + ".png";
        match super::png::render(&f.file, &f.svg) {
            Ok(bytes) => {
                write(&out.join(&file), &bytes).map_err(|e| e.to_string())?;
                names.push(file);
            }
            Err(e @ super::png::PngError::NoFont) => {
                warnings.push(e.to_string());
                png = false;
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    write(&out.join("report.html"), super::html::report(doc, figs).as_bytes()).map_err(|e| e.to_string())?;
    names.push("report.html".into());
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_legend_goes_to_the_corner_the_lines_leave_free() {
        let x = Axis::of(Scale::Pow2, [1.0, 32.0]).unwrap();
        let y = Axis::of(Scale::Decimal, [2.0, 50.0]).unwrap();
        let line = |pts: &[(f64, f64)]| ("l".to_string(), BLACK, pts.to_vec());
        // falling from the upper left (the post-cost plot): not there
        let falling = [
            line(&[(1.0, 45.0), (8.0, 18.0), (32.0, 16.0)]),
            line(&[(1.0, 12.0), (8.0, 4.0), (32.0, 2.3)]),
        ];
        let c = legend_corner(&falling, &x, &y);
        assert!(!matches!(c, SeriesLabelPosition::UpperLeft), "{c:?}");
        // rising to the upper right (latency versus size): the upper left, as before
        let rising = [line(&[(1.0, 2.5), (8.0, 3.0), (32.0, 45.0)])];
        assert!(matches!(legend_corner(&rising, &x, &y), SeriesLabelPosition::UpperLeft));
    }

    #[test]
    fn spectrum_runs_from_the_median_region_to_the_maximum_at_x_equal_count() {
        let mut h = Hist::new();
        for i in 1..=1000 {
            h.record(i as f64);
        }
        let s = spectrum(&h);
        let last = s.last().copied().unwrap_or_default();
        assert_eq!(last.0, 1000.0);
        assert!((last.1 - 1000.0).abs() <= 1.0, "{last:?}");
        // x = 2 is the median
        let med = s.iter().find(|p| (p.0 - 2.0).abs() < 1e-9).copied().unwrap_or_default();
        assert!((med.1 - 500.0).abs() <= 1.0, "{med:?}");
        assert!(s.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
    }

    #[test]
    fn cdf_is_one_over_one_minus_q_and_ends_at_the_count() {
        let mut h = Hist::new();
        for v in [10.0, 20.0, 20.0, 40.0] {
            h.record(v);
        }
        // y = 1/(1 - q): a quarter at or below 10, three quarters at or below 20, all (placed at
        // the count) at or below 40
        let c = cdf(&h);
        assert_eq!(c, vec![(10.0, 4.0 / 3.0), (20.0, 4.0), (40.0, 4.0)]);
    }

    fn doc(hist: &Hist) -> Value {
        serde_json::json!({
            "environment": {"device": "rxe0", "provider": "rxe", "software_model": false},
            "runs": [{"scenario": "lat", "op": "write", "size": 8, "backend": "verbs",
                      "figure": "one_way", "histogram": hist.encode()}]
        })
    }

    #[test]
    fn a_run_without_samples_gives_no_figure_and_one_with_samples_gives_spectrum_and_cdf() {
        assert!(figures(&doc(&Hist::new())).map(|f| f.is_empty()).unwrap_or(false));
        let mut h = Hist::new();
        (1..=100).for_each(|i| h.record(1000.0 + i as f64));
        let figs = figures(&doc(&h)).unwrap_or_default();
        let names: Vec<&str> = figs.iter().map(|f| f.file.as_str()).collect();
        assert_eq!(names, ["lat-write-spectrum.svg", "lat-write-cdf.svg"]);
        for f in &figs {
            assert!(f.svg.contains("stroke=\"#D55E00\""), "{}: no verbs line", f.file);
            assert!(f.title.contains("rxe0 (rxe: software emulation)"), "{}", f.title);
        }
    }

    /// The figures' file names come from the vocabulary of the operations and transports
    /// rdmaprobe writes: a run naming anything else is refused, naming the run (issue 30 point 4).
    #[test]
    fn file_names_come_from_a_fixed_vocabulary() {
        let mut h = Hist::new();
        h.record(1000.0);
        for (field, v, why) in [
            ("op", "x/../../../../tmp/y", "op is not an operation rdmaprobe writes"),
            ("op", "write_imm", "op is not an operation rdmaprobe writes"),
            ("transport", "../t", "transport is not a transport rdmaprobe writes"),
            ("transport", "UC/..", "transport is not a transport rdmaprobe writes"),
        ] {
            let mut d = doc(&h);
            d["runs"][0][field] = Value::from(v);
            let e = figures(&d).err().unwrap_or_default();
            assert!(e.starts_with("run 1 (lat ") && e.contains(why), "{v}: {e}");
        }
        let mut d = doc(&h);
        d["runs"][0]["transport"] = Value::from("UD");
        d["runs"][0]["op"] = Value::from("send");
        let names: Vec<String> = figures(&d).unwrap_or_default().into_iter().map(|f| f.file).collect();
        assert_eq!(names, ["lat-send-UD-spectrum.svg", "lat-send-UD-cdf.svg"]);
    }

    /// Issue 29 item 8: no post-cost plot. One per configuration, a line per backend and
    /// doorbell mode over the postlists; a damaged figure is refused naming the run.
    #[test]
    fn post_cost_runs_give_ns_per_wqe_versus_postlist() {
        let run = |backend: &str, l: u64, ns: f64| {
            serde_json::json!({"scenario": "post_cost", "op": "write", "verb": "write", "backend": backend,
                "size_bytes": 8, "inline": true, "postlist": l, "db_mode": if backend == "direct" { Value::from("bf") } else { Value::Null },
                "per_wqe_ns": {"p50": ns}})
        };
        let mut d = serde_json::json!({
            "environment": {"device": "model0", "provider": "model0", "software_model": true},
            "runs": [run("verbs", 1, 70.0), run("direct", 1, 18.0), run("verbs", 8, 37.0), run("direct", 8, 5.5)]
        });
        let figs = figures(&d).unwrap();
        assert_eq!(figs.len(), 1);
        assert_eq!(figs[0].file, "post-cost-write-8B-inline-vs-postlist.svg");
        assert!(
            figs[0]
                .title
                .starts_with("post cost of 8 B inline writes versus postlist"),
            "{}",
            figs[0].title
        );
        for c in ["#D55E00", "#0072B2"] {
            assert!(figs[0].svg.contains(&format!("stroke=\"{c}\"")), "no {c} line");
        }
        assert!(figs[0].svg.contains("direct bf"));
        d["runs"][2]["per_wqe_ns"]["p50"] = Value::from("fast");
        let e = figures(&d).err().unwrap_or_default();
        assert!(
            e.starts_with("run 3 (post_cost write 8 B verbs)") && e.contains("per_wqe_ns.p50"),
            "{e}"
        );
    }

    /// The texts of an SVG, in order.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                t.split_once('>')
                    .and_then(|(_, r)| r.split_once("</text>"))
                    .map(|x| x.0.trim().to_string())
            })
            .collect()
    }

    /// Latency runs of two backends at `sizes`, each with a histogram.
    fn sized(sizes: &[u64]) -> Value {
        let mut h = Hist::new();
        (1..=200).for_each(|i| h.record(900.0 + i as f64));
        let runs: Vec<Value> = sizes
            .iter()
            .flat_map(|&s| {
                let h = h.encode();
                ["verbs", "direct"].map(move |b| {
                    serde_json::json!({"scenario": "lat", "op": "write", "size_bytes": s, "backend": b,
                        "figure": "one_way", "histogram_ns": h.clone(),
                        "latency_ns": {"p50": 1000.0 + s as f64 / 100.0, "p99": 3000.0 + s as f64 / 50.0}})
                })
            })
            .collect();
        serde_json::json!({"environment": {"device": "model0", "software_model": true}, "runs": runs})
    }

    /// Issue 29 item 18: latency versus size has power-of-two size ticks (not "98K", "977K",
    /// "10M" from decimal ticks), no label twice, a marker at each measured point (a circle for
    /// p50, a triangle for p99, beside the legend's), and the p99 dashed: p50 and p99 differed
    /// only in thickness.
    #[test]
    fn latency_versus_size_has_power_of_two_ticks_and_markers() {
        let figs = figures(&sized(&[2 << 20, 4 << 20, 8 << 20])).unwrap();
        let f = figs.iter().find(|f| f.file == "lat-write-vs-size.svg").unwrap();
        let t = texts(&f.svg);
        for want in ["2M", "4M", "8M"] {
            assert!(t.iter().any(|x| x == want), "no {want} tick: {t:?}");
        }
        for bad in ["977K", "10M", "1000k", "5M"] {
            assert!(!t.iter().any(|x| x == bad), "{bad}: {t:?}");
        }
        let mut sorted = t.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), t.len(), "a text twice: {t:?}");
        // 2 backends x 3 sizes, plus one in each legend entry
        assert_eq!(f.svg.matches("<circle").count(), 6 + 2, "p50 markers");
        assert_eq!(f.svg.matches("<polygon").count(), 6 + 2, "p99 markers");
        let figs = figures(&sized(&[8, 4096, 65536])).unwrap();
        let f = figs.iter().find(|f| f.file == "lat-write-vs-size.svg").unwrap();
        let t = texts(&f.svg);
        for want in ["8", "512", "1K", "4K", "64K"] {
            assert!(t.iter().any(|x| x == want), "no {want} tick: {t:?}");
        }
        assert!(!t.iter().any(|x| x == "10K" || x == "98K"), "{t:?}");
        // the curves of a histogram have no markers
        let sp = figs.iter().find(|f| f.file == "lat-write-spectrum.svg").unwrap();
        assert_eq!(sp.svg.matches("<circle").count(), 0);
    }

    /// Issue 29 item 18: the CDF's y axis is the log of 1 − q, labelled as percentiles (on a
    /// linear axis the tail was squashed into the top line), and the spectrum starts at 0 %.
    #[test]
    fn cdf_and_spectrum_have_percentile_axes_from_zero() {
        let mut h = Hist::new();
        (1..=1000).for_each(|i| h.record(1000.0 + i as f64));
        let c = cdf(&h);
        // q = 0.998 at the third-last sample: 1/(1 - q) = 500
        assert!((c[c.len() - 3].1 - 500.0).abs() < 1e-6, "{:?}", &c[c.len() - 3..]);
        assert_eq!(c.last().map(|p| p.1), Some(1000.0));
        let figs = figures(&doc(&h)).unwrap_or_default();
        for f in &figs {
            let t = texts(&f.svg);
            for want in ["0%", "50%", "90%", "99%", "99.9%"] {
                assert!(t.iter().any(|x| x == want), "{}: no {want}: {t:?}", f.file);
            }
        }
    }

    /// A write that fails after the output directory was created removes what was written and
    /// the directory: a failed plot leaves no empty `--out` behind.
    #[test]
    fn a_failed_write_leaves_no_directory_it_made() {
        let base = std::env::temp_dir().join(format!("rdmaprobe-plot-fail-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let out = base.join("a/b");
        let fig = |file: &str| Figure {
            file: file.into(),
            title: "t".into(),
            svg: "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"2\" height=\"2\"/>".into(),
        };
        let figs = [fig("lat-write-spectrum.svg"), fig("no/such.svg")];
        let e = write_figures(&serde_json::json!({"runs": []}), &figs, &out)
            .err()
            .unwrap_or_default();
        assert!(e.contains("no/such.svg"), "{e}");
        assert!(
            !base.exists(),
            "left behind: {:?}",
            std::fs::read_dir(&base).map(|d| d.count())
        );
        // a directory that was there stays, with what was written
        std::fs::create_dir_all(&out).unwrap();
        assert!(write_figures(&serde_json::json!({"runs": []}), &figs, &out).is_err());
        assert!(out.join("lat-write-spectrum.svg").exists());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn percent_labels() {
        use super::super::axis::pct_label;
        assert_eq!(pct_label(2.0), "50%");
        assert_eq!(pct_label(100.0), "99%");
        assert_eq!(pct_label(1000.0), "99.9%");
        assert_eq!(pct_label(100000.0), "99.999%");
    }
}

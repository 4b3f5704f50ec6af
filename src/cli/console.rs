//! The console: a measurement printed as the command line prints it (notes on standard error,
//! the table on standard output as each run ends, the suite's progress), and its files written.

use rdmaprobe::probe::report::title;
use rdmaprobe::probe::{self, Observer, Plan, ProbeError, Report, Role, Scenario};
use rdmaprobe::report::output;
use std::path::PathBuf;

// Standard output may be a pipe that closes (`rdmaprobe lat ... | head`): after SIGPIPE (which
// stops the run, see `rdmaprobe::signals`) a write fails, and printing must not panic.
macro_rules! out {
    () => {{
        use std::io::Write;
        let _ = writeln!(std::io::stdout());
    }};
    ($($t:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}
macro_rules! outp {
    ($($t:tt)*) => {{
        use std::io::Write;
        let _ = write!(std::io::stdout(), $($t)*);
    }};
}

/// Prints a measurement as it goes: notes on standard error, the table on standard output.
pub struct Printer;

impl Observer for Printer {
    fn note(&mut self, msg: &str) {
        eprintln!("rdmaprobe: {msg}");
    }
    fn waiting(&mut self, addr: &str, secs: u64) {
        eprintln!("rdmaprobe: server waiting for a client on {addr} ({secs} s)");
    }
    fn started(&mut self, r: &Report) {
        if let (Role::Server(peer), Scenario::Lat(l)) = (&r.role, &r.plan.scenario) {
            out!(" server: client {peer} connected; running {} with it", title(l.op));
        }
        if let (Role::Server(peer), Scenario::Bw(b)) = (&r.role, &r.plan.scenario) {
            out!(
                " server: client {peer} connected; running {} bandwidth with it",
                title(b.op)
            );
        }
        outp!("{}", r.header());
    }
    fn finished(&mut self, r: &Report, i: usize) {
        outp!("{}", r.row(i));
    }
    fn heading(&mut self, text: &str) {
        outp!("{text}");
    }
    fn step(&mut self, n: usize, total: usize, what: &str) {
        progress(n, total, what);
    }
}

/// What `--output` prints instead of the table (perftest's --output).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputKind {
    /// Latency average, ns (lat; perftest's t_avg, which it prints in µs).
    Latency,
    /// Average bandwidth, MB/s (2^20 B/s; Gb/s with --report-gbits) (bw).
    Bandwidth,
    /// Average message rate, Mpps (bw).
    #[value(name = "message_rate")]
    MessageRate,
}

/// Notes on standard error, nothing on standard output: `--output` prints the numbers alone.
struct NumbersOnly;

impl Observer for NumbersOnly {
    fn note(&mut self, msg: &str) {
        eprintln!("rdmaprobe: {msg}");
    }
    fn waiting(&mut self, addr: &str, secs: u64) {
        eprintln!("rdmaprobe: server waiting for a client on {addr} ({secs} s)");
    }
}

/// `--output` asks for a figure the scenario has, of one backend.
fn check_output(plan: &Plan, o: OutputKind) -> Result<(), ProbeError> {
    let fits = matches!(
        (&plan.scenario, o),
        (Scenario::Lat(_), OutputKind::Latency) | (Scenario::Bw(_), OutputKind::Bandwidth | OutputKind::MessageRate)
    );
    if !fits {
        return Err(ProbeError::Usage(format!(
            "--output {}: lat prints latency, bw bandwidth or message_rate",
            match o {
                OutputKind::Latency => "latency",
                OutputKind::Bandwidth => "bandwidth",
                OutputKind::MessageRate => "message_rate",
            }
        )));
    }
    if plan.backends == probe::Backends::All {
        return Err(ProbeError::Usage(
            "--output prints one number per size: --backend all has one per backend; choose one backend \
             (--backend verbs, wr or direct), or give no --backend for perftest's post path (wr)"
                .into(),
        ));
    }
    Ok(())
}

/// The numbers `--output` prints, one per run (size).
pub fn output_numbers(r: &Report, o: OutputKind) -> Vec<f64> {
    match (&r.runs, o) {
        (probe::Runs::Lat(rs), OutputKind::Latency) => rs.iter().map(|x| x.latency.mean).collect(),
        (probe::Runs::Bw(rs), OutputKind::Bandwidth) => rs
            .iter()
            .map(|x| {
                let gbits = matches!(&r.plan.scenario, Scenario::Bw(b) if b.gbits);
                if gbits {
                    x.summary.bw_avg_gbit_s
                } else {
                    x.summary.bw_avg_mib_s
                }
            })
            .collect(),
        (probe::Runs::Bw(rs), OutputKind::MessageRate) => rs.iter().map(|x| x.summary.msg_rate_mpps).collect(),
        _ => Vec::new(),
    }
}

/// Runs a plan, prints it, and writes the files asked for (`json`: the result document, `hdr`:
/// the interval log); with `numbers` (perftest's --output) prints one number per size instead
/// of the table. Returns the exit status (2: an output file cannot be written).
pub fn measure(
    plan: &Plan,
    json: Option<&PathBuf>,
    hdr: Option<&PathBuf>,
    numbers: Option<OutputKind>,
) -> Result<u8, ProbeError> {
    if let Some(o) = numbers {
        check_output(plan, o)?;
    }
    for p in [json, hdr].into_iter().flatten() {
        if let Err(e) = output::check(p) {
            eprintln!("rdmaprobe: error: cannot write the output file {e}");
            return Ok(2);
        }
    }
    probe::stop_on_sigint();
    let r = match numbers {
        Some(_) => probe::run(plan, &mut NumbersOnly)?,
        None => probe::run(plan, &mut Printer)?,
    };
    if let Some(o) = numbers {
        if let Some(path) = json {
            output::write(path, &serde_json::to_vec_pretty(&r.json()?)?)
                .map_err(|e| ProbeError::Render(e.to_string()))?;
        }
        if let Some(path) = hdr {
            output::write(path, &r.interval_log()?).map_err(|e| ProbeError::Render(e.to_string()))?;
        }
        if plan.backends == probe::Backends::Perftest {
            let names: Vec<&str> = r.backends.iter().map(|k| k.as_str()).collect();
            eprintln!(
                "rdmaprobe: --output: backend {} (perftest's post path: wr = ibv_wr_*, else verbs = ibv_post_send; \
                 --backend to choose)",
                names.join(",")
            );
        }
        if !matches!(r.role, Role::Server(_)) {
            for v in output_numbers(&r, o) {
                out!("{v:.2}");
            }
        }
        if let Some(e) = &r.end_error {
            eprintln!("rdmaprobe: error: {e}");
            return Ok(1);
        }
        return Ok(0);
    }
    if let Some(path) = hdr {
        output::write(path, &r.interval_log()?).map_err(|e| ProbeError::Render(e.to_string()))?;
        out!(
            " interval log ({} intervals) written to {}",
            r.intervals.len(),
            path.display()
        );
    }
    if let Role::Server(_) = r.role {
        if let Some(e) = &r.end_error {
            write_json(&r, json)?;
            eprintln!("rdmaprobe: error: {e}");
            return Ok(1);
        }
        outp!("{}", r.footer());
        write_json(&r, json)?;
        out!(" server: done");
        return Ok(0);
    }
    outp!("{}", r.footer());
    write_json(&r, json)?;
    if let Some(e) = &r.end_error {
        // measured, printed and written; but the run did not end cleanly
        eprintln!(
            "rdmaprobe: error: {e} (after the measurement: the figures above stand, the run did not end cleanly)"
        );
        return Ok(1);
    }
    Ok(0)
}

/// `--json FILE`: the report's JSON written, and said.
fn write_json(r: &probe::Report, json: Option<&std::path::PathBuf>) -> Result<(), ProbeError> {
    if let Some(path) = json {
        output::write(path, &serde_json::to_vec_pretty(&r.json()?)?).map_err(|e| ProbeError::Render(e.to_string()))?;
        out!(" results written to {}", path.display());
    }
    Ok(())
}

/// A suite's step `n` of `total`: a bar redrawn in place on a terminal, one plain line per step
/// otherwise (a log file or CI).
pub fn progress(n: usize, total: usize, what: &str) {
    use std::io::Write;
    let t = PROGRESS_START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64();
    PROGRESS.store(n, std::sync::atomic::Ordering::Relaxed);
    if is_tty() {
        let filled = 30 * (n - 1) / total.max(1);
        outp!(
            "\r\x1b[2K[{}{}] {n}/{total} {t:>5.1}s {what}",
            "#".repeat(filled),
            " ".repeat(30 - filled)
        );
        let _ = std::io::stdout().flush();
    } else {
        out!("[{t:>5.1}s] {n}/{total} {what}");
    }
}

static PROGRESS_START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
static PROGRESS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn is_tty() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(libc::STDOUT_FILENO) == 1 }
}

/// Ends the progress bar on a terminal.
pub fn progress_done() {
    if is_tty() {
        let n = PROGRESS.load(std::sync::atomic::Ordering::Relaxed);
        out!("\r\x1b[2K[{}] {n}/{n} done", "#".repeat(30));
    }
}

/// Runs a suite, prints it as it goes, writes its files into `out` (checked first, and with
/// `pdf` the browser found first: exit status 2 when either fails) and prints the summary;
/// returns the exit status (2 also when report.pdf cannot be made).
pub fn suite(sp: &probe::SuitePlan, out: &std::path::Path, pdf: bool) -> Result<u8, ProbeError> {
    probe::stop_on_sigint();
    let browser = match output::check_dir(out).and_then(|_| pdf_browser(pdf)) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("rdmaprobe: error: {e}");
            return Ok(2);
        }
    };
    let r = probe::suite::run(sp, &mut Printer)?;
    let (mut plots, warnings) = r.write(out)?;
    // a PDF that fails is said after the summary, which the measurement still gives
    let mut pdf_error = None;
    if let Some(b) = &browser {
        match report_pdf(b, out) {
            Ok(name) => plots.push(name),
            Err(e) => pdf_error = Some(e),
        }
    }
    for w in warnings {
        eprintln!("rdmaprobe: warning: {w}");
    }
    progress_done();
    out!();
    outp!("{}", r.summary_text());
    out!(
        "\nwritten: {} (results.json, {}{}) in {:.1} s",
        out.display(),
        if r.has_latency() { "latency.hlog, " } else { "" },
        plots.join(", "),
        r.started.elapsed().as_secs_f64()
    );
    if let Some(e) = pdf_error {
        eprintln!(
            "rdmaprobe: error: report.pdf not written (the other files are, in {}): {e}",
            out.display()
        );
        return Ok(2);
    }
    Ok(0)
}

/// Writes the plots and report.html of the result file `results` into `out`, and with `pdf`
/// report.pdf; returns the exit status (2: the file cannot be read as a result or `out` cannot
/// be written, and nothing is; or the PDF cannot be made: with no browser nothing is written,
/// with a browser that fails the plots and report.html are, and the error says so).
pub fn plot(results: &str, out: &std::path::Path, pdf: bool) -> u8 {
    let doc = match rdmaprobe::report::compare::load(results) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("rdmaprobe: error: cannot plot: {e}");
            return 2;
        }
    };
    let browser = match pdf_browser(pdf) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("rdmaprobe: error: {e}");
            return 2;
        }
    };
    let (mut names, warnings) = match output::check_dir(out).and_then(|_| rdmaprobe::report::plot::write_all(&doc, out))
    {
        Ok(w) => w,
        Err(e) => {
            eprintln!("rdmaprobe: error: cannot plot {results}: {e}");
            return 2;
        }
    };
    for w in warnings {
        eprintln!("rdmaprobe: warning: {w}");
    }
    let mut code = 0;
    if let Some(b) = &browser {
        match report_pdf(b, out) {
            Ok(name) => names.push(name),
            Err(e) => {
                eprintln!("rdmaprobe: error: report.pdf not written: {e}");
                code = 2;
            }
        }
    }
    out!("written in {}: {}", out.display(), names.join(", "));
    code
}

/// With `pdf`, the browser to print with, found before anything runs or is written.
fn pdf_browser(pdf: bool) -> Result<Option<PathBuf>, String> {
    pdf.then(rdmaprobe::report::pdf::find_browser)
        .transpose()
        .map_err(|e| e.to_string())
}

/// `out/report.html` (just written) printed to `out/report.pdf` by `browser`; the file's name.
fn report_pdf(browser: &std::path::Path, out: &std::path::Path) -> Result<String, String> {
    let page = out.join("report.html");
    let html = std::fs::read_to_string(&page).map_err(|e| format!("{}: {e}", page.display()))?;
    let pdf = rdmaprobe::report::pdf::render_with(browser, &html, rdmaprobe::report::pdf::DEADLINE)
        .map_err(|e| e.to_string())?;
    output::write(&out.join("report.pdf"), &pdf).map_err(|e| e.to_string())?;
    Ok("report.pdf".into())
}

/// How `compare` judges beyond the threshold and the adjustment.
pub struct CompareHow {
    /// The in-run control (`--control auto|on|off`).
    pub control: rdmaprobe::report::compare::ControlMode,
    /// `--target-effect PCT`.
    pub target_effect_pct: Option<f64>,
    /// `--until-decided MAX`.
    pub until_decided: Option<usize>,
}

/// Compares result files (`base` against `new`, each one process run), prints the report in
/// `format` (`text`, `markdown`, `junit`) and returns the exit status: 0 no regression, 1
/// regression, 2 inputs that cannot be compared (said on standard error), 3 rows undecided
/// with `--until-decided`.
pub fn compare(
    base: &[String],
    new: &[String],
    threshold: Option<f64>,
    metrics: &[String],
    adjust: &str,
    how: CompareHow,
    format: &str,
) -> u8 {
    use rdmaprobe::report::compare;
    let fail = |why: String| {
        eprintln!("rdmaprobe: error: {why}");
        2
    };
    if let Some(t) = threshold.filter(|t| !(t.is_finite() && *t >= 0.0)) {
        return fail(format!("--threshold must be a percentage >= 0 (got {t})"));
    }
    if let Some(t) = how.target_effect_pct.filter(|t| !(t.is_finite() && *t > 0.0)) {
        return fail(format!("--target-effect must be a percentage above 0 (got {t})"));
    }
    if let Some(m) = metrics.iter().find(|m| !compare::METRICS.contains(&m.as_str())) {
        return fail(format!("unknown metric '{m}' ({})", compare::METRICS.join(", ")));
    }
    let load = |paths: &[String]| -> Result<Vec<(String, serde_json::Value)>, compare::CompareError> {
        paths.iter().map(|p| Ok((p.clone(), compare::load(p)?))).collect()
    };
    let opts = compare::Options {
        threshold_pct: threshold,
        metrics: metrics.to_vec(),
        adjust: if adjust == "bh" {
            compare::Adjust::BenjaminiHochberg
        } else {
            compare::Adjust::Holm
        },
        control: how.control,
        target_effect_pct: how.target_effect_pct,
        until_decided: how.until_decided,
        ..compare::Options::default()
    };
    let r = match load(base).and_then(|b| compare::compare_sets(&b, &load(new)?, &opts)) {
        Ok(r) => r,
        Err(e) => return fail(format!("cannot compare: {e}")),
    };
    if r.rows.is_empty() {
        eprintln!("rdmaprobe: error: cannot compare: no run of BASE matches a run of NEW (scenario, operation, backend, size, parameters)");
        outp!("{}", compare::text(&r));
        return 2;
    }
    match format {
        "markdown" => outp!("{}", compare::markdown(&r)),
        "junit" => outp!("{}", compare::junit(&r)),
        _ => outp!("{}", compare::text(&r)),
    }
    r.exit_status()
}

/// Runs `doctor` and prints it (text or JSON); returns the exit status (1: a check failed).
pub fn doctor(device: Option<&str>, port: u8, json: bool) -> Result<u8, ProbeError> {
    let d = probe::check::doctor::run(device, port)?;
    match json {
        true => out!("{}", serde_json::to_string_pretty(&d)?),
        false => outp!("{}", d.text()),
    }
    Ok(u8::from(d.failed()))
}

/// Runs the ping ladder (limits from `baseline`, a result file, when given), prints it, writes
/// `json`; returns the exit status (0, or 10 + the first failing layer; 2: a baseline that
/// cannot be read).
pub fn ping(
    mut p: probe::check::ping::PingPlan,
    baseline: Option<&str>,
    json: Option<&PathBuf>,
) -> Result<u8, ProbeError> {
    if let Some(b) = baseline {
        match rdmaprobe::report::compare::load(b) {
            Ok(doc) => p.baseline = Some(doc),
            Err(e) => {
                eprintln!("rdmaprobe: error: --baseline: {e}");
                return Ok(2);
            }
        }
    }
    probe::stop_on_sigint();
    let r = probe::check::ping::run(&p, &mut Printer)?;
    outp!("{}", r.text());
    if let Some(path) = json {
        output::write(path, &serde_json::to_vec_pretty(&r)?).map_err(|e| ProbeError::Render(e.to_string()))?;
    }
    Ok(r.exit_code())
}

/// An error and its causes, each cause only when the message so far does not already say it.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut msg = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let t = c.to_string();
        if !msg.contains(&t) {
            msg.push_str(": ");
            msg.push_str(&t);
        }
        src = c.source();
    }
    msg
}

/// Prints `devices` (text or JSON); returns the exit status (0: a hardware device, 3: none).
pub fn devices(json: bool, gids: u32) -> Result<u8, ProbeError> {
    let (text, code) = probe::check::info::devices(json, gids)?;
    outp!("{text}");
    Ok(code)
}

/// Prints `clock` (text or JSON).
pub fn clock(json: bool, window_ms: u64) -> Result<u8, ProbeError> {
    outp!("{}", probe::check::info::clock(json, window_ms)?);
    Ok(0)
}

/// `fleet-report`: reads a fleet run's directory, prints the verdict, writes the JSON and the
/// HTML page (into the directory unless given), with `pdf` the page as PDF beside the HTML,
/// and returns the exit status: 0 no node failed, 1 nodes failed, 2 the directory cannot be
/// read or a report cannot be written (with `pdf`: no browser found, and nothing written; or
/// the browser failed).
pub fn fleet_report(
    dir: &std::path::Path,
    json: Option<&std::path::Path>,
    html: Option<&std::path::Path>,
    pdf: bool,
    rules: rdmaprobe::report::fleet::Rules,
) -> u8 {
    use rdmaprobe::report::fleet;
    let input = match fleet::load(dir) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("rdmaprobe: error: cannot read the fleet run: {e}");
            return 2;
        }
    };
    let browser = match pdf_browser(pdf) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("rdmaprobe: error: {e}");
            return 2;
        }
    };
    let r = fleet::judge(&input, &rules);
    let json_path = json.map_or_else(|| dir.join("fleet-report.json"), PathBuf::from);
    let html_path = html.map_or_else(|| dir.join("fleet-report.html"), PathBuf::from);
    let text = serde_json::to_string_pretty(&r.json()).unwrap_or_default() + "\n";
    let page = r.html();
    // the defaults lie in the directory the nodes' results fill: a link planted there is
    // replaced, never followed; a path the user names is written as output::write writes
    let write = |path: &std::path::Path, named: bool, data: &[u8]| {
        let written = if named {
            output::write(path, data)
        } else {
            output::write_new(path, data)
        };
        written.map_err(|e| format!("{}: {e}", path.display()))
    };
    let mut paths = vec![json_path.display().to_string(), html_path.display().to_string()];
    let done = write(&json_path, json.is_some(), text.as_bytes())
        .and_then(|_| write(&html_path, html.is_some(), page.as_bytes()));
    if let Err(e) = done {
        eprintln!("rdmaprobe: error: {e}");
        return 2;
    }
    // the PDF's name is derived, never named by the user: replaced, never followed, wherever
    // it lies (a fleet directory others write into); its failure is said after the verdict
    let pdf = browser.as_ref().map(|b| {
        let pdf_path = beside(&html_path, "pdf");
        let r = rdmaprobe::report::pdf::render_with(b, &page, rdmaprobe::report::pdf::DEADLINE)
            .map_err(|e| format!("{} not written: {e}", pdf_path.display()))
            .and_then(|bytes| write(&pdf_path, false, &bytes));
        (pdf_path, r)
    });
    outp!("{}", r.text());
    if let Some((p, Ok(()))) = &pdf {
        paths.push(p.display().to_string());
    }
    out!("written: {}", paths.join(", "));
    if let Some((_, Err(e))) = pdf {
        eprintln!("rdmaprobe: error: {e}");
        return 2;
    }
    r.exit_code()
}

/// `path` with the extension `ext` in place of its own (after it, when it already has `ext`).
fn beside(path: &std::path::Path, ext: &str) -> PathBuf {
    if path.extension().is_some_and(|e| e == ext) {
        let mut s = path.as_os_str().to_owned();
        s.push(".");
        s.push(ext);
        PathBuf::from(s)
    } else {
        path.with_extension(ext)
    }
}

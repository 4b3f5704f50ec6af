//! PDF copies of `report.html` and `fleet-report.html` (`--pdf`): the page printed by headless
//! Chromium (`--print-to-pdf`), the one well-kept HTML-and-SVG-to-PDF renderer a Debian machine
//! installs with apt (`chromium`). The page (self-contained: inline CSS and SVG, nothing fetched)
//! is copied into a private directory made for the one run, with the browser's profile, under a
//! Content-Security-Policy that runs no script and fetches nothing (the PDF shows what the page
//! holds); the browser prints it there under a deadline; the PDF is checked (non-empty, `%PDF-`
//! at the start, `%%EOF` at the end) and its bytes handed back, for the caller to write with its
//! own rules (`fleet-report` writes into a directory others may write to: the browser never
//! writes there itself). The page's `@media print` rules lay it out on A4.
#![forbid(unsafe_code)]

use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The pages' rules for paper (report.html and fleet-report.html hold them, so a browser's own
/// print gives what `--pdf` gives): A4 with 12-14 mm margins (the content fits Letter's width
/// too); the page's full width for the content, the plots scaled to it; a table row, a figure
/// with its caption and the warnings box never split across pages, no heading left alone at a
/// page's foot; long values (paths, commands) wrapped instead of widening a table past the
/// paper; cell colours (pass, FAIL, headers) printed; what a `<details>` folds away (the memory
/// regions) printed open (Chromium 131 and later).
pub const PRINT_CSS: &str = "@media print{@page{size:A4;margin:14mm 12mm;@bottom-right{content:\"page \" counter(page) \" of \" counter(pages);font:7.5pt sans-serif;color:#666}}\
*{-webkit-print-color-adjust:exact;print-color-adjust:exact}\
body{margin:0;max-width:none;font-size:9.5pt}h1{font-size:16pt;margin:0 0 .4em}\
h2{font-size:12.5pt;break-after:avoid}h3{font-size:10.5pt;break-after:avoid}\
table{font-size:7.5pt}td,th{padding:1px 4px;overflow-wrap:break-word}td:not(.l){white-space:nowrap}\
thead{display:table-header-group}tr,figure,.warn{break-inside:avoid}tr:first-child,h2+p{break-after:avoid}figure{margin:.6em 0}figure svg{width:100%;height:auto;display:block}\
code{white-space:pre-wrap;overflow-wrap:anywhere}\
details::details-content{content-visibility:visible;display:block}summary{font-weight:bold;list-style:none;break-after:avoid}}";

/// The environment variable naming the browser (a Chromium or Chrome binary), over the search.
pub const BROWSER_VAR: &str = "RDMAPROBE_CHROMIUM";

/// The names searched for on `PATH`, in this order.
const BROWSERS: [&str; 4] = ["chromium", "chromium-browser", "google-chrome", "google-chrome-stable"];

/// How long the browser may take for one page (a suite's report prints in a few seconds).
pub const DEADLINE: Duration = Duration::from_secs(120);

/// At most this much of the browser's standard error is kept for an error message.
const STDERR_KEEP: usize = 64 * 1024;

/// At most this many of its last lines go into the message.
const STDERR_LINES: usize = 12;

/// Why a PDF could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PdfError {
    /// No browser to print with.
    #[error(
        "--pdf needs headless Chromium: {why}; install Debian's chromium (apt-get install chromium, or \
         harness/setup.sh --browser) or set {BROWSER_VAR} to a Chromium or Chrome binary"
    )]
    NoBrowser {
        /// What was looked for.
        why: String,
    },
    /// The private directory for the browser could not be made or used.
    #[error("PDF: the browser's private directory {dir}: {source}")]
    Scratch {
        /// The directory.
        dir: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The browser could not be started.
    #[error("PDF: cannot run `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// The browser did not finish within the deadline (it was killed).
    #[error("PDF: `{command}` did not finish within {secs} s and was killed; its standard error: {stderr}")]
    Deadline {
        /// The command line.
        command: String,
        /// The deadline, seconds.
        secs: u64,
        /// The end of its standard error.
        stderr: String,
    },
    /// The run was interrupted (a signal); the browser was killed.
    #[error("PDF: interrupted; `{command}` was killed")]
    Interrupted {
        /// The command line.
        command: String,
    },
    /// The browser failed.
    #[error("PDF: `{command}` failed ({status}); its standard error: {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// The end of its standard error.
        stderr: String,
    },
    /// The browser exited 0 without leaving a whole PDF.
    #[error("PDF: `{command}` exited 0 but {why}; its standard error: {stderr}")]
    NotPdf {
        /// The command line.
        command: String,
        /// What is wrong with its output.
        why: String,
        /// The end of its standard error.
        stderr: String,
    },
}

/// The browser to print with: [`BROWSER_VAR`]'s value when set (it must be an executable file),
/// else the first of chromium, chromium-browser, google-chrome, google-chrome-stable on `PATH`.
/// `var` and `path` are those variables' values.
pub fn find_browser_in(var: Option<&std::ffi::OsStr>, path: Option<&std::ffi::OsStr>) -> Result<PathBuf, PdfError> {
    if let Some(v) = var.filter(|v| !v.is_empty()) {
        let p = PathBuf::from(v);
        let found = if p.components().count() > 1 {
            Some(p.clone()).filter(|p| executable(p))
        } else {
            search(path, &[&p.to_string_lossy()])
        };
        return found.ok_or_else(|| PdfError::NoBrowser {
            why: format!("{BROWSER_VAR}={} is not an executable file", p.display()),
        });
    }
    search(path, &BROWSERS).ok_or_else(|| PdfError::NoBrowser {
        why: format!("none of {} found on PATH", BROWSERS.join(", ")),
    })
}

/// [`find_browser_in`] with this process's environment: call it before a long run, so a missing
/// browser is said before the run spends its time.
pub fn find_browser() -> Result<PathBuf, PdfError> {
    find_browser_in(
        std::env::var_os(BROWSER_VAR).as_deref(),
        std::env::var_os("PATH").as_deref(),
    )
}

fn search(path: Option<&std::ffi::OsStr>, names: &[&str]) -> Option<PathBuf> {
    let path = path?;
    std::env::split_paths(path)
        .filter(|d| d.is_absolute())
        .flat_map(|d| names.iter().map(move |n| d.join(n)))
        .find(|p| executable(p))
}

fn executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A directory only this user may enter, removed with what it holds when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Result<Scratch, PdfError> {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let base = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        loop {
            let n = N.fetch_add(1, Ordering::Relaxed);
            let dir = base.join(format!("rdmaprobe-pdf-{}-{nanos:08x}-{n}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(Scratch(dir)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => continue,
                Err(source) => {
                    return Err(PdfError::Scratch {
                        dir: dir.display().to_string(),
                        source,
                    })
                }
            }
        }
    }

    fn err(&self, source: std::io::Error) -> PdfError {
        PdfError::Scratch {
            dir: self.0.display().to_string(),
            source,
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `path` (absolute) as a `file://` URL: every byte but the unreserved ones (RFC 3986) and `/`
/// percent-encoded, so that a directory with a space, a `#`, a `?` or a `%` in its name (a
/// `TMPDIR` the user chose) names that file and not another.
fn file_url(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut u = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            u.push(b as char);
        } else {
            u.push_str(&format!("%{b:02X}"));
        }
    }
    u
}

/// The page `html` (a self-contained page) printed to PDF by `browser` within `deadline`; the
/// PDF's bytes, checked to be a whole PDF.
pub fn render_with(browser: &Path, html: &str, deadline: Duration) -> Result<Vec<u8>, PdfError> {
    let scratch = Scratch::new()?;
    let page = scratch.0.join("page.html");
    let out = scratch.0.join("page.pdf");
    std::fs::write(&page, locked(html)).map_err(|e| scratch.err(e))?;
    let mut cmd = Command::new(browser);
    cmd.args([
        "--headless",
        // the page is rdmaprobe's own, escaped, and runs nothing (`locked`); the sandbox cannot
        // start as root or in most containers
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-extensions",
        "--no-first-run",
        "--no-default-browser-check",
        "--no-pdf-header-footer",
    ])
    .arg(format!("--user-data-dir={}", scratch.0.join("profile").display()))
    .arg(format!("--print-to-pdf={}", out.display()))
    // TMPDIR may be relative: the URL names the page from the root
    .arg(file_url(&std::path::absolute(&page).unwrap_or_else(|_| page.clone())))
    // the browser's caches and settings stay in the scratch directory too
    .env("HOME", &scratch.0)
    .env("XDG_CONFIG_HOME", scratch.0.join("config"))
    .env("XDG_CACHE_HOME", scratch.0.join("cache"))
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    let command = shown(&cmd);
    let (status, stderr) = run(cmd, &command, deadline)?;
    if !status.success() {
        return Err(PdfError::Failed {
            command,
            status: status.to_string(),
            stderr,
        });
    }
    let not_pdf = |why: String| PdfError::NotPdf {
        command: command.clone(),
        why,
        stderr: stderr.clone(),
    };
    let bytes = match std::fs::read(&out) {
        Ok(b) => b,
        Err(e) => return Err(not_pdf(format!("left no PDF ({e})"))),
    };
    check(&bytes).map_err(not_pdf)?;
    Ok(bytes)
}

/// No script runs and nothing is fetched: only inline styles, inline SVG and `data:` images.
/// (Headless Chromium's `--blink-settings=scriptEnabled=false` stops `--print-to-pdf` from
/// writing anything, and `--disable-javascript` does not stop a page's scripts: seen with
/// Debian 12's chromium 156.)
const CSP: &str = "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
                   style-src 'unsafe-inline'; img-src data:\">";

/// `html` with [`CSP`] first in its head.
fn locked(html: &str) -> String {
    match html.find("<head>") {
        Some(i) => format!("{}<head>{CSP}{}", &html[..i], &html[i + "<head>".len()..]),
        None => format!("{CSP}{html}"),
    }
}

/// [`render_with`] the browser [`find_browser`] finds, within [`DEADLINE`].
pub fn render(html: &str) -> Result<Vec<u8>, PdfError> {
    render_with(&find_browser()?, html, DEADLINE)
}

/// Whether `bytes` are a whole PDF: `%PDF-` first, `%%EOF` in the last kilobyte.
pub fn check(bytes: &[u8]) -> Result<(), String> {
    if bytes.is_empty() {
        return Err("the PDF is empty".into());
    }
    if !bytes.starts_with(b"%PDF-") {
        return Err(format!(
            "the file is not a PDF (it starts {:?})",
            String::from_utf8_lossy(&bytes[..bytes.len().min(16)])
        ));
    }
    let tail = &bytes[bytes.len().saturating_sub(1024)..];
    if !tail.windows(5).any(|w| w == b"%%EOF") {
        return Err(format!(
            "the PDF is cut short ({} bytes, no %%EOF at its end)",
            bytes.len()
        ));
    }
    Ok(())
}

/// The command line as a person would type it (for messages).
fn shown(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `cmd` (its standard error piped) until it exits, the deadline passes or a signal stops
/// the run (then it is killed: its helper processes end with it); its status and the end of its
/// standard error.
fn run(mut cmd: Command, command: &str, deadline: Duration) -> Result<(std::process::ExitStatus, String), PdfError> {
    // a binary just written (or being upgraded) can be busy for a moment (ETXTBSY)
    let mut tries = 0;
    let mut child = loop {
        match cmd.spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 5 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            spawned => {
                break spawned.map_err(|source| PdfError::Spawn {
                    command: command.into(),
                    source,
                })?
            }
        }
    };
    // read standard error as it comes (the browser writes much of it; a full pipe would stall it)
    let err = Arc::new(Mutex::new(Vec::new()));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    if let Some(mut pipe) = child.stderr.take() {
        let err = Arc::clone(&err);
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n @ 1..) = pipe.read(&mut buf) {
                let mut e = err.lock().unwrap_or_else(|p| p.into_inner());
                e.extend_from_slice(&buf[..n]);
                let over = e.len().saturating_sub(STDERR_KEEP);
                e.drain(..over);
            }
            let _ = done_tx.send(());
        });
    }
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Ok(s),
            Ok(None) => {}
            Err(source) => break Err(source),
        }
        if crate::signals::interrupted() || start.elapsed() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break Err(std::io::Error::from(std::io::ErrorKind::TimedOut));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    // a helper process that outlives the browser may hold the pipe open: wait a little only
    let _ = done_rx.recv_timeout(Duration::from_secs(2));
    let stderr = tail(&err.lock().unwrap_or_else(|p| p.into_inner()));
    match status {
        Ok(s) => Ok((s, stderr)),
        Err(_) if crate::signals::interrupted() => Err(PdfError::Interrupted {
            command: command.into(),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => Err(PdfError::Deadline {
            command: command.into(),
            secs: deadline.as_secs(),
            stderr,
        }),
        Err(source) => Err(PdfError::Spawn {
            command: command.into(),
            source,
        }),
    }
}

/// The last lines of the browser's standard error, without its noise about the absent D-Bus
/// (headless on a server has none) and Debian's wrapper script's own complaint; `(empty)` when
/// nothing is left.
fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.contains(":ERROR:dbus/") && !l.contains("unexpected operator"))
        .collect();
    let kept = &lines[lines.len().saturating_sub(STDERR_LINES)..];
    if kept.is_empty() {
        "(empty)".into()
    } else {
        kept.join(" | ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    /// A fake browser: a shell script with `body`, made executable, in its own scratch directory.
    fn fake(body: &str) -> (Scratch, PathBuf) {
        let s = Scratch::new().unwrap();
        let p = s.0.join("fake-chromium");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        (s, p)
    }

    /// The script's `--print-to-pdf=` argument, for `body` to write to.
    const OUT: &str = r#"for a in "$@"; do case "$a" in --print-to-pdf=*) out="${a#--print-to-pdf=}";; esac; done"#;

    #[test]
    fn the_page_is_named_by_a_url_that_names_it_whatever_the_directory_is_called() {
        assert_eq!(
            file_url(Path::new("/tmp/a b/#1?x%/page.html")),
            "file:///tmp/a%20b/%231%3Fx%25/page.html"
        );
        assert_eq!(
            file_url(Path::new("/tmp/rdmaprobe-pdf.X_~/p.html")),
            "file:///tmp/rdmaprobe-pdf.X_~/p.html"
        );
        // a byte that is not UTF-8, as it is
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(file_url(Path::new(OsStr::from_bytes(b"/t\xff"))), "file:///t%FF");
    }

    #[test]
    fn a_whole_pdf_is_handed_back() {
        let (_s, b) = fake(&format!("{OUT}\nprintf '%%PDF-1.4\\nbody\\n%%%%EOF\\n' > \"$out\""));
        let pdf = render_with(&b, "<html></html>", Duration::from_secs(20)).unwrap();
        assert!(pdf.starts_with(b"%PDF-1.4"));
    }

    #[test]
    fn a_failing_browser_is_an_error_naming_the_command_and_its_stderr() {
        let (_s, b) = fake("echo 'cannot open display' >&2\nexit 3");
        let e = render_with(&b, "<html></html>", Duration::from_secs(20)).unwrap_err();
        let m = e.to_string();
        assert!(matches!(e, PdfError::Failed { .. }), "{m}");
        assert!(
            m.contains("fake-chromium --headless") && m.contains("--print-to-pdf="),
            "{m}"
        );
        assert!(m.contains("cannot open display") && m.contains("exit status: 3"), "{m}");
    }

    #[test]
    fn a_browser_past_the_deadline_is_killed() {
        let (_s, b) = fake("echo started >&2\nexec sleep 30");
        let t = Instant::now();
        let e = render_with(&b, "<html></html>", Duration::from_millis(500)).unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert!(matches!(e, PdfError::Deadline { secs: 0, .. }), "{e}");
        assert!(e.to_string().contains("started"), "{e}");
    }

    #[test]
    fn output_that_is_not_a_whole_pdf_is_refused() {
        for (body, why) in [
            (String::from("exit 0"), "left no PDF"),
            (format!("{OUT}\n: > \"$out\""), "empty"),
            (format!("{OUT}\necho '<html>' > \"$out\""), "not a PDF"),
            (format!("{OUT}\nprintf '%%PDF-1.4\\nhalf' > \"$out\""), "cut short"),
        ] {
            let (_s, b) = fake(&body);
            let e = render_with(&b, "<html></html>", Duration::from_secs(20)).unwrap_err();
            assert!(
                matches!(e, PdfError::NotPdf { .. }) && e.to_string().contains(why),
                "{body}: {e}"
            );
        }
    }

    #[test]
    fn the_browser_is_the_variables_or_the_first_on_path() {
        let (s, b) = fake("exit 0");
        let dir = s.0.as_os_str();
        let e = find_browser_in(None, Some(dir)).unwrap_err();
        assert!(
            e.to_string().contains("none of chromium") && e.to_string().contains(BROWSER_VAR),
            "{e}"
        );
        std::fs::copy(&b, s.0.join("google-chrome")).unwrap();
        assert_eq!(find_browser_in(None, Some(dir)).unwrap(), s.0.join("google-chrome"));
        assert_eq!(find_browser_in(Some(b.as_os_str()), None).unwrap(), b);
        assert_eq!(
            find_browser_in(Some(OsStr::new("fake-chromium")), Some(dir)).unwrap(),
            b
        );
        let e = find_browser_in(Some(OsStr::new("/nonexistent/chromium")), Some(dir)).unwrap_err();
        assert!(
            e.to_string()
                .contains("RDMAPROBE_CHROMIUM=/nonexistent/chromium is not"),
            "{e}"
        );
    }

    #[test]
    fn the_printed_page_runs_no_script() {
        let l = locked("<!DOCTYPE html>\n<html><head><title>t</title></head><body><script>x()</script></body></html>");
        assert!(
            l.starts_with("<!DOCTYPE html>\n<html><head><meta http-equiv=\"Content-Security-Policy\""),
            "{l}"
        );
        assert!(
            l.contains("default-src 'none';") && l.contains("<title>t</title>"),
            "{l}"
        );
        assert!(locked("<p>bare</p>").starts_with("<meta"));
    }

    #[test]
    fn the_browsers_noise_is_left_out_of_messages() {
        let t = tail(
            b"/usr/bin/chromium: 9: [: 1: unexpected operator\n[1:2:ERROR:dbus/bus.cc:405] Failed\nreal trouble\n",
        );
        assert_eq!(t, "real trouble");
        assert_eq!(tail(b""), "(empty)");
    }
}

//! Writing result files safely, as root on a shared machine: a regular file (or a new one) is
//! replaced atomically through a temporary file created exclusively beside it under an
//! unpredictable name, removed again on any failure; a symlink is followed (the file it names is
//! replaced, the link stays); a target that is not a regular file (`/dev/null`, a FIFO, a
//! terminal, `/proc/self/fd/1`) is written through, never replaced. [`check`] finds a
//! destination that cannot work before a run spends its time. What rdmaprobe names itself inside
//! a directory others may write to goes through [`write_new`]: whatever is at the name (a planted
//! link, a FIFO) is replaced by a new file, never followed.
#![forbid(unsafe_code)]

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Why a result file could not be written.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {why}")]
pub struct OutputError {
    /// The destination.
    pub path: String,
    /// What is wrong.
    pub why: String,
}

fn err(path: &Path, why: impl Into<String>) -> OutputError {
    OutputError {
        path: path.display().to_string(),
        why: why.into(),
    }
}

/// Where the bytes go: the path to replace atomically (a regular file, or none yet), or a
/// non-regular file to write through.
enum Target {
    Replace(PathBuf),
    Through(PathBuf),
}

fn target(path: &Path) -> Result<Target, OutputError> {
    if path.as_os_str().is_empty() {
        return Err(err(path, "an empty path"));
    }
    if path.as_os_str() == "-" {
        // perftest-style `-` would mix the JSON with the table on standard output
        return Err(err(
            path,
            "'-' is not taken for standard output (the table is printed there): name a file for the JSON",
        ));
    }
    match fs::metadata(path) {
        // follows symlinks: what the path finally names
        Ok(m) if m.is_dir() => Err(err(path, "is a directory")),
        Ok(m) if m.is_file() => {
            // a symlink to a regular file: replace the file it names, keep the link
            let real = fs::canonicalize(path).map_err(|e| err(path, format!("cannot resolve: {e}")))?;
            Ok(Target::Replace(real))
        }
        Ok(_) => Ok(Target::Through(path.to_path_buf())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if fs::symlink_metadata(path).is_ok() {
                return Err(err(
                    path,
                    "is a symlink to nothing (refused: it would be followed anywhere)",
                ));
            }
            let dir = parent(path);
            match fs::metadata(&dir) {
                Ok(m) if m.is_dir() => Ok(Target::Replace(path.to_path_buf())),
                Ok(_) => Err(err(path, format!("{} is not a directory", dir.display()))),
                Err(e) => Err(err(
                    path,
                    format!("its directory {} cannot be used: {e}", dir.display()),
                )),
            }
        }
        Err(e) => Err(err(path, e.to_string())),
    }
}

fn parent(path: &Path) -> PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Checks, before a run, that `path` can be written: a writable directory for a new or regular
/// file (a probe file created exclusively and removed), or an existing non-regular file that
/// opens for writing.
pub fn check(path: &Path) -> Result<(), OutputError> {
    use std::os::unix::fs::FileTypeExt;
    match target(path)? {
        // a FIFO is not opened to check it: that would block without a reader, and with one
        // would hand it an empty stream; it must be writable by someone
        Target::Through(p) if fs::metadata(&p).is_ok_and(|m| m.file_type().is_fifo()) => {
            match fs::metadata(&p).map(|m| m.permissions().mode() & 0o222) {
                Ok(0) => Err(err(path, "a FIFO nobody may write to")),
                Ok(_) => Ok(()),
                Err(e) => Err(err(path, e.to_string())),
            }
        }
        Target::Through(p) => OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&p)
            .map(|_| ())
            .map_err(|e| err(path, format!("cannot be opened for writing: {e}"))),
        Target::Replace(p) => {
            let (f, tmp) = temp_beside(&p)?;
            drop(f);
            let _ = fs::remove_file(&tmp);
            Ok(())
        }
    }
}

/// A new file beside `p`, created exclusively (never an existing file or a planted link) under
/// a name nobody can predict, mode 0644.
fn temp_beside(p: &Path) -> Result<(fs::File, PathBuf), OutputError> {
    let dir = parent(p);
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("out");
    let mut last = String::new();
    for attempt in 0u64..16 {
        let salt =
            crate::clock::start() ^ (u64::from(std::process::id()) << 32) ^ attempt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let tmp = dir.join(format!(".{name}.{salt:016x}.tmp"));
        match OpenOptions::new().write(true).create_new(true).mode(0o644).open(&tmp) {
            Ok(f) => return Ok((f, tmp)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => last = e.to_string(),
        }
    }
    Err(err(p, format!("cannot create a file in {}: {last}", dir.display())))
}

/// Writes `data` to `path` (see the module's rules): a complete file or none, nothing left
/// behind on failure.
pub fn write(path: &Path, data: &[u8]) -> Result<(), OutputError> {
    match target(path)? {
        Target::Through(p) => write_through(path, &p, data),
        Target::Replace(p) => {
            let (mut f, tmp) = temp_beside(&p)?;
            // the file replaced keeps its mode and, when this process may give it, its owner
            if let Ok(m) = fs::metadata(&p) {
                use std::os::unix::fs::MetadataExt;
                let _ = f.set_permissions(fs::Permissions::from_mode(m.mode() & 0o7777));
                let _ = std::os::unix::fs::fchown(&f, Some(m.uid()), Some(m.gid()));
            }
            let done = f
                .write_all(data)
                .and_then(|()| f.sync_all())
                .map_err(|e| err(path, format!("writing: {e}")))
                .and_then(|()| fs::rename(&tmp, &p).map_err(|e| err(path, format!("replacing: {e}"))));
            if done.is_err() {
                let _ = fs::remove_file(&tmp);
            }
            done
        }
    }
}

/// Writes `data` as a new file at `path`, never through what is there: a temporary file created
/// exclusively beside it (mode 0644), renamed over the name, so a symlink, FIFO or file planted at
/// `path` is replaced, never followed or written through (a directory there refuses). For
/// outputs rdmaprobe names itself inside a directory others may write to (`fleet-report`'s
/// `DIR/fleet-report.{json,html}`); paths the user names go through [`write()`].
pub fn write_new(path: &Path, data: &[u8]) -> Result<(), OutputError> {
    if path.file_name().is_none() {
        return Err(err(path, "not a file's name"));
    }
    let (mut f, tmp) = temp_beside(path)?;
    let done = f
        .write_all(data)
        .and_then(|()| f.sync_all())
        .map_err(|e| err(path, format!("writing: {e}")))
        .and_then(|()| fs::rename(&tmp, path).map_err(|e| err(path, format!("replacing: {e}"))));
    if done.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    done
}

/// Writes `data` through a file that is not replaced (a device, a FIFO, a terminal), without
/// blocking where a stop (a signal, [`crate::signals`]) could not end the wait: a FIFO waits for
/// its reader, and a full pipe for room, in slices.
fn write_through(path: &Path, p: &Path, mut data: &[u8]) -> Result<(), OutputError> {
    let stopped = || err(path, "interrupted while waiting for a reader");
    let mut f = loop {
        match OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(p) {
            Ok(f) => break f,
            // a FIFO without a reader yet
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                if crate::signals::interrupted() {
                    return Err(stopped());
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => return Err(err(path, format!("cannot be opened for writing: {e}"))),
        }
    };
    while !data.is_empty() {
        match f.write(data) {
            Ok(0) => return Err(err(path, "writing: the reader went away")),
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if crate::signals::interrupted() {
                    return Err(stopped());
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(err(path, format!("writing: {e}"))),
        }
    }
    Ok(())
}

/// Checks that `dir` can hold the output, without creating it (a run that fails leaves no empty
/// directory): an existing directory must take a file; else its nearest existing ancestor must.
pub fn check_dir(dir: &Path) -> Result<(), String> {
    let mut d = dir.to_path_buf();
    while !d.exists() {
        match d.parent().filter(|p| !p.as_os_str().is_empty()) {
            Some(p) => d = p.to_path_buf(),
            None => d = PathBuf::from("."),
        }
        if d == Path::new(".") {
            break;
        }
    }
    let what = if d.as_path() == dir { "writing in" } else { "creating" };
    if !d.is_dir() {
        return Err(format!("{what} {}: {} is not a directory", dir.display(), d.display()));
    }
    check(&d.join(".rdmaprobe-probe"))
        .map_err(|e| format!("{what} {}: {} is not writable ({e})", dir.display(), d.display()))
}

/// Creates the output directory (after the run: a failed run leaves none).
pub fn make_dir(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))
}

/// Creates the output directory as [`make_dir`] does, and returns the directories it created
/// (outermost first; none when it was there), for [`remove_made`] after a failure.
pub fn make_dir_new(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut missing = Vec::new();
    let mut d = dir;
    while !d.as_os_str().is_empty() && fs::symlink_metadata(d).is_err() {
        missing.push(d.to_path_buf());
        match d.parent() {
            Some(p) => d = p,
            None => break,
        }
    }
    make_dir(dir)?;
    missing.reverse();
    Ok(missing)
}

/// Removes the directories [`make_dir_new`] created, innermost first, each only when empty.
pub fn remove_made(dirs: &[PathBuf]) {
    for d in dirs.iter().rev() {
        let _ = fs::remove_dir(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rdmaprobe-out-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn leftovers(d: &Path) -> Vec<String> {
        fs::read_dir(d)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp"))
            .collect()
    }

    #[test]
    fn regular_files_are_replaced_whole_and_symlinks_followed() {
        let d = tmpdir("reg");
        let f = d.join("r.json");
        write(&f, b"one").unwrap();
        write(&f, b"two").unwrap();
        assert_eq!(fs::read(&f).unwrap(), b"two");
        // a symlink to a regular file: the file is replaced, the link stays a link
        let l = d.join("link.json");
        std::os::unix::fs::symlink(&f, &l).unwrap();
        write(&l, b"three").unwrap();
        assert!(fs::symlink_metadata(&l).unwrap().file_type().is_symlink());
        assert_eq!(fs::read(&f).unwrap(), b"three");
        assert!(leftovers(&d).is_empty());
        fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn non_regular_targets_are_written_through_never_replaced() {
        use std::os::unix::fs::FileTypeExt;
        let d = tmpdir("dev");
        // a FIFO with a reader: written through, still a FIFO afterwards
        let fifo = d.join("fifo");
        let ok = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            let reader = {
                let fifo = fifo.clone();
                std::thread::spawn(move || fs::read(&fifo).unwrap())
            };
            write(&fifo, b"through").unwrap();
            assert_eq!(reader.join().unwrap(), b"through");
            assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
        }
        // /dev/null and a symlink to it: written through, the device and the link untouched
        write(Path::new("/dev/null"), b"x").unwrap();
        assert!(fs::metadata("/dev/null").unwrap().file_type().is_char_device());
        let l = d.join("null-link");
        std::os::unix::fs::symlink("/dev/null", &l).unwrap();
        write(&l, b"x").unwrap();
        assert!(fs::symlink_metadata(&l).unwrap().file_type().is_symlink());
        assert!(leftovers(&d).is_empty());
        fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn impossible_destinations_are_found_before_and_leave_nothing() {
        let d = tmpdir("bad");
        for (p, why) in [
            (d.join("no/such/dir/x.json"), "cannot be used"),
            (d.clone(), "is a directory"),
        ] {
            let e = check(&p).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
            assert!(write(&p, b"x").is_err());
        }
        // a dangling symlink is refused, not followed
        let l = d.join("dangling");
        std::os::unix::fs::symlink(d.join("nowhere/x"), &l).unwrap();
        assert!(check(&l).unwrap_err().to_string().contains("symlink to nothing"));
        // a failed replace (the target turned into a directory after the check) leaves no file
        let t = d.join("t.json");
        check(&t).unwrap();
        fs::create_dir(&t).unwrap();
        assert!(write(&t, b"x").is_err());
        assert!(leftovers(&d).is_empty(), "{:?}", leftovers(&d));
        fs::remove_dir_all(&d).ok();
    }

    /// [`write_new`] replaces what is at the name (a symlink, a FIFO) and never follows it or
    /// writes through it; a directory there refuses, leaving nothing behind.
    #[test]
    fn a_new_file_replaces_a_planted_link_never_its_target() {
        use std::os::unix::fs::FileTypeExt;
        let d = tmpdir("new");
        let victim = d.join("victim");
        fs::write(&victim, b"precious").unwrap();
        let l = d.join("report.json");
        std::os::unix::fs::symlink(&victim, &l).unwrap();
        write_new(&l, b"report").unwrap();
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert!(fs::symlink_metadata(&l).unwrap().file_type().is_file());
        assert_eq!(fs::read(&l).unwrap(), b"report");
        let fifo = d.join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        write_new(&fifo, b"x").unwrap();
        assert!(!fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
        fs::create_dir(d.join("dir")).unwrap();
        assert!(write_new(&d.join("dir"), b"x").is_err());
        assert!(leftovers(&d).is_empty(), "{:?}", leftovers(&d));
        let _ = fs::remove_dir_all(&d);
    }

    /// A FIFO is checked without being opened (no block, no empty stream handed to a reader)
    /// and written through to the reader that comes; a replaced file keeps its mode.
    #[test]
    fn a_fifo_reaches_its_reader_and_a_replaced_file_keeps_its_mode() {
        let d = tmpdir("fifo");
        let f = d.join("f");
        assert!(std::process::Command::new("mkfifo").arg(&f).status().unwrap().success());
        let t = std::time::Instant::now();
        check(&f).unwrap();
        assert!(
            t.elapsed() < std::time::Duration::from_secs(1),
            "check blocked on a FIFO"
        );
        let data = vec![b'x'; 300_000]; // more than a pipe holds
        let f2 = f.clone();
        let reader = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            fs::read(&f2).unwrap()
        });
        write(&f, &data).unwrap();
        assert_eq!(reader.join().unwrap().len(), data.len());
        let r = d.join("private.json");
        fs::write(&r, b"old").unwrap();
        fs::set_permissions(&r, fs::Permissions::from_mode(0o600)).unwrap();
        write(&r, b"new").unwrap();
        assert_eq!(fs::metadata(&r).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::read(&r).unwrap(), b"new");
        let _ = fs::remove_dir_all(&d);
    }
}

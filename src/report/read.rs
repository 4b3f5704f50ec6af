//! Reading files that others may have written (result files, a fleet run's directory), as root on
//! a shared machine: regular files only, of a bounded size, never waiting on a FIFO or a device.
//! A file is opened with `O_NONBLOCK` (a FIFO opens at once instead of waiting for a writer) and
//! checked on the opened file's own metadata (no race between a check and the open); what it
//! holds is read up to its bound and one byte more, so a file that grows while read is refused
//! too. Under a directory ([`Dir`]) every component is opened through the directory opened before
//! it (`/proc/self/fd/N/NAME`) with `O_NOFOLLOW`: a symlink anywhere below the directory the user
//! named is refused, never followed out of it.
#![forbid(unsafe_code)]

use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// The largest result document `compare`, `plot` and `ping --baseline` read: 64 MiB (a suite's
/// results.json is well under a MiB; `lat -n 100000000`, three backends, about 5 MB).
pub const MAX_RESULT_BYTES: u64 = 64 << 20;

/// Why a file could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {why}")]
pub struct ReadError {
    /// The file.
    pub path: String,
    /// What is wrong.
    pub why: String,
}

fn err(path: &Path, why: impl Into<String>) -> ReadError {
    ReadError {
        path: path.display().to_string(),
        why: why.into(),
    }
}

/// `n` bytes as a person reads a bound: `16 MiB`, `512 KiB`, `100 bytes`.
pub fn size_text(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// What a file that is not regular is, for a message.
fn kind(t: fs::FileType) -> &'static str {
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// The bytes of the opened file `f` (named `path`): a regular file of at most `max` bytes.
fn read_opened(mut f: File, path: &Path, max: u64) -> Result<Vec<u8>, ReadError> {
    let m = f.metadata().map_err(|e| err(path, e.to_string()))?;
    if !m.file_type().is_file() {
        return Err(err(
            path,
            format!(
                "{}, not a regular file (refused: only regular files are read)",
                kind(m.file_type())
            ),
        ));
    }
    let too_big = || {
        err(
            path,
            format!("larger than {}, the most such a file may hold", size_text(max)),
        )
    };
    if m.len() > max {
        return Err(too_big());
    }
    let mut buf = Vec::with_capacity(m.len() as usize);
    (&mut f)
        .take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| err(path, format!("reading: {e}")))?;
    if buf.len() as u64 > max {
        return Err(too_big());
    }
    Ok(buf)
}

/// The open flags of every file read: never waiting on a FIFO, never taking a terminal.
const READ_FLAGS: i32 = libc::O_NONBLOCK | libc::O_NOCTTY;

/// Reads the file the user named at `path` (a symlink there is followed: the user named it): a
/// regular file of at most `max` bytes, opened without waiting.
pub fn file(path: &Path, max: u64) -> Result<Vec<u8>, ReadError> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(READ_FLAGS)
        .open(path)
        .map_err(|e| err(path, e.to_string()))?;
    read_opened(f, path, max)
}

/// A directory opened once, whose entries are opened through it and never through a symlink.
pub struct Dir {
    f: File,
    path: PathBuf,
    /// The directory the user named, that this one is in (or is).
    top: PathBuf,
}

/// Why a name cannot be opened below a directory: not one plain component.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(format!("'{}' is not a name in the directory", name.escape_debug()));
    }
    Ok(())
}

impl Dir {
    /// Opens the directory the user named (a symlink there is followed).
    pub fn open(path: &Path) -> Result<Dir, ReadError> {
        let f = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | READ_FLAGS)
            .open(path)
            .map_err(|e| err(path, e.to_string()))?;
        let d = Dir {
            f,
            path: path.to_path_buf(),
            top: path.to_path_buf(),
        };
        // the entries are reached through /proc/self/fd: without /proc, every one would read as
        // missing
        match fs::metadata(d.through("")) {
            Ok(m) if m.is_dir() => Ok(d),
            _ => Err(err(
                path,
                "cannot be read below safely: /proc/self/fd is not there (is /proc mounted?)",
            )),
        }
    }

    /// Its path, as the user named it (and the names below).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path that reaches `name` through the opened directory.
    fn through(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/{name}", self.f.as_raw_fd()))
    }

    /// Opens `name` in it, never following a symlink; `None` when there is no such entry.
    fn open_entry(&self, name: &str, flags: i32) -> Result<Option<(File, PathBuf)>, ReadError> {
        let shown = self.path.join(name);
        check_name(name).map_err(|why| err(&shown, why))?;
        match OpenOptions::new()
            .read(true)
            .custom_flags(flags | READ_FLAGS | libc::O_NOFOLLOW)
            .open(self.through(name))
        {
            Ok(f) => Ok(Some((f, shown))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            // a symlink: ELOOP, or ENOTDIR where a directory was asked for
            Err(_) if fs::symlink_metadata(self.through(name)).is_ok_and(|m| m.file_type().is_symlink()) => {
                Err(self.link_refused(&shown))
            }
            Err(e) => Err(err(&shown, e.to_string())),
        }
    }

    /// The refusal of the symlink at `shown` below it.
    fn link_refused(&self, shown: &Path) -> ReadError {
        err(
            shown,
            format!(
                "a symbolic link (refused: nothing below {} is read through a link)",
                self.top.display()
            ),
        )
    }

    /// The directory `name` in it (not a symlink); `None` when there is none.
    pub fn dir(&self, name: &str) -> Result<Option<Dir>, ReadError> {
        Ok(self.open_entry(name, libc::O_DIRECTORY)?.map(|(f, path)| Dir {
            f,
            path,
            top: self.top.clone(),
        }))
    }

    /// The regular file `name` in it (not a symlink) of at most `max` bytes; `None` when there
    /// is none.
    pub fn file(&self, name: &str, max: u64) -> Result<Option<Vec<u8>>, ReadError> {
        match self.open_entry(name, 0)? {
            Some((f, path)) => read_opened(f, &path, max).map(Some),
            None => Ok(None),
        }
    }

    /// Its entries that are directories (symlinks among them refused), in name order; entries
    /// of another kind (a README, a stray file) are left out.
    pub fn subdirs(&self) -> Result<Vec<String>, ReadError> {
        let rd = fs::read_dir(self.through("")).map_err(|e| err(&self.path, e.to_string()))?;
        let mut out = Vec::new();
        for e in rd {
            let e = e.map_err(|e| err(&self.path, e.to_string()))?;
            let name = e.file_name().to_string_lossy().into_owned();
            let t = e.file_type().map_err(|x| err(&self.path.join(&name), x.to_string()))?;
            if t.is_symlink() {
                return Err(self.link_refused(&self.path.join(&name)));
            }
            if t.is_dir() {
                out.push(name);
            }
        }
        out.sort();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rdmaprobe-read-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn regular_files_are_read_up_to_their_bound() {
        let d = tmpdir("bound");
        fs::write(d.join("a"), b"12345").unwrap();
        assert_eq!(file(&d.join("a"), 5).unwrap(), b"12345");
        let e = file(&d.join("a"), 4).unwrap_err().to_string();
        assert!(e.contains("larger than 4 bytes"), "{e}");
        let dir = Dir::open(&d).unwrap();
        assert_eq!(dir.file("a", 5).unwrap().unwrap(), b"12345");
        assert!(dir.file("missing", 5).unwrap().is_none());
        assert!(dir.dir("missing").unwrap().is_none());
        assert!(dir.file("../a", 5).is_err() && dir.file("", 5).is_err());
        assert_eq!(size_text(16 << 20), "16 MiB");
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn fifos_devices_and_links_below_are_refused_at_once() {
        let d = tmpdir("kinds");
        assert!(std::process::Command::new("mkfifo")
            .arg(d.join("fifo"))
            .status()
            .unwrap()
            .success());
        std::os::unix::fs::symlink("/dev/zero", d.join("zero")).unwrap();
        fs::create_dir(d.join("sub")).unwrap();
        std::os::unix::fs::symlink(d.join("sub"), d.join("sublink")).unwrap();
        let t = std::time::Instant::now();
        let e = file(&d.join("fifo"), 100).unwrap_err().to_string();
        assert!(e.contains("a FIFO, not a regular file"), "{e}");
        // the user named the link: followed, and the device refused
        let e = file(&d.join("zero"), 100).unwrap_err().to_string();
        assert!(e.contains("a device"), "{e}");
        let dir = Dir::open(&d).unwrap();
        for (name, why) in [("fifo", "a FIFO"), ("zero", "symbolic link"), ("sub", "a directory")] {
            let e = dir.file(name, 100).unwrap_err().to_string();
            assert!(e.contains(why), "{name}: {e}");
        }
        let e = dir.dir("sublink").err().unwrap().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(dir.subdirs().unwrap_err().to_string().contains("symbolic link"));
        fs::remove_file(d.join("sublink")).unwrap();
        fs::remove_file(d.join("zero")).unwrap();
        assert_eq!(dir.subdirs().unwrap(), ["sub"]);
        assert!(t.elapsed() < std::time::Duration::from_secs(2), "{:?}", t.elapsed());
        let _ = fs::remove_dir_all(&d);
    }
}

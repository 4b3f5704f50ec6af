//! Private directories and files: the failure bundle (issue 30 points 1 and 2). A bundle holds
//! the command line, the host's configuration and the kernel log, and root writes it on a
//! machine other users share, so:
//! - a directory made for it is new: [`PrivateDir::fresh`] creates it exclusively (never one
//!   that exists) under a name nobody can predict, mode 0700;
//! - a directory the user names ([`PrivateDir::named`], checked before a run by
//!   [`check_named`]) is used only when it is a directory itself (not a symlink), belongs to
//!   the user (the uid given: the caller's effective uid) and nobody else may write in it; one
//!   that does not exist is created, its last component 0700;
//! - the directory is held open once checked, and every file is made relative to that open
//!   directory (through `/proc/self/fd/N/NAME`), so a path swapped after the check cannot
//!   redirect a write; each file is created exclusively (`O_CREAT|O_EXCL|O_NOFOLLOW`), mode
//!   0600, never through a link. An entry already there (a second run into the same directory)
//!   is unlinked first: unlink does not follow a link, and in a directory only its owner may
//!   write in, only its owner can have put the entry there.
#![forbid(unsafe_code)]

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A directory only its owner may write in, held open: what is written in it goes into the
/// directory that was checked, whatever its path names later.
#[derive(Debug)]
pub struct PrivateDir {
    dir: File,
    path: PathBuf,
}

impl PrivateDir {
    /// A new directory in `parent` named `prefix` and 16 random hex digits (8 bytes of
    /// `/dev/urandom`; where that cannot be read, a hash keyed by the standard library's random
    /// per-process keys over the TSC, the pid and the attempt), created exclusively with mode
    /// 0700: a name that exists (anyone's) is never used, another is drawn.
    pub fn fresh(parent: &Path, prefix: &str, uid: u32) -> Result<Self, String> {
        let mut last = String::from("every name drawn existed");
        for attempt in 0..64 {
            let path = parent.join(format!("{prefix}{:016x}", random(attempt)));
            match fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    return Self::open(&path, uid).map_err(|why| {
                        let _ = fs::remove_dir(&path);
                        format!("{}: {why}", path.display())
                    })
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    last = e.to_string();
                    break;
                }
            }
        }
        Err(format!("cannot create a directory in {}: {last}", parent.display()))
    }

    /// The directory the user named: used when it passes [`check_named`]'s rules (checked
    /// again here, on the directory opened), created when it does not exist (its parents as
    /// `create_dir_all` makes them, itself 0700). The error says why, without the path.
    pub fn named(path: &Path, uid: u32) -> Result<Self, String> {
        check_named(path, uid)?;
        if fs::symlink_metadata(path).is_err() {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                fs::create_dir_all(parent).map_err(|e| format!("cannot be created: {}: {e}", parent.display()))?;
            }
            match fs::DirBuilder::new().mode(0o700).create(path) {
                // made meanwhile by someone: judged as found
                Err(e) if e.kind() != ErrorKind::AlreadyExists => return Err(format!("cannot be created: {e}")),
                _ => {}
            }
        }
        Self::open(path, uid)
    }

    /// Opens `path` as a directory without following a link, and judges what was opened.
    fn open(path: &Path, uid: u32) -> Result<Self, String> {
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| {
                // a link is refused with ELOOP or (with O_DIRECTORY) ENOTDIR: say which it was
                let link = fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
                match e.raw_os_error() {
                    _ if link => SYMLINK.to_string(),
                    Some(libc::ENOTDIR) => "is not a directory".to_string(),
                    _ => format!("cannot be opened: {e}"),
                }
            })?;
        let m = dir.metadata().map_err(|e| format!("cannot be examined: {e}"))?;
        judge(&m, uid)?;
        let d = PrivateDir {
            dir,
            path: path.to_path_buf(),
        };
        // the files are reached through the open directory: /proc must show it
        match fs::metadata(d.at(".")) {
            Ok(p) if p.dev() == m.dev() && p.ino() == m.ino() => Ok(d),
            _ => Err(format!(
                "{} does not lead to the directory opened (is /proc mounted?): files cannot be made in it safely",
                d.at(".").display()
            )),
        }
    }

    /// The path the directory was opened by (for messages: what it names may have changed).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` in the open directory, whatever its path names now.
    fn at(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}/{name}", self.dir.as_raw_fd()))
    }

    /// Writes `data` to the file `name` (a plain name, no `/`) in the directory: an entry
    /// already there is unlinked (not followed), the file created exclusively, never through a
    /// link, mode 0600. The error names the file.
    pub fn write(&self, name: &str, data: &[u8]) -> Result<(), String> {
        let shown = self.path.join(name);
        if name.is_empty() || name == "." || name == ".." || name.contains('/') {
            return Err(format!("{name:?}: not a plain file name"));
        }
        let at = self.at(name);
        match fs::remove_file(&at) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(format!("{}: the entry there cannot be replaced: {e}", shown.display())),
        }
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&at)
            .map_err(|e| format!("{}: cannot be created: {e}", shown.display()))?;
        f.write_all(data)
            .map_err(|e| format!("{}: writing: {e}", shown.display()))
    }
}

const SYMLINK: &str = "is a symlink (refused: a link could lead anywhere; name the directory itself)";

/// The rules for a directory found (its own metadata, not a link's target): a directory, the
/// user's, nobody else may write in it.
fn judge(m: &fs::Metadata, uid: u32) -> Result<(), String> {
    if m.file_type().is_symlink() {
        return Err(SYMLINK.into());
    }
    if !m.is_dir() {
        return Err("is not a directory".into());
    }
    if m.uid() != uid {
        return Err(format!(
            "belongs to uid {}, not to this user (uid {uid}): name a directory of your own, or one that does not exist yet",
            m.uid()
        ));
    }
    let mode = m.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "has mode {mode:04o}: others may write in it, and so replace what is written there \
             (chmod go-w it, or name one that does not exist yet)"
        ));
    }
    Ok(())
}

/// Checks, before a run, the directory the user named (see [`PrivateDir::named`]): one that
/// exists must pass the rules; for one that does not, its nearest existing ancestor must be a
/// directory. Nothing is created. The error says why, without the path.
pub fn check_named(path: &Path, uid: u32) -> Result<(), String> {
    if path.as_os_str().is_empty() {
        return Err("an empty path".into());
    }
    match fs::symlink_metadata(path) {
        Ok(m) => judge(&m, uid),
        // not there (ENOTDIR: a component on the way is not a directory, found below)
        Err(e) if e.kind() == ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR) => {
            let mut up = path.parent();
            while let Some(p) = up {
                let p = if p.as_os_str().is_empty() { Path::new(".") } else { p };
                match fs::metadata(p) {
                    Ok(m) if m.is_dir() => return Ok(()),
                    Ok(_) => return Err(format!("cannot be created: {} is not a directory", p.display())),
                    Err(e) if e.kind() == ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR) => {
                        up = p.parent().filter(|_| p != Path::new("."))
                    }
                    Err(e) => return Err(format!("cannot be created: {}: {e}", p.display())),
                }
            }
            Ok(())
        }
        Err(e) => Err(format!("cannot be examined: {e}")),
    }
}

/// 64 bits nobody can predict: `/dev/urandom`'s, else a hash under the standard library's
/// per-process random keys.
fn random(attempt: u32) -> u64 {
    let mut b = [0u8; 8];
    if File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u64::from_ne_bytes(b);
    }
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(crate::clock::start());
    h.write_u32(std::process::id());
    h.write_u32(attempt);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A test's own directory (0755) and this process's effective uid (its owner's).
    fn base(name: &str) -> (PathBuf, u32) {
        let d = std::env::temp_dir().join(format!("rdmaprobe-private-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        let uid = fs::metadata(&d).unwrap().uid();
        (d, uid)
    }

    fn mode(p: &Path) -> u32 {
        fs::symlink_metadata(p).unwrap().mode() & 0o7777
    }

    fn chmod(p: &Path, m: u32) {
        fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
    }

    /// Two fresh directories are two, 0700, named by 16 random hex digits (not by time and
    /// pid), their files 0600.
    #[test]
    fn fresh_directories_are_new_private_and_unpredictable() {
        let (d, uid) = base("fresh");
        let a = PrivateDir::fresh(&d, "rdmaprobe-diag-", uid).unwrap();
        let b = PrivateDir::fresh(&d, "rdmaprobe-diag-", uid).unwrap();
        assert_ne!(a.path(), b.path());
        for p in [a.path(), b.path()] {
            assert_eq!(p.parent(), Some(d.as_path()));
            let name = p.file_name().unwrap().to_str().unwrap();
            let suffix = name.strip_prefix("rdmaprobe-diag-").unwrap();
            assert!(
                suffix.len() == 16 && suffix.bytes().all(|c| c.is_ascii_hexdigit()),
                "{name}"
            );
            assert_eq!(mode(p), 0o700);
        }
        a.write("x.txt", b"one").unwrap();
        assert_eq!(mode(&a.path().join("x.txt")), 0o600);
        assert_eq!(fs::read(a.path().join("x.txt")).unwrap(), b"one");
        fs::remove_dir_all(&d).ok();
    }

    /// A named directory: this user's own (even 0755: others may read, not write) is taken; a
    /// symlink to it, a file, a group- or world-writable one are refused before (check_named)
    /// and when opened (named); one that does not exist is created 0700 with its parents.
    #[test]
    fn named_directories_must_be_this_users_alone() {
        let (d, uid) = base("named");
        let own = d.join("own");
        fs::create_dir(&own).unwrap();
        chmod(&own, 0o755);
        check_named(&own, uid).unwrap();
        PrivateDir::named(&own, uid).unwrap();
        let link = d.join("link");
        std::os::unix::fs::symlink(&own, &link).unwrap();
        let file = d.join("file");
        fs::write(&file, b"").unwrap();
        let open = d.join("open");
        fs::create_dir(&open).unwrap();
        chmod(&open, 0o777);
        let group = d.join("group");
        fs::create_dir(&group).unwrap();
        chmod(&group, 0o770);
        for (p, why) in [
            (&link, "is a symlink"),
            (&file, "is not a directory"),
            (&open, "has mode 0777"),
            (&group, "has mode 0770"),
        ] {
            assert!(check_named(p, uid).unwrap_err().contains(why), "{}", p.display());
            assert!(PrivateDir::named(p, uid).unwrap_err().contains(why), "{}", p.display());
        }
        // another user's, as far as this process is concerned
        let e = PrivateDir::named(&own, uid + 1).unwrap_err();
        assert!(e.contains(&format!("belongs to uid {uid}")), "{e}");
        // not there yet: checked without being made, then made 0700
        let new = d.join("a/b/new");
        check_named(&new, uid).unwrap();
        assert!(!d.join("a").exists());
        let n = PrivateDir::named(&new, uid).unwrap();
        assert_eq!(mode(n.path()), 0o700);
        let under_file = file.join("sub");
        assert!(check_named(&under_file, uid)
            .unwrap_err()
            .contains("is not a directory"));
        assert!(check_named(Path::new(""), uid).is_err());
        fs::remove_dir_all(&d).ok();
    }

    /// What is planted in the user's own directory is not followed: a link to a file and a
    /// dangling one are replaced by the file written (their targets untouched, nothing
    /// created); a file written twice is replaced; a directory in the way and a name with a
    /// slash are errors naming the file.
    #[test]
    fn planted_links_are_replaced_never_followed() {
        let (d, uid) = base("links");
        let own = d.join("own");
        fs::create_dir(&own).unwrap();
        chmod(&own, 0o700);
        let victim = d.join("victim");
        fs::write(&victim, b"precious").unwrap();
        std::os::unix::fs::symlink(&victim, own.join("command.txt")).unwrap();
        std::os::unix::fs::symlink(d.join("nowhere"), own.join("error.txt")).unwrap();
        let p = PrivateDir::named(&own, uid).unwrap();
        for name in ["command.txt", "error.txt", "error.txt"] {
            p.write(name, name.as_bytes()).unwrap();
            let m = fs::symlink_metadata(own.join(name)).unwrap();
            assert!(m.file_type().is_file() && m.mode() & 0o7777 == 0o600, "{name}");
            assert_eq!(fs::read(own.join(name)).unwrap(), name.as_bytes());
        }
        assert_eq!(fs::read(&victim).unwrap(), b"precious");
        assert!(!d.join("nowhere").exists());
        fs::create_dir(own.join("dir.txt")).unwrap();
        assert!(p.write("dir.txt", b"x").unwrap_err().contains("dir.txt"));
        assert!(p.write("../escape", b"x").is_err());
        assert!(!d.join("escape").exists());
        fs::remove_dir_all(&d).ok();
    }

    /// The directory is checked once and held: swapping its path for a link elsewhere after
    /// the check does not redirect what is written (it lands in the directory checked).
    #[test]
    fn a_directory_swapped_after_the_check_does_not_redirect_writes() {
        let (d, uid) = base("swap");
        let own = d.join("own");
        fs::create_dir(&own).unwrap();
        chmod(&own, 0o700);
        let p = PrivateDir::named(&own, uid).unwrap();
        let moved = d.join("moved");
        fs::rename(&own, &moved).unwrap();
        let elsewhere = d.join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &own).unwrap();
        p.write("f.txt", b"x").unwrap();
        assert!(moved.join("f.txt").is_file());
        assert!(!elsewhere.join("f.txt").exists());
        fs::remove_dir_all(&d).ok();
    }
}

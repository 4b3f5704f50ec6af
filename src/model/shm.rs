//! Shared-memory objects of the device model: one file per memory region, queue pair and
//! completion queue under `/dev/shm/rdmaprobe-model0` (or `$RDMAPROBE_MODEL_DIR`), mapped with
//! memmap2 by every process that uses it. Names carry the object's number; headers carry the
//! owner's pid, so files of a process that died are swept away by the next one to open the model.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// The model's directory.
pub fn dir() -> PathBuf {
    std::env::var_os("RDMAPROBE_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/dev/shm/rdmaprobe-model0"))
}

/// Object kinds, the prefix of their file names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjKind {
    /// Memory region (named by its key).
    Mr,
    /// Queue pair (named by its QP number).
    Qp,
    /// Completion queue (named by its CQ number).
    Cq,
}

impl ObjKind {
    fn prefix(self) -> &'static str {
        match self {
            ObjKind::Mr => "mr",
            ObjKind::Qp => "qp",
            ObjKind::Cq => "cq",
        }
    }
}

fn path(kind: ObjKind, id: u32) -> PathBuf {
    dir().join(format!("{}-{:06x}", kind.prefix(), id))
}

/// A mapped object file. The creating handle removes the file when dropped.
pub struct Shm {
    map: memmap2::MmapMut,
    path: PathBuf,
    owner: bool,
}

impl Shm {
    /// Creates a new object of `len` bytes with a fresh 24-bit id (never 0), zero-filled.
    pub fn create(kind: ObjKind, len: usize, mut next_id: impl FnMut() -> u32) -> io::Result<(u32, Shm)> {
        fs::create_dir_all(dir())?;
        for _ in 0..64 {
            let id = next_id() & 0xff_ffff;
            if id == 0 || id == sys_invalid_key() {
                continue;
            }
            let p = path(kind, id);
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&p)
            {
                Ok(f) => {
                    f.set_len(len as u64)?;
                    // SAFETY: a file we just created and sized; nobody else truncates it (other
                    // processes only map it, and it is removed only by its owner).
                    let map = unsafe { memmap2::MmapOptions::new().len(len).map_mut(&f) }?;
                    return Ok((
                        id,
                        Shm {
                            map,
                            path: p,
                            owner: true,
                        },
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other("could not find a free object number after 64 tries"))
    }

    /// Maps an existing object (another process's, or our own).
    pub fn open(kind: ObjKind, id: u32) -> io::Result<Shm> {
        let p = path(kind, id);
        let f: File = OpenOptions::new().read(true).write(true).open(&p)?;
        let len = f.metadata()?.len() as usize;
        // SAFETY: an object file of the model; its size is fixed at creation and it is never
        // truncated while it exists.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map_mut(&f) }?;
        Ok(Shm {
            map,
            path: p,
            owner: false,
        })
    }

    /// Start of the mapping.
    pub fn ptr(&self) -> *mut u8 {
        self.map.as_ptr() as *mut u8
    }

    /// Length of the mapping.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Removes the object's file now (the owner does, when its handle is dropped); mappings,
    /// this one and other threads' and processes', stay valid until unmapped.
    pub fn unlink(&self) {
        if self.owner {
            let _ = fs::remove_file(&self.path);
        }
    }

    /// Never true (objects have a header).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        if self.owner {
            let _ = fs::remove_file(&self.path);
        }
    }
}

fn sys_invalid_key() -> u32 {
    crate::sys::MLX5_INVALID_LKEY
}

/// Whether process `pid` is alive.
pub fn pid_alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Removes object files whose owner process is gone (crash recovery). `owner_of` reads the
/// owner pid from a mapped header. Returns how many were removed.
pub fn sweep(owner_of: impl Fn(&Shm) -> Option<u32>) -> usize {
    let Ok(rd) = fs::read_dir(dir()) else { return 0 };
    let mut removed = 0;
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((kind, id)) = name.split_once('-') else {
            continue;
        };
        let kind = match kind {
            "mr" => ObjKind::Mr,
            "qp" => ObjKind::Qp,
            "cq" => ObjKind::Cq,
            _ => continue,
        };
        let Ok(id) = u32::from_str_radix(id, 16) else { continue };
        let Ok(shm) = Shm::open(kind, id) else { continue };
        if let Some(pid) = owner_of(&shm) {
            if pid != 0 && !pid_alive(pid) && fs::remove_file(e.path()).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

//! Shared-memory objects of the device model: one file per memory region, queue pair and
//! completion queue under `/dev/shm/rdmaprobe-model0-UID` (or `$RDMAPROBE_MODEL_DIR`), mapped with
//! memmap2 by every process that uses it. Names carry the object's number; headers carry the
//! owner's pid, so files of a process that died are swept away by the next one to open the model.
//!
//! The trust boundary: a model directory belongs to one user. It is made with mode 0700 and
//! refused when another user owns it or anyone else may write in it (another user could plant
//! objects that this process would then use); its files are made 0600. The processes of that
//! user (which could as well attach to each other with ptrace) share it, and still each checks
//! every value it reads from another process's object against its own mapping before use.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// The model's directory: `$RDMAPROBE_MODEL_DIR`, else one per user under `/dev/shm`.
pub fn dir() -> PathBuf {
    std::env::var_os("RDMAPROBE_MODEL_DIR")
        .map(PathBuf::from)
        // SAFETY: geteuid has no preconditions and cannot fail.
        .unwrap_or_else(|| PathBuf::from(format!("/dev/shm/rdmaprobe-model0-{}", unsafe { libc::geteuid() })))
}

/// Makes sure the model's directory is this user's alone (see the module's trust boundary):
/// created with mode 0700 when missing (its parent must exist); an existing one must be a
/// directory (not a symlink), owned by this user, with mode 0700 (never changed here). Returns
/// it.
pub fn secure_dir() -> io::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let d = dir();
    match fs::DirBuilder::new().mode(0o700).create(&d) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let m = fs::symlink_metadata(&d)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let refuse = |why: String| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "model0's directory {} {why}: refused (another user could plant objects there); \
                 remove it, or point RDMAPROBE_MODEL_DIR at a directory of your own with mode 0700",
                d.display()
            ),
        ))
    };
    if !m.file_type().is_dir() {
        return refuse("is not a directory (a symlink?)".into());
    }
    if m.uid() != me {
        return refuse(format!("belongs to uid {}, not to this user (uid {me})", m.uid()));
    }
    let mode = m.mode() & 0o777;
    if mode & 0o077 != 0 {
        // never changed here: the variable may name a directory others rely on
        return refuse(format!("has mode {mode:04o}: others may reach into it (0700 expected)"));
    }
    Ok(d)
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
    /// A page of doorbell records that libmlx5 allocated (model0 under rdma-core).
    Db,
    /// Shared receive queue (named by its SRQ number).
    Srq,
}

impl ObjKind {
    fn prefix(self) -> &'static str {
        match self {
            ObjKind::Mr => "mr",
            ObjKind::Qp => "qp",
            ObjKind::Cq => "cq",
            ObjKind::Db => "db",
            ObjKind::Srq => "srq",
        }
    }
}

fn path(kind: ObjKind, id: u32) -> PathBuf {
    dir().join(format!("{}-{:06x}", kind.prefix(), id))
}

/// A mapped object file. The creating handle removes the file when dropped.
pub struct Shm {
    map: memmap2::MmapMut,
    /// The owner's descriptor, for [`Shm::map_over`], until the object is unlinked; another
    /// process's object is only mapped (its descriptor closed at once: a mapping needs none, and
    /// a process reaching thousands of objects would run out of open files).
    file: std::sync::Mutex<Option<File>>,
    path: PathBuf,
    owner: bool,
}

impl Shm {
    /// Creates a new object of `len` bytes with a fresh 24-bit id (never 0), zero-filled.
    pub fn create(kind: ObjKind, len: usize, mut next_id: impl FnMut() -> u32) -> io::Result<(u32, Shm)> {
        secure_dir()?;
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
                    // allocated for real: a sparse file on a full tmpfs would fault (SIGBUS) at
                    // the first store instead of failing here with a message
                    use std::os::fd::AsRawFd;
                    // SAFETY: a descriptor we own; allocates the file's blocks.
                    let rc = unsafe { libc::posix_fallocate(f.as_raw_fd(), 0, len as libc::off_t) };
                    if rc != 0 {
                        let _ = fs::remove_file(&p);
                        let e = io::Error::from_raw_os_error(rc);
                        return Err(io::Error::new(
                            e.kind(),
                            format!("{e}: {} needs {len} bytes in {}", p.display(), dir().display()),
                        ));
                    }
                    // SAFETY: a file we just created and sized; nobody else truncates it (other
                    // processes only map it, and it is removed only by its owner).
                    let map = match unsafe { memmap2::MmapOptions::new().len(len).map_mut(&f) } {
                        Ok(m) => m,
                        Err(e) => {
                            // not left behind: a file without its header names no owner, and
                            // no sweep would ever take it
                            let _ = fs::remove_file(&p);
                            return Err(e);
                        }
                    };
                    return Ok((
                        id,
                        Shm {
                            map,
                            file: std::sync::Mutex::new(Some(f)),
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
        // never follow a link, never block on a FIFO: then only a regular file is taken
        let f: File = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&p)?;
        let meta = f.metadata()?;
        if !meta.file_type().is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: not a regular file, not a model object", p.display()),
            ));
        }
        let len = meta.len() as usize;
        // every object starts with a page of header (a shorter file is not one of ours)
        if len < 4096 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: {len} bytes, not a model object", p.display()),
            ));
        }
        // SAFETY: an object file of the model; its size is fixed at creation and it is never
        // truncated while it exists.
        let map = unsafe { memmap2::MmapOptions::new().len(len).map_mut(&f) }?;
        Ok(Shm {
            map,
            file: std::sync::Mutex::new(None),
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
        // out of service: no more map_over; the mappings keep the memory, not a descriptor
        *self.file.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Turns the user memory `[addr, addr + len)` (page-aligned, whole pages) into a second view
    /// of this object at `off`: its bytes are copied into the object, then the object is mapped
    /// over them (`MAP_FIXED`), so what the process stores there lands in shared memory that
    /// other processes and the model read. This is how model0 "pins" memory that libmlx5 or a
    /// user allocated and registered (queues, doorbell records, memory regions).
    ///
    /// # Safety
    /// `[addr, addr + len)` must be mapped, writable memory of this process that nothing else
    /// remaps meanwhile; `off + len` must lie inside the object and be page-aligned.
    pub unsafe fn map_over(&self, off: usize, addr: usize, len: usize) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        if off % 4096 != 0 || addr % 4096 != 0 || len % 4096 != 0 || off + len > self.len() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        // only the owner maps its object over memory, and only while it is in service
        let Some(fd) = file.as_ref().map(|f| f.as_raw_fd()) else {
            return Err(io::Error::from_raw_os_error(libc::EBADF));
        };
        // SAFETY: the caller guarantees the source range; the destination is inside our mapping.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, self.ptr().add(off), len) };
        // SAFETY: replaces the caller's pages (guaranteed by the caller) with the object's, which
        // now hold the same bytes.
        let p = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd,
                off as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Undoes [`Shm::map_over`]: private anonymous memory again at `addr`, holding the bytes the
    /// object holds now.
    ///
    /// # Safety
    /// `[addr, addr + len)` must be a range this object was mapped over with `map_over(off, ..)`.
    pub unsafe fn unmap_over(&self, off: usize, addr: usize, len: usize) -> io::Result<()> {
        // SAFETY: the caller guarantees the range was ours; the new pages are private and empty.
        let p = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both ranges are mapped and `len` long; they no longer alias.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr().add(off), addr as *mut u8, len) };
        Ok(())
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
    // nothing of a directory that is not this user's alone is touched
    if secure_dir().is_err() {
        return 0;
    }
    let Ok(rd) = fs::read_dir(dir()) else { return 0 };
    let mut removed = 0;
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        // a completion channel's FIFO (model/events.rs) of a process that is gone
        if super::events::dead_fifo(&name) {
            if fs::remove_file(e.path()).is_ok() {
                removed += 1;
            }
            continue;
        }
        let Some((kind, id)) = name.split_once('-') else {
            continue;
        };
        let kind = match kind {
            "mr" => ObjKind::Mr,
            "qp" => ObjKind::Qp,
            "cq" => ObjKind::Cq,
            "db" => ObjKind::Db,
            "srq" => ObjKind::Srq,
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

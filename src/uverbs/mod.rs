//! model0 behind the real rdma-core: a user-space uverbs device.
//!
//! The machine's own, unmodified libibverbs and libmlx5 open model0 as an mlx5 device
//! (`mlx5_model0`... named `model0`), so the `verbs` and `wr` backends run on model0 beside
//! `direct`, and libmlx5's own WQEs, doorbell records and CQE parsing meet model0:
//!
//! - discovery: a sysfs directory (`SYSFS_PATH`, set before libibverbs first reads it) that
//!   holds one uverbs device with a ConnectX-5 PCI id, so libibverbs loads libmlx5 for it;
//! - the descriptor: the executable defines `open`, `openat`, `stat`, `close`, `write`, `ioctl`
//!   and `mmap` (`interpose`); calls on the device node or descriptor are answered here, all
//!   others go to the kernel untouched;
//! - the commands ([`device`]): `ioctl` answers `ENOTTY`, so libibverbs sends the legacy
//!   `write()` commands; objects become model0's, with libmlx5's buffers and doorbell-record pages
//!   and the program's registered memory pinned into model0's shared files;
//! - execution: libmlx5 rings a register page nothing watches, so model0 executes where the
//!   scenarios already let it (after the timed post call, and when polling), through
//!   [`device::model_qp`]; no thread polls for doorbells. In another program under the preload
//!   ([`preload`]) the provider's entry points are wrapped to the same end, and with
//!   `--engine trap` ([`trap`]) a store to a register page is itself the signal to execute.
//!
//! Limits: RC, UC and UD QPs, SRQs, 64- and 128-byte CQEs; a kernel whose RDMA netlink
//! lists devices makes libibverbs ignore `SYSFS_PATH`, so on such a machine model0 keeps the
//! direct backend only.

pub mod device;
#[cfg(target_arch = "x86_64")]
mod insn;
mod interpose;
pub mod preload;
pub mod trap;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::OnceLock;

pub use device::{model_qp, progress, progress_qp, set_model};

/// The name libibverbs lists model0 under.
pub const IBDEV: &str = "model0";

/// Whether model0 is reachable through libibverbs in this process, and if not why.
pub fn status() -> &'static Result<PathBuf, String> {
    static S: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    S.get_or_init(install)
}

/// Creates the sysfs directory and points libibverbs at it. Must run before libibverbs reads
/// `SYSFS_PATH` (its first device list): `DeviceList::get` calls it.
fn install() -> Result<PathBuf, String> {
    if std::env::var_os("RDMAPROBE_NO_UVERBS").is_some() {
        return Err("RDMAPROBE_NO_UVERBS is set".into());
    }
    let root = crate::model::shm::dir().join("sysfs");
    crate::model::shm::secure_dir().map_err(|e| e.to_string())?;
    // a SYSFS_PATH of our own (inherited from an rdmaprobe parent) is fine; another is the user's
    if let Some(p) = std::env::var_os("SYSFS_PATH").filter(|p| Path::new(p) != root) {
        return Err(format!(
            "SYSFS_PATH is set ({}): libibverbs reads devices from there",
            Path::new(&p).display()
        ));
    }
    if Path::new("/sys/class/infiniband_verbs").is_dir() {
        return Err(
            "the kernel has RDMA devices (libibverbs lists them through netlink and ignores SYSFS_PATH)".into(),
        );
    }
    // libibverbs asks RDMA netlink first and reads SYSFS_PATH only when that fails
    if crate::verbs::device::netlink_rdma_errno() == 0 {
        return Err("the kernel answers RDMA netlink (libibverbs lists devices from it and ignores SYSFS_PATH)".into());
    }
    // a process started by `rdmaprobe model0 exec` (or by rdmaprobe) finds the tree made
    let made = std::env::var_os("SYSFS_PATH").is_some_and(|p| Path::new(&p) == root)
        && root
            .join("class/infiniband")
            .join(IBDEV)
            .join("device/vendor")
            .is_file();
    if !made {
        write_tree(&root).map_err(|e| format!("creating {}: {e}", root.display()))?;
    }
    // SAFETY: set once, before libibverbs is initialised, from the first device list.
    unsafe { std::env::set_var("SYSFS_PATH", &root) };
    interpose::PATH_ON.store(true, Ordering::Release);
    Ok(root)
}

fn write_tree(root: &Path) -> std::io::Result<()> {
    // SAFETY: `stat` is plain data; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a constant path and a stat buffer of ours.
    if unsafe { libc::syscall(libc::SYS_newfstatat, libc::AT_FDCWD, c"/dev/null".as_ptr(), &mut st, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let (maj, min) = (libc::major(st.st_rdev), libc::minor(st.st_rdev));
    let uv = root.join("class/infiniband_verbs").join(device::UVERBS_NAME);
    // As a kernel lays it out: the device under its PCI function, `class/infiniband/model0` a
    // link to it, `device` a link back to the function (UCX finds the PCI ids there).
    let pci = root.join(PCI_DIR);
    let ib = pci.join("infiniband").join(IBDEV);
    let files: &[(PathBuf, String)] = &[
        (root.join("class/infiniband_verbs/abi_version"), "6\n".into()),
        (uv.join("ibdev"), format!("{IBDEV}\n")),
        (uv.join("dev"), format!("{maj}:{min}\n")),
        (uv.join("abi_version"), "1\n".into()),
        (pci.join("vendor"), "0x15b3\n".into()),
        (pci.join("device"), "0x1017\n".into()),
        (pci.join("subsystem_vendor"), "0x15b3\n".into()),
        (pci.join("subsystem_device"), "0x0020\n".into()),
        (pci.join("modalias"), MODALIAS.into()),
        (ib.join("node_type"), "1: CA\n".into()),
        (ib.join("fw_ver"), "16.35.1000\n".into()),
        // as QUERY_DEVICE answers (ibv_devices reads the file, ibv_devinfo the command)
        (ib.join("node_guid"), "0000:0000:0000:0001\n".into()),
        (ib.join("sys_image_guid"), "0000:0000:0000:0001\n".into()),
        (
            ib.join("ports/1/gids/0"),
            "fe80:0000:0000:0000:0000:0000:0000:0001\n".into(),
        ),
        (ib.join("ports/1/gid_attrs/types/0"), "IB/RoCE v1\n".into()),
        // the default partition, full membership (ibv_query_pkey reads it here)
        (ib.join("ports/1/pkeys/0"), "0xffff\n".into()),
        (ib.join("ports/1/link_layer"), "InfiniBand\n".into()),
    ];
    for (p, content) in files {
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        // Written whole under a temporary name and renamed: other processes read it meanwhile.
        let tmp = p.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, content)?;
        std::fs::rename(&tmp, p)?;
    }
    let class_ib = root.join("class/infiniband");
    std::fs::create_dir_all(&class_ib)?;
    let link = class_ib.join(IBDEV);
    // a tree of an earlier rdmaprobe had a directory here
    if link.symlink_metadata().is_ok_and(|m| m.is_dir()) {
        std::fs::remove_dir_all(&link)?;
    }
    symlink_replace(&format!("../../{PCI_DIR}/infiniband/{IBDEV}"), &link)?;
    symlink_replace("../../../0000:00:00.0", &ib.join("device"))
}

/// Where model0's PCI function sits in the fake sysfs.
const PCI_DIR: &str = "devices/pci0000:00/0000:00:00.0";

/// The PCI function's modalias: a ConnectX-5 (15b3:1017), which makes libibverbs load libmlx5.
const MODALIAS: &str = "pci:v000015B3d00001017sv000015B3sd00000020bc02sc00i00\n";

/// Points `link` at `target`, replacing what is there in one step (other processes read it).
fn symlink_replace(target: &str, link: &Path) -> std::io::Result<()> {
    let tmp = link.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)?;
    std::fs::rename(&tmp, link)
}

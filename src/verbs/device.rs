//! Devices, contexts, ports and GIDs: `ibv_get_device_list`, `ibv_open_device`,
//! `ibv_query_device`, `___ibv_query_port`, `ibv_query_gid_ex`. The types of ports and GIDs
//! are in `port`, re-exported here.

mod port;

pub use port::{
    mtu_bytes, mtu_from_bytes, phys_state_str, pick_gid_index, port_state_str, speed_str, width_str, Gid, GidEntry,
    GidParseError, GidType, PortInfo,
};

use super::error::{check_ptr, check_rc, Ctx, NoDevice, Result, VerbsError};
use super::Ledger;
use crate::sys;
use std::ffi::CStr;
use std::sync::Arc;

/// Names of the user verbs devices, or why there are none.
pub fn device_names() -> Result<Vec<String>> {
    let list = DeviceList::get()?;
    Ok(list.names())
}

/// The list from `ibv_get_device_list`, freed on drop. Contexts opened from it outlive it.
pub struct DeviceList {
    ptr: *mut *mut sys::ibv_device,
    n: usize,
    /// The hardware devices (list positions), without model0's uverbs device.
    hw: Vec<usize>,
    /// model0's uverbs device, when libibverbs lists it (`crate::uverbs`).
    model: Option<usize>,
}

impl DeviceList {
    /// Gets the list; an empty or failed list becomes [`VerbsError::NoDevice`] with the reason.
    pub fn get() -> Result<Self> {
        let list = Self::get_with_model()?;
        if list.hw.is_empty() {
            return Err(VerbsError::NoDevice(classify_missing(netlink_rdma_errno())));
        }
        Ok(list)
    }

    /// The list with model0's uverbs device in it (hardware devices may be absent).
    fn get_with_model() -> Result<Self> {
        // model0's uverbs device must be in place before libibverbs reads sysfs the first time.
        #[cfg(target_os = "linux")]
        let _ = crate::uverbs::status();
        let mut n: core::ffi::c_int = 0;
        // SAFETY: writes the count into `n`; returns an owned list or NULL with errno set.
        let ptr = unsafe { sys::ibv_get_device_list(&mut n) };
        if ptr.is_null() {
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            return Err(VerbsError::NoDevice(classify_missing(e)));
        }
        let mut list = DeviceList {
            ptr,
            n: n.max(0) as usize,
            hw: Vec::new(),
            model: None,
        };
        for i in 0..list.n {
            if list.is_model(i) {
                list.model = Some(i);
            } else {
                list.hw.push(i);
            }
        }
        Ok(list)
    }

    /// Whether entry `i` is model0's uverbs device (its sysfs name is ours).
    fn is_model(&self, i: usize) -> bool {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: a valid device from the list; its kernel-device name is a string it owns.
            let dev = unsafe { CStr::from_ptr(sys::ibv_get_device_name(self.raw(i))) };
            // SAFETY: as above: `dev_name` is a NUL-terminated array inside the device.
            let uv = unsafe { CStr::from_ptr((*self.raw(i)).dev_name.as_ptr()) };
            dev.to_bytes() == crate::uverbs::IBDEV.as_bytes()
                && uv.to_bytes() == crate::uverbs::device::UVERBS_NAME.as_bytes()
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = i;
            false
        }
    }

    fn raw(&self, i: usize) -> *mut sys::ibv_device {
        assert!(i < self.n);
        // SAFETY: i < n, and the list holds n valid device pointers until it is freed.
        unsafe { *self.ptr.add(i) }
    }

    /// Hardware device names in list order (model0's uverbs device is not one).
    pub fn names(&self) -> Vec<String> {
        self.hw
            .iter()
            .map(|&i| {
                // SAFETY: a valid device from the list; the name is a NUL-terminated string it owns.
                unsafe { CStr::from_ptr(sys::ibv_get_device_name(self.raw(i))) }
                    .to_string_lossy()
                    .into_owned()
            })
            .collect()
    }

    /// Opens the device called `name`.
    pub fn open(&self, name: &str) -> Result<Context> {
        let names = self.names();
        let i = names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| VerbsError::UnknownDevice {
                name: name.to_string(),
                available: names.clone(),
            })?;
        self.open_at(self.hw[i], name)
    }

    fn open_at(&self, i: usize, name: &str) -> Result<Context> {
        let dev = self.raw(i);
        // SAFETY: a valid device pointer from the live list.
        let ctx = check_ptr(unsafe { sys::ibv_open_device(dev) }, "ibv_open_device", || {
            Ctx::dev(name)
        })?;
        // SAFETY: the same valid device pointer; mlx5dv_is_supported only reads it.
        let mlx5 = unsafe { sys::mlx5dv_is_supported(dev) };
        let ledger = Ledger::new(name);
        ledger.created(super::Kind::Context);
        Ok(Context {
            inner: Arc::new(ContextInner {
                ctx,
                name: name.to_string(),
                mlx5,
                ledger,
            }),
        })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: ptr came from ibv_get_device_list and is freed once, here.
        unsafe { sys::ibv_free_device_list(self.ptr) };
    }
}

/// Why `ibv_get_device_list` found nothing, from its errno and what sysfs and /dev show.
pub fn classify_missing(errno: i32) -> NoDevice {
    classify(
        errno,
        std::path::Path::new("/sys/class/infiniband_verbs").exists(),
        dir_has_entries("/sys/class/infiniband"),
        uverbs_denied(),
    )
}

/// The decision behind [`classify_missing`], from its inputs.
pub fn classify(errno: i32, verbs_class: bool, ib_devices: bool, uverbs_denied: bool) -> NoDevice {
    if errno == libc::ENOSYS || errno == libc::EPROTONOSUPPORT || errno == libc::EAFNOSUPPORT {
        return NoDevice::KernelWithoutRdma;
    }
    if errno == libc::EACCES || errno == libc::EPERM || uverbs_denied {
        return NoDevice::NoPermission;
    }
    if ib_devices {
        return NoDevice::NoUverbs;
    }
    if !verbs_class && errno != 0 {
        return NoDevice::KernelWithoutRdma;
    }
    NoDevice::NoDevices
}

/// What the kernel says to an RDMA netlink socket (libibverbs' first way to list devices): 0
/// when it opens, else the errno (`EPROTONOSUPPORT`: a kernel without RDMA).
pub(crate) fn netlink_rdma_errno() -> i32 {
    // SAFETY: a plain socket call; the descriptor is closed at once.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_RDMA,
        )
    };
    if fd < 0 {
        return std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    }
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    0
}

fn dir_has_entries(p: &str) -> bool {
    std::fs::read_dir(p).map(|mut d| d.next().is_some()).unwrap_or(false)
}

fn uverbs_denied() -> bool {
    let Ok(rd) = std::fs::read_dir("/dev/infiniband") else {
        return false;
    };
    for e in rd.flatten() {
        if e.file_name().to_string_lossy().starts_with("uverbs") {
            if let Err(err) = std::fs::OpenOptions::new().read(true).write(true).open(e.path()) {
                if err.kind() == std::io::ErrorKind::PermissionDenied {
                    return true;
                }
            }
        }
    }
    false
}

pub(crate) struct ContextInner {
    pub(crate) ctx: *mut sys::ibv_context,
    pub(crate) name: String,
    mlx5: bool,
    pub(crate) ledger: Arc<Ledger>,
}

// SAFETY: an ibv_context is thread-safe per the verbs API (providers lock internally).
unsafe impl Send for ContextInner {}
// SAFETY: as above: concurrent verbs on one context are allowed.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: ctx came from ibv_open_device; every child holds an Arc to us, so none is left.
        let rc = unsafe { sys::ibv_close_device(self.ctx) };
        self.ledger.destroyed(
            super::Kind::Context,
            check_rc(rc, "ibv_close_device", || Ctx::dev(&self.name)),
        );
    }
}

/// An open device (`ibv_context`). Cheap to clone; closed when the last clone and the last
/// child (PD, CQ) are gone.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl Context {
    /// Opens a device by name.
    pub fn open(name: &str) -> Result<Self> {
        #[cfg(target_os = "linux")]
        if name == crate::uverbs::IBDEV {
            return Self::open_model0();
        }
        DeviceList::get()?.open(name)
    }

    /// Opens model0 through libibverbs and libmlx5 (its user-space uverbs device), or says why
    /// it cannot be.
    pub fn open_model0() -> Result<Self> {
        #[cfg(target_os = "linux")]
        if let Err(why) = crate::uverbs::status() {
            return Err(VerbsError::Invalid {
                ctx: Ctx::dev(crate::uverbs::IBDEV),
                why: format!("model0 is not reachable through libibverbs here: {why}"),
            });
        }
        let list = DeviceList::get_with_model()?;
        match list.model {
            Some(i) => list.open_at(i, crate::uverbs::IBDEV),
            None => Err(VerbsError::Invalid {
                ctx: Ctx::dev(crate::uverbs::IBDEV),
                why: "libibverbs did not list model0's uverbs device (does libmlx5 load? ibverbs-providers)".into(),
            }),
        }
    }

    /// Opens the first device of the list.
    pub fn open_first() -> Result<Self> {
        let list = DeviceList::get()?;
        let first = list
            .names()
            .into_iter()
            .next()
            .ok_or(VerbsError::NoDevice(NoDevice::NoDevices))?;
        list.open(&first)
    }

    /// The provider library this context runs on (for example libmlx5's resolved path), when
    /// the loader can tell.
    pub fn provider_library(&self) -> Option<String> {
        provider_path_of(self.as_ptr())
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The raw context pointer (valid while `self` lives).
    pub fn as_ptr(&self) -> *mut sys::ibv_context {
        self.inner.ctx
    }

    /// Whether the mlx5 direct-verbs interface supports this device.
    pub fn is_mlx5(&self) -> bool {
        self.inner.mlx5
    }

    /// The record of what was created and destroyed through this device (outlives it).
    pub fn ledger(&self) -> Arc<Ledger> {
        self.inner.ledger.clone()
    }

    pub(crate) fn ctx(&self) -> Ctx {
        Ctx::dev(&self.inner.name)
    }

    /// `ibv_query_device`.
    pub fn query(&self) -> Result<DeviceInfo> {
        let mut a = sys::ibv_device_attr::default();
        // SAFETY: live context; `a` is a writable ibv_device_attr.
        let rc = unsafe { sys::ibv_query_device(self.inner.ctx, &mut a) };
        check_rc(rc, "ibv_query_device", || self.ctx())?;
        // SAFETY: fw_ver is a NUL-terminated array filled by the provider (or all zeros).
        let fw = unsafe { CStr::from_ptr(a.fw_ver.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let clock = self.nic_clock_caps();
        Ok(DeviceInfo {
            name: self.inner.name.clone(),
            provider: provider_of(self.inner.ctx),
            fw_ver: fw,
            node_guid: format_guid(u64::from_be(a.node_guid)),
            sys_image_guid: format_guid(u64::from_be(a.sys_image_guid)),
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
            hw_ver: a.hw_ver,
            phys_port_cnt: a.phys_port_cnt,
            max_qp: a.max_qp,
            max_qp_wr: a.max_qp_wr,
            max_sge: a.max_sge,
            max_cqe: a.max_cqe,
            max_mr_size: a.max_mr_size,
            max_qp_rd_atom: a.max_qp_rd_atom,
            max_qp_init_rd_atom: a.max_qp_init_rd_atom,
            atomic_cap: match a.atomic_cap {
                sys::IBV_ATOMIC_HCA => "hca",
                sys::IBV_ATOMIC_GLOB => "global",
                _ => "none",
            },
            mlx5dv: self.inner.mlx5,
            nic_clock: clock.as_ref().ok().copied(),
            nic_clock_unknown: clock.err().map(|e| e.to_string()),
        })
    }

    /// `ibv_query_port` (the header's `___ibv_query_port`), with the port's first GIDs.
    pub fn query_port(&self, port: u8) -> Result<PortInfo> {
        let mut a = sys::ibv_port_attr::default();
        // SAFETY: live context; `a` is a writable ibv_port_attr of the size the header defines.
        let rc = unsafe { sys::___ibv_query_port(self.inner.ctx, port, &mut a) };
        check_rc(rc, "ibv_query_port", || self.ctx().port(port))?;
        Ok(PortInfo::from_attr(port, &a))
    }

    /// `ibv_query_gid_ex` for one index; `Ok(None)` for an empty slot.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Option<GidEntry>> {
        let mut e = sys::ibv_gid_entry::default();
        // SAFETY: live context; `e` is a writable ibv_gid_entry.
        let rc = unsafe { sys::ibv_query_gid_ex(self.inner.ctx, port as u32, index, &mut e, 0) };
        if rc == libc::ENODATA || rc == -libc::ENODATA {
            return Ok(None);
        }
        check_rc(rc, "ibv_query_gid_ex", || {
            self.ctx().port(port).detail(format!("GID index {index}"))
        })?;
        // SAFETY: `raw` is the 16-byte view of the union and always initialised.
        let gid = Gid(unsafe { e.gid.raw });
        if gid.is_zero() {
            return Ok(None);
        }
        Ok(Some(GidEntry {
            index,
            gid,
            gid_type: GidType::from_raw(e.gid_type),
        }))
    }

    /// The first `max` GID slots of a port that hold an entry. Only the first slots are read:
    /// a port may have 1024, and reading them all is slow.
    pub fn gids(&self, port: u8, max: u32) -> Result<Vec<GidEntry>> {
        let p = self.query_port(port)?;
        let n = (p.gid_tbl_len.max(0) as u32).min(max);
        let mut out = Vec::new();
        for i in 0..n {
            if let Some(e) = self.query_gid(port, i)? {
                out.push(e);
            }
        }
        Ok(out)
    }
}

/// What `ibv_query_device` says, plus the provider library.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceInfo {
    /// Device name.
    pub name: String,
    /// The user-space provider serving it (the library its `post_send` lives in).
    pub provider: String,
    /// Firmware version.
    pub fw_ver: String,
    /// Node GUID.
    pub node_guid: String,
    /// System image GUID.
    pub sys_image_guid: String,
    /// PCI vendor id.
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// Number of ports.
    pub phys_port_cnt: u8,
    /// Max QPs.
    pub max_qp: i32,
    /// Max WRs per queue.
    pub max_qp_wr: i32,
    /// Max SGEs per WR.
    pub max_sge: i32,
    /// Max CQEs per CQ.
    pub max_cqe: i32,
    /// Max MR size.
    pub max_mr_size: u64,
    /// Max outstanding RDMA reads/atomics as responder.
    pub max_qp_rd_atom: i32,
    /// Max outstanding RDMA reads/atomics as initiator.
    pub max_qp_init_rd_atom: i32,
    /// Atomic capability.
    pub atomic_cap: &'static str,
    /// Whether mlx5dv supports the device (the direct backend's precondition).
    pub mlx5dv: bool,
    /// Its completion timestamps' clock (`ibv_query_device_ex`); `None`: see `nic_clock_unknown`.
    pub nic_clock: Option<super::NicClockCaps>,
    /// Why `ibv_query_device_ex` could not say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic_clock_unknown: Option<String>,
}

/// The path of the provider library a context runs on (the shared object its `post_send` entry
/// lives in), resolved.
fn provider_path_of(ctx: *mut sys::ibv_context) -> Option<String> {
    // SAFETY: live context; we only read the function pointer's address.
    let f = unsafe { (*ctx).ops.post_send }?;
    let p = library_of(f as usize)?;
    Some(std::fs::canonicalize(&p).map(|r| r.display().to_string()).unwrap_or(p))
}

/// The provider of a context: the shared object its `post_send` entry lives in.
fn provider_of(ctx: *mut sys::ibv_context) -> String {
    // SAFETY: live context; we only read the function pointer's address.
    let f = unsafe { (*ctx).ops.post_send };
    match f {
        Some(f) => library_of(f as usize)
            .map(|p| provider_name(&p))
            .unwrap_or_else(|| "unknown".into()),
        None => "unknown".into(),
    }
}

/// The path of the shared object holding `addr`, by `dladdr`.
/// The address is only looked up, never dereferenced.
pub fn library_of(addr: usize) -> Option<String> {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the address and fills `info`.
    let ok = unsafe { libc::dladdr(addr as *const core::ffi::c_void, &mut info) };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the dynamic loader.
    Some(unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned())
}

/// `/usr/lib/.../libibverbs/librxe-rdmav34.so` -> `rxe`; `.../libmlx5.so.1` -> `mlx5`.
pub fn provider_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.strip_prefix("lib").unwrap_or(file);
    let stem = stem.split(".so").next().unwrap_or(stem);
    stem.split("-rdmav").next().unwrap_or(stem).to_string()
}

/// The libibverbs actually loaded: its resolved path and version (from the file name).
pub fn libibverbs_loaded() -> (String, String) {
    let path = library_of(sys::ibv_get_device_list as *const () as usize).unwrap_or_default();
    let real = std::fs::canonicalize(&path)
        .map(|p| p.display().to_string())
        .unwrap_or(path);
    let version = real
        .rsplit_once("libibverbs.so.")
        .map(|(_, v)| v)
        .filter(|v| v.matches('.').count() >= 3)
        .unwrap_or("unknown")
        .to_string();
    (real, version)
}

fn format_guid(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        g >> 48,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn gid_parse_and_format() {
        let g: Gid = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(g.to_string(), "0000:0000:0000:0000:0000:ffff:c000:0201");
        assert_eq!(g.ipv4_mapped(), Some(Ipv4Addr::new(192, 0, 2, 1)));
        let l: Gid = "fe80:0000:0000:0000:5054:00ff:fe12:3456".parse().unwrap();
        assert_eq!(l.0[0], 0xfe);
        assert_eq!(l.0[15], 0x56);
        assert_eq!(l.ipv4_mapped(), None);
        assert_eq!(l.to_string().parse::<Gid>().unwrap(), l);
        assert!(Gid::default().is_zero());
        assert!(!l.is_zero());
        let e = "192.0.2.1".parse::<Gid>().unwrap_err();
        assert!(e.to_string().contains("not a GID: '192.0.2.1'"));
        assert!("fe80::1::2".parse::<Gid>().is_err());
    }

    #[test]
    fn gid_index_prefers_roce_v2_ipv4() {
        let link_local = Gid("fe80::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        let v4: Gid = "::ffff:192.0.2.1".parse().unwrap();
        let entries = [
            GidEntry {
                index: 0,
                gid: link_local,
                gid_type: GidType::RoceV1,
            },
            GidEntry {
                index: 1,
                gid: link_local,
                gid_type: GidType::RoceV2,
            },
            GidEntry {
                index: 2,
                gid: v4,
                gid_type: GidType::RoceV1,
            },
            GidEntry {
                index: 3,
                gid: v4,
                gid_type: GidType::RoceV2,
            },
        ];
        assert_eq!(pick_gid_index(&entries), Some(3));
        assert_eq!(pick_gid_index(&entries[..3]), Some(1));
        assert_eq!(pick_gid_index(&entries[..1]), Some(0));
        assert_eq!(pick_gid_index(&[]), None);
    }

    #[test]
    fn mtu_speed_width_tables() {
        assert_eq!(mtu_bytes(sys::IBV_MTU_1024), 1024);
        assert_eq!(mtu_bytes(sys::IBV_MTU_4096), 4096);
        assert_eq!(mtu_bytes(0), 0);
        assert_eq!(mtu_from_bytes(2048), Some(sys::IBV_MTU_2048));
        assert_eq!(mtu_from_bytes(1500), None);
        assert_eq!(speed_str(32), "25.0 Gbps (EDR)");
        assert_eq!(width_str(2), "4X");
        assert_eq!(port_state_str(sys::IBV_PORT_ACTIVE), "ACTIVE");
        assert_eq!(phys_state_str(5), "LINK_UP");
    }

    #[test]
    fn provider_names_from_paths() {
        assert_eq!(
            provider_name("/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so"),
            "rxe"
        );
        assert_eq!(provider_name("/usr/lib/x86_64-linux-gnu/libmlx5.so.1"), "mlx5");
        assert_eq!(provider_name("libsiw-rdmav34.so"), "siw");
        assert_eq!(format_guid(0x0002c90300a1b2c3), "0002:c903:00a1:b2c3");
    }

    #[test]
    fn missing_device_classification() {
        assert_eq!(classify(libc::ENOSYS, false, false, false), NoDevice::KernelWithoutRdma);
        assert_eq!(classify(libc::EACCES, true, true, false), NoDevice::NoPermission);
        assert_eq!(classify(0, true, true, true), NoDevice::NoPermission);
        assert_eq!(classify(0, true, true, false), NoDevice::NoUverbs);
        assert_eq!(classify(0, true, false, false), NoDevice::NoDevices);
        assert_eq!(classify(libc::ENODEV, false, false, false), NoDevice::KernelWithoutRdma);
    }

    #[test]
    fn this_machine_without_rdma_is_explained_not_panicked() {
        // On a host whose kernel has RDMA this returns devices; on one without it (the CI
        // machines) the error must be the explained NoDevice, never anything else.
        match DeviceList::get() {
            Ok(l) => assert!(!l.names().is_empty()),
            Err(VerbsError::NoDevice(_)) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }

    #[test]
    fn loaded_libibverbs_is_found() {
        let (path, version) = libibverbs_loaded();
        assert!(path.contains("libibverbs.so"), "{path}");
        assert!(version.starts_with("1."), "{version}");
    }
}

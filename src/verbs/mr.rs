//! Protection domains, page-aligned (optionally 2 MiB huge-page) buffers and memory regions.

use super::device::Context;
use super::error::{check_ptr, check_rc, Ctx, Result, VerbsError};
use super::{Kind, Ledger};
use crate::sys;
use std::marker::PhantomData;
use std::sync::Arc;

pub(crate) struct PdInner {
    pub(crate) pd: *mut sys::ibv_pd,
    pub(crate) ctx: Context,
    /// For a parent domain: the PD and thread domain it was made of (released after it).
    _parts: Option<(Pd, Td)>,
}

// SAFETY: a PD is used through verbs, which are thread-safe on one context.
unsafe impl Send for PdInner {}
// SAFETY: as above.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: pd came from ibv_alloc_pd; MRs and QPs hold an Arc to us, so none is left.
        let rc = unsafe { sys::ibv_dealloc_pd(self.pd) };
        let name = self.ctx.name().to_string();
        self.ctx
            .inner
            .ledger
            .destroyed(Kind::Pd, check_rc(rc, "ibv_dealloc_pd", || Ctx::dev(&name)));
    }
}

/// A protection domain. Cheap to clone; deallocated after its last MR and QP.
#[derive(Clone)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

impl Pd {
    /// `ibv_alloc_pd`.
    pub fn new(ctx: &Context) -> Result<Self> {
        // SAFETY: live context.
        let pd = check_ptr(unsafe { sys::ibv_alloc_pd(ctx.as_ptr()) }, "ibv_alloc_pd", || ctx.ctx())?;
        ctx.inner.ledger.created(Kind::Pd);
        Ok(Pd {
            inner: Arc::new(PdInner {
                pd,
                ctx: ctx.clone(),
                _parts: None,
            }),
        })
    }

    /// A parent domain over `self` with a new thread domain (`ibv_alloc_td`,
    /// `ibv_alloc_parent_domain`): QPs created in it get a dedicated, lock-free BlueFlame
    /// register on mlx5, as perftest `--no_lock` and UCX do.
    pub fn with_thread_domain(&self) -> Result<Self> {
        let ctx = self.context();
        let td = Td::new(ctx)?;
        let mut attr = sys::ibv_parent_domain_init_attr {
            pd: self.as_ptr(),
            td: td.td,
            ..Default::default()
        };
        // SAFETY: live context, PD and TD; attr is valid for the call.
        let pd = unsafe { sys::ibv_alloc_parent_domain(ctx.as_ptr(), &mut attr) };
        let pd = check_ptr(pd, "ibv_alloc_parent_domain", || ctx.ctx())?;
        ctx.inner.ledger.created(Kind::Pd);
        Ok(Pd {
            inner: Arc::new(PdInner {
                pd,
                ctx: ctx.clone(),
                _parts: Some((self.clone(), td)),
            }),
        })
    }

    /// The device.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The raw pointer (valid while `self` lives).
    pub fn as_ptr(&self) -> *mut sys::ibv_pd {
        self.inner.pd
    }

    pub(crate) fn ledger(&self) -> &Ledger {
        &self.inner.ctx.inner.ledger
    }
}

/// A thread domain (`ibv_alloc_td`): promises single-threaded use of what is created in it.
pub struct Td {
    td: *mut sys::ibv_td,
    ctx: Context,
}

// SAFETY: a thread domain handle may move between threads; it is only passed to verbs.
unsafe impl Send for Td {}
// SAFETY: shared access only reads the pointer.
unsafe impl Sync for Td {}

impl Td {
    /// `ibv_alloc_td`.
    pub fn new(ctx: &Context) -> Result<Self> {
        let mut attr = sys::ibv_td_init_attr { comp_mask: 0 };
        // SAFETY: live context; attr valid for the call.
        let td = check_ptr(
            unsafe { sys::ibv_alloc_td(ctx.as_ptr(), &mut attr) },
            "ibv_alloc_td",
            || ctx.ctx(),
        )?;
        ctx.inner.ledger.created(Kind::Td);
        Ok(Td { td, ctx: ctx.clone() })
    }
}

impl Drop for Td {
    fn drop(&mut self) {
        // SAFETY: td came from ibv_alloc_td; the parent domain using it was deallocated first
        // (PdInner drops its parts after ibv_dealloc_pd).
        let rc = unsafe { sys::ibv_dealloc_td(self.td) };
        let name = self.ctx.name().to_string();
        self.ctx
            .inner
            .ledger
            .destroyed(Kind::Td, check_rc(rc, "ibv_dealloc_td", || Ctx::dev(&name)));
    }
}

/// Size of a huge page used for buffers.
pub const HUGE_PAGE: usize = 2 << 20;
/// Base page size assumed for alignment and pagemap look-ups.
pub const PAGE: usize = 4096;

/// Page-aligned anonymous memory, every page faulted in (so it can be pinned and looked up).
pub struct Buffer {
    map: memmap2::MmapMut,
    huge: bool,
}

impl Buffer {
    /// Maps `len` bytes (rounded up to the page or huge-page size), zeroed.
    pub fn new(len: usize, huge: bool) -> Result<Self> {
        if len == 0 {
            return Err(VerbsError::Invalid {
                ctx: Ctx::default(),
                why: "buffer length 0".into(),
            });
        }
        let unit = if huge { HUGE_PAGE } else { PAGE };
        let rounded = len.div_ceil(unit) * unit;
        let mut opts = memmap2::MmapOptions::new();
        opts.len(rounded);
        if huge {
            opts.huge(Some(21));
        }
        let mut map = opts.map_anon().map_err(|source| VerbsError::Map {
            len: rounded,
            huge,
            source,
        })?;
        // Fault every page in now (a huge mapping fails here, not later, if none are reserved).
        for off in (0..rounded).step_by(PAGE) {
            map[off] = 0;
        }
        Ok(Buffer { map, huge })
    }

    /// Mapped length.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Never true: a buffer has at least one page.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Start address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr() as *mut u8
    }

    /// Whether the buffer is made of 2 MiB pages.
    pub fn is_huge(&self) -> bool {
        self.huge
    }
}

/// Access rights of a memory region: grant only what the use needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MrAccess(pub u32);

impl MrAccess {
    /// Local reads only (a send or write source).
    pub const LOCAL_READ: MrAccess = MrAccess(0);
    /// The HCA may write locally (receive buffers, read and atomic results).
    pub const LOCAL_WRITE: MrAccess = MrAccess(sys::IBV_ACCESS_LOCAL_WRITE);
    /// Peers may RDMA-write.
    pub const REMOTE_WRITE: MrAccess = MrAccess(sys::IBV_ACCESS_REMOTE_WRITE);
    /// Peers may RDMA-read.
    pub const REMOTE_READ: MrAccess = MrAccess(sys::IBV_ACCESS_REMOTE_READ);
    /// Peers may run atomics.
    pub const REMOTE_ATOMIC: MrAccess = MrAccess(sys::IBV_ACCESS_REMOTE_ATOMIC);
}

impl std::ops::BitOr for MrAccess {
    type Output = MrAccess;
    fn bitor(self, o: MrAccess) -> MrAccess {
        MrAccess(self.0 | o.0)
    }
}

/// Where a memory region sits in memory, for reports (as perftest prints each region at start).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MrPlacement {
    /// Virtual start address.
    pub addr: u64,
    /// Offset of the start within its 4 KiB page.
    pub page_offset: u64,
    /// The largest power of two dividing the start address, bytes (0 for address 0).
    pub align: u64,
    /// Backed by 2 MiB pages.
    pub huge: bool,
    /// Physical address of the first byte, when `/proc/self/pagemap` gives it (root only).
    pub phys_addr: Option<u64>,
    /// Why there is no physical address, when there is none.
    pub phys_unreadable: Option<String>,
}

impl MrPlacement {
    /// The placement of memory starting at `addr` (backed by 2 MiB pages when `huge`): its page
    /// offset and alignment, and its physical address from `/proc/self/pagemap` or why not.
    pub fn at(addr: u64, huge: bool) -> Self {
        let (page_offset, align) = offset_and_align(addr);
        let (phys_addr, phys_unreadable) = match phys_addr_why(addr) {
            Ok(p) => (Some(p), None),
            Err(why) => (None, Some(why)),
        };
        MrPlacement {
            addr,
            page_offset,
            align,
            huge,
            phys_addr,
            phys_unreadable,
        }
    }

    /// A power-of-two byte count (an alignment) as the line says it: `4 KiB`, `2 MiB`, `64 B`.
    pub fn size_label(n: u64) -> String {
        bytes_label(n)
    }

    /// One short line: address, page offset, alignment, huge pages, physical address.
    pub fn line(&self) -> String {
        format!(
            "addr {:#x}, page offset {}, aligned {}, huge pages {}, phys {}",
            self.addr,
            self.page_offset,
            bytes_label(self.align),
            if self.huge { "yes" } else { "no" },
            match (&self.phys_addr, &self.phys_unreadable) {
                (Some(p), _) => format!("{p:#x}"),
                (None, Some(why)) => format!("unreadable ({why})"),
                (None, None) => "unreadable".to_string(),
            }
        )
    }
}

/// The offset of `addr` in its 4 KiB page, and the largest power of two dividing it (0 for 0).
pub fn offset_and_align(addr: u64) -> (u64, u64) {
    let align = if addr == 0 { 0 } else { 1u64 << addr.trailing_zeros() };
    (addr % PAGE as u64, align)
}

/// A power-of-two byte count as `4 KiB`, `2 MiB`, `64 B`.
fn bytes_label(n: u64) -> String {
    match n {
        n if n >= 1 << 30 && n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

/// A registered memory region over a [`Buffer`] it owns.
pub struct Mr {
    mr: *mut sys::ibv_mr,
    buf: Buffer,
    len: usize,
    pd: Pd,
}

// SAFETY: the MR's keys and buffer may be used from any thread; the buffer is owned.
unsafe impl Send for Mr {}
// SAFETY: shared access only reads keys and hands out raw addresses.
unsafe impl Sync for Mr {}

impl Mr {
    /// The protection domain the buffer is registered in.
    pub fn pd(&self) -> &Pd {
        &self.pd
    }

    /// Maps a buffer of `len` bytes and registers it (`ibv_reg_mr`) with `access`.
    pub fn new(pd: &Pd, len: usize, access: MrAccess, huge: bool) -> Result<Self> {
        let ctx = || pd.context().ctx().detail(format!("{len} bytes"));
        let buf = Buffer::new(len, huge).map_err(|e| match e {
            VerbsError::Invalid { why, .. } => VerbsError::Invalid { ctx: ctx(), why },
            e => e,
        })?;
        // SAFETY: live PD; the buffer is mapped for at least `len` bytes and outlives the MR
        // (it is dropped after ibv_dereg_mr in Drop).
        let mr = unsafe { sys::ibv_reg_mr(pd.as_ptr(), buf.as_ptr().cast(), len, access.0 as i32) };
        let mr = check_ptr(mr, "ibv_reg_mr", ctx)?;
        pd.ledger().created(Kind::Mr);
        Ok(Mr {
            mr,
            buf,
            len,
            pd: pd.clone(),
        })
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: live MR.
        unsafe { (*self.mr).lkey }
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: live MR.
        unsafe { (*self.mr).rkey }
    }

    /// Start address (as the HCA sees it: the virtual address).
    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// Registered length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the registered length is 0 (never: `Buffer` refuses it).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Raw start pointer.
    pub fn as_ptr(&self) -> *mut u8 {
        self.buf.as_ptr()
    }

    fn range(&self, offset: usize, len: usize) -> Result<()> {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(VerbsError::Invalid {
                ctx: self.pd.context().ctx(),
                why: format!("range {offset}+{len} exceeds the {}-byte memory region", self.len),
            });
        }
        Ok(())
    }

    /// A scatter/gather entry over `offset..offset+len`, bounds-checked.
    pub fn sge(&self, offset: usize, len: usize) -> Result<Sge<'_>> {
        self.range(offset, len)?;
        let len32 = u32::try_from(len).map_err(|_| VerbsError::Invalid {
            ctx: self.pd.context().ctx(),
            why: format!("SGE length {len} does not fit 32 bits"),
        })?;
        Ok(Sge {
            raw: sys::ibv_sge {
                addr: self.addr() + offset as u64,
                length: len32,
                lkey: self.lkey(),
            },
            _mr: PhantomData,
        })
    }

    /// What a peer needs to access `offset..` of this region.
    pub fn remote(&self, offset: usize) -> RemoteBuf {
        RemoteBuf {
            addr: self.addr() + offset as u64,
            rkey: self.rkey(),
            len: (self.len - offset.min(self.len)) as u64,
        }
    }

    /// Copies `out.len()` bytes from `offset` (a snapshot: the HCA may be writing).
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.range(offset, out.len())?;
        // SAFETY: in bounds (checked); byte copies of memory the HCA may write are fine for u8.
        unsafe { std::ptr::copy_nonoverlapping(self.as_ptr().add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copies `data` to `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.range(offset, data.len())?;
        // SAFETY: in bounds (checked); the buffer is ours and writable.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.as_ptr().add(offset), data.len()) };
        Ok(())
    }

    /// Reads a native-endian u64 at an 8-byte aligned offset (atomic results).
    pub fn read_u64(&self, offset: usize) -> Result<u64> {
        let mut b = [0u8; 8];
        self.read(offset, &mut b)?;
        Ok(u64::from_ne_bytes(b))
    }

    /// Where the region sits.
    pub fn placement(&self) -> MrPlacement {
        MrPlacement::at(self.addr(), self.buf.is_huge())
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: mr came from ibv_reg_mr and is deregistered once, before its buffer is unmapped.
        let rc = unsafe { sys::ibv_dereg_mr(self.mr) };
        let name = self.pd.context().name().to_string();
        self.pd
            .ledger()
            .destroyed(Kind::Mr, check_rc(rc, "ibv_dereg_mr", || Ctx::dev(&name)));
    }
}

/// Address, rkey and length of a peer's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct RemoteBuf {
    /// Remote virtual address.
    pub addr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Bytes available from `addr`.
    pub len: u64,
}

/// A scatter/gather entry into a live [`Mr`], bounds-checked at creation.
#[derive(Clone, Copy)]
pub struct Sge<'a> {
    pub(crate) raw: sys::ibv_sge,
    _mr: PhantomData<&'a Mr>,
}

impl Sge<'_> {
    /// The raw entry.
    pub fn raw(&self) -> sys::ibv_sge {
        self.raw
    }
    /// Its length.
    pub fn len(&self) -> u32 {
        self.raw.length
    }
    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.raw.length == 0
    }
}

/// The physical address of `vaddr` from `/proc/self/pagemap`, if readable and given (the PFN
/// reads as 0 without CAP_SYS_ADMIN).
pub fn phys_addr(vaddr: u64) -> Option<u64> {
    phys_addr_why(vaddr).ok()
}

/// As [`phys_addr`], with why there is none: the file unreadable, the page not mapped in yet, or
/// the frame number hidden (it needs root: CAP_SYS_ADMIN).
pub fn phys_addr_why(vaddr: u64) -> std::result::Result<u64, String> {
    use std::io::{Read, Seek, SeekFrom};
    let path = "/proc/self/pagemap";
    let mut f = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
    f.seek(SeekFrom::Start((vaddr / PAGE as u64) * 8))
        .map_err(|e| format!("{path}: {e}"))?;
    let mut b = [0u8; 8];
    f.read_exact(&mut b).map_err(|e| format!("{path}: {e}"))?;
    let entry = u64::from_le_bytes(b);
    match pagemap_phys(entry, vaddr) {
        Some(p) => Ok(p),
        None if entry >> 63 & 1 == 0 => Err("page not mapped in yet".into()),
        None => Err("needs root".into()),
    }
}

/// Decodes a pagemap entry: bit 63 present, bits 0..55 the PFN.
pub fn pagemap_phys(entry: u64, vaddr: u64) -> Option<u64> {
    let present = entry >> 63 & 1 == 1;
    let pfn = entry & ((1u64 << 55) - 1);
    if !present || pfn == 0 {
        return None;
    }
    Some(pfn * PAGE as u64 + vaddr % PAGE as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_page_aligned_and_rounded() {
        let b = Buffer::new(100, false).unwrap();
        assert_eq!(b.as_ptr() as usize % PAGE, 0);
        assert_eq!(b.len(), PAGE);
        assert!(!b.is_huge());
        assert!(Buffer::new(0, false).is_err());
    }

    #[test]
    fn huge_buffer_error_says_reserve() {
        // With no huge pages reserved the mapping fails and the error says what to do; with
        // some reserved it succeeds and is 2 MiB aligned.
        match Buffer::new(1, true) {
            Ok(b) => assert_eq!(b.as_ptr() as usize % HUGE_PAGE, 0),
            Err(e) => assert!(e.to_string().contains("vm.nr_hugepages"), "{e}"),
        }
    }

    #[test]
    fn pagemap_decoding() {
        assert_eq!(pagemap_phys(0, 0x1234), None);
        assert_eq!(pagemap_phys(1 << 63, 0x1234), None); // present, PFN hidden (no CAP_SYS_ADMIN)
        assert_eq!(
            pagemap_phys((1 << 63) | 0x42, 0x7f00_0000_1234),
            Some(0x42 * 4096 + 0x234)
        );
        assert_eq!(pagemap_phys(0x42, 0x1234), None); // not present
    }

    #[test]
    fn offset_and_alignment_of_an_address() {
        assert_eq!(offset_and_align(0x7f00_0020_0000), (0, 2 << 20));
        assert_eq!(offset_and_align(0x7f00_0000_1000), (0, 4096));
        assert_eq!(offset_and_align(0x7f00_0000_1040), (0x40, 64));
        assert_eq!(offset_and_align(0x1003), (3, 1));
        assert_eq!(offset_and_align(0), (0, 0));
        let p = MrPlacement::at(0x7f00_0000_1040, false);
        assert_eq!(
            (p.addr, p.page_offset, p.align, p.huge),
            (0x7f00_0000_1040, 0x40, 64, false)
        );
        assert!(p
            .line()
            .starts_with("addr 0x7f0000001040, page offset 64, aligned 64 B, huge pages no, phys "));
        assert_eq!(bytes_label(2 << 20), "2 MiB");
        assert_eq!(bytes_label(4096), "4 KiB");
    }

    #[test]
    fn placement_of_a_buffer_says_its_physical_address_or_why_not() {
        let b = Buffer::new(100, false).unwrap();
        let p = MrPlacement::at(b.as_ptr() as u64, b.is_huge());
        assert_eq!(p.page_offset, 0);
        assert!(p.align >= PAGE as u64, "{p:?}");
        // faulted in: a physical address as root, else "needs root"
        match (p.phys_addr, p.phys_unreadable.as_deref()) {
            (Some(a), None) => assert_eq!(a % PAGE as u64, 0),
            (None, Some(why)) => assert_eq!(why, "needs root"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn access_flags_combine() {
        let a = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
        assert_eq!(a.0, sys::IBV_ACCESS_LOCAL_WRITE | sys::IBV_ACCESS_REMOTE_READ);
        assert_eq!(MrAccess::LOCAL_READ.0, 0);
    }
}

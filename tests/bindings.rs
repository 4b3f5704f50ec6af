//! The raw layer against the C compiler: layouts bindgen cannot check (the hand-written
//! `mlx5_wqe_ctrl_seg`), and the C wrappers of `static inline` functions, called for real.

use rdmaprobe::sys;
use rdmaprobe::sys::layout_probe as c;
use std::mem::{offset_of, size_of};

#[test]
fn ctrl_seg_matches_the_c_compiler() {
    // SAFETY: plain reads of constant arrays defined in layout_probe.c.
    let (l, align) = unsafe { (c::rdmaprobe_layout_ctrl_seg, c::rdmaprobe_layout_align_ctrl_seg) };
    let ours = [
        size_of::<sys::mlx5_wqe_ctrl_seg>(),
        offset_of!(sys::mlx5_wqe_ctrl_seg, opmod_idx_opcode),
        offset_of!(sys::mlx5_wqe_ctrl_seg, qpn_ds),
        offset_of!(sys::mlx5_wqe_ctrl_seg, signature),
        offset_of!(sys::mlx5_wqe_ctrl_seg, dci_stream_channel_id),
        offset_of!(sys::mlx5_wqe_ctrl_seg, fm_ce_se),
        offset_of!(sys::mlx5_wqe_ctrl_seg, imm),
    ];
    let theirs: Vec<usize> = l.iter().map(|&v| v as usize).collect();
    assert_eq!(ours.as_slice(), theirs.as_slice());
    assert_eq!(std::mem::align_of::<sys::mlx5_wqe_ctrl_seg>(), align as usize);
}

#[test]
fn bindgen_layouts_match_the_c_compiler() {
    // SAFETY: plain reads of constant arrays defined in layout_probe.c.
    let (cqe, sizes) = unsafe { (c::rdmaprobe_layout_cqe64, c::rdmaprobe_layout_sizes) };
    let ours_cqe = [
        size_of::<sys::mlx5_cqe64>(),
        offset_of!(sys::mlx5_cqe64, byte_cnt),
        offset_of!(sys::mlx5_cqe64, wqe_counter),
        offset_of!(sys::mlx5_cqe64, signature),
        offset_of!(sys::mlx5_cqe64, op_own),
    ];
    assert_eq!(ours_cqe.map(|v| v as u64), cqe.map(u64::from));
    assert_eq!(ours_cqe, [64, 44, 60, 62, 63]);
    let ours = [
        size_of::<sys::ibv_wc>(),
        size_of::<sys::ibv_send_wr>(),
        size_of::<sys::ibv_recv_wr>(),
        size_of::<sys::ibv_sge>(),
        size_of::<sys::ibv_qp_ex>(),
        size_of::<sys::mlx5_wqe_data_seg>(),
        size_of::<sys::mlx5_wqe_raddr_seg>(),
        size_of::<sys::mlx5_err_cqe>(),
    ];
    assert_eq!(ours.map(|v| v as u64), sizes.map(u64::from));
    assert_eq!(ours[..4], [48, 128, 32, 16]);
}

/// What `mlx5dv_set_ctrl_seg` writes, called through bindgen's C wrapper of the static inline
/// function: the bytes bindings.md recorded from rdma-core 44.
/// 16 bytes aligned as a WQE segment in the ring (the SSE setter uses an aligned 16-byte store).
#[repr(C, align(16))]
struct Seg([u8; 16]);

#[test]
fn rdma_core_ctrl_seg_setters_are_callable_and_write_the_known_bytes() {
    let mut seg = Seg([0xaau8; 16]);
    let p = seg.0.as_mut_ptr() as *mut sys::mlx5_wqe_ctrl_seg;
    // SAFETY: `seg` is 16 writable bytes, 16-byte aligned; the setter writes only within it.
    unsafe { sys::mlx5dv_set_ctrl_seg(p, 0x1234, 8, 0, 0xabcdef, 8, 3, 0x5a, 0xdeadbeef) };
    assert_eq!(
        seg.0,
        [0x00, 0x12, 0x34, 0x08, 0xab, 0xcd, 0xef, 0x03, 0x5a, 0xaa, 0xaa, 0x08, 0xef, 0xbe, 0xad, 0xde]
    );
    #[cfg(target_arch = "x86_64")]
    {
        let mut seg = Seg([0xaau8; 16]);
        let p = seg.0.as_mut_ptr() as *mut sys::mlx5_wqe_ctrl_seg;
        // SAFETY: as above; the SSE setter's aligned 16-byte store covers exactly `seg`.
        unsafe { sys::mlx5dv_x86_set_ctrl_seg(p, 0x1234, 8, 0, 0xabcdef, 8, 3, 0x5a, 0xdeadbeef) };
        assert_eq!(
            seg.0,
            [0x00, 0x12, 0x34, 0x08, 0xab, 0xcd, 0xef, 0x03, 0x5a, 0, 0, 0x08, 0xef, 0xbe, 0xad, 0xde]
        );
    }
}

#[test]
fn rdma_core_data_seg_setter_is_callable() {
    let mut seg = sys::mlx5_wqe_data_seg::default();
    // SAFETY: a valid, writable data segment.
    unsafe { sys::mlx5dv_set_data_seg(&mut seg, 0x1000, 0x1122_3344, 0x7f01_0203_0405) };
    // SAFETY: mlx5_wqe_data_seg is 16 plain bytes.
    let bytes: [u8; 16] = unsafe { std::mem::transmute(seg) };
    assert_eq!(
        bytes,
        [0, 0, 0x10, 0, 0x11, 0x22, 0x33, 0x44, 0, 0, 0x7f, 0x01, 0x02, 0x03, 0x04, 0x05]
    );
}

#[test]
fn build_recorded_the_rdma_core_version() {
    let v = env!("RDMAPROBE_BUILD_RDMA_CORE");
    let lib = env!("RDMAPROBE_BUILD_LIBIBVERBS");
    assert!(lib.starts_with("1.") && lib.ends_with(v), "{lib} vs {v}");
    assert!(v.split('.').all(|p| p.parse::<u32>().is_ok()), "{v}");
}

//! Tests of the send queue: configuration checks, the bytes and stores of every post and
//! doorbell path, the ring's wrap and retirement.

use super::super::seg::{opcode, DataSeg};
use super::*;

/// bf-nofence drops the flush after a BlueFlame copy only: an 8-byte doorbell (a WQE of the
/// control segment alone, or a postlist) keeps it, as UCX does; bf flushes after both.
#[test]
fn bf_nofence_keeps_the_fence_after_a_doorbell() {
    use super::super::barrier::FLUSHES;
    let flushes = || FLUSHES.with(|f| f.get());
    let d = [DataSeg::new(0x1000, 1, 8)];
    for (mode, after_bf, after_db) in [(DbMode::BfNoFence, 0, 1), (DbMode::Bf, 1, 1), (DbMode::Db, 1, 1)] {
        let mut r = rig();
        let mut q = sq(&mut r, mode, 256);
        let f0 = flushes();
        q.post_and_ring(&Wqe::send(Payload::Gather(&d))).unwrap(); // 2 units: BlueFlame
        let f1 = flushes();
        q.post_and_ring(&Wqe::nop()).unwrap(); // 1 unit: the doorbell, as libmlx5
        let f2 = flushes();
        q.post(&Wqe::send(Payload::Gather(&d))).unwrap();
        q.post(&Wqe::send(Payload::Gather(&d))).unwrap();
        q.ring(); // a postlist: the doorbell
        let f3 = flushes();
        assert_eq!((f1 - f0, f2 - f1, f3 - f2), (after_bf, after_db, after_db), "{mode:?}");
    }
}

#[repr(C, align(64))]
struct Mem<const N: usize>([u8; N]);

struct Rig {
    ring: Mem<{ 8 * 64 }>,
    dbrec: [u32; 2],
    reg: Mem<512>,
}

#[derive(Default)]
struct Count(u32, u32);
impl RingHook for Count {
    fn rung(&mut self, _qpn: u32, pi: u32) {
        self.0 += 1;
        self.1 = pi;
    }
}

fn sq(r: &mut Rig, mode: DbMode, bf_size: u32) -> Sq<Count> {
    let cfg = SqConfig {
        buf: r.ring.0.as_mut_ptr(),
        wqe_cnt: 8,
        stride: 64,
        dbrec: r.dbrec.as_mut_ptr(),
        bf_reg: r.reg.0.as_mut_ptr(),
        bf_size,
        qpn: 0x123,
        max_inline: 220,
    };
    // SAFETY: the rig's buffers match the config and outlive the queue in each test.
    unsafe { Sq::new(cfg, mode, Count::default()) }.unwrap()
}

fn rig() -> Rig {
    Rig {
        ring: Mem([0; 512]),
        dbrec: [0; 2],
        reg: Mem([0; 512]),
    }
}

#[test]
fn config_is_validated() {
    let mut r = rig();
    let mut cfg = SqConfig {
        buf: r.ring.0.as_mut_ptr(),
        wqe_cnt: 6,
        stride: 64,
        dbrec: r.dbrec.as_mut_ptr(),
        bf_reg: r.reg.0.as_mut_ptr(),
        bf_size: 256,
        qpn: 1,
        max_inline: 0,
    };
    // SAFETY: rejected before any memory is touched.
    let e = unsafe { Sq::new(cfg, DbMode::Bf, NoHook) }.err();
    assert_eq!(
        e,
        Some(SqError::BadConfig("SQ wqe_cnt is not a power of two in 1..=32768"))
    );
    cfg.wqe_cnt = 8;
    cfg.stride = 128;
    // SAFETY: as above.
    assert!(unsafe { Sq::new(cfg, DbMode::Bf, NoHook) }.is_err());
    cfg.stride = 64;
    // rdma-core's bf_reg_size / 2: a power of two a WQEBB fits in (128 too), not 96 or 32
    for bad in [96, 32, 8192] {
        cfg.bf_size = bad;
        // SAFETY: as above.
        assert!(unsafe { Sq::new(cfg, DbMode::Bf, NoHook) }.is_err(), "bf_size {bad}");
    }
    cfg.bf_size = 128;
    // SAFETY: valid rig memory (its register has 512 bytes).
    assert_eq!(unsafe { Sq::new(cfg, DbMode::Bf, NoHook) }.unwrap().mode(), DbMode::Bf);
    cfg.bf_size = 0;
    // SAFETY: valid rig memory.
    let s = unsafe { Sq::new(cfg, DbMode::Bf, NoHook) }.unwrap();
    assert_eq!(s.mode(), DbMode::Db, "no BlueFlame register forces doorbell mode");
}

#[test]
fn post_writes_segments_and_ring_writes_dbrec_and_bf() {
    let mut r = rig();
    let mut q = sq(&mut r, DbMode::Bf, 256);
    let d = [DataSeg::new(0x7f00_0000_1000, 0x42, 64)];
    let i = q
        .post(&Wqe::write(0xaa00, 0x77, Payload::Gather(&d)).signaled())
        .unwrap();
    assert_eq!(i, 0);
    q.ring();
    assert_eq!(q.hook_mut().0, 1);
    assert_eq!(u32::from_be(r.dbrec[1]), 1);
    let w = &r.ring.0[..64];
    assert_eq!(&w[0..4], &[0, 0, 0, opcode::RDMA_WRITE]);
    assert_eq!(&w[4..8], &[0, 0x01, 0x23, 3]);
    assert_eq!(w[11], 0x08);
    assert_eq!(&w[16..24], &0xaa00u64.to_be_bytes());
    assert_eq!(&w[24..28], &0x77u32.to_be_bytes());
    assert_eq!(&w[32..36], &64u32.to_be_bytes());
    assert_eq!(&w[40..48], &0x7f00_0000_1000u64.to_be_bytes());
    // BlueFlame: the whole 64-byte WQEBB copied to the register at offset 0.
    assert_eq!(&r.reg.0[..64], w);
    assert!(r.reg.0[256..].iter().all(|&b| b == 0));
}

#[test]
fn bf_offset_toggles_and_batches_use_the_doorbell() {
    let mut r = rig();
    let mut q = sq(&mut r, DbMode::Bf, 256);
    let d = [DataSeg::new(1, 2, 3)];
    q.post_and_ring(&Wqe::send(Payload::Gather(&d))).unwrap(); // BF at offset 0
    q.post(&Wqe::send(Payload::Gather(&d))).unwrap();
    q.post(&Wqe::send(Payload::Gather(&d)).signaled()).unwrap();
    q.ring(); // two WQEs: 8-byte doorbell at offset 256 with the last WQE's first 8 bytes
    assert_eq!(q.pi(), 3);
    assert_eq!(&r.reg.0[256..264], &r.ring.0[128..136]);
    assert!(
        r.reg.0[264..320].iter().all(|&b| b == 0),
        "only 8 bytes stored in db mode"
    );
    assert_eq!(u32::from_be(r.dbrec[1]), 3);
}

#[test]
fn db_mode_never_copies_the_wqe() {
    let mut r = rig();
    let mut q = sq(&mut r, DbMode::Db, 256);
    let d = [DataSeg::new(1, 2, 3)];
    q.post_and_ring(&Wqe::send(Payload::Gather(&d))).unwrap();
    assert_eq!(&r.reg.0[..8], &r.ring.0[..8]);
    assert!(r.reg.0[8..64].iter().all(|&b| b == 0));
}

#[test]
fn full_ring_refuses_and_retire_frees() {
    let mut r = rig();
    let mut q = sq(&mut r, DbMode::Db, 0);
    let data = [0x5au8; 200]; // 4 WQEBBs each
    q.post(&Wqe::send(Payload::Inline(&data))).unwrap();
    q.post(&Wqe::send(Payload::Inline(&data))).unwrap();
    assert_eq!(q.free(), 0);
    let e = q.post(&Wqe::nop()).unwrap_err();
    assert_eq!(
        e,
        SqError::Full {
            qpn: 0x123,
            need: 1,
            free: 0
        }
    );
    q.retire(0); // the first WQE (4 WQEBBs)
    assert_eq!((q.ci(), q.free()), (4, 4));
    q.retire(4);
    assert_eq!((q.ci(), q.free()), (8, 8));
    let big = [0u8; 221];
    assert!(matches!(
        q.post(&Wqe::send(Payload::Inline(&big))),
        Err(SqError::InlineTooLarge { .. })
    ));
}

#[test]
fn prepared_wqes_write_the_same_bytes_as_built_ones() {
    let d = [DataSeg::new(0x7f00_0000_1000, 0x42, 64)];
    let data: [u8; 150] = core::array::from_fn(|i| i as u8 ^ 0x5a);
    let mut av = super::super::seg::AvSeg::default().to(0x4242, 0x1111_1111);
    av.rgid = core::array::from_fn(|i| i as u8 + 1);
    let wqes = [
        Wqe::write(0xaa00, 0x77, Payload::Gather(&d)),
        Wqe::send_imm(0xdead, Payload::Inline(&data[..40])),
        Wqe::write(0x10, 1, Payload::Inline(&data)),
        Wqe::atomic_fa(0x20, 2, 9, &d),
        Wqe::send(Payload::Gather(&d)).to(&av),
        Wqe::send_imm(7, Payload::Inline(&data[..100])).to(&av),
    ];
    for (i, w) in wqes.iter().enumerate() {
        for signaled in [false, true] {
            let (mut r1, mut r2) = (rig(), rig());
            let mut a = sq(&mut r1, DbMode::Db, 0);
            let mut b = sq(&mut r2, DbMode::Db, 0);
            // start both at WQEBB 6 so the larger ones wrap
            for _ in 0..6 {
                a.post(&Wqe::nop()).unwrap();
                b.post(&Wqe::nop()).unwrap();
            }
            a.retire(5);
            b.retire(5);
            let built = if signaled { w.signaled() } else { *w };
            let ia = a.post(&built).unwrap();
            let p = Prepared::new(w, 0x123, 220).unwrap();
            let ib = b.post_prepared(&p, signaled).unwrap();
            assert_eq!(ia, ib);
            let n = built.wqebbs() as usize;
            for k in 0..n {
                let s = ((6 + k) % 8) * 64;
                assert_eq!(
                    &r1.ring.0[s..s + 64],
                    &r2.ring.0[s..s + 64],
                    "WQE {i} signaled {signaled} WQEBB {k}"
                );
            }
            assert_eq!((a.pi(), b.pi()), (6 + n as u32, 6 + n as u32));
        }
    }
}

#[test]
fn inline_wraps_past_the_ring_end() {
    let mut r = rig();
    let mut q = sq(&mut r, DbMode::Db, 0);
    for _ in 0..6 {
        q.post(&Wqe::nop()).unwrap();
    }
    q.retire(5);
    let data: [u8; 150] = core::array::from_fn(|i| i as u8);
    // starts at WQEBB 6: ctrl+raddr (32 B), header, 150 bytes: 3 WQEBBs: 6, 7, then 0.
    let i = q.post(&Wqe::write(0x10, 1, Payload::Inline(&data))).unwrap();
    assert_eq!(i, 6);
    let ring = &r.ring.0;
    let off = 6 * 64 + 32;
    assert_eq!(&ring[off..off + 4], &(150u32 | INLINE_SEG).to_be_bytes());
    let first = 512 - (off + 4); // bytes before the end
    assert_eq!(&ring[off + 4..], &data[..first]);
    assert_eq!(&ring[..150 - first], &data[first..]);
}

/// The fast paths ([`Sq::post_prepared_ring`] for one WQE, [`Sq::post_prepared_n`] for a
/// batch) store exactly what `post_prepared` x n then `ring` store: ring, doorbell record,
/// register (BlueFlame copy or 8-byte doorbell, at the toggling offset), indices, doorbells,
/// over 40 rounds of mixed sizes that wrap the 8-WQEBB ring many times, in every mode, with
/// WQEs left waiting before a single post (the fast path must step aside) and batches that
/// do not fit (the batch path refuses the whole batch and writes nothing; the reference,
/// post by post, writes what fits and is brought level by hand).
#[test]
fn fast_prepared_posts_store_what_post_then_ring_stores() {
    let d = [DataSeg::new(0x7f00_0000_1000, 0x42, 64)];
    let data: [u8; 100] = core::array::from_fn(|i| i as u8 ^ 0xa5);
    let wqes = [
        Wqe::write(0xaa00, 0x77, Payload::Gather(&d)),
        Wqe::send(Payload::Inline(&data[..8])),
        Wqe::write(0x10, 1, Payload::Inline(&data[..40])),
        Wqe::send_imm(0xbeef, Payload::Inline(&data)),
    ];
    let preps: [Prepared; 4] = core::array::from_fn(|i| Prepared::new(&wqes[i], 0x123, 220).unwrap());
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = |m: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % m
    };
    for (mode, bf_size) in [
        (DbMode::Bf, 256),
        (DbMode::BfNoFence, 256),
        (DbMode::Db, 256),
        (DbMode::Bf, 0),
    ] {
        let (mut r1, mut r2) = (rig(), rig());
        let mut a = sq(&mut r1, mode, bf_size);
        let mut b = sq(&mut r2, mode, bf_size);
        for round in 0..40 {
            let p = &preps[next(4) as usize];
            let n = 1 + next(if p.wqebbs() == 1 { 9 } else { 3 }) as u32;
            let signal_last = next(2) == 1;
            let leftover = next(4) == 0 && n == 1;
            if leftover {
                // a WQE waits for a doorbell: the single post must ring for both
                a.post_prepared(&preps[0], false).unwrap();
                b.post_prepared(&preps[0], false).unwrap();
            }
            let fits = u64::from(p.wqebbs()) * u64::from(n) <= u64::from(a.free());
            let ra = (|| {
                let mut last = 0;
                for i in 0..n {
                    last = a.post_prepared(p, signal_last && i == n - 1)?;
                }
                a.ring();
                Ok::<u16, SqError>(last)
            })();
            let rb = if n == 1 {
                b.post_prepared_ring(p, signal_last)
            } else {
                b.post_prepared_n(p, n, signal_last)
                    .map(|i| i.unwrap())
                    .inspect(|_| b.ring())
            };
            let what = format!(
                "{mode:?} bf_size {bf_size} round {round}: n {n} of {} WQEBBs",
                p.wqebbs()
            );
            let last = if fits {
                let last = ra.unwrap();
                assert_eq!(last, rb.unwrap(), "{what}");
                Some(last)
            } else {
                // the batch is refused whole; the reference wrote the WQEs that fitted and
                // stopped before its doorbell: bring `b` to the same state by hand
                assert!(matches!(rb, Err(SqError::Full { .. })), "{what}: {rb:?}");
                assert!(matches!(ra, Err(SqError::Full { .. })), "{what}: {ra:?}");
                let mut last = None;
                while b.pi() != a.pi() {
                    last = Some(b.post_prepared(p, false).unwrap());
                }
                a.ring();
                b.ring();
                last
            };
            assert_eq!(r1.ring.0, r2.ring.0, "{what}: ring");
            assert_eq!(r1.dbrec, r2.dbrec, "{what}: doorbell record");
            assert_eq!(r1.reg.0, r2.reg.0, "{what}: register page");
            assert_eq!(
                (a.pi(), a.hook.0, a.hook.1),
                (b.pi(), b.hook.0, b.hook.1),
                "{what}: index, doorbells"
            );
            assert_eq!(a.bf_offset(), b.bf_offset(), "{what}: BlueFlame offset");
            // retire everything, as the completion of the last WQE would
            if let Some(last) = last {
                a.retire(last);
                b.retire(last);
            }
            assert_eq!(a.ci(), a.pi(), "{what}: retired");
            assert_eq!((a.ci(), a.pi()), (b.ci(), b.pi()), "{what}: retired");
        }
    }
}

/// A UD SEND: the control segment, the 48-byte datagram segment (the address vector with the
/// destination QP and Q_Key), then the data, as libmlx5 lays it out (`tests/oracle.rs` compares
/// the bytes with libmlx5's own); also where the WQE starts in the last WQEBB of the ring.
#[test]
fn ud_send_carries_the_datagram_segment_after_the_control_segment() {
    use super::super::seg::{AvSeg, EXTENDED_UD_AV};
    let d = [DataSeg::new(0x7f00_0000_1000, 0x42, 64)];
    let mut av = AvSeg::default().to(0xabcdef, 0x1111_1111);
    av.rlid = super::super::seg::Be16::new(7);
    for start in [0u32, 7] {
        let mut r = rig();
        let mut q = sq(&mut r, DbMode::Db, 0);
        for _ in 0..start {
            q.post(&Wqe::nop()).unwrap();
        }
        if start > 0 {
            q.retire(start as u16 - 1);
        }
        let i = q.post(&Wqe::send(Payload::Gather(&d)).to(&av).signaled()).unwrap();
        assert_eq!(u32::from(i), start);
        let w = start as usize * 64;
        let ring = &r.ring.0;
        assert_eq!(ring[w + 7] & 0x3f, 5, "DS: ctrl 1 + datagram 3 + data 1");
        assert_eq!(ring[w + 3], opcode::SEND);
        let seg = &ring[w + 16..w + 64];
        assert_eq!(&seg[0..4], &0x1111_1111u32.to_be_bytes(), "Q_Key first");
        assert_eq!(
            &seg[8..12],
            &(0xabcdef | EXTENDED_UD_AV).to_be_bytes(),
            "destination QP"
        );
        assert_eq!(&seg[14..16], &7u16.to_be_bytes(), "rlid");
        // the data segment is the first unit of the next WQEBB (wrapped to 0 from 7)
        let n = ((start as usize + 1) % 8) * 64;
        assert_eq!(&ring[n..n + 4], &64u32.to_be_bytes());
        assert_eq!(&ring[n + 8..n + 16], &0x7f00_0000_1000u64.to_be_bytes());
        assert_eq!(q.pi(), start + 2);
    }
}

/// Inline WQEs posted from a prepared image carry the bytes given at the post, not those the
/// image was built with: every way of posting them (the single post, whose words are made in
/// registers; a batch; `set_inline` then `post_prepared`) stores exactly what building the WQE
/// with those bytes (`post`) then `ring` stores — ring, doorbell record and register page — for
/// every opcode that takes inline data, RC and UD, every payload length from 0 to 60 and some
/// longer, at ring positions where the WQE wraps. The prepared side's ring starts full of
/// garbage and its source has garbage after the payload: the padding it writes is zero, as in
/// the built WQE (whose ring starts zeroed), and nothing past the payload is sent.
#[test]
fn inline_images_carry_the_bytes_given_at_each_post() {
    let mut av = super::super::seg::AvSeg::default().to(0x4242, 0x1111_1111);
    av.rgid = core::array::from_fn(|i| i as u8 + 1);
    let data: [u8; 256] = core::array::from_fn(|i| (i as u8).wrapping_mul(7) ^ 0x5a);
    let zeros = [0u8; 256];
    let lens = (0..=60).chain([100, 150, 200]);
    let mut checked = 0;
    for len in lens {
        let mut src = [0xffu8; 256];
        src[..len].copy_from_slice(&data[..len]);
        for op in 0..5 {
            let build = |bytes: &'static [u8]| -> Wqe<'static> { make(op, bytes) };
            // SAFETY of the leak: test data, small and bounded (the loops' sizes)
            let real: &'static [u8] = Box::leak(data[..len].to_vec().into_boxed_slice());
            let stale: &'static [u8] = Box::leak(zeros[..len].to_vec().into_boxed_slice());
            let avs: &'static super::super::seg::AvSeg = Box::leak(Box::new(av));
            let with_av = |w: Wqe<'static>| if op == 4 { w.to(avs) } else { w };
            let want = with_av(build(real));
            let Ok(mut prep) = Prepared::new(&with_av(build(stale)), 0x123, 220) else {
                continue; // over 4 WQEBBs: built at every post by the backend
            };
            for start in [0u32, 5, 7] {
                for way in 0..3 {
                    let n = if way == 1 { 2 } else { 1 };
                    let (mut r1, mut r2) = (rig(), rig());
                    r2.ring.0 = [0xee; 512];
                    let mut a = sq(&mut r1, DbMode::Bf, 256);
                    let mut b = sq(&mut r2, DbMode::Bf, 256);
                    for _ in 0..start {
                        a.post(&Wqe::nop()).unwrap();
                        b.post(&Wqe::nop()).unwrap();
                    }
                    a.ring();
                    b.ring();
                    if start > 0 {
                        a.retire(start as u16 - 1);
                        b.retire(start as u16 - 1);
                    }
                    // the built WQE leaves its padding as the ring held it (as libmlx5): zero
                    r1.ring.0 = [0; 512];
                    for i in 0..n {
                        a.post(&if i == n - 1 { want.signaled() } else { want }).unwrap();
                    }
                    a.ring();
                    match way {
                        0 => {
                            b.post_prepared_ring_inline(&mut prep, &src, true).unwrap();
                        }
                        1 => {
                            b.post_prepared_n_inline(&mut prep, &src, n, true).unwrap();
                            b.ring();
                        }
                        _ => {
                            prep.set_inline(&src).unwrap();
                            b.post_prepared(&prep, true).unwrap();
                            b.ring();
                        }
                    }
                    let what = format!("op {op} len {len} start {start} way {way}");
                    let nbb = (want.wqebbs() * n) as usize;
                    for k in 0..nbb {
                        let s = ((start as usize + k) % 8) * 64;
                        assert_eq!(&r1.ring.0[s..s + 64], &r2.ring.0[s..s + 64], "{what}: WQEBB {k}");
                    }
                    assert_eq!(r1.dbrec, r2.dbrec, "{what}: doorbell record");
                    assert_eq!(r1.reg.0, r2.reg.0, "{what}: register page");
                    assert_eq!((a.pi(), a.bf_offset()), (b.pi(), b.bf_offset()), "{what}");
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 800, "{checked} cases");
}

/// The WQE of opcode `op` (0 WRITE, 1 WRITE_IMM, 2 SEND, 3 SEND_IMM, 4 SEND, for UD) with
/// `bytes` inline.
fn make(op: u32, bytes: &[u8]) -> Wqe<'_> {
    match op {
        0 => Wqe::write(0xaa00, 0x77, Payload::Inline(bytes)),
        1 => Wqe::write_imm(0xaa00, 0x77, 0xbeef, Payload::Inline(bytes)),
        3 => Wqe::send_imm(0xdead, Payload::Inline(bytes)),
        _ => Wqe::send(Payload::Inline(bytes)),
    }
}

/// An inline image takes a source that holds its payload, and refuses a shorter one (every
/// way in); the bytes of a longer one past the payload are never carried; an image without
/// inline data takes anything and stays as it is.
#[test]
fn inline_sources_shorter_than_the_payload_are_refused() {
    let data = [0x11u8; 40];
    for len in [1usize, 8, 12, 40] {
        let mut p = Prepared::new(&Wqe::write(0x10, 1, Payload::Inline(&data[..len])), 0x123, 220).unwrap();
        assert_eq!(p.inline_len() as usize, len);
        let short = vec![0u8; len - 1];
        let refused = |r: Result<(), SqError>| {
            assert!(
                matches!(r, Err(SqError::InlineTooLarge { qpn: 0x123, max, .. }) if max as usize == len),
                "len {len}: {r:?}"
            )
        };
        refused(p.set_inline(&short));
        refused(p.body_with(&short).map(|_| ()));
        let mut r = rig();
        let mut q = sq(&mut r, DbMode::Bf, 256);
        refused(q.post_prepared_ring_inline(&mut p, &short, false).map(|_| ()));
        refused(q.post_prepared_n_inline(&mut p, &short, 3, false).map(|_| ()));
        assert_eq!(q.pi(), 0, "len {len}: nothing posted");
    }
    // an image of more than one WQEBB has no single-WQEBB body to make
    let big = Prepared::new(&Wqe::write(0x10, 1, Payload::Inline(&[7; 40])), 0x123, 220).unwrap();
    assert_eq!(big.wqebbs(), 2);
    assert!(matches!(big.body_with(&[7; 64]), Err(SqError::BadConfig(_))));
    let d = [DataSeg::new(0x1000, 7, 64)];
    let mut g = Prepared::new(&Wqe::write(0x10, 1, Payload::Gather(&d)), 0x123, 220).unwrap();
    let before = g.body();
    g.set_inline(&[1, 2, 3]).unwrap();
    assert_eq!(g.body_with(&[9; 64]).unwrap(), before);
    assert_eq!(g.body(), before);
}

/// A batch writes each WQE's own index where its low byte wraps inside the batch (the batch
/// path carries the control words from one WQE to the next by an add, made anew every 256th
/// index) and above 16 bits: on a 1024-WQEBB ring, batches from indices around those points,
/// gathered and inline, bytes against `post_prepared` x n (the inline one given the payload
/// first), both rings full of the same other bytes beforehand. (A 16-bit or 32-bit wrap cannot
/// fall inside a batch of this path: the ring's size divides 65536, so such an index is slot 0,
/// where a batch starts; the cases cover indices above 16 bits and a batch ending at u32::MAX.)
#[test]
fn batches_carry_each_index_where_its_low_byte_wraps_and_above_16_bits() {
    const CNT: u32 = 1024;
    let d = [DataSeg::new(0x7f00_0000_1000, 0x42, 64)];
    let data: [u8; 64] = core::array::from_fn(|i| i as u8 ^ 0x3c);
    let gather = Prepared::new(&Wqe::write(0xaa00, 0x77, Payload::Gather(&d)), 0x123, 220).unwrap();
    let inline = Prepared::new(&Wqe::send(Payload::Inline(&[0u8; 8])), 0x123, 220).unwrap();
    let mk = |ring: &mut Vec<Mem<64>>, dbrec: &mut [u32; 2], reg: &mut Mem<512>| {
        let cfg = SqConfig {
            buf: ring.as_mut_ptr() as *mut u8,
            wqe_cnt: CNT,
            stride: 64,
            dbrec: dbrec.as_mut_ptr(),
            bf_reg: reg.0.as_mut_ptr(),
            bf_size: 256,
            qpn: 0x123,
            max_inline: 220,
        };
        // SAFETY: the buffers match the config and outlive the queue in this test.
        unsafe { Sq::new(cfg, DbMode::Db, Count::default()) }.unwrap()
    };
    for (start, n) in [
        (250u32, 32u32),
        (255, 2),
        (256, 255),
        (200, 600),
        (0xff00 - 1, 3),
        (0x1_0000 + 250, 40),
        (0x3_00f0, 700),
        (u32::MAX - 99, 100),
    ] {
        for is_inline in [false, true] {
            let fill = || (0..CNT).map(|i| Mem([(i as u8) ^ 0xa5; 64])).collect::<Vec<_>>();
            let (mut ring_a, mut ring_b) = (fill(), fill());
            let (mut db_a, mut db_b) = ([0u32; 2], [0u32; 2]);
            let (mut reg_a, mut reg_b) = (Mem([0; 512]), Mem([0; 512]));
            let mut a = mk(&mut ring_a, &mut db_a, &mut reg_a);
            let mut b = mk(&mut ring_b, &mut db_b, &mut reg_b);
            for q in [&mut a, &mut b] {
                q.set_pi(start);
                q.ci = start;
            }
            let mut pa = if is_inline { inline.clone() } else { gather.clone() };
            let mut pb = pa.clone();
            let src = &data[..];
            if is_inline {
                pa.set_inline(src).unwrap();
            }
            let mut last = 0;
            for i in 0..n {
                last = a.post_prepared(&pa, i == n - 1).unwrap();
            }
            a.ring();
            let got = if is_inline {
                b.post_prepared_n_inline(&mut pb, src, n, true)
            } else {
                b.post_prepared_n(&pb, n, true)
            };
            b.ring();
            let what = format!("from index {start:#x}, {n} WQEs, inline {is_inline}");
            assert_eq!(got.unwrap(), Some(last), "{what}");
            assert_eq!(u32::from(last), start.wrapping_add(n - 1) & 0xffff, "{what}");
            for (i, (x, y)) in ring_a.iter().zip(&ring_b).enumerate() {
                assert_eq!(x.0, y.0, "{what}: WQEBB {i}");
            }
            assert_eq!((db_a, a.pi()), (db_b, b.pi()), "{what}: doorbell record, index");
        }
    }
}

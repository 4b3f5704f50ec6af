//! The trust boundary, tested from inside (issue 11 point 1): another process's object headers
//! are forged here, field by field, and every operation that reads them must end in an error
//! completion (or a refused lookup), never an access outside a mapping. Before these checks a
//! forged MR header plus a peer QP naming it ended the client with SIGSEGV, and a smaller offset
//! put its message into another mapping.

use super::layout::{hdr, CqHdr, MrHdr, ObjHdr, QpHdr};
use super::shm::ObjKind;
use super::{syndrome, DirectModelQp, ExecMode, Model, ModelConfig, ModelConnect, ModelMr, ModelQpCaps};
use crate::mlx5::cq::{Cq, Cqe, CqeError};
use crate::mlx5::seg::DataSeg;
use crate::mlx5::sq::DbMode;
use crate::mlx5::wqe::{Payload, Wqe};
use crate::sys;

const ALL: u32 = sys::IBV_ACCESS_LOCAL_WRITE
    | sys::IBV_ACCESS_REMOTE_WRITE
    | sys::IBV_ACCESS_REMOTE_READ
    | sys::IBV_ACCESS_REMOTE_ATOMIC;

struct Pair {
    m: Model,
    a: DirectModelQp,
    b: DirectModelQp,
    ma: ModelMr,
    mb: ModelMr,
}

fn pair() -> Pair {
    let m = Model::open(ModelConfig {
        exec: ExecMode::Inline,
        ..Default::default()
    })
    .unwrap();
    let pd = m.alloc_pd();
    let a = DirectModelQp::new(&m, pd, ModelQpCaps::default(), 64, DbMode::Db).unwrap();
    let b = DirectModelQp::new(&m, pd, ModelQpCaps::default(), 64, DbMode::Db).unwrap();
    let conn = ModelConnect {
        rnr_retry: 0,
        ..Default::default()
    };
    a.qp.connect(b.qp.qpn(), conn);
    b.qp.connect(a.qp.qpn(), conn);
    let ma = m.reg_mr(pd, 1 << 16, ALL).unwrap();
    let mb = m.reg_mr(pd, 1 << 16, ALL).unwrap();
    Pair { m, a, b, ma, mb }
}

/// Writes `v` over a `T` field of the object `kind`/`id`'s header, as another process could.
fn forge<H, T: Copy>(m: &Model, kind: ObjKind, id: u32, field: impl Fn(&H) -> &T, v: T) {
    let s = m.lookup(kind, id).expect("object");
    let h: &H = hdr(&s);
    let off = field(h) as *const T as usize - h as *const H as usize;
    // SAFETY: a field of a header inside the object's (writable, shared) mapping, reached from
    // the mapping's own pointer; the test forges it as a hostile process sharing the model
    // directory would (the model reads such fields volatile, once).
    unsafe { std::ptr::write_volatile(s.ptr().add(off) as *mut T, v) };
}

fn next(cq: &mut Cq) -> Result<Cqe, CqeError> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut out = [Cqe::default(); 1];
    loop {
        if cq.poll(&mut out)? == 1 {
            return Ok(out[0]);
        }
        assert!(std::time::Instant::now() < deadline, "no CQE within 5 s");
    }
}

fn write(p: &mut Pair, raddr: u64, rkey: u32) -> Result<Cqe, CqeError> {
    let s = [DataSeg::new(p.ma.addr(), p.ma.lkey(), 8)];
    let w = Wqe::write(raddr, rkey, Payload::Gather(&s)).signaled();
    p.a.sq.post_and_ring(&w).unwrap();
    next(&mut p.a.cq)
}

fn send(p: &mut Pair) -> Result<Cqe, CqeError> {
    let s = [DataSeg::new(p.ma.addr(), p.ma.lkey(), 8)];
    p.a.sq
        .post_and_ring(&Wqe::send(Payload::Gather(&s)).signaled())
        .unwrap();
    next(&mut p.a.cq)
}

#[test]
fn a_forged_region_header_is_held_to_the_mapping() {
    // the region claims to be huge: an address far past the mapping is refused, not written
    let mut p = pair();
    let (addr, rkey) = (p.mb.addr(), p.mb.rkey());
    forge::<MrHdr, u64>(&p.m, ObjKind::Mr, rkey, |h| &h.len, u64::MAX / 2);
    let e = write(&mut p, addr + (1 << 40), rkey).unwrap_err();
    assert_eq!(e.syndrome, syndrome::REMOTE_ACCESS);
    // its data offset points past the mapping
    let mut p = pair();
    let (addr, rkey) = (p.mb.addr(), p.mb.rkey());
    forge::<MrHdr, u64>(&p.m, ObjKind::Mr, rkey, |h| &h.data_off, 1 << 40);
    let e = write(&mut p, addr, rkey).unwrap_err();
    assert_eq!(e.syndrome, syndrome::REMOTE_ACCESS);
}

#[test]
fn a_region_of_another_owner_is_not_the_peers() {
    // the peer QP says it belongs to another process: a key naming a region of this one (same
    // PD number: PDs are numbered per process) is refused, not written into
    let mut p = pair();
    let (addr, rkey) = (p.mb.addr(), p.mb.rkey());
    let bqpn = p.b.qp.qpn();
    forge::<QpHdr, u32>(
        &p.m,
        ObjKind::Qp,
        bqpn,
        |h| &h.obj.owner_pid,
        std::process::id() ^ 0x4000_0000,
    );
    let e = write(&mut p, addr, rkey).unwrap_err();
    assert_eq!(e.syndrome, syndrome::REMOTE_ACCESS);
    let mut got = [0u8; 8];
    p.mb.read(0, &mut got);
    assert_eq!(got, [0u8; 8], "written into a region the peer does not own");
}

#[test]
fn a_forged_receive_ring_is_refused() {
    for (what, f) in [
        ("count", 0usize),
        ("count not a power of two", 1),
        ("stride", 2),
        ("offset", 3),
    ] {
        let mut p = pair();
        let bqpn = p.b.qp.qpn();
        let rx = [DataSeg::new(p.mb.addr(), p.mb.lkey(), 64)];
        p.b.rq.post(&rx).unwrap();
        p.b.rq.ring();
        match f {
            0 => forge::<QpHdr, u32>(&p.m, ObjKind::Qp, bqpn, |h| &h.rq_wqe_cnt, 1 << 30),
            1 => forge::<QpHdr, u32>(&p.m, ObjKind::Qp, bqpn, |h| &h.rq_wqe_cnt, 3),
            2 => forge::<QpHdr, u32>(&p.m, ObjKind::Qp, bqpn, |h| &h.rq_stride, 1 << 28),
            _ => forge::<QpHdr, u32>(&p.m, ObjKind::Qp, bqpn, |h| &h.rq_off, u32::MAX - 64),
        }
        let e = send(&mut p).expect_err(what);
        assert_eq!(e.syndrome, syndrome::TRANSPORT_RETRY_EXC, "{what}");
    }
}

#[test]
fn a_forged_completion_queue_is_not_written_past_its_mapping() {
    let mut p = pair();
    let rx = [DataSeg::new(p.mb.addr(), p.mb.lkey(), 64)];
    p.b.rq.post(&rx).unwrap();
    p.b.rq.ring();
    // the responder's CQ claims 2^30 entries: its CQE is not written (an overrun), the
    // responder is in error, the requester sees its peer gone
    let bcq = hdr::<QpHdr>(&p.m.lookup(ObjKind::Qp, p.b.qp.qpn()).unwrap()).recv_cqn;
    forge::<CqHdr, u32>(&p.m, ObjKind::Cq, bcq, |h| &h.cqe_cnt, 1 << 30);
    let _ = send(&mut p);
    let s = p.m.lookup(ObjKind::Cq, bcq).unwrap();
    assert!(hdr::<CqHdr>(&s).overruns.load(std::sync::atomic::Ordering::Relaxed) > 0);
}

#[test]
fn objects_that_are_not_the_models_are_not_used() {
    let p = pair();
    // a header whose magic is wrong: the lookup refuses it
    let id = p.mb.rkey();
    forge::<ObjHdr, u64>(&p.m, ObjKind::Mr, id, |h| &h.magic, 0x6261_6421);
    // (a fresh thread: lookups are cached per thread)
    let m = p.m.clone();
    let found = std::thread::spawn(move || m.lookup(ObjKind::Mr, id).is_some())
        .join()
        .unwrap();
    assert!(!found, "an object with a wrong magic was used");
    // a file shorter than a header page is not mapped
    let f = super::shm::dir().join(format!("mr-{:06x}", 0xfe_dcba));
    std::fs::write(&f, [0u8; 100]).unwrap();
    let m = p.m.clone();
    let found = std::thread::spawn(move || m.lookup(ObjKind::Mr, 0xfe_dcba).is_some())
        .join()
        .unwrap();
    std::fs::remove_file(&f).ok();
    assert!(!found, "a 100-byte file was used as an object");
}

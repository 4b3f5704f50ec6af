//! The key-value workload on the direct path: rdmaprobe's own mlx5 WQEs, doorbells and CQ
//! polling. A client's request is an inline RDMA WRITE WQE on its UC QP, rung at once; a
//! worker's batch is one inline SEND_WITH_IMM WQE per response, each with the datagram segment
//! of its client, and one doorbell for the batch; completions and receives are read from the
//! CQs directly. The ends are generic over the queues ([`DirectQueues`]); [`model_loopback`]
//! builds them on model0's own QPs, [`nic_loopback`] on an mlx5 device's QPs taken over with
//! mlx5dv (a ConnectX, or model0 through libmlx5).

use std::any::Any;

use super::verbs::{device_parts, Parts};
use super::{check_addrs, Addr, ClientAddr, ClientLink, Reply, Response, ServerAddr, WorkerLink, SLOT};
use crate::backend::direct::DirectQueues;
use crate::backend::setup::{Dev, SetupError, DEPTH};
use crate::backend::verbs::ModelHook;
use crate::backend::{BackendError, BackendKind, MemView, QKEY};
use crate::mlx5::cq::{cqe_op, Cq, Cqe};
use crate::mlx5::rq::Rq;
use crate::mlx5::seg::{AvSeg, DataSeg};
use crate::mlx5::sq::{DbMode, Sq};
use crate::mlx5::wqe::{Payload, Wqe};
use crate::model::{DirectModelQp, Model, ModelConnect, ModelMr, ModelQpCaps};
use crate::scenario::kv::op::{Layout, OPCODE_AT};
use crate::sys;
use crate::verbs::direct::DirectQp;
use crate::verbs::RemoteBuf;
use crate::verbs::{Mr, MrAccess, Pd, QpCaps};
use std::sync::Arc;

/// The GRH area before a UD receive's data.
const GRH: usize = 40;
/// One response receive buffer: the GRH area and a slot.
const RECV_BUF: usize = 128;

fn invalid(why: String) -> BackendError {
    BackendError::Invalid { backend: "direct", why }
}

/// Polls `q`'s CQ once: send completions retire the send queue (and are counted); receive
/// completions retire the receive queue and are handed to `recv`.
fn poll<Q: DirectQueues>(
    q: &mut Q,
    cqes: &mut [Cqe; 16],
    mut recv: impl FnMut(&Cqe) -> Result<(), BackendError>,
) -> Result<u32, BackendError> {
    q.progress();
    let (sq, rq, cq) = q.parts();
    let n = cq.poll(cqes).map_err(BackendError::Cqe)?;
    let (mut sends, mut last) = (0, None);
    for c in &cqes[..n] {
        if c.opcode == cqe_op::REQ {
            sends += 1;
            last = Some(c.wqe_counter);
        } else {
            rq.retire(c.wqe_counter);
            recv(c)?;
        }
    }
    if let Some(w) = last {
        sq.retire(w);
    }
    Ok(sends)
}

/// A client's end on the direct path.
pub struct KvDirectClient<Q: DirectQueues> {
    uc: Q,
    ud: Q,
    region: RemoteBuf,
    rx: MemView,
    rx_base: u64,
    rx_lkey: u32,
    ring: usize,
    posted: u64,
    done: u64,
    cqes: [Cqe; 16],
    workers: Vec<u32>,
    /// The receive buffers' registration (model0's or a NIC's).
    _rx: Box<dyn Any + Send>,
}

impl<Q: DirectQueues> KvDirectClient<Q> {
    /// A client of UC QP `uc` and UD QP `ud` with `ring` receive buffers in `rx` (its view, its
    /// address and its lkey), kept registered by `keep`; its server's region and workers come
    /// when it is connected.
    fn new(uc: Q, ud: Q, rx: (MemView, u64, u32), ring: usize, keep: Box<dyn Any + Send>) -> Self {
        KvDirectClient {
            uc,
            ud,
            region: RemoteBuf::default(),
            rx: rx.0,
            rx_base: rx.1,
            rx_lkey: rx.2,
            ring,
            posted: 0,
            done: 0,
            cqes: [Cqe::default(); 16],
            workers: Vec::new(),
            _rx: keep,
        }
    }
}

impl<Q: DirectQueues> ClientLink for KvDirectClient<Q> {
    fn write(&mut self, slot: usize, bytes: &[u8], signal: bool) -> Result<(), BackendError> {
        if (slot + 1) * SLOT > self.region.len as usize || bytes.len() > SLOT {
            return Err(invalid(format!(
                "slot {slot} ({} B) outside the {}-byte region",
                bytes.len(),
                self.region.len
            )));
        }
        let w = Wqe::write(
            self.region.addr + (slot * SLOT) as u64,
            self.region.rkey,
            Payload::Inline(bytes),
        );
        let (sq, _, _) = self.uc.parts();
        sq.post(&if signal { w.signaled() } else { w })
            .map_err(BackendError::Sq)?;
        sq.ring();
        self.uc.after_post();
        Ok(())
    }

    fn post_recvs(&mut self, n: u32) -> Result<(), BackendError> {
        if n == 0 || self.posted - self.done + u64::from(n) > self.ring as u64 {
            return Err(invalid(format!("{n} more receives beyond the ring of {}", self.ring)));
        }
        let (_, rq, _) = self.ud.parts();
        for i in 0..u64::from(n) {
            let b = ((self.posted + i) % self.ring as u64) as usize;
            let sge = [DataSeg::new(
                self.rx_base + (b * RECV_BUF) as u64,
                self.rx_lkey,
                RECV_BUF as u32,
            )];
            rq.post(&sge).map_err(BackendError::Sq)?;
        }
        rq.ring();
        self.posted += u64::from(n);
        Ok(())
    }

    fn poll_sends(&mut self) -> Result<u32, BackendError> {
        poll(&mut self.uc, &mut self.cqes, |c| {
            Err(invalid(format!(
                "QP {:#x}: a receive completion on a client's UC QP",
                c.qpn
            )))
        })
    }

    fn poll_responses(&mut self, out: &mut Vec<Response>) -> Result<(), BackendError> {
        let (rx, ring, workers) = (&self.rx, self.ring as u64, &self.workers);
        let done = &mut self.done;
        poll(&mut self.ud, &mut self.cqes, |c| {
            if !workers.contains(&c.src_qp) {
                return Err(crate::backend::stray_datagram("direct", c.qpn, c.src_qp, workers[0]));
            }
            let len = (c.byte_cnt as usize).saturating_sub(GRH);
            if len > SLOT || c.opcode != cqe_op::RESP_SEND_IMM || c.scatter != 0 {
                return Err(invalid(format!(
                    "QP {:#x}: a response of {len} B (CQE opcode {:#x}, scatter {}): not an immediate SEND into the buffer",
                    c.qpn, c.opcode, c.scatter
                )));
            }
            // receives complete in the order posted: this one is the ring's next buffer
            let b = (*done % ring) as usize * RECV_BUF + GRH;
            let mut data = [0u8; SLOT];
            for (i, d) in data[..len].iter_mut().enumerate() {
                *d = rx.load(b + i);
            }
            let imm = u32::from_be(c.imm);
            if workers.get(imm as usize) != Some(&c.src_qp) {
                return Err(invalid(format!(
                    "QP {:#x}: a response with immediate {imm} from QP {:#x}, which is not worker {imm}'s UD QP",
                    c.qpn, c.src_qp
                )));
            }
            out.push(Response {
                imm,
                len: len as u32,
                data,
            });
            *done += 1;
            Ok(())
        })?;
        Ok(())
    }
}

/// A worker's end on the direct path.
pub struct KvDirectWorker<Q: DirectQueues> {
    ud: Q,
    region: MemView,
    avs: Vec<AvSeg>,
    cqes: [Cqe; 16],
    /// The region's registration (model0's or a NIC's).
    _region: Arc<dyn Any + Send + Sync>,
}

impl<Q: DirectQueues> WorkerLink for KvDirectWorker<Q> {
    fn read_slot(&self, slot: usize, out: &mut [u8; SLOT]) {
        for (i, b) in out.iter_mut().enumerate() {
            *b = self.region.load(slot * SLOT + i);
        }
    }

    fn opcode(&self, slot: usize) -> u8 {
        self.region.load(slot * SLOT + OPCODE_AT)
    }

    fn set_opcode(&self, slot: usize, v: u8) {
        self.region.store(slot * SLOT + OPCODE_AT, v)
    }

    fn respond(&mut self, batch: &[Reply<'_>]) -> Result<(), BackendError> {
        if batch.is_empty() || batch.len() > 32 {
            return Err(invalid(format!("a batch of {} responses (1 to 32)", batch.len())));
        }
        let (sq, _, _) = self.ud.parts();
        for r in batch {
            let av = self
                .avs
                .get(r.to as usize)
                .ok_or_else(|| invalid(format!("a response to client {} of {}", r.to, self.avs.len())))?;
            let w = Wqe::send_imm(r.imm, Payload::Inline(r.data)).to(av);
            sq.post(&if r.signal { w.signaled() } else { w })
                .map_err(BackendError::Sq)?;
        }
        sq.ring();
        self.ud.after_post();
        Ok(())
    }

    fn poll_sends(&mut self) -> Result<u32, BackendError> {
        poll(&mut self.ud, &mut self.cqes, |c| {
            Err(invalid(format!(
                "QP {:#x}: a receive completion on a worker's UD QP",
                c.qpn
            )))
        })
    }
}

/// The server's side of the requests: a UC QP for each client and the region they write.
struct Server<Q> {
    _qps: Vec<Q>,
    _region: Arc<dyn Any + Send + Sync>,
}

/// Every client's and worker's direct end of a loopback run (on model0's own QPs, or on an mlx5
/// device's), and the server side they reach (dropped after them).
pub struct KvDirectPaths<Q: DirectQueues = DirectModelQp> {
    /// The clients' ends.
    pub clients: Vec<KvDirectClient<Q>>,
    /// The workers' ends.
    pub workers: Vec<KvDirectWorker<Q>>,
    _server: Server<Q>,
}

/// A model0 QP of transport `t` (its Q_Key set), whose queues the direct path drives.
fn model_qp(model: &Model, pd: u32, t: crate::backend::Transport) -> Result<DirectModelQp, SetupError> {
    let caps = ModelQpCaps {
        max_send_wr: DEPTH,
        max_recv_wr: DEPTH,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let q = DirectModelQp::new(model, pd, caps, 2 * DEPTH, DbMode::Bf)?;
    q.qp.set_transport(t.model());
    q.qp.set_qkey(QKEY);
    Ok(q)
}

/// The clients' direct ends of `layout` on model0: for each a UC QP (connected by
/// [`connect_model_clients`] once the server's QP numbers are known) and a UD QP with
/// `2 * window` receive buffers; their QP numbers, for the server.
pub fn model_clients(
    model: &Model,
    layout: Layout,
) -> Result<(Vec<KvDirectClient<DirectModelQp>>, Vec<ClientAddr>), SetupError> {
    use crate::backend::Transport;
    let pd = model.alloc_pd();
    let ring = 2 * layout.window as usize;
    let (mut clients, mut addrs) = (Vec::new(), Vec::new());
    for _ in 0..layout.clients {
        let (c, ud) = (model_qp(model, pd, Transport::Uc)?, model_qp(model, pd, Transport::Ud)?);
        ud.qp.connect(0, ModelConnect::default());
        let rx_mr = model.reg_mr(pd, ring * RECV_BUF, crate::sys::IBV_ACCESS_LOCAL_WRITE)?;
        // SAFETY: the buffer lives as long as `rx_mr`, which the client owns.
        let rx = unsafe { MemView::new(rx_mr.as_ptr(), rx_mr.len()) };
        addrs.push(ClientAddr {
            uc: qpn_addr(c.qp.qpn()),
            ud: qpn_addr(ud.qp.qpn()),
        });
        let (base, lkey) = (rx_mr.addr(), rx_mr.lkey());
        clients.push(KvDirectClient::new(c, ud, (rx, base, lkey), ring, Box::new(rx_mr)));
    }
    Ok((clients, addrs))
}

/// A model0 QP's address: its number alone.
fn qpn_addr(qpn: u32) -> Addr {
    Addr { qpn, ..Addr::default() }
}

/// Connects each client's UC QP to its server UC QP in `server` (checked against `layout`) and
/// gives the clients the region and the workers' QP numbers.
pub fn connect_model_clients(
    clients: &mut [KvDirectClient<DirectModelQp>],
    layout: Layout,
    server: &ServerAddr,
) -> Result<(), SetupError> {
    check_addrs(&layout, None, Some(server))?;
    for (c, s) in clients.iter_mut().zip(&server.uc) {
        c.uc.qp.connect(s.qpn, ModelConnect::default());
        c.region = server.region;
        c.workers = server.workers.clone();
    }
    Ok(())
}

/// The server's direct ends (in its process): the workers, and the UC QPs and region the
/// clients reach (dropped after the workers).
pub struct KvDirectServerSide<Q: DirectQueues = DirectModelQp> {
    /// The workers' ends.
    pub workers: Vec<KvDirectWorker<Q>>,
    server: Server<Q>,
}

/// The server's direct ends of `layout` on model0 for the clients at `clients` (checked against
/// it): a UC QP connected to each client's, the request region, and for each worker a UD QP with
/// the address vector of every client's UD QP; their addresses, for the clients.
pub fn model_server(
    model: &Model,
    layout: Layout,
    clients: &[ClientAddr],
) -> Result<(KvDirectServerSide, ServerAddr), SetupError> {
    use crate::backend::Transport;
    check_addrs(&layout, Some(clients), None)?;
    let pd = model.alloc_pd();
    let access = crate::sys::IBV_ACCESS_LOCAL_WRITE | crate::sys::IBV_ACCESS_REMOTE_WRITE;
    let region: Arc<ModelMr> = Arc::new(model.reg_mr(pd, layout.bytes(), access)?);
    let mut qps = Vec::new();
    for c in clients {
        let s = model_qp(model, pd, Transport::Uc)?;
        s.qp.connect(c.uc.qpn, ModelConnect::default());
        qps.push(s);
    }
    let avs: Vec<AvSeg> = clients.iter().map(|c| AvSeg::default().to(c.ud.qpn, QKEY)).collect();
    let mut workers = Vec::new();
    for _ in 0..layout.workers {
        let ud = model_qp(model, pd, Transport::Ud)?;
        ud.qp.connect(0, ModelConnect::default());
        // SAFETY: the region lives as long as the Arc the worker holds.
        let view = unsafe { MemView::new(region.as_ptr(), region.len()) };
        workers.push(KvDirectWorker {
            ud,
            region: view,
            avs: avs.clone(),
            cqes: [Cqe::default(); 16],
            _region: region.clone(),
        });
    }
    let addr = ServerAddr {
        region: RemoteBuf {
            addr: region.addr(),
            rkey: region.rkey(),
            len: region.len() as u64,
        },
        uc: qps.iter().map(|q| qpn_addr(q.qp.qpn())).collect(),
        workers: workers.iter().map(|w| w.ud.qp.qpn()).collect(),
    };
    let server = Server {
        _qps: qps,
        _region: region,
    };
    Ok((KvDirectServerSide { workers, server }, addr))
}

/// Builds a loopback run's direct ends on model0's own QPs, as [`super::verbs::loopback`] does
/// with libibverbs': [`model_clients`], the [`model_server`] for them, the clients connected.
pub fn model_loopback(model: &Model, layout: Layout) -> Result<KvDirectPaths, SetupError> {
    let (mut clients, addrs) = model_clients(model, layout)?;
    let (side, saddr) = model_server(model, layout, &addrs)?;
    connect_model_clients(&mut clients, layout, &saddr)?;
    Ok(KvDirectPaths {
        clients,
        workers: side.workers,
        _server: side.server,
    })
}

/// An mlx5 device's QP taken over with mlx5dv ([`DirectQp`]), with model0's hook when the device
/// is model0 through libmlx5 (nothing watches its doorbells there: what was rung executes before
/// each poll and after each post, as on the verbs backends' QPs).
pub struct NicQp {
    q: DirectQp,
    hook: ModelHook,
}

impl DirectQueues for NicQp {
    type Hook = crate::mlx5::sq::NoHook;
    fn parts(&mut self) -> (&mut Sq<Self::Hook>, &mut Rq<Self::Hook>, &mut Cq) {
        self.q.parts()
    }
    fn progress(&mut self) {
        self.hook.before_poll();
    }
    fn after_post(&mut self) {
        self.hook.after_post();
    }
    fn describe(&self) -> String {
        self.q.describe()
    }
    fn qpn(&self) -> u32 {
        self.q.qpn()
    }
}

/// A UC or UD QP of `d`'s device in `pd` with a CQ of its own, taken over with mlx5dv; refused
/// when it grants less inline data than a slot.
fn nic_qp(pd: &Pd, d: &Parts<'_>, qp_type: u32) -> Result<NicQp, SetupError> {
    let caps = QpCaps {
        max_send_wr: DEPTH,
        max_recv_wr: DEPTH,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: SLOT as u32,
    };
    let q = DirectQp::with_type(pd, caps, 2 * DEPTH, DbMode::Bf, qp_type)?;
    if q.max_inline() < SLOT as u32 {
        return Err(SetupError::from(BackendError::Unsupported {
            backend: "direct",
            why: format!(
                "QP {:#x}: {} B of inline data granted; the key-value workload sends requests and responses of up to {SLOT} B inline",
                q.qpn(),
                q.max_inline()
            ),
        }));
    }
    let hook = ModelHook::of(q.verbs_qp(), d.ctx.name());
    Ok(NicQp { q, hook })
}

/// `dev`'s verbs parts for the direct ends: an mlx5 device (or model0 through libmlx5).
fn nic_parts(dev: &Dev) -> Result<Parts<'_>, SetupError> {
    let d = device_parts(dev, BackendKind::Direct)?;
    crate::verbs::direct::require_mlx5(d.ctx)?;
    Ok(d)
}

/// The clients' direct ends of `layout` on `dev`'s mlx5 QPs: for each a UC QP (connected by
/// [`connect_nic_clients`] once the server's addresses are known) and a UD QP with `2 * window`
/// receive buffers; their addresses, for the server.
pub fn nic_clients(dev: &Dev, layout: Layout) -> Result<(Vec<KvDirectClient<NicQp>>, Vec<ClientAddr>), SetupError> {
    let d = nic_parts(dev)?;
    let pd = Pd::new(d.ctx)?;
    let ring = 2 * layout.window as usize;
    let (mut clients, mut addrs) = (Vec::new(), Vec::new());
    for _ in 0..layout.clients {
        let uc = nic_qp(&pd, &d, sys::IBV_QPT_UC)?;
        let mut ud = nic_qp(&pd, &d, sys::IBV_QPT_UD)?;
        ud.q.connect_ud(d.port, d.opts.pkey_index, QKEY)?;
        let rx_mr = Mr::new(&pd, ring * RECV_BUF, MrAccess::LOCAL_WRITE, false)?;
        // SAFETY: the MR's buffer lives as long as `rx_mr`, which the client owns.
        let rx = unsafe { MemView::new(rx_mr.as_ptr(), rx_mr.len()) };
        addrs.push(ClientAddr {
            uc: Addr::of(&uc.q.endpoint(d.port, d.gid)?),
            ud: Addr::of(&ud.q.endpoint(d.port, d.gid)?),
        });
        let (base, lkey) = (rx_mr.addr(), rx_mr.lkey());
        clients.push(KvDirectClient::new(uc, ud, (rx, base, lkey), ring, Box::new(rx_mr)));
    }
    Ok((clients, addrs))
}

/// Connects each client's UC QP to its server UC QP in `server` (checked against `layout`), and
/// gives the clients the region and the workers' QP numbers.
pub fn connect_nic_clients(
    dev: &Dev,
    clients: &mut [KvDirectClient<NicQp>],
    layout: Layout,
    server: &ServerAddr,
) -> Result<(), SetupError> {
    check_addrs(&layout, None, Some(server))?;
    let d = nic_parts(dev)?;
    for (c, s) in clients.iter_mut().zip(&server.uc) {
        crate::backend::path::path_taken(d.ctx, c.uc.q.connect(d.port, &d.opts, &s.endpoint())?)?;
        c.region = server.region;
        c.workers = server.workers.clone();
    }
    Ok(())
}

/// The server's direct ends of `layout` on `dev`'s mlx5 QPs for the clients at `clients`
/// (checked against it): a UC QP connected to each client's, the request region, and for each
/// worker a UD QP with the address vector of every client's UD QP (libmlx5's, of an address
/// handle kept with the QP); their addresses, for the clients.
pub fn nic_server(
    dev: &Dev,
    layout: Layout,
    clients: &[ClientAddr],
) -> Result<(KvDirectServerSide<NicQp>, ServerAddr), SetupError> {
    check_addrs(&layout, Some(clients), None)?;
    let d = nic_parts(dev)?;
    let pd = Pd::new(d.ctx)?;
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE;
    let region = Arc::new(Mr::new(&pd, layout.bytes(), access, dev.huge_pages())?);
    let (mut qps, mut uc) = (Vec::new(), Vec::new());
    for c in clients {
        let mut s = nic_qp(&pd, &d, sys::IBV_QPT_UC)?;
        uc.push(Addr::of(&s.q.endpoint(d.port, d.gid)?));
        crate::backend::path::path_taken(d.ctx, s.q.connect(d.port, &d.opts, &c.uc.endpoint())?)?;
        qps.push(s);
    }
    let mut workers = Vec::new();
    for _ in 0..layout.workers {
        let mut ud = nic_qp(&pd, &d, sys::IBV_QPT_UD)?;
        ud.q.connect_ud(d.port, d.path.pkey_index, QKEY)?;
        let mut avs = Vec::new();
        for c in clients {
            let sl_tclass = (d.path.sl, d.path.traffic_class);
            avs.push(ud.q.datagrams_to(&pd, d.port, &c.ud.endpoint(), d.gid, sl_tclass, QKEY)?);
        }
        // SAFETY: the region lives as long as the Arc the worker holds.
        let view = unsafe { MemView::new(region.as_ptr(), region.len()) };
        workers.push(KvDirectWorker {
            ud,
            region: view,
            avs,
            cqes: [Cqe::default(); 16],
            _region: region.clone(),
        });
    }
    let addr = ServerAddr {
        region: region.remote(0),
        uc,
        workers: workers.iter().map(|w| w.ud.q.qpn()).collect(),
    };
    let server = Server {
        _qps: qps,
        _region: region,
    };
    Ok((KvDirectServerSide { workers, server }, addr))
}

/// Builds a loopback run's direct ends on `dev`'s mlx5 QPs: [`nic_clients`], the
/// [`nic_server`] for them, the clients connected.
pub fn nic_loopback(dev: &Dev, layout: Layout) -> Result<KvDirectPaths<NicQp>, SetupError> {
    let (mut clients, addrs) = nic_clients(dev, layout)?;
    let (side, saddr) = nic_server(dev, layout, &addrs)?;
    connect_nic_clients(dev, &mut clients, layout, &saddr)?;
    Ok(KvDirectPaths {
        clients,
        workers: side.workers,
        _server: side.server,
    })
}

//! The key-value workload on the direct path: rdmaprobe's own mlx5 WQEs, doorbells and CQ
//! polling. A client's request is an inline RDMA WRITE WQE on its UC QP, rung at once; a
//! worker's batch is one inline SEND_WITH_IMM WQE per response, each with the datagram segment
//! of its client, and one doorbell for the batch; completions and receives are read from the
//! CQs directly. The ends are generic over the queues ([`DirectQueues`]); [`model_loopback`]
//! builds them on model0's own QPs.

use super::{check_addrs, Addr, ClientAddr, ClientLink, Reply, Response, ServerAddr, WorkerLink, SLOT};
use crate::backend::direct::DirectQueues;
use crate::backend::setup::{SetupError, DEPTH};
use crate::backend::{BackendError, MemView, QKEY};
use crate::mlx5::cq::{cqe_op, Cqe};
use crate::mlx5::seg::{AvSeg, DataSeg};
use crate::mlx5::sq::DbMode;
use crate::mlx5::wqe::{Payload, Wqe};
use crate::model::{DirectModelQp, Model, ModelConnect, ModelMr, ModelQpCaps};
use crate::scenario::kv::op::{Layout, OPCODE_AT};
use crate::verbs::RemoteBuf;
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
    _rx: ModelMr,
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
    _region: Arc<ModelMr>,
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
struct Server {
    _qps: Vec<DirectModelQp>,
    _region: Arc<ModelMr>,
}

/// Every client's and worker's direct end of a loopback run on model0, and the server side they
/// reach (dropped after them).
pub struct KvDirectPaths {
    /// The clients' ends.
    pub clients: Vec<KvDirectClient<DirectModelQp>>,
    /// The workers' ends.
    pub workers: Vec<KvDirectWorker<DirectModelQp>>,
    _server: Server,
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
        clients.push(KvDirectClient {
            uc: c,
            ud,
            region: RemoteBuf::default(),
            rx,
            rx_base: rx_mr.addr(),
            rx_lkey: rx_mr.lkey(),
            ring,
            posted: 0,
            done: 0,
            cqes: [Cqe::default(); 16],
            workers: Vec::new(),
            _rx: rx_mr,
        });
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

/// The server's direct ends on model0 (in its process): the workers, and the UC QPs and region
/// the clients reach (dropped after the workers).
pub struct KvDirectServerSide {
    /// The workers' ends.
    pub workers: Vec<KvDirectWorker<DirectModelQp>>,
    server: Server,
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
    let region = Arc::new(model.reg_mr(pd, layout.bytes(), access)?);
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

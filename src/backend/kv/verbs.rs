//! The key-value workload over libibverbs, posted with `ibv_post_send` (as HERD posts: the
//! `verbs` backend) or `ibv_wr_start` .. `ibv_wr_complete` (the `wr` backend): each client has a UC
//! QP connected to a server UC QP of its own, through which it writes requests inline into the
//! server's request region, and a UD QP on which it receives responses (each receive into a
//! buffer of its own: the 40-byte GRH area, then the response); each worker has a UD QP with an
//! address handle for every client and posts a batch of SEND_WITH_IMM responses, inline, as one
//! chain (one doorbell). On model0 (through libmlx5) the model executes each QP's work after its
//! post and before its poll, as the verbs backend lets it.

use super::{check_addrs, Addr, ClientAddr, ClientLink, Reply, Response, ServerAddr, WorkerLink, SLOT};
use crate::backend::setup::{Dev, SetupError, DEPTH};
use crate::backend::verbs::{verbs_err, wc_error, ModelHook};
use crate::backend::{BackendError, BackendKind, MemView, QKEY};
use crate::scenario::kv::op::Layout;
use crate::sys;
use crate::sys::inline::{poll_cq, post_recv, post_send, WrOps};
use crate::verbs::{Ah, Cq, Mr, MrAccess, Pd, Qp, QpCaps, RemoteBuf};
use std::sync::Arc;

/// The GRH area before a UD receive's data.
const GRH: usize = 40;
/// One response receive buffer: the GRH area and a slot.
const RECV_BUF: usize = 128;
/// Most responses one worker post chains (MICA's batch).
const MAX_CHAIN: usize = 32;

/// Polls `cq` once into `wc`; an error completion becomes the verbs error it is.
fn poll(kind: BackendKind, cq: &Cq, wc: &mut [sys::ibv_wc; 16], device: &str) -> Result<usize, BackendError> {
    // SAFETY: a live CQ and room for 16 completions.
    let n = unsafe { poll_cq(cq.as_ptr(), 16, wc.as_mut_ptr()) };
    if n < 0 {
        return Err(verbs_err(kind, "ibv_poll_cq", n, device, 0, "kv"));
    }
    for w in &wc[..n as usize] {
        if w.status != sys::IBV_WC_SUCCESS {
            return Err(wc_error(kind, w, device));
        }
    }
    Ok(n as usize)
}

/// A client's end: its UC QP to the server's region and its UD QP for responses.
pub struct KvClient {
    kind: BackendKind,
    device: String,
    region: RemoteBuf,
    /// The wr backend: the UC QP's `ibv_wr_*` entry points.
    wr_api: Option<(WrOps, *mut sys::ibv_qp_ex)>,
    wr: sys::ibv_send_wr,
    sge: sys::ibv_sge,
    rwrs: Vec<sys::ibv_recv_wr>,
    rsges: Vec<sys::ibv_sge>,
    wc: [sys::ibv_wc; 16],
    /// Receive buffers in the ring, the next to post and the next to complete.
    ring: usize,
    posted: u64,
    done: u64,
    rx: MemView,
    uc_hook: ModelHook,
    ud_hook: ModelHook,
    /// The workers' UD QP numbers (a response from another QP is a stranger's).
    workers: Vec<u32>,
    // owners, dropped after the raw pointers above
    uc: Qp,
    uc_cq: Cq,
    ud: Qp,
    ud_cq: Cq,
    rx_mr: Mr,
}

// SAFETY: the raw pointers in the WRs point into this end's own vectors and MR; one thread uses
// the end at a time.
unsafe impl Send for KvClient {}

impl KvClient {
    fn post_write(&mut self, slot: usize, bytes: &[u8], signal: bool) -> Result<(), BackendError> {
        if (slot + 1) * SLOT > self.region.len as usize || bytes.len() > SLOT {
            return Err(BackendError::Invalid {
                backend: self.kind.as_str(),
                why: format!(
                    "slot {slot} ({} B) outside the {}-byte region",
                    bytes.len(),
                    self.region.len
                ),
            });
        }
        let raddr = self.region.addr + (slot * SLOT) as u64;
        if let Some((ops, q)) = self.wr_api {
            let Some(write) = ops.rdma_write else {
                return Err(BackendError::Unsupported {
                    backend: "wr",
                    why: "the UC QP has no ibv_wr_rdma_write".into(),
                });
            };
            // SAFETY: q is this end's live extended QP and `ops` its entry points; between start
            // and complete only the builder and its setter run; `bytes` is read during the call.
            let rc = unsafe {
                (ops.start)(q);
                (*q).wr_id = slot as u64;
                (*q).wr_flags = sys::IBV_SEND_INLINE | if signal { sys::IBV_SEND_SIGNALED } else { 0 };
                write(q, self.region.rkey, raddr);
                (ops.set_inline_data)(q, bytes.as_ptr() as *mut _, bytes.len());
                (ops.complete)(q)
            };
            if rc != 0 {
                return Err(verbs_err(
                    self.kind,
                    "ibv_wr_complete",
                    rc,
                    &self.device,
                    self.uc.qpn(),
                    "kv request",
                ));
            }
            self.uc_hook.after_post();
            return Ok(());
        }
        self.sge = sys::ibv_sge {
            addr: bytes.as_ptr() as u64,
            length: bytes.len() as u32,
            lkey: 0,
        };
        self.wr.sg_list = &mut self.sge;
        self.wr.num_sge = 1;
        self.wr.next = std::ptr::null_mut();
        self.wr.opcode = sys::IBV_WR_RDMA_WRITE;
        self.wr.send_flags = sys::IBV_SEND_INLINE | if signal { sys::IBV_SEND_SIGNALED } else { 0 };
        self.wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
            remote_addr: raddr,
            rkey: self.region.rkey,
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP; one WR whose inline SGE points at `bytes` (read during the call).
        let rc = unsafe { post_send(self.uc.as_ptr(), &mut self.wr, &mut bad) };
        if rc != 0 {
            return Err(verbs_err(
                self.kind,
                "ibv_post_send",
                rc,
                &self.device,
                self.uc.qpn(),
                "kv request",
            ));
        }
        self.uc_hook.after_post();
        Ok(())
    }
}

impl ClientLink for KvClient {
    fn write(&mut self, slot: usize, bytes: &[u8], signal: bool) -> Result<(), BackendError> {
        self.post_write(slot, bytes, signal)
    }

    fn post_recvs(&mut self, n: u32) -> Result<(), BackendError> {
        let n = n as usize;
        if n == 0 || n > self.rwrs.len() || self.posted - self.done + n as u64 > self.ring as u64 {
            return Err(BackendError::Invalid {
                backend: self.kind.as_str(),
                why: format!("{n} more receives beyond the ring of {}", self.ring),
            });
        }
        let base = self.rx_mr.addr();
        let rp = self.rwrs.as_mut_ptr();
        for i in 0..n {
            let b = ((self.posted + i as u64) % self.ring as u64) as usize;
            self.rsges[i] = sys::ibv_sge {
                addr: base + (b * RECV_BUF) as u64,
                length: RECV_BUF as u32,
                lkey: self.rx_mr.lkey(),
            };
            self.rwrs[i].wr_id = b as u64;
            self.rwrs[i].next = if i + 1 < n {
                // SAFETY: i + 1 < n <= rwrs.len(): the next receive WR inside the vector.
                unsafe { rp.add(i + 1) }
            } else {
                std::ptr::null_mut()
            };
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP; the chain of n receive WRs points into the registered ring.
        let rc = unsafe { post_recv(self.ud.as_ptr(), self.rwrs.as_mut_ptr(), &mut bad) };
        if rc != 0 {
            return Err(verbs_err(
                self.kind,
                "ibv_post_recv",
                rc,
                &self.device,
                self.ud.qpn(),
                "kv responses",
            ));
        }
        self.posted += n as u64;
        self.ud_hook.receives_posted();
        Ok(())
    }

    fn poll_sends(&mut self) -> Result<u32, BackendError> {
        self.uc_hook.before_poll();
        Ok(poll(self.kind, &self.uc_cq, &mut self.wc, &self.device)? as u32)
    }

    fn poll_responses(&mut self, out: &mut Vec<Response>) -> Result<(), BackendError> {
        self.ud_hook.before_poll();
        let n = poll(self.kind, &self.ud_cq, &mut self.wc, &self.device)?;
        for w in &self.wc[..n] {
            if !self.workers.contains(&w.src_qp) {
                return Err(crate::backend::stray_datagram(
                    self.kind.as_str(),
                    w.qp_num,
                    w.src_qp,
                    self.workers[0],
                ));
            }
            let len = (w.byte_len as usize).saturating_sub(GRH);
            if len > SLOT || w.wc_flags & sys::IBV_WC_WITH_IMM == 0 {
                return Err(BackendError::Invalid {
                    backend: self.kind.as_str(),
                    why: format!(
                        "QP {:#x}: a response of {len} B without an immediate or above {SLOT} B",
                        w.qp_num
                    ),
                });
            }
            let b = w.wr_id as usize * RECV_BUF + GRH;
            let mut data = [0u8; SLOT];
            for (i, d) in data[..len].iter_mut().enumerate() {
                *d = self.rx.load(b + i);
            }
            // SAFETY: a completion with IBV_WC_WITH_IMM set carries imm_data in this union.
            let imm = u32::from_be(unsafe { w.__bindgen_anon_1.imm_data });
            if self.workers.get(imm as usize) != Some(&w.src_qp) {
                return Err(BackendError::Invalid {
                    backend: self.kind.as_str(),
                    why: format!(
                        "QP {:#x}: a response with immediate {imm} from QP {:#x}, which is not worker {imm}'s UD QP",
                        w.qp_num, w.src_qp
                    ),
                });
            }
            out.push(Response {
                imm,
                len: len as u32,
                data,
            });
            self.done += 1;
        }
        Ok(())
    }
}

/// A worker's end: its UD QP, an address handle for every client, and the request region.
pub struct KvWorker {
    kind: BackendKind,
    device: String,
    /// The wr backend: the UD QP's `ibv_wr_*` entry points.
    wr_api: Option<(WrOps, *mut sys::ibv_qp_ex)>,
    region: MemView,
    wrs: Vec<sys::ibv_send_wr>,
    sges: Vec<sys::ibv_sge>,
    wc: [sys::ibv_wc; 16],
    hook: ModelHook,
    /// Each client's UD QP number.
    clients: Vec<u32>,
    // owners, dropped after the raw pointers above: the QP before the address handles its
    // queued work requests name
    ud: Qp,
    cq: Cq,
    ahs: Vec<Ah>,
    _region: Arc<Mr>,
}

// SAFETY: as KvClient's; the region view points into the MR this end holds an Arc of.
unsafe impl Send for KvWorker {}

impl WorkerLink for KvWorker {
    fn read_slot(&self, slot: usize, out: &mut [u8; SLOT]) {
        for (i, b) in out.iter_mut().enumerate() {
            *b = self.region.load(slot * SLOT + i);
        }
    }

    fn opcode(&self, slot: usize) -> u8 {
        self.region.load(slot * SLOT + crate::scenario::kv::op::OPCODE_AT)
    }

    fn set_opcode(&self, slot: usize, v: u8) {
        self.region.store(slot * SLOT + crate::scenario::kv::op::OPCODE_AT, v)
    }

    fn respond(&mut self, batch: &[Reply<'_>]) -> Result<(), BackendError> {
        let n = batch.len();
        if n == 0 || n > MAX_CHAIN {
            return Err(BackendError::Invalid {
                backend: self.kind.as_str(),
                why: format!("a batch of {n} responses (1 to {MAX_CHAIN})"),
            });
        }
        if let Some(bad) = batch.iter().find(|r| r.to as usize >= self.ahs.len()) {
            return Err(BackendError::Invalid {
                backend: self.kind.as_str(),
                why: format!("a response to client {} of {}", bad.to, self.ahs.len()),
            });
        }
        if self.wr_api.is_some() {
            return self.respond_wr(batch);
        }
        let wp = self.wrs.as_mut_ptr();
        for (i, r) in batch.iter().enumerate() {
            let Some(ah) = self.ahs.get(r.to as usize) else {
                return Err(BackendError::Invalid {
                    backend: self.kind.as_str(),
                    why: format!("a response to client {} of {}", r.to, self.ahs.len()),
                });
            };
            self.sges[i] = sys::ibv_sge {
                addr: r.data.as_ptr() as u64,
                length: r.data.len() as u32,
                lkey: 0,
            };
            let w = &mut self.wrs[i];
            w.num_sge = i32::from(!r.data.is_empty());
            w.opcode = sys::IBV_WR_SEND_WITH_IMM;
            w.__bindgen_anon_1.imm_data = r.imm.to_be();
            w.send_flags = sys::IBV_SEND_INLINE | if r.signal { sys::IBV_SEND_SIGNALED } else { 0 };
            w.wr.ud = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
                ah: ah.as_ptr(),
                remote_qpn: self.clients[r.to as usize],
                remote_qkey: QKEY,
            };
            w.next = if i + 1 < n {
                // SAFETY: i + 1 < n <= MAX_CHAIN: the next WR inside the vector.
                unsafe { wp.add(i + 1) }
            } else {
                std::ptr::null_mut()
            };
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP; a chain of n WRs whose inline SGEs point at the batch's bytes (read
        // during the call) and whose address handles this end owns.
        let rc = unsafe { post_send(self.ud.as_ptr(), self.wrs.as_mut_ptr(), &mut bad) };
        if rc != 0 {
            return Err(verbs_err(
                self.kind,
                "ibv_post_send",
                rc,
                &self.device,
                self.ud.qpn(),
                "kv responses",
            ));
        }
        self.hook.after_post();
        Ok(())
    }

    fn poll_sends(&mut self) -> Result<u32, BackendError> {
        self.hook.before_poll();
        Ok(poll(self.kind, &self.cq, &mut self.wc, &self.device)? as u32)
    }
}

impl KvWorker {
    /// The batch through `ibv_wr_*`: one start, a SEND_WITH_IMM with its inline data and its
    /// address per response, one complete.
    fn respond_wr(&mut self, batch: &[Reply<'_>]) -> Result<(), BackendError> {
        let Some((ops, q)) = self.wr_api else {
            return Err(BackendError::Unsupported {
                backend: "wr",
                why: "no ibv_wr_* API on this QP".into(),
            });
        };
        let Some(set_ud) = ops.set_ud_addr else {
            return Err(BackendError::Unsupported {
                backend: "wr",
                why: "the UD QP has no ibv_wr_set_ud_addr".into(),
            });
        };
        // SAFETY: q is this end's live extended QP and `ops` its entry points; between start and
        // complete only builders and setters run; the address handles are this end's (bounds
        // checked by the caller) and each response's bytes are read during the call.
        let rc = unsafe {
            (ops.start)(q);
            for r in batch {
                (*q).wr_id = u64::from(r.to);
                (*q).wr_flags = sys::IBV_SEND_INLINE | if r.signal { sys::IBV_SEND_SIGNALED } else { 0 };
                (ops.send_imm)(q, r.imm.to_be());
                set_ud(q, self.ahs[r.to as usize].as_ptr(), self.clients[r.to as usize], QKEY);
                (ops.set_inline_data)(q, r.data.as_ptr() as *mut _, r.data.len());
            }
            (ops.complete)(q)
        };
        if rc != 0 {
            return Err(verbs_err(
                self.kind,
                "ibv_wr_complete",
                rc,
                &self.device,
                self.ud.qpn(),
                "kv responses",
            ));
        }
        self.hook.after_post();
        Ok(())
    }
}

/// The server's side of the requests: a UC QP for each client and the region they write.
struct Server {
    _qps: Vec<(Qp, Cq)>,
    _region: Arc<Mr>,
}

/// The server's ends (in its process): the workers, and the UC QPs and region the clients reach
/// (dropped after the workers).
pub struct KvServerSide {
    /// The workers' ends.
    pub workers: Vec<KvWorker>,
    server: Server,
}

/// Every client's and worker's end of a loopback run, and the server side they reach. The
/// clients and the workers are dropped before the server's QPs and region.
pub struct KvPaths {
    /// The clients' ends.
    pub clients: Vec<KvClient>,
    /// The workers' ends.
    pub workers: Vec<KvWorker>,
    _server: Server,
}

/// A UC or UD QP with a CQ of its own.
fn qp_with_cq(pd: &Pd, ctx: &crate::verbs::Context, ud: bool, wr: bool) -> Result<(Qp, Cq), SetupError> {
    let cq = Cq::new(ctx, 2 * DEPTH)?;
    let caps = QpCaps {
        max_send_wr: DEPTH,
        max_recv_wr: DEPTH,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let qp = if ud {
        Qp::new_ud(pd, &cq, &cq, caps, wr)?
    } else {
        Qp::new_uc(pd, &cq, &cq, caps, wr)?
    };
    if qp.granted_caps().max_inline_data < SLOT as u32 {
        return Err(SetupError::from(BackendError::Unsupported {
            backend: "verbs",
            why: format!(
                "QP {:#x}: {} B of inline data granted; the key-value workload sends requests and responses of up to {SLOT} B inline",
                qp.qpn(),
                qp.granted_caps().max_inline_data
            ),
        }));
    }
    Ok((qp, cq))
}

/// The `ibv_wr_*` entry points of a QP made with them.
fn wr_ops(qp: &Qp) -> Result<(WrOps, *mut sys::ibv_qp_ex), SetupError> {
    qp.wr_ops().ok_or_else(|| {
        SetupError::from(BackendError::Unsupported {
            backend: "wr",
            why: format!("QP {:#x} was not created with the ibv_wr_* API", qp.qpn()),
        })
    })
}

/// The device's parts a client's or a worker's QPs are made with, and their connection options.
pub(super) struct Parts<'a> {
    pub(super) ctx: &'a crate::verbs::Context,
    pub(super) port: &'a crate::verbs::PortInfo,
    pub(super) gid: Option<u8>,
    pub(super) path: crate::backend::path::PathOpts,
    pub(super) opts: crate::verbs::ConnectOpts,
}

/// `dev`'s parts for backend `kind` (verbs or wr).
fn parts(dev: &Dev, kind: BackendKind) -> Result<Parts<'_>, SetupError> {
    if kind == BackendKind::Direct {
        return Err(SetupError::from(BackendError::Unsupported {
            backend: kind.as_str(),
            why: "the key-value workload's libibverbs ends post with ibv_post_send or ibv_wr_*".into(),
        }));
    }
    device_parts(dev, kind)
}

/// `dev`'s verbs parts for the ends of backend `kind`: its context, port and GID, the path and
/// the connection options.
pub(super) fn device_parts(dev: &Dev, kind: BackendKind) -> Result<Parts<'_>, SetupError> {
    let Some((ctx, port, gid)) = dev.verbs_parts() else {
        return Err(SetupError::from(BackendError::Unsupported {
            backend: kind.as_str(),
            why: "the device has no verbs context".into(),
        }));
    };
    let path = dev.path();
    let opts = crate::backend::setup::kv_connect_opts(ctx, port, gid, path)?;
    Ok(Parts {
        ctx,
        port,
        gid,
        path,
        opts,
    })
}

/// One client's end: its UC QP (not connected yet: the server's address comes later) and its UD
/// QP with `ring` receive buffers, and their addresses for the server.
fn client(kind: BackendKind, pd: &Pd, d: &Parts<'_>, ring: usize) -> Result<(KvClient, ClientAddr), SetupError> {
    let device = d.ctx.name().to_string();
    let wr = kind == BackendKind::Wr;
    let (c, ccq) = qp_with_cq(pd, d.ctx, false, wr)?;
    let ec = c.endpoint(d.port, d.gid)?;
    let (mut u, ucq) = qp_with_cq(pd, d.ctx, true, false)?;
    u.connect_ud(d.port, d.opts.pkey_index, QKEY)?;
    let ud = u.endpoint(d.port, d.gid)?;
    let rx_mr = Mr::new(pd, ring * RECV_BUF, MrAccess::LOCAL_WRITE, false)?;
    // SAFETY: the MR's buffer lives as long as `rx_mr`, which the client owns.
    let rx = unsafe { MemView::new(rx_mr.as_ptr(), rx_mr.len()) };
    let mut rsges = vec![sys::ibv_sge::default(); ring];
    let rwrs = rsges
        .iter_mut()
        .map(|g| sys::ibv_recv_wr {
            num_sge: 1,
            sg_list: g,
            ..Default::default()
        })
        .collect();
    let (uc_hook, ud_hook) = (ModelHook::of(&c, &device), ModelHook::of(&u, &device));
    let me = KvClient {
        kind,
        device,
        region: RemoteBuf::default(),
        // taken once connected (libmlx5 changes them at RTS): connect_clients
        wr_api: None,
        wr: sys::ibv_send_wr::default(),
        sge: sys::ibv_sge::default(),
        rwrs,
        rsges,
        wc: [sys::ibv_wc::default(); 16],
        ring,
        posted: 0,
        done: 0,
        rx,
        uc_hook,
        ud_hook,
        workers: Vec::new(),
        uc: c,
        uc_cq: ccq,
        ud: u,
        ud_cq: ucq,
        rx_mr,
    };
    let addr = ClientAddr {
        uc: Addr::of(&ec),
        ud: Addr::of(&ud),
    };
    Ok((me, addr))
}

/// The clients' ends of `layout` on `dev`: for each a UC QP (connected by [`connect_clients`]
/// once the server's addresses are known) and a UD QP with `2 * window` receive buffers; their
/// addresses, for the server.
pub fn clients(dev: &Dev, kind: BackendKind, layout: Layout) -> Result<(Vec<KvClient>, Vec<ClientAddr>), SetupError> {
    let d = parts(dev, kind)?;
    let pd = Pd::new(d.ctx)?;
    let ring = 2 * layout.window as usize;
    let mut v = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..layout.clients {
        let (c, a) = client(kind, &pd, &d, ring)?;
        v.push(c);
        addrs.push(a);
    }
    Ok((v, addrs))
}

/// Connects each client's UC QP to its server UC QP in `server` (checked against `layout`), and
/// gives the clients the region and the workers' QP numbers.
pub fn connect_clients(
    dev: &Dev,
    clients: &mut [KvClient],
    layout: Layout,
    server: &ServerAddr,
) -> Result<(), SetupError> {
    check_addrs(&layout, None, Some(server))?;
    let Some(c0) = clients.first() else {
        return Ok(());
    };
    let d = parts(dev, c0.kind)?;
    for (c, s) in clients.iter_mut().zip(&server.uc) {
        crate::backend::path::path_taken(d.ctx, c.uc.connect(d.port, &d.opts, &s.endpoint())?)?;
        if c.kind == BackendKind::Wr {
            c.wr_api = Some(wr_ops(&c.uc)?);
        }
        c.region = server.region;
        c.workers = server.workers.clone();
    }
    Ok(())
}

/// The server's ends of `layout` on `dev` for the clients at `clients` (checked against it): a
/// UC QP connected to each client's, the request region, and for each worker a UD QP with an
/// address handle for every client's UD QP; their addresses, for the clients.
pub fn server(
    dev: &Dev,
    kind: BackendKind,
    layout: Layout,
    clients: &[ClientAddr],
) -> Result<(KvServerSide, ServerAddr), SetupError> {
    check_addrs(&layout, Some(clients), None)?;
    let d = parts(dev, kind)?;
    let device = d.ctx.name().to_string();
    let pd = Pd::new(d.ctx)?;
    let access = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_WRITE;
    let region = Arc::new(Mr::new(&pd, layout.bytes(), access, dev.huge_pages())?);
    let mut qps = Vec::new();
    let mut uc = Vec::new();
    for c in clients {
        let (mut s, scq) = qp_with_cq(&pd, d.ctx, false, false)?;
        uc.push(Addr::of(&s.endpoint(d.port, d.gid)?));
        crate::backend::path::path_taken(d.ctx, s.connect(d.port, &d.opts, &c.uc.endpoint())?)?;
        qps.push((s, scq));
    }
    let mut workers = Vec::new();
    for _ in 0..layout.workers {
        let (mut u, cq) = qp_with_cq(&pd, d.ctx, true, kind == BackendKind::Wr)?;
        u.connect_ud(d.port, d.path.pkey_index, QKEY)?;
        let ahs = clients
            .iter()
            .map(|c| Ah::new(&pd, d.port, &c.ud.endpoint(), d.gid, (d.path.sl, d.path.traffic_class)))
            .collect::<Result<Vec<_>, _>>()?;
        // SAFETY: the region lives as long as the Arc the worker holds.
        let view = unsafe { MemView::new(region.as_ptr(), region.len()) };
        let mut wrs = vec![sys::ibv_send_wr::default(); MAX_CHAIN];
        let mut sges = vec![sys::ibv_sge::default(); MAX_CHAIN];
        for (w, s) in wrs.iter_mut().zip(sges.iter_mut()) {
            w.sg_list = s;
        }
        workers.push(KvWorker {
            kind,
            device: device.clone(),
            wr_api: if kind == BackendKind::Wr {
                Some(wr_ops(&u)?)
            } else {
                None
            },
            region: view,
            wrs,
            sges,
            wc: [sys::ibv_wc::default(); 16],
            hook: ModelHook::of(&u, &device),
            clients: clients.iter().map(|c| c.ud.qpn).collect(),
            ahs,
            ud: u,
            cq,
            _region: region.clone(),
        });
    }
    let addr = ServerAddr {
        region: region.remote(0),
        uc,
        workers: workers.iter().map(|w| w.ud.qpn()).collect(),
    };
    let server = Server {
        _qps: qps,
        _region: region,
    };
    Ok((KvServerSide { workers, server }, addr))
}

/// Builds a loopback run's ends on `dev` (both sides on one device): [`clients`], the
/// [`server`] for them, then the clients connected.
pub fn loopback(dev: &Dev, kind: BackendKind, layout: Layout) -> Result<KvPaths, SetupError> {
    let (mut clients, addrs) = clients(dev, kind, layout)?;
    let (side, saddr) = server(dev, kind, layout, &addrs)?;
    connect_clients(dev, &mut clients, layout, &saddr)?;
    Ok(KvPaths {
        clients,
        workers: side.workers,
        _server: side.server,
    })
}

//! The RDMA connection manager (librdmacm), for `-R`: address and route resolution, and the
//! connection's REQ/REP/RTU exchange, for QPs this program creates and moves through their states
//! itself (librdmacm's "QP-less" use: no QP is attached to an `rdma_cm_id`; the QP number travels
//! in the connection parameters and the attributes of each state come from `rdma_init_qp_attr`).
//! The CM chooses the source GID (from the route to the peer's IP address), the P_Key, the path
//! MTU and the starting PSNs, as it does for perftest's `-R`.
//!
//! Every wait has a deadline: the event channel's descriptor is non-blocking and polled.

use super::error::{check_rc, Ctx, Result, VerbsError};
use crate::sys;
use std::ffi::CStr;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// An `rdma_event_channel`: where the CM reports what happened to the ids made on it.
struct Channel {
    ch: *mut sys::rdma_event_channel,
}

// SAFETY: the channel is a descriptor and librdmacm's bookkeeping, usable from any thread; this
// program uses it from one at a time (every use goes through &self of the owner of the ids).
unsafe impl Send for Channel {}
// SAFETY: as above; rdma_get_cm_event is thread-safe in librdmacm.
unsafe impl Sync for Channel {}

impl Channel {
    fn new() -> Result<Arc<Self>> {
        // SAFETY: no arguments; returns NULL with errno on failure.
        let ch = unsafe { sys::rdma_create_event_channel() };
        if ch.is_null() {
            return Err(VerbsError::Verb {
                verb: "rdma_create_event_channel",
                ctx: Ctx::dev("rdma_cm")
                    .detail("is the rdma_ucm kernel module loaded, and /dev/infiniband/rdma_cm there and writable?"),
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: ch is a live channel; its fd is an open descriptor it owns.
        let fd = unsafe { (*ch).fd };
        // SAFETY: fcntl on an open descriptor; O_NONBLOCK only changes how reads wait.
        let rc = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK)
        };
        let c = Arc::new(Channel { ch });
        if rc < 0 {
            return Err(VerbsError::Verb {
                verb: "fcntl(rdma_cm channel, O_NONBLOCK)",
                ctx: Ctx::dev("rdma_cm"),
                source: io::Error::last_os_error(),
            });
        }
        Ok(c)
    }

    /// The next event, or `None` once `deadline` passed. A stop asked by a signal, or `abort`
    /// answering true (checked every slice of at most 200 ms), ends the wait with an error.
    fn next(&self, deadline: Instant, ctx: &Ctx, abort: &mut dyn FnMut() -> bool) -> Result<Option<Event>> {
        loop {
            if Instant::now() >= deadline {
                return Ok(None);
            }
            if crate::signals::stops_waits() {
                return Err(VerbsError::Port {
                    ctx: ctx.clone(),
                    why: "rdma_cm: the wait was interrupted".into(),
                });
            }
            if abort() {
                return Err(VerbsError::Port {
                    ctx: ctx.clone(),
                    why: ABORTED.into(),
                });
            }
            let mut ev: *mut sys::rdma_cm_event = std::ptr::null_mut();
            // SAFETY: live channel; ev receives an event to be acknowledged below.
            let rc = unsafe { sys::rdma_get_cm_event(self.ch, &mut ev) };
            if rc == 0 && !ev.is_null() {
                // SAFETY: ev is the event librdmacm just returned, valid until acknowledged.
                let e = unsafe { Event::copy(&*ev) };
                // SAFETY: acknowledged once; nothing of it is used afterwards (copied above).
                unsafe { sys::rdma_ack_cm_event(ev) };
                return Ok(Some(e));
            }
            let err = io::Error::last_os_error();
            if !matches!(err.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EINTR)) {
                return Err(VerbsError::Verb {
                    verb: "rdma_get_cm_event",
                    ctx: ctx.clone(),
                    source: err,
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            // SAFETY: live channel; its fd stays open while the channel lives.
            let fd = unsafe { (*self.ch).fd };
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, 200) as i32;
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut pfd, 1, ms) };
        }
    }

    /// Waits until `judge` takes an event (or finds it wrong: an error naming it). Events it
    /// skips are dropped, except connection requests, which are rejected (strangers, or a client
    /// out of step) and counted in the timeout's message.
    fn wait(
        self: &Arc<Self>,
        (deadline, limit): (Instant, Duration),
        what: &str,
        ctx: &Ctx,
        abort: &mut dyn FnMut() -> bool,
        mut judge: impl FnMut(&Event) -> Verdict,
    ) -> Result<Event> {
        let mut rejected = 0;
        loop {
            let Some(e) = self.next(deadline, ctx, abort)? else {
                return Err(VerbsError::Timeout {
                    ctx: ctx.clone(),
                    what: match rejected {
                        0 => what.to_string(),
                        n => format!("{what} ({n} connection request(s) for other QPs rejected meanwhile)"),
                    },
                    ms: limit.as_millis() as u64,
                });
            };
            match judge(&e) {
                Verdict::Take => return Ok(e),
                Verdict::Fail => {
                    return Err(VerbsError::Port {
                        ctx: ctx.clone(),
                        why: format!("rdma_cm: waiting for {what}, got {}", e.explain()),
                    })
                }
                Verdict::Skip if e.kind == sys::RDMA_CM_EVENT_CONNECT_REQUEST => {
                    let id = CmId::adopt(e.id, self, ctx.clone());
                    // SAFETY: live id of a request not yet answered; no private data. Dropping
                    // it afterwards destroys it.
                    unsafe { sys::rdma_reject(id.id, std::ptr::null(), 0) };
                    rejected += 1;
                }
                Verdict::Skip => {}
            }
        }
    }
}

/// How a wait judges an event.
enum Verdict {
    /// The one awaited.
    Take,
    /// Its id's, but not what was awaited: an error.
    Fail,
    /// Another id's.
    Skip,
}

/// The reason of a wait ended because the peer spoke (or hung up) out of band.
pub const ABORTED: &str = "rdma_cm: the peer spoke or hung up out of band meanwhile";

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: every id made on the channel holds an Arc of it, so none is left.
        unsafe { sys::rdma_destroy_event_channel(self.ch) };
    }
}

/// What an event said, copied out before it was acknowledged.
#[derive(Debug, Clone)]
struct Event {
    id: *mut sys::rdma_cm_id,
    kind: u32,
    status: i32,
    /// The peer's QP number (connection requests and responses).
    qp_num: u32,
    responder_resources: u8,
    initiator_depth: u8,
    private: Vec<u8>,
}

impl Event {
    /// # Safety
    /// `e` is an event librdmacm returned and that is not yet acknowledged.
    unsafe fn copy(e: &sys::rdma_cm_event) -> Self {
        // SAFETY: connected-mode events carry `conn` (the port space is TCP: no UD events).
        let c = unsafe { e.param.conn };
        let private = if c.private_data.is_null() || c.private_data_len == 0 {
            Vec::new()
        } else {
            // SAFETY: private_data points at private_data_len bytes while the event lives.
            unsafe { std::slice::from_raw_parts(c.private_data as *const u8, c.private_data_len as usize) }.to_vec()
        };
        Event {
            id: e.id,
            kind: e.event,
            status: e.status,
            qp_num: c.qp_num,
            responder_resources: c.responder_resources,
            initiator_depth: c.initiator_depth,
            private,
        }
    }

    fn name(&self) -> String {
        event_name(self.kind)
    }

    /// The event and its status, said for an error.
    fn explain(&self) -> String {
        let why = match self.kind {
            sys::RDMA_CM_EVENT_REJECTED => match self.status {
                8 => " (the peer's connection manager has no listener on that port: invalid service ID)".to_string(),
                28 => " (the peer rejected the connection)".to_string(),
                s => format!(" (reject reason {s})"),
            },
            _ if self.status < 0 => format!(" ({})", io::Error::from_raw_os_error(-self.status)),
            _ if self.status > 0 => format!(" (status {})", self.status),
            _ => String::new(),
        };
        format!("{}{why}", self.name())
    }
}

fn event_name(kind: u32) -> String {
    // SAFETY: rdma_event_str returns a static string for any value.
    let s = unsafe { sys::rdma_event_str(kind) };
    if s.is_null() {
        return format!("event {kind}");
    }
    // SAFETY: a NUL-terminated static string.
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

/// The sockaddr of `a`, in storage large enough for either family.
fn sockaddr(a: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage, which is suitably aligned.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_in6 fits in sockaddr_storage, which is suitably aligned.
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
        }
    }
    ss
}

/// One `rdma_cm_id`: a listener, or one connection's.
pub struct CmId {
    id: *mut sys::rdma_cm_id,
    ch: Arc<Channel>,
    /// Where (for errors): the addresses.
    ctx: Ctx,
}

// SAFETY: an id is used from one thread at a time (&mut or the owner's &self).
unsafe impl Send for CmId {}

impl Drop for CmId {
    fn drop(&mut self) {
        // SAFETY: live id; every event of it this program took was acknowledged (Channel::next);
        // no QP is attached to it. A connected id disconnects (the peer sees DISCONNECTED).
        unsafe { sys::rdma_destroy_id(self.id) };
    }
}

/// The QP attributes the CM gives for one state, with their mask.
#[derive(Clone, Copy)]
pub struct StateAttr {
    /// The attributes.
    pub attr: sys::ibv_qp_attr,
    /// Which of them are set (`IBV_QP_*`).
    pub mask: i32,
}

/// What the CM gave a QP: the attributes of INIT, RTR and RTS.
#[derive(Clone, Copy)]
pub struct CmAttrs {
    /// INIT (port, P_Key index; the access flags are the caller's).
    pub init: StateAttr,
    /// RTR (address vector with the GID the CM chose, path MTU, the peer's QP and PSN).
    pub rtr: StateAttr,
    /// RTS (the send PSN, timeouts, retries).
    pub rts: StateAttr,
}

/// The device and port a CM id is bound to, and the path it resolved.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CmPath {
    /// The RDMA device the route goes through.
    pub device: String,
    /// Its port.
    pub port: u8,
    /// This side's IP address and port.
    pub local: String,
    /// The peer's IP address and port.
    pub remote: String,
}

impl CmId {
    fn new(ch: &Arc<Channel>, ctx: Ctx) -> Result<Self> {
        let mut id: *mut sys::rdma_cm_id = std::ptr::null_mut();
        // SAFETY: live channel; id receives the new id; RC connections (TCP port space).
        let rc = unsafe { sys::rdma_create_id(ch.ch, &mut id, std::ptr::null_mut(), sys::RDMA_PS_TCP) };
        check_rc(rc, "rdma_create_id", || ctx.clone())?;
        Ok(CmId {
            id,
            ch: ch.clone(),
            ctx,
        })
    }

    /// Takes ownership of an id the CM made for a connection request.
    fn adopt(id: *mut sys::rdma_cm_id, ch: &Arc<Channel>, ctx: Ctx) -> Self {
        CmId {
            id,
            ch: ch.clone(),
            ctx,
        }
    }

    /// The device and port the id is bound to (after address resolution, or a request), and
    /// its addresses.
    pub fn path(&self) -> Option<CmPath> {
        // SAFETY: live id; verbs is NULL or a context librdmacm keeps open.
        let verbs = unsafe { (*self.id).verbs };
        if verbs.is_null() {
            return None;
        }
        // SAFETY: a live context's device; the name is a static string of it.
        let name = unsafe { CStr::from_ptr(sys::ibv_get_device_name((*verbs).device)) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: live id.
        let (port, src, dst) = unsafe {
            let r = &(*self.id).route.addr;
            (
                (*self.id).port_num,
                sock_str(&r.__bindgen_anon_1.src_storage),
                sock_str(&r.__bindgen_anon_2.dst_storage),
            )
        };
        Some(CmPath {
            device: name,
            port,
            local: src,
            remote: dst,
        })
    }

    /// The attributes the CM gives for the QP's INIT, RTR and RTS (after a connection response
    /// or request).
    pub fn attrs(&self) -> Result<CmAttrs> {
        let one = |state: u32, verb: &'static str| -> Result<StateAttr> {
            let mut attr = sys::ibv_qp_attr {
                qp_state: state,
                ..Default::default()
            };
            let mut mask = 0;
            // SAFETY: live id; attr and mask are writable.
            let rc = unsafe { sys::rdma_init_qp_attr(self.id, &mut attr, &mut mask) };
            check_rc(rc, verb, || self.ctx.clone())?;
            Ok(StateAttr { attr, mask })
        };
        Ok(CmAttrs {
            init: one(sys::IBV_QPS_INIT, "rdma_init_qp_attr(INIT)")?,
            rtr: one(sys::IBV_QPS_RTR, "rdma_init_qp_attr(RTR)")?,
            rts: one(sys::IBV_QPS_RTS, "rdma_init_qp_attr(RTS)")?,
        })
    }

    /// Waits for `want` on this id; any other event of it is an error naming it.
    fn expect(&self, want: u32, deadline: (Instant, Duration), abort: &mut dyn FnMut() -> bool) -> Result<Event> {
        let what = format!("the connection manager's {}", event_name(want));
        let me = self.id;
        self.ch.wait(deadline, &what, &self.ctx, abort, |e| match e.id == me {
            true if e.kind == want && e.status == 0 => Verdict::Take,
            true => Verdict::Fail,
            false => Verdict::Skip,
        })
    }
}

fn sock_str(ss: &sys::sockaddr_storage) -> String {
    // SAFETY: sys::sockaddr_storage and libc's have the same layout (both the C type).
    let ss: &libc::sockaddr_storage = unsafe { &*(ss as *const _ as *const libc::sockaddr_storage) };
    match ss.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says sockaddr_in.
            let sin: &libc::sockaddr_in = unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
            let ip = std::net::Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            format!("{ip}:{}", u16::from_be(sin.sin_port))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says sockaddr_in6.
            let sin6: &libc::sockaddr_in6 = unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            format!("[{ip}]:{}", u16::from_be(sin6.sin6_port))
        }
        f => format!("(address family {f})"),
    }
}

/// Outstanding READs and atomics a connected QP takes as responder and as initiator: at most
/// this side's limit and what the peer's message offers. (A connection event gives the peer's
/// figures from the receiver's point of view: its `responder_resources` are what this side
/// must take as responder.)
#[derive(Debug, Clone, Copy)]
struct Depths {
    responder: u8,
    initiator: u8,
}

impl Depths {
    fn of(e: &Event, rd_atomic: u8) -> Self {
        Depths {
            responder: rd_atomic.min(e.responder_resources),
            initiator: rd_atomic.min(e.initiator_depth),
        }
    }
}

/// The minimal RNR NAK timer code of RTR: 12 (0.64 ms), as a QP connected out of band has
/// (the CM gives 0, 655 ms; the timer is this side's alone, not negotiated).
const MIN_RNR_TIMER: u8 = 12;

/// The CM's attributes with what this side settled: the depths (librdmacm sets them the same
/// way for a QP it moves itself) and the RNR timer.
fn settled(mut a: CmAttrs, d: Depths) -> CmAttrs {
    if a.rtr.mask & sys::IBV_QP_MAX_DEST_RD_ATOMIC as i32 != 0 {
        a.rtr.attr.max_dest_rd_atomic = d.responder;
    }
    if a.rtr.mask & sys::IBV_QP_MIN_RNR_TIMER as i32 != 0 {
        a.rtr.attr.min_rnr_timer = MIN_RNR_TIMER;
    }
    if a.rts.mask & sys::IBV_QP_MAX_QP_RD_ATOMIC as i32 != 0 {
        a.rts.attr.max_rd_atomic = d.initiator;
    }
    a
}

/// How many outstanding READs/atomics each side may have, and the retries: what the REQ and
/// REP carry.
#[derive(Debug, Clone, Copy)]
pub struct CmParams {
    /// Outstanding READs/atomics as responder and as initiator.
    pub rd_atomic: u8,
    /// Transport retries (the client's REQ sets them for both).
    pub retry_count: u8,
    /// Traffic class / ToS of the connection (`RDMA_OPTION_ID_TOS`), set before route
    /// resolution.
    pub tos: u8,
}

fn conn_param(qpn: u32, p: &CmParams, private: &[u8; 4]) -> sys::rdma_conn_param {
    sys::rdma_conn_param {
        private_data: private.as_ptr() as *const core::ffi::c_void,
        private_data_len: private.len() as u8,
        responder_resources: p.rd_atomic,
        initiator_depth: p.rd_atomic,
        flow_control: 1,
        retry_count: p.retry_count,
        rnr_retry_count: 7,
        srq: 0,
        qp_num: qpn,
    }
}

/// The active side: one connection per QP to the server's listener at `to`.
pub struct CmClient {
    ch: Arc<Channel>,
    to: SocketAddr,
    timeout: Duration,
    /// The run's device (for errors).
    device: String,
}

/// A connection under way on the active side: the response came; the QP moves to RTS, then
/// [`PendingClient::establish`].
pub struct PendingClient {
    id: CmId,
    /// The server's QP number, as its REP said.
    pub peer_qpn: u32,
    depths: Depths,
}

impl CmClient {
    /// A client of the listener at `to` for the run on `device`; every step waits at most
    /// `timeout`.
    pub fn new(to: SocketAddr, timeout: Duration, device: &str) -> Result<Self> {
        Ok(CmClient {
            ch: Channel::new()?,
            to,
            timeout,
            device: device.to_string(),
        })
    }

    /// Resolves the server's address and the route to it for our QP `qpn`: then the id knows
    /// the device and port (check them before [`Resolved::request`]).
    pub fn resolve(&self, qpn: u32, p: &CmParams) -> Result<Resolved> {
        let deadline = (Instant::now() + self.timeout, self.timeout);
        let ctx = Ctx::dev(&self.device)
            .qpn(qpn)
            .detail(format!("rdma_cm to {}", self.to));
        let id = CmId::new(&self.ch, ctx)?;
        let mut dst = sockaddr(self.to);
        let ms = self.timeout.as_millis().clamp(100, 60_000) as i32;
        // SAFETY: live id; dst is a valid sockaddr of its family; no source address.
        let rc = unsafe {
            sys::rdma_resolve_addr(
                id.id,
                std::ptr::null_mut(),
                &mut dst as *mut _ as *mut sys::sockaddr,
                ms,
            )
        };
        check_rc(rc, "rdma_resolve_addr", || id.ctx.clone())?;
        id.expect(sys::RDMA_CM_EVENT_ADDR_RESOLVED, deadline, &mut || false)?;
        if p.tos != 0 {
            let mut tos = p.tos;
            // SAFETY: live id; optval points at one byte, as RDMA_OPTION_ID_TOS takes.
            let rc = unsafe {
                sys::rdma_set_option(
                    id.id,
                    sys::RDMA_OPTION_ID as i32,
                    sys::RDMA_OPTION_ID_TOS as i32,
                    &mut tos as *mut u8 as *mut core::ffi::c_void,
                    1,
                )
            };
            check_rc(rc, "rdma_set_option(TOS)", || id.ctx.clone())?;
        }
        // SAFETY: live id with a resolved address.
        let rc = unsafe { sys::rdma_resolve_route(id.id, ms) };
        check_rc(rc, "rdma_resolve_route", || id.ctx.clone())?;
        id.expect(sys::RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, &mut || false)?;
        Ok(Resolved { id, qpn, deadline })
    }
}

/// A route to the server, no request sent yet.
pub struct Resolved {
    id: CmId,
    qpn: u32,
    deadline: (Instant, Duration),
}

impl Resolved {
    /// The CM id (its path).
    pub fn id(&self) -> &CmId {
        &self.id
    }

    /// Sends the connection request for our QP (its index `index` in the private data) and
    /// waits for the response (or until `abort` says the peer spoke out of band).
    pub fn request(self, index: u32, p: &CmParams, abort: &mut dyn FnMut() -> bool) -> Result<PendingClient> {
        let private = index.to_be_bytes();
        let mut cp = conn_param(self.qpn, p, &private);
        // SAFETY: live id with a route; cp and the private data it points at outlive the call.
        let rc = unsafe { sys::rdma_connect(self.id.id, &mut cp) };
        check_rc(rc, "rdma_connect", || self.id.ctx.clone())?;
        let e = self
            .id
            .expect(sys::RDMA_CM_EVENT_CONNECT_RESPONSE, self.deadline, abort)?;
        Ok(PendingClient {
            peer_qpn: e.qp_num,
            depths: Depths::of(&e, p.rd_atomic),
            id: self.id,
        })
    }
}

impl PendingClient {
    /// The CM id (its path and attributes).
    pub fn id(&self) -> &CmId {
        &self.id
    }

    /// The attributes of our QP's states, with the depths the REP settled.
    pub fn attrs(&self) -> Result<CmAttrs> {
        Ok(settled(self.id.attrs()?, self.depths))
    }

    /// Sends the RTU (our QP is in RTS): the connection is established.
    pub fn establish(self) -> Result<CmId> {
        // SAFETY: live id that received a connection response.
        let rc = unsafe { sys::rdma_establish(self.id.id) };
        check_rc(rc, "rdma_establish", || self.id.ctx.clone())?;
        Ok(self.id)
    }
}

/// The passive side: a listener; each connection request is matched to the QP expected next.
pub struct CmServer {
    listener: CmId,
    timeout: Duration,
}

/// A connection request taken: our QP moves to RTS from its attributes, then
/// [`PendingServer::accept`].
pub struct PendingServer {
    id: CmId,
    /// The client's QP number.
    pub peer_qpn: u32,
    depths: Depths,
}

impl CmServer {
    /// Listens on `bind` (port 0: one the system picks; [`CmServer::port`] says which) for the
    /// run on `device`.
    pub fn listen(bind: IpAddr, timeout: Duration, device: &str) -> Result<Self> {
        let ch = Channel::new()?;
        let ctx = Ctx::dev(device).detail(format!("rdma_cm listener on {bind}"));
        let listener = CmId::new(&ch, ctx)?;
        let mut a = sockaddr(SocketAddr::new(bind, 0));
        // SAFETY: live id; a is a valid sockaddr of its family.
        let rc = unsafe { sys::rdma_bind_addr(listener.id, &mut a as *mut _ as *mut sys::sockaddr) };
        check_rc(rc, "rdma_bind_addr", || listener.ctx.clone())?;
        // SAFETY: live, bound id.
        let rc = unsafe { sys::rdma_listen(listener.id, 64) };
        check_rc(rc, "rdma_listen", || listener.ctx.clone())?;
        Ok(CmServer { listener, timeout })
    }

    /// The port the listener is bound to.
    pub fn port(&self) -> u16 {
        // SAFETY: live, bound id.
        u16::from_be(unsafe { sys::rdma_get_src_port(self.listener.id) })
    }

    /// Waits for the connection request of the client's QP `peer_qpn` (number `index` of the
    /// run); a request for another QP (a stranger, or a client out of step) is rejected and
    /// the wait goes on.
    pub fn request(
        &self,
        peer_qpn: u32,
        index: u32,
        rd_atomic: u8,
        abort: &mut dyn FnMut() -> bool,
    ) -> Result<PendingServer> {
        let deadline = (Instant::now() + self.timeout, self.timeout);
        let what = format!("the connection request of the client's QP {peer_qpn:#x}");
        let listener = self.listener.id;
        let e = self.listener.ch.wait(deadline, &what, &self.listener.ctx, abort, |e| {
            if e.kind == sys::RDMA_CM_EVENT_CONNECT_REQUEST {
                let their_index = e.private.get(..4).map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                return match e.qp_num == peer_qpn && their_index == Some(index) {
                    true => Verdict::Take,
                    // a stranger, or a client out of step: rejected
                    false => Verdict::Skip,
                };
            }
            // the listener's own trouble is ours; another id's event (one torn down) is not
            match e.id == listener {
                true => Verdict::Fail,
                false => Verdict::Skip,
            }
        })?;
        let ctx = Ctx::dev(&self.listener.ctx.device).detail(format!("rdma_cm request of QP {:#x}", e.qp_num));
        Ok(PendingServer {
            peer_qpn: e.qp_num,
            depths: Depths::of(&e, rd_atomic),
            id: CmId::adopt(e.id, &self.listener.ch, ctx),
        })
    }
}

impl PendingServer {
    /// The CM id (its path and attributes).
    pub fn id(&self) -> &CmId {
        &self.id
    }

    /// The attributes of our QP's states, with the depths this side's REP will say.
    pub fn attrs(&self) -> Result<CmAttrs> {
        Ok(settled(self.id.attrs()?, self.depths))
    }

    /// Refuses the request (this side could not connect its QP): the client hears a reject at
    /// once instead of waiting for its deadline.
    pub fn reject(self) {
        // SAFETY: live id of a request not yet answered; no private data.
        unsafe { sys::rdma_reject(self.id.id, std::ptr::null(), 0) };
    }

    /// Sends the REP for our QP `qpn` (in RTS) and waits until the client's RTU establishes the
    /// connection.
    pub fn accept(
        mut self,
        qpn: u32,
        p: &CmParams,
        timeout: Duration,
        abort: &mut dyn FnMut() -> bool,
    ) -> Result<CmId> {
        let deadline = (Instant::now() + timeout, timeout);
        let private = [0u8; 4];
        let mut cp = conn_param(qpn, p, &private);
        // what this side's QP was given (see `attrs`)
        cp.responder_resources = self.depths.responder;
        cp.initiator_depth = self.depths.initiator;
        self.id.ctx = Ctx::dev(&self.id.ctx.device)
            .qpn(qpn)
            .detail(format!("rdma_cm, client QP {:#x}", self.peer_qpn));
        // SAFETY: live id of a connection request; cp and its private data outlive the call.
        let rc = unsafe { sys::rdma_accept(self.id.id, &mut cp) };
        check_rc(rc, "rdma_accept", || self.id.ctx.clone())?;
        self.id.expect(sys::RDMA_CM_EVENT_ESTABLISHED, deadline, abort)?;
        Ok(self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockaddrs_round_trip_through_the_c_layout() {
        for a in ["192.0.2.1:18515", "[2001:db8::7]:4791", "0.0.0.0:0"] {
            let a: SocketAddr = a.parse().unwrap();
            let ss = sockaddr(a);
            // SAFETY: both are the C sockaddr_storage.
            let s: &sys::sockaddr_storage = unsafe { &*(&ss as *const _ as *const sys::sockaddr_storage) };
            assert_eq!(sock_str(s), a.to_string());
        }
    }

    #[test]
    fn without_the_kernel_s_connection_manager_the_error_says_what_to_load() {
        if std::path::Path::new("/dev/infiniband/rdma_cm").exists() {
            // a kernel with it: the Soft-RoCE lane connects through it
            return;
        }
        let e = CmServer::listen("0.0.0.0".parse().unwrap(), Duration::from_secs(1), "rxe0")
            .err()
            .expect("no rdma_cm device here, yet a listener");
        let s = e.to_string();
        assert!(s.contains("rdma_create_event_channel") && s.contains("rdma_ucm"), "{s}");
    }

    /// The depths a QP takes are at most this side's limit and what the peer offers, read from
    /// the receiver's point of view (the event's responder_resources are ours as responder), and
    /// replace the CM's in RTR and RTS; the RNR timer is this side's 12, not the CM's 0.
    #[test]
    fn the_qp_takes_the_depths_this_side_settled() {
        let e = Event {
            id: std::ptr::null_mut(),
            kind: sys::RDMA_CM_EVENT_CONNECT_REQUEST,
            status: 0,
            qp_num: 7,
            responder_resources: 4,
            initiator_depth: 32,
            private: Vec::new(),
        };
        let d = Depths::of(&e, 16);
        assert_eq!((d.responder, d.initiator), (4, 16));
        let state = |mask: u32| StateAttr {
            attr: sys::ibv_qp_attr {
                max_dest_rd_atomic: 99,
                max_rd_atomic: 99,
                min_rnr_timer: 0,
                ..Default::default()
            },
            mask: mask as i32,
        };
        let a = CmAttrs {
            init: state(sys::IBV_QP_STATE),
            rtr: state(sys::IBV_QP_STATE | sys::IBV_QP_MAX_DEST_RD_ATOMIC | sys::IBV_QP_MIN_RNR_TIMER),
            rts: state(sys::IBV_QP_STATE | sys::IBV_QP_MAX_QP_RD_ATOMIC),
        };
        let s = settled(a, d);
        assert_eq!(s.rtr.attr.max_dest_rd_atomic, 4);
        assert_eq!(s.rtr.attr.min_rnr_timer, MIN_RNR_TIMER);
        assert_eq!(s.rts.attr.max_rd_atomic, 16);
        // what the CM did not set stays unset
        let uc = CmAttrs {
            rtr: state(sys::IBV_QP_STATE),
            rts: state(sys::IBV_QP_STATE),
            ..a
        };
        let s = settled(uc, d);
        assert_eq!((s.rtr.attr.max_dest_rd_atomic, s.rts.attr.max_rd_atomic), (99, 99));
    }

    #[test]
    fn the_event_names_are_librdmacm_s() {
        assert_eq!(event_name(sys::RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED");
        assert_eq!(event_name(sys::RDMA_CM_EVENT_REJECTED), "RDMA_CM_EVENT_REJECTED");
    }

    #[test]
    fn a_reject_says_why() {
        let e = Event {
            id: std::ptr::null_mut(),
            kind: sys::RDMA_CM_EVENT_REJECTED,
            status: 8,
            qp_num: 0,
            responder_resources: 0,
            initiator_depth: 0,
            private: Vec::new(),
        };
        assert!(e.explain().contains("no listener on that port"), "{}", e.explain());
        let e = Event {
            kind: sys::RDMA_CM_EVENT_ADDR_ERROR,
            status: -libc::ENETUNREACH,
            ..e
        };
        assert!(
            e.explain()
                .starts_with("RDMA_CM_EVENT_ADDR_ERROR (Network is unreachable"),
            "{}",
            e.explain()
        );
    }
}

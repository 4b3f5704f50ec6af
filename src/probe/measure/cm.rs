//! `-R`: the QPs of a client/server run connected through the RDMA connection manager, as
//! perftest's `-R`. The parameters, buffers and barriers still go over the out-of-band TCP
//! connection; the server's listener port goes over it too (the listener takes a port the system
//! picks, so no port is shared with anything else). For each QP, in order: the client resolves
//! the server's IP address and the route and sends the request carrying its QP number; the
//! server matches it with the QP the out-of-band exchange announced, moves its QP to RTS with the
//! CM's attributes and accepts; the client moves its QP to RTS and establishes.

use crate::backend::setup::{rd_atomic, AnyEnd, Dev, HalfEnd};
use crate::backend::OpKind;
use crate::oob::{QpInfo, Rendezvous};
use crate::probe::plan::{PeerSpec, Plan};
use crate::probe::ProbeError;
use crate::verbs::cm::{CmAttrs, CmClient, CmId, CmParams, CmPath, CmServer};
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

/// What the server tells the client: its listener's port.
#[derive(serde::Serialize, serde::Deserialize)]
struct CmHello {
    rdma_cm_port: u16,
}

enum Side {
    Client(CmClient),
    Server(CmServer),
}

/// One run's connections through the CM: kept until the run ends (dropping one disconnects it).
pub struct CmLink {
    side: Side,
    params: CmParams,
    timeout: Duration,
    ids: Vec<CmId>,
    /// What the first connection was given (every connection of a run takes the same route).
    first: Option<Value>,
}

impl CmLink {
    /// After the hello: the server listens and says on which port; the client hears it.
    pub fn open(rdv: &mut dyn Rendezvous, plan: &Plan, dev: &Dev) -> Result<Self, ProbeError> {
        let ctx = cm_context(dev)?;
        let params = CmParams {
            rd_atomic: rd_atomic(ctx)?,
            retry_count: plan.path.retry_count,
            tos: plan.path.traffic_class,
        };
        let timeout = plan.oob_timeout;
        let side = match &plan.peer {
            PeerSpec::Listen { bind, .. } => Side::Server(listen(rdv, bind, timeout, dev)?),
            PeerSpec::Connect { host, .. } => Side::Client(client(rdv, host, timeout, dev)?),
            PeerSpec::Loopback => {
                return Err(ProbeError::Usage(
                    "-R/--rdma-cm connects a client and a server: not with --loopback".into(),
                ))
            }
        };
        Ok(CmLink {
            side,
            params,
            timeout,
            ids: Vec::new(),
            first: None,
        })
    }

    /// Connects `half` to the peer's QP `theirs` (from the out-of-band exchange) through the CM.
    /// A failure is told to the peer out of band (it may be waiting for the CM, and hears it
    /// there); a failure of the peer's, heard while waiting for the CM, is returned as the peer's.
    pub fn connect(
        &mut self,
        rdv: &mut dyn Rendezvous,
        half: HalfEnd,
        (dev, op): (&Dev, OpKind),
        theirs: &QpInfo,
        gid_asked: Option<u8>,
    ) -> Result<AnyEnd, ProbeError> {
        let to = Target {
            dev,
            op,
            theirs,
            gid_asked,
            index: self.ids.len() as u32,
        };
        match self.connect_one(rdv, half, &to) {
            Ok(e) => Ok(e),
            Err(e) => {
                // a wait cut short because the peer spoke, or a reject that may be the peer's
                // failure: what the peer said is the reason
                let aborted = matches!(&e, ProbeError::Setup(crate::backend::setup::SetupError::Verbs(v))
                    if matches!(&**v, crate::verbs::VerbsError::Port { why, .. } if why == crate::verbs::cm::ABORTED));
                if aborted || rdv.pending() {
                    match heard(rdv) {
                        Some(theirs) => return Err(theirs),
                        None if aborted => {
                            return Err(ProbeError::Invalid(format!(
                                "rdma_cm: the peer {} sent something else than its failure while this side waited \
                                 for the connection manager",
                                rdv.peer_name()
                            )))
                        }
                        None => {}
                    }
                }
                Err(super::session::fail(rdv, e))
            }
        }
    }

    /// One QP through the CM, as the client or the server; the connection kept, the first one's
    /// route recorded.
    fn connect_one(&mut self, rdv: &mut dyn Rendezvous, half: HalfEnd, to: &Target<'_>) -> Result<AnyEnd, ProbeError> {
        let (id, (end, rec)) = match &self.side {
            Side::Client(c) => to.as_client(c, rdv, half, &self.params)?,
            Side::Server(s) => to.as_server(s, rdv, half, &self.params, self.timeout)?,
        };
        self.ids.push(id);
        if self.first.is_none() {
            self.first = Some(rec);
        }
        Ok(end)
    }

    /// The report's record: the first connection's route and attributes, and how many.
    pub fn json(&self) -> Value {
        let mut v = self.first.clone().unwrap_or(Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.insert("connections".into(), json!(self.ids.len()));
        }
        v
    }
}

/// The device's verbs context, when its QPs can be connected through the CM: an InfiniBand or
/// RoCE device (not model0, which has no IP address, nor iWARP, whose CM moves the QPs itself).
fn cm_context(dev: &Dev) -> Result<&crate::verbs::Context, ProbeError> {
    let Some((ctx, _, _)) = dev.verbs_parts().filter(|_| !dev.is_model()) else {
        return Err(ProbeError::Usage(format!(
            "-R/--rdma-cm: {} has no IP address for the connection manager to resolve (give an RDMA device with -d)",
            dev.name()
        )));
    };
    // SAFETY: a live context's device.
    if unsafe { (*(*ctx.as_ptr()).device).transport_type } == crate::sys::IBV_TRANSPORT_IWARP {
        return Err(ProbeError::Usage(format!(
            "-R/--rdma-cm: {} is an iWARP device, whose connection manager moves the QPs itself; \
             rdmaprobe connects InfiniBand and RoCE QPs through it",
            dev.name()
        )));
    }
    Ok(ctx)
}

/// The server's side: it listens on `bind` (a port the system picks) and tells the client which.
fn listen(rdv: &mut dyn Rendezvous, bind: &str, timeout: Duration, dev: &Dev) -> Result<CmServer, ProbeError> {
    let ip: IpAddr = bind
        .parse()
        .map_err(|_| ProbeError::Usage(format!("--bind {bind}: not an IP address")))?;
    let s = CmServer::listen(ip, timeout, &dev.name())?;
    rdv.exchange(&CmHello { rdma_cm_port: s.port() })?;
    Ok(s)
}

/// The client's side: it hears the server's port and resolves the server at the address the
/// out-of-band connection reached, else `host`'s first.
fn client(rdv: &mut dyn Rendezvous, host: &str, timeout: Duration, dev: &Dev) -> Result<CmClient, ProbeError> {
    let theirs: CmHello = rdv.exchange(&CmHello { rdma_cm_port: 0 })?;
    let ip = match rdv.peer_addr() {
        Some(a) => a.ip(),
        None => (host, 0)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .map(|a| a.ip())
            .ok_or_else(|| ProbeError::Invalid(format!("-R: cannot resolve {host} to an IP address")))?,
    };
    if theirs.rdma_cm_port == 0 {
        return Err(ProbeError::Invalid(format!(
            "-R: the server {} sent no connection manager port",
            rdv.peer_name()
        )));
    }
    Ok(CmClient::new(
        SocketAddr::new(ip, theirs.rdma_cm_port),
        timeout,
        &dev.name(),
    )?)
}

/// One QP's connection through the CM: to the peer's QP `theirs` (from the out-of-band
/// exchange), the `index`-th of the run, on this run's device.
struct Target<'t> {
    dev: &'t Dev,
    op: OpKind,
    theirs: &'t QpInfo,
    gid_asked: Option<u8>,
    index: u32,
}

/// A connected end, and the record of its route and attributes.
type Connected = (AnyEnd, Value);

impl Target<'_> {
    /// The client's connection: the route resolved, the request sent, the reply checked against
    /// the out-of-band QP, this side's QP to RTS, then established.
    fn as_client(
        &self,
        c: &CmClient,
        rdv: &mut dyn Rendezvous,
        half: HalfEnd,
        params: &CmParams,
    ) -> Result<(CmId, Connected), ProbeError> {
        let route = c.resolve(half.qpn(), params)?;
        check_device(route.id(), self.dev)?;
        // the server says nothing out of band before the connection is established, unless it
        // failed
        let pending = route.request(self.index, params, &mut || rdv.pending())?;
        if pending.peer_qpn != self.theirs.qpn {
            return Err(ProbeError::Invalid(format!(
                "rdma_cm: the server's reply names its QP {:#x}, its out-of-band message QP {:#x}",
                pending.peer_qpn, self.theirs.qpn
            )));
        }
        // on an error the pending id is dropped: the server hears a reject
        let connected = self.prepare(pending.id(), pending.attrs(), half)?;
        Ok((pending.establish()?, connected))
    }

    /// The server's connection: the client's request for this QP awaited, this side's QP to RTS
    /// (a failure rejects the request), then accepted.
    fn as_server(
        &self,
        s: &CmServer,
        rdv: &mut dyn Rendezvous,
        half: HalfEnd,
        params: &CmParams,
        timeout: Duration,
    ) -> Result<(CmId, Connected), ProbeError> {
        let qpn = half.qpn();
        // the client says nothing out of band before its request is answered, unless it failed
        let pending = s.request(self.theirs.qpn, self.index, params.rd_atomic, &mut || rdv.pending())?;
        let connected = match self.prepare(pending.id(), pending.attrs(), half) {
            Ok(v) => v,
            Err(e) => {
                pending.reject();
                return Err(e);
            }
        };
        // not cut short by the peer's next message: once it has our REP and sent its RTU, it goes
        // on (its next QP, or the barrier) before this side sees ESTABLISHED; a client that fails
        // before its RTU destroys its id, which rejects the connection
        let id = pending.accept(qpn, params, timeout, &mut || false)?;
        Ok((id, connected))
    }

    /// `half` to RTS with the attributes the CM gave, once its device and GID are checked.
    fn prepare(&self, id: &CmId, attrs: crate::verbs::Result<CmAttrs>, half: HalfEnd) -> Result<Connected, ProbeError> {
        let path = check_device(id, self.dev)?;
        let attrs = attrs?;
        check_gid(&attrs, self.gid_asked, &path)?;
        let (end, got) = half.connect_cm(self.dev, self.op, self.theirs, &attrs)?;
        Ok((end, record(&path, &attrs, &got)))
    }
}

/// What the peer said out of band about the connection: its failure, or that it ended or hung
/// up; `None` when it said something else (a message of the run: it went on).
fn heard(rdv: &mut dyn Rendezvous) -> Option<ProbeError> {
    match rdv.recv_value() {
        Err(e) => Some(e.into()),
        Ok(v) => match serde_json::from_value::<crate::oob::Done>(v) {
            Ok(crate::oob::Done { error: Some(e) }) => Some(ProbeError::Peer(crate::oob::escape(&e))),
            Ok(_) => Some(ProbeError::Invalid(format!(
                "rdma_cm: the peer {} ended the run while this side connected through the connection manager",
                rdv.peer_name()
            ))),
            Err(_) => None,
        },
    }
}

/// The CM's device and port must be the ones this run opened (its QPs are there); returns them.
fn check_device(id: &CmId, dev: &Dev) -> Result<CmPath, ProbeError> {
    let path = id
        .path()
        .ok_or_else(|| ProbeError::Invalid("rdma_cm: the connection has no device".into()))?;
    let Some((_, port, _)) = dev.verbs_parts() else {
        return Err(ProbeError::Invalid("-R needs an RDMA device".into()));
    };
    if path.device != dev.name() || path.port != port.port {
        return Err(ProbeError::Invalid(format!(
            "rdma_cm routes {} -> {} through {} port {}, but this side opened {} port {}: give -d {} -i {}",
            path.local,
            path.remote,
            path.device,
            path.port,
            dev.name(),
            port.port,
            path.device,
            path.port
        )));
    }
    Ok(path)
}

/// The source GID index the CM chose for the route; with -x the user's must be the same.
fn check_gid(attrs: &CmAttrs, asked: Option<u8>, path: &CmPath) -> Result<(), ProbeError> {
    let ah = attrs.rtr.attr.ah_attr;
    if let Some(x) = asked {
        if ah.is_global == 0 || ah.grh.sgid_index != x {
            return Err(ProbeError::Usage(format!(
                "-x {x}: the connection manager chose {} for the route {} -> {} (give no -x with -R)",
                if ah.is_global == 0 {
                    "no GID (a LID-routed path)".to_string()
                } else {
                    format!("GID index {}", ah.grh.sgid_index)
                },
                path.local,
                path.remote
            )));
        }
    }
    Ok(())
}

/// A connection's route and the attributes its QP holds in RTS.
fn record(path: &CmPath, attrs: &CmAttrs, got: &crate::sys::ibv_qp_attr) -> Value {
    let ah = attrs.rtr.attr.ah_attr;
    json!({
        "device": path.device, "port": path.port, "local": path.local, "remote": path.remote,
        "sgid_index": (ah.is_global != 0).then_some(ah.grh.sgid_index),
        "dgid": (ah.is_global != 0).then(|| crate::verbs::Gid::from_raw(ah.grh.dgid).to_string()),
        "dlid": ah.dlid, "sl": ah.sl, "traffic_class": ah.grh.traffic_class,
        "path_mtu": crate::verbs::device::mtu_bytes(got.path_mtu),
        "timeout": got.timeout, "retry_cnt": got.retry_cnt, "rnr_retry": got.rnr_retry,
        "max_rd_atomic": got.max_rd_atomic, "max_dest_rd_atomic": got.max_dest_rd_atomic,
    })
}

/// The header's line for a run connected through the CM (`params["rdma_cm"]`), or `None`.
pub fn describe(cm: &Value) -> Option<String> {
    let o = cm.as_object()?;
    Some(format!(
        " connected by rdma_cm (-R): {} connection(s) through {} port {}, {} -> {}, source GID index {} (chosen by the CM), path MTU {}",
        o.get("connections").and_then(Value::as_u64).unwrap_or(0),
        o.get("device").and_then(Value::as_str).unwrap_or("?"),
        o.get("port").and_then(Value::as_u64).unwrap_or(0),
        o.get("local").and_then(Value::as_str).unwrap_or("?"),
        o.get("remote").and_then(Value::as_str).unwrap_or("?"),
        o.get("sgid_index").and_then(Value::as_u64).map_or("none".to_string(), |i| i.to_string()),
        o.get("path_mtu").and_then(Value::as_u64).unwrap_or(0),
    ))
}

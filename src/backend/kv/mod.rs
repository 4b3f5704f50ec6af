//! What the key-value workload asks of an RDMA path (HERD's: `scenario::kv`): a client writes
//! requests inline into slots of the server's request region and receives responses; a worker
//! reads the region's slots and posts batches of responses, each to one client with its
//! immediate. `verbs`: these over libibverbs (`ibv_post_send`), UC for the requests and UD for
//! the responses.

pub mod direct;
pub mod verbs;

use super::BackendError;

/// Bytes of one request slot and the most a response carries.
pub const SLOT: usize = 64;

/// What a client asks of its path to the server.
pub trait ClientLink {
    /// Writes `bytes` into slot `slot` of the server's request region (inline), signalled when
    /// `signal`.
    fn write(&mut self, slot: usize, bytes: &[u8], signal: bool) -> Result<(), BackendError>;
    /// Posts `n` receives for responses.
    fn post_recvs(&mut self, n: u32) -> Result<(), BackendError>;
    /// Completions of signalled writes seen by one poll.
    fn poll_sends(&mut self) -> Result<u32, BackendError>;
    /// Responses seen by one poll, appended to `out`.
    fn poll_responses(&mut self, out: &mut Vec<Response>) -> Result<(), BackendError>;
}

/// What a worker asks of its path: the request region and the responses.
pub trait WorkerLink {
    /// Copies slot `slot` of the request region into `out`.
    fn read_slot(&self, slot: usize, out: &mut [u8; SLOT]);
    /// The opcode byte of slot `slot`.
    fn opcode(&self, slot: usize) -> u8;
    /// Sets the opcode byte of slot `slot` (a worker marks a slot taken).
    fn set_opcode(&self, slot: usize, v: u8);
    /// Posts the responses of one batch as one post: to client `to`, the bytes, the immediate;
    /// the ones whose `signal` is set are signalled.
    fn respond(&mut self, batch: &[Reply<'_>]) -> Result<(), BackendError>;
    /// Completions of signalled responses seen by one poll.
    fn poll_sends(&mut self) -> Result<u32, BackendError>;
}

/// A response as a client receives it.
#[derive(Debug, Clone, Copy)]
pub struct Response {
    /// The immediate: the worker's number.
    pub imm: u32,
    /// Bytes carried.
    pub len: u32,
    /// The bytes (the first `len`).
    pub data: [u8; SLOT],
}

/// One response of a worker's batch.
#[derive(Debug, Clone, Copy)]
pub struct Reply<'a> {
    /// The client.
    pub to: u32,
    /// The bytes (empty for a PUT or a GET miss).
    pub data: &'a [u8],
    /// The immediate (the worker's number).
    pub imm: u32,
    /// Signalled.
    pub signal: bool,
}

/// One QP's address as exchanged out of band (model0's direct QPs: the QP number alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Addr {
    /// QP number.
    pub qpn: u32,
    /// Initial PSN.
    pub psn: u32,
    /// LID.
    pub lid: u16,
    /// GID, 16 bytes.
    pub gid: [u8; 16],
}

impl Addr {
    /// The address of a QP whose endpoint is `e`.
    pub fn of(e: &crate::verbs::Endpoint) -> Addr {
        Addr {
            qpn: e.qpn,
            psn: e.psn,
            lid: e.lid,
            gid: e.gid.0,
        }
    }

    /// The endpoint a QP connects to.
    pub fn endpoint(&self) -> crate::verbs::Endpoint {
        crate::verbs::Endpoint {
            qpn: self.qpn,
            psn: self.psn,
            lid: self.lid,
            gid: crate::verbs::Gid(self.gid),
        }
    }
}

/// What the server needs of one client (sent by the clients' side): its UC QP, which a server UC
/// QP connects to, and its UD QP, which the workers answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientAddr {
    /// The UC QP of the requests.
    pub uc: Addr,
    /// The UD QP of the responses.
    pub ud: Addr,
}

/// What the clients need of the server (sent back): the request region, a UC QP for each client
/// (in the clients' order), each worker's UD QP number.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerAddr {
    /// The request region.
    pub region: crate::verbs::RemoteBuf,
    /// The server's UC QP of each client.
    pub uc: Vec<Addr>,
    /// The workers' UD QP numbers.
    pub workers: Vec<u32>,
}

/// The peer's addresses checked against the layout both sides agreed: as many clients as
/// `layout.clients`, and (the server's) a UC QP each, a UD QP per worker and a region that holds
/// every slot. A peer that disagrees is named, never trusted with a write outside its region.
pub fn check_addrs(
    layout: &crate::scenario::kv::op::Layout,
    clients: Option<&[ClientAddr]>,
    server: Option<&ServerAddr>,
) -> Result<(), BackendError> {
    let bad = |why: String| Err(BackendError::Invalid { backend: "kv", why });
    if let Some(c) = clients.filter(|c| c.len() != layout.clients as usize) {
        return bad(format!(
            "the peer sent {} clients' QPs; {} were agreed",
            c.len(),
            layout.clients
        ));
    }
    if let Some(s) = server {
        if s.uc.len() != layout.clients as usize || s.workers.len() != layout.workers as usize {
            return bad(format!(
                "the peer sent {} UC QPs and {} workers; {} clients and {} workers were agreed",
                s.uc.len(),
                s.workers.len(),
                layout.clients,
                layout.workers
            ));
        }
        if s.region.len < layout.bytes() as u64 {
            return bad(format!(
                "the peer's request region is {} B; the agreed layout needs {} B",
                s.region.len,
                layout.bytes()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::kv::op::Layout;

    /// A peer's addresses that do not fit the agreed layout are refused, naming what differs:
    /// clients' QPs of another count, a server's UC QPs or workers of another count, a region
    /// smaller than the slots the clients would write.
    #[test]
    fn addresses_that_do_not_fit_the_layout_are_refused() {
        let l = Layout {
            workers: 2,
            clients: 3,
            window: 4,
        };
        let c = ClientAddr {
            uc: Addr::default(),
            ud: Addr::default(),
        };
        assert!(check_addrs(&l, Some(&[c; 3]), None).is_ok());
        let e = check_addrs(&l, Some(&[c; 2]), None).unwrap_err().to_string();
        assert!(e.contains("sent 2 clients' QPs; 3 were agreed"), "{e}");
        let good = ServerAddr {
            region: crate::verbs::RemoteBuf {
                addr: 0x1000,
                rkey: 7,
                len: l.bytes() as u64,
            },
            uc: vec![Addr::default(); 3],
            workers: vec![1, 2],
        };
        assert!(check_addrs(&l, None, Some(&good)).is_ok());
        let mut s = good.clone();
        s.workers.push(3);
        let e = check_addrs(&l, None, Some(&s)).unwrap_err().to_string();
        assert!(e.contains("3 UC QPs and 3 workers; 3 clients and 2 workers"), "{e}");
        let mut s = good.clone();
        s.uc.pop();
        assert!(check_addrs(&l, None, Some(&s)).is_err());
        let mut s = good;
        s.region.len -= 1;
        let e = check_addrs(&l, None, Some(&s)).unwrap_err().to_string();
        assert!(
            e.contains(&format!(
                "region is {} B; the agreed layout needs {} B",
                l.bytes() - 1,
                l.bytes()
            )),
            "{e}"
        );
    }

    /// An address survives the out-of-band JSON and comes back as the endpoint it was made of;
    /// a message with a field more is refused.
    #[test]
    fn an_address_round_trips_through_json() {
        let e = crate::verbs::Endpoint {
            qpn: 0x1234,
            psn: 77,
            lid: 3,
            gid: crate::verbs::Gid([9; 16]),
        };
        let a = Addr::of(&e);
        let back: Addr = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(back.endpoint(), e);
        let mut v = serde_json::to_value(a).unwrap();
        v["extra"] = 1.into();
        assert!(serde_json::from_value::<Addr>(v).is_err());
    }
}

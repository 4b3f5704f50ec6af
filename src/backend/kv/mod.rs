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

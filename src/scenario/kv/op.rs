//! HERD's request slot (MICA's `struct mica_op`: 16 key bytes, the opcode at byte 16, the value
//! length at 17, the value from 18; 64 bytes in all), the opcodes, the request region's layout
//! (`OFFSET(wn, cn, ws)` of rdma_bench's herd/main.h) and the values the store holds: every byte
//! a function of its key, so a client checks each GET response against its key alone.

use super::keys;

/// Bytes of one request slot (`sizeof(struct mica_op)`).
pub const SLOT: usize = crate::backend::kv::SLOT;
/// Where the opcode lies in a slot.
pub const OPCODE_AT: usize = 16;
/// Where the value length lies in a slot.
pub const VAL_LEN_AT: usize = 17;
/// Where the value starts in a slot (and in a log entry).
pub const VALUE_AT: usize = 18;
/// The largest value a slot holds (`MICA_MAX_VALUE`: 64 - 16 - 1 - 1).
pub const MAX_VALUE: usize = SLOT - VALUE_AT;
/// HERD's value size (`HERD_VALUE_SIZE`).
pub const HERD_VALUE_SIZE: usize = 32;

/// MICA's GET.
pub const MICA_OP_GET: u8 = 111;
/// MICA's PUT.
pub const MICA_OP_PUT: u8 = 112;
/// MICA's response to a PUT (update or insert).
pub const MICA_RESP_PUT_SUCCESS: u8 = 113;
/// MICA's response to a GET that found its key.
pub const MICA_RESP_GET_SUCCESS: u8 = 114;
/// MICA's response to a GET that did not.
pub const MICA_RESP_GET_FAIL: u8 = 115;
/// What HERD adds to MICA's opcodes in a request: a worker takes a slot whose opcode is at least
/// [`HERD_OP_GET`] as new and subtracts this in place (slots are never zeroed).
pub const HERD_MICA_OFFSET: u8 = 10;
/// HERD's GET in a request slot.
pub const HERD_OP_GET: u8 = MICA_OP_GET + HERD_MICA_OFFSET;
/// HERD's PUT in a request slot.
pub const HERD_OP_PUT: u8 = MICA_OP_PUT + HERD_MICA_OFFSET;
/// Bytes a GET request writes (`HERD_GET_REQ_SIZE`: the key and the opcode).
pub const GET_REQ_LEN: usize = OPCODE_AT + 1;

/// Bytes a PUT request of `val_len` bytes writes (`HERD_PUT_REQ_SIZE` for HERD's 32 B).
pub const fn put_req_len(val_len: usize) -> usize {
    VALUE_AT + val_len
}

/// Byte `j` of the value of `key`: a function of the key alone, different for keys whose
/// `second` halves differ. (MICA's populate fills every byte with the key's byte 8, which a wrong
/// key's value matches one time in 256.)
#[inline]
pub fn value_byte(key: &[u8; 16], j: usize) -> u8 {
    key[8 + (j & 7)] ^ (j as u8).wrapping_mul(0x9d)
}

/// The value of `key`, `out.len()` bytes.
pub fn fill_value(key: &[u8; 16], out: &mut [u8]) {
    for (j, b) in out.iter_mut().enumerate() {
        *b = value_byte(key, j);
    }
}

/// Where a value differs from the one its key must have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValueError {
    /// Another length than the run's value size.
    #[error("key {key}: the value carried {got} B, the store holds {want} B values")]
    Length {
        /// The key (as [`keys::hex`] prints it).
        key: String,
        /// Bytes carried.
        got: usize,
        /// The run's value size.
        want: usize,
    },
    /// A byte not the key's.
    #[error("key {key}: value byte {at} is {got:#04x}, the key's value has {want:#04x} there")]
    Byte {
        /// The key (as [`keys::hex`] prints it).
        key: String,
        /// The first differing byte.
        at: usize,
        /// What was carried.
        got: u8,
        /// What the key's value holds.
        want: u8,
    },
}

/// Checks `got` is the value of `key`, `want_len` bytes long.
pub fn check_value(key: &[u8; 16], got: &[u8], want_len: usize) -> Result<(), ValueError> {
    if got.len() != want_len {
        return Err(ValueError::Length {
            key: keys::hex(key),
            got: got.len(),
            want: want_len,
        });
    }
    match got.iter().enumerate().find(|&(j, &b)| b != value_byte(key, j)) {
        None => Ok(()),
        Some((at, &b)) => Err(ValueError::Byte {
            key: keys::hex(key),
            at,
            got: b,
            want: value_byte(key, at),
        }),
    }
}

/// A request as a HERD client forges it: the slot's bytes and how many of them it writes. A GET
/// carries the value length 0xff (HERD writes -1) but writes only the key and the opcode; a PUT
/// writes the key, the opcode, the length and `value` (HERD leaves a PUT's value unfilled; here it
/// is the key's, so the store keeps values a GET can check).
pub fn request(key: &[u8; 16], put: Option<&[u8]>) -> ([u8; SLOT], usize) {
    let mut s = [0u8; SLOT];
    s[..16].copy_from_slice(key);
    match put {
        None => {
            s[OPCODE_AT] = HERD_OP_GET;
            s[VAL_LEN_AT] = 0xff;
            (s, GET_REQ_LEN)
        }
        Some(v) => {
            let n = v.len().min(MAX_VALUE);
            s[OPCODE_AT] = HERD_OP_PUT;
            s[VAL_LEN_AT] = n as u8;
            s[VALUE_AT..VALUE_AT + n].copy_from_slice(&v[..n]);
            (s, put_req_len(n))
        }
    }
}

/// The request region: a slot for every (worker, client, window slot), worker-major as HERD's
/// `OFFSET(wn, cn, ws) = wn * NUM_CLIENTS * WINDOW_SIZE + cn * WINDOW_SIZE + ws`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Workers.
    pub workers: u32,
    /// Clients.
    pub clients: u32,
    /// Window slots per (worker, client).
    pub window: u32,
}

impl Layout {
    /// The slot number of (worker, client, window slot).
    #[inline]
    pub fn slot(&self, wn: u32, cn: u32, ws: u32) -> usize {
        ((wn as usize * self.clients as usize) + cn as usize) * self.window as usize + ws as usize
    }

    /// The region's bytes.
    pub fn bytes(&self) -> usize {
        self.workers as usize * self.clients as usize * self.window as usize * SLOT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_mica_s_op() {
        assert_eq!(MAX_VALUE, 46);
        assert_eq!(put_req_len(HERD_VALUE_SIZE), 50, "HERD_PUT_REQ_SIZE");
        assert_eq!(GET_REQ_LEN, 17, "HERD_GET_REQ_SIZE");
        assert_eq!((HERD_OP_GET, HERD_OP_PUT), (121, 122));
        let k = keys::key(7);
        let (g, n) = request(&k, None);
        assert_eq!((n, g[16], g[17], &g[..16]), (17, 121, 0xff, &k[..]));
        let mut v = [0u8; 32];
        fill_value(&k, &mut v);
        let (p, n) = request(&k, Some(&v));
        assert_eq!((n, p[16], p[17], &p[18..50]), (50, 122, 32, &v[..]));
    }

    #[test]
    fn values_are_checked_against_their_key() {
        let (a, b) = (keys::key(1), keys::key(2));
        let mut v = [0u8; 46];
        fill_value(&a, &mut v);
        assert_eq!(check_value(&a, &v, 46), Ok(()));
        let e = check_value(&b, &v, 46).unwrap_err();
        assert!(matches!(e, ValueError::Byte { at: 0, .. }), "{e}");
        assert!(e.to_string().contains(&keys::hex(&b)), "{e}");
        v[45] ^= 1;
        assert!(matches!(check_value(&a, &v, 46), Err(ValueError::Byte { at: 45, .. })));
        assert!(matches!(
            check_value(&a, &v[..32], 46),
            Err(ValueError::Length { got: 32, want: 46, .. })
        ));
        // two keys' values differ in every byte where their second halves do
        let mut w = [0u8; 8];
        fill_value(&b, &mut w);
        fill_value(&a, &mut v[..8]);
        let differ = (0..8).filter(|&j| a[8 + j] != b[8 + j]).count();
        assert_eq!((0..8).filter(|&j| v[j] != w[j]).count(), differ);
    }

    #[test]
    fn the_region_is_worker_major_as_herd_s_offset() {
        let l = Layout {
            workers: 12,
            clients: 70,
            window: 32,
        };
        assert_eq!(l.slot(0, 0, 0), 0);
        assert_eq!(l.slot(0, 0, 31), 31);
        assert_eq!(l.slot(0, 1, 0), 32);
        assert_eq!(l.slot(1, 0, 0), 70 * 32);
        assert_eq!(l.slot(11, 69, 31) + 1, 12 * 70 * 32);
        assert_eq!(l.bytes(), 12 * 70 * 32 * 64);
    }
}

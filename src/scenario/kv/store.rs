//! A MICA store as rdma_bench's mica/mica.c keeps one per HERD worker: an index of buckets of 8
//! slots (in use, a 23-bit tag, a 40-bit offset into the virtual log) and a circular log of
//! entries (the key, the opcode, the value length, the value; each 8-byte aligned). A batch first
//! finds each key's slot by tag (the first in-use slot with its tag; an entry the log has wrapped
//! over is not found), then in order compares the whole key in the log: a GET hit gives the
//! value's place in the log, a PUT hit copies its value in place, a PUT miss inserts (the last
//! slot with its tag or free, else the slot `tag & 7` evicted), a GET miss is counted.
//!
//! One departure, said here: rdma_bench wraps the log when `log_cap - log_head` is small, with
//! `log_head` the virtual head, which after the first wrap is above `log_cap` and never wraps
//! again (its entries then run past the log's end); this store wraps on the physical position,
//! as MICA means to.

use super::keys;
use super::op::{self, MAX_VALUE, MICA_OP_GET, MICA_OP_PUT, VALUE_AT, VAL_LEN_AT};

/// Bits of a slot's offset into the virtual log (`MICA_LOG_BITS`).
const LOG_BITS: u32 = 40;
const LOG_SPACE: u64 = 1 << LOG_BITS;
/// Slots per bucket.
const WAYS: usize = 8;
/// The largest log (MICA's bound on `log_cap`).
pub const MAX_LOG: u64 = 1 << 30;

/// Bytes of a log entry for values of `val_len` bytes: the key, the opcode, the length and the
/// value, rounded up to 8.
pub fn entry_bytes(val_len: u8) -> u64 {
    (VALUE_AT as u64 + u64::from(val_len) + 7) & !7
}

/// The most requests one batch takes (`MICA_MAX_BATCH_SIZE`).
pub const MAX_BATCH: usize = 32;

/// What a store counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreStats {
    /// GETs that found their key.
    pub get_hits: u64,
    /// GETs that did not (never inserted, evicted from the index, or wrapped over in the log).
    pub get_misses: u64,
    /// PUTs that found their key and wrote its value in place.
    pub put_hits: u64,
    /// PUTs that did not and inserted it (populate's inserts included).
    pub put_inserts: u64,
    /// Inserts that found no free slot with their tag and evicted one.
    pub evictions: u64,
    /// Inserts that took the slot of another key with the same tag (MICA compares tags only
    /// there): that key is lost from the index, as by an eviction.
    pub collisions: u64,
    /// Times the log wrapped.
    pub wraps: u64,
}

/// One request's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A GET that found its key: its value, copied from the log when the GET was served (a
    /// later insert of the same batch may wrap the log over the entry; MICA hands out a pointer
    /// and has that hazard).
    GetHit {
        /// The value's length.
        len: u8,
        /// The value (its first `len` bytes).
        value: [u8; MAX_VALUE],
    },
    /// A GET that did not.
    GetMiss,
    /// A PUT (update or insert).
    Put,
}

impl Outcome {
    /// A GET hit's value (empty for the others).
    pub fn value(&self) -> &[u8] {
        match self {
            Outcome::GetHit { len, value } => &value[..usize::from(*len).min(MAX_VALUE)],
            _ => &[],
        }
    }

    /// MICA's response type for it.
    pub fn code(&self) -> u8 {
        match self {
            Outcome::GetHit { .. } => op::MICA_RESP_GET_SUCCESS,
            Outcome::GetMiss => op::MICA_RESP_GET_FAIL,
            Outcome::Put => op::MICA_RESP_PUT_SUCCESS,
        }
    }
}

/// A request the store cannot take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Buckets or log of a size MICA does not allow.
    #[error("store geometry: {0}")]
    Geometry(String),
    /// Neither MICA's GET nor PUT.
    #[error("request {index} of the batch: opcode {opcode} is neither MICA's GET (111) nor PUT (112)")]
    Opcode {
        /// Index in the batch.
        index: usize,
        /// The opcode found.
        opcode: u8,
    },
    /// A PUT whose value length is not the store's.
    #[error("request {index} of the batch: PUT of key {key} carries {got} B, the store holds {want} B values")]
    ValueLength {
        /// Index in the batch.
        index: usize,
        /// The key.
        key: String,
        /// Its length byte.
        got: u8,
        /// The store's value size.
        want: u8,
    },
    /// More requests than a batch takes.
    #[error("a batch of {0} requests: at most {MAX_BATCH}")]
    Batch(usize),
    /// A request shorter than its opcode needs.
    #[error("request {index} of the batch: {got} B, its opcode needs {want}")]
    Short {
        /// Index in the batch.
        index: usize,
        /// Bytes given.
        got: usize,
        /// Bytes needed.
        want: usize,
    },
}

/// One worker's store.
#[derive(Debug)]
pub struct Store {
    index: Vec<[u64; WAYS]>,
    log: Vec<u8>,
    bkt_mask: u32,
    log_mask: u64,
    /// The virtual head (modulo 2^40, as a slot's offset).
    head: u64,
    val_len: u8,
    stats: StoreStats,
    /// Keys that left the index (evicted, or lost to a key of their tag) and were not inserted
    /// again: their GETs miss.
    lost: std::collections::HashSet<[u8; 16]>,
}

#[inline]
fn slot_word(tag: u16, offset: u64) -> u64 {
    1 | (u64::from(tag) << 1) | ((offset & (LOG_SPACE - 1)) << 24)
}
#[inline]
fn in_use(w: u64) -> bool {
    w & 1 == 1
}
#[inline]
fn tag_of(w: u64) -> u64 {
    (w >> 1) & ((1 << 23) - 1)
}
#[inline]
fn offset_of(w: u64) -> u64 {
    w >> 24
}

fn key_at(b: &[u8]) -> [u8; 16] {
    let mut k = [0u8; 16];
    k.copy_from_slice(&b[..16]);
    k
}

impl Store {
    /// An empty store: `buckets` (a power of two, at most 16 Mi, as MICA's) and a log of `log_cap`
    /// bytes (a power of two of at least 4 KiB; MICA asks at least 2 MiB, the small ones are for
    /// tests that wrap it), holding values of `val_len` bytes (1 to 46).
    pub fn new(buckets: u32, log_cap: u64, val_len: u8) -> Result<Self, StoreError> {
        if !buckets.is_power_of_two() || buckets > 16 << 20 {
            return Err(StoreError::Geometry(format!(
                "{buckets} buckets: a power of two up to 16 Mi"
            )));
        }
        if !log_cap.is_power_of_two() || !(4096..=MAX_LOG).contains(&log_cap) {
            return Err(StoreError::Geometry(format!(
                "a log of {log_cap} B: a power of two from 4 KiB to 1 GiB"
            )));
        }
        if val_len == 0 || usize::from(val_len) > MAX_VALUE {
            return Err(StoreError::Geometry(format!("{val_len} B values: 1 to {MAX_VALUE}")));
        }
        Ok(Store {
            index: vec![[0; WAYS]; buckets as usize],
            log: vec![0; log_cap as usize],
            bkt_mask: buckets - 1,
            log_mask: log_cap - 1,
            head: 0,
            val_len,
            stats: StoreStats::default(),
            lost: std::collections::HashSet::new(),
        })
    }

    /// What it counted.
    pub fn stats(&self) -> StoreStats {
        self.stats
    }

    /// Whether `key` left the index (evicted, or lost to another key of its tag) and was not
    /// inserted since: a GET of it misses, as in MICA. Keys of entries the log wrapped over are
    /// not tracked: [`StoreStats::wraps`] says whether there can be any.
    pub fn is_lost(&self, key: &[u8; 16]) -> bool {
        self.lost.contains(key)
    }

    /// Its value size.
    pub fn val_len(&self) -> u8 {
        self.val_len
    }

    /// Inserts keys `0..n` ([`keys::key`]) with their values ([`op::fill_value`]), as MICA's
    /// populate does with its own fill.
    pub fn populate(&mut self, n: u32) {
        let mut v = [0u8; MAX_VALUE];
        let v = &mut v[..usize::from(self.val_len)];
        for i in 0..n {
            let k = keys::key(i);
            op::fill_value(&k, v);
            self.insert(&k, v);
        }
    }

    /// MICA's `mica_insert_one`: the last slot of the key's bucket with its tag or free, else the
    /// slot `tag & 7` evicted; the entry appended at the head.
    pub fn insert(&mut self, key: &[u8; 16], value: &[u8]) {
        let f = keys::fields(key);
        let bkt = &mut self.index[(f.bkt & self.bkt_mask) as usize];
        let tag = u64::from(f.tag);
        let chosen = (0..WAYS).rev().find(|&i| tag_of(bkt[i]) == tag || !in_use(bkt[i]));
        let i = chosen.unwrap_or_else(|| {
            self.stats.evictions += 1;
            usize::from(f.tag) & 7
        });
        let old = bkt[i];
        if in_use(old) {
            // the slot's key (while the log still holds its entry) leaves the index: evicted, or
            // lost to this key of the same tag; the same key again is an update of its slot
            let age = self.head.wrapping_sub(offset_of(old)) & (LOG_SPACE - 1);
            let at = (offset_of(old) & self.log_mask) as usize;
            if age <= self.log_mask && self.log[at..at + 16] != key[..] {
                self.stats.collisions += u64::from(chosen.is_some());
                self.lost.insert(key_at(&self.log[at..]));
            }
        }
        self.lost.remove(key);
        let bkt = &mut self.index[(f.bkt & self.bkt_mask) as usize];
        bkt[i] = slot_word(f.tag, self.head);
        self.stats.put_inserts += 1;
        let at = (self.head & self.log_mask) as usize;
        let len = VALUE_AT + value.len();
        self.log[at..at + 16].copy_from_slice(key);
        self.log[at + 16] = MICA_OP_PUT;
        self.log[at + VAL_LEN_AT] = value.len() as u8;
        self.log[at + VALUE_AT..at + len].copy_from_slice(value);
        self.head = (self.head + len as u64 + 7) & !7;
        // wrap while a whole entry (64 B) still fits: rdma_bench's margin, MICA_MAX_VALUE + 32
        let left = self.log_mask + 1 - (self.head & self.log_mask);
        if left <= MAX_VALUE as u64 + 32 {
            self.head = (self.head + self.log_mask + 1) & !self.log_mask;
            self.stats.wraps += 1;
        }
        self.head &= LOG_SPACE - 1;
    }

    /// The log offset of the entry the index names for `key`, if the log has not wrapped over it.
    fn find(&self, key: &[u8; 16]) -> Option<usize> {
        let f = keys::fields(key);
        let bkt = &self.index[(f.bkt & self.bkt_mask) as usize];
        let w = *bkt.iter().find(|&&w| in_use(w) && tag_of(w) == u64::from(f.tag))?;
        let age = self.head.wrapping_sub(offset_of(w)) & (LOG_SPACE - 1);
        (age <= self.log_mask).then_some((offset_of(w) & self.log_mask) as usize)
    }

    /// MICA's `mica_batch_op` over requests whose opcodes are MICA's (a HERD worker has taken
    /// [`op::HERD_MICA_OFFSET`] off): every key looked up in the index first, then each request
    /// in order. `out` gets one outcome per request.
    pub fn batch(&mut self, reqs: &[&[u8]], out: &mut Vec<Outcome>) -> Result<(), StoreError> {
        out.clear();
        if reqs.len() > MAX_BATCH {
            return Err(StoreError::Batch(reqs.len()));
        }
        let mut found = [None; MAX_BATCH];
        for (i, r) in reqs.iter().enumerate() {
            let want = match r.get(op::OPCODE_AT) {
                Some(&MICA_OP_GET) => op::GET_REQ_LEN,
                Some(&MICA_OP_PUT) => op::put_req_len(usize::from(self.val_len)),
                Some(&opcode) => return Err(StoreError::Opcode { index: i, opcode }),
                None => op::GET_REQ_LEN,
            };
            if r.len() < want {
                return Err(StoreError::Short {
                    index: i,
                    got: r.len(),
                    want,
                });
            }
            if r[op::OPCODE_AT] == MICA_OP_PUT && r[VAL_LEN_AT] != self.val_len {
                let key = keys::hex(&key_at(r));
                return Err(StoreError::ValueLength {
                    index: i,
                    key,
                    got: r[VAL_LEN_AT],
                    want: self.val_len,
                });
            }
            found[i] = self.find(&key_at(r));
        }
        for (i, r) in reqs.iter().enumerate() {
            let key = key_at(r);
            let hit = found[i].filter(|&a| self.log[a..a + 16] == key);
            let vl = usize::from(self.val_len);
            out.push(match (r[op::OPCODE_AT], hit) {
                (MICA_OP_GET, Some(a)) => {
                    self.stats.get_hits += 1;
                    let len = self.log[a + VAL_LEN_AT];
                    let n = usize::from(len).min(MAX_VALUE);
                    let mut value = [0u8; MAX_VALUE];
                    value[..n].copy_from_slice(&self.log[a + VALUE_AT..a + VALUE_AT + n]);
                    Outcome::GetHit { len, value }
                }
                (MICA_OP_GET, None) => {
                    self.stats.get_misses += 1;
                    Outcome::GetMiss
                }
                (_, Some(a)) => {
                    self.stats.put_hits += 1;
                    self.log[a + VALUE_AT..a + VALUE_AT + vl].copy_from_slice(&r[VALUE_AT..VALUE_AT + vl]);
                    Outcome::Put
                }
                (_, None) => {
                    self.insert(&key, &r[VALUE_AT..VALUE_AT + vl]);
                    Outcome::Put
                }
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

//! perftest's out-of-band protocol, spoken to an unmodified perftest peer (`ib_write_lat` ...)
//! over the same TCP connection rdmaprobe's own exchange would use. Facts from perftest's
//! `src/perftest_communication.c` (6.06, Debian 12's; `../shared/docs/perftest-protocol.md`):
//!
//! - every exchange is fixed-size raw bytes: the client writes its message, then reads the
//!   server's; the server reads, then writes. perftest reads a message with one `read()` that
//!   must return all of it, so each of ours goes out in one `write()`;
//! - the sequence opens with the version (16 bytes, NUL-padded), the cycle buffer and the cache
//!   line (4 bytes each, big-endian; both sides keep the larger), and the MTU (the `ibv_mtu`
//!   enum as a decimal string, 2 bytes for a peer of 5.31 or later; both keep the smaller);
//! - a QP is described by a key message of 59 bytes
//!   (`lid:out_reads:qpn:psn:rkey:vaddr:srqn` in hex, NUL-terminated), or 108 with the GID
//!   (when the side's GID index is set: RoCE, or `-x`), each side choosing by its own GID
//!   index, so both must agree.
//!
//! - a peer of 6.28 or later (perftest 26.01 on) negotiates after the MTU: both send their
//!   parameters and device limits (`negotiate`), and a difference ends the run naming it.
//!
//! rdmaprobe says it is perftest [`VERSION`] (6.29): a peer of 6.28 or later negotiates with it
//! (6.28 as released does with every peer, 6.29 with one of 6.28 or later), so it learns that
//! rdmaprobe's QPs do not use mlx5's enhanced reorder and turns its own off (which a 6.29 that
//! skipped the negotiation would not); an older peer does not negotiate, and nothing else in its
//! exchange depends on the version beyond what 6.06 already said.
#![forbid(unsafe_code)]

mod negotiate;

pub use negotiate::{negotiate_offsets, Negotiation, DEF_DURATION, NEGOTIATION_BYTES};

use super::{OobError, Peer};
use std::io::{BufRead, Write};
use std::time::Instant;

/// The version rdmaprobe announces (the newest whose exchange it speaks: 6.29's negotiation
/// struct, which a 6.28 peer reads as its own).
pub const VERSION: &str = "6.29";
/// The size of the version message (perftest's `MAX_VERSION`).
pub const VERSION_BYTES: usize = 16;
/// A key message without the GID (perftest's `KEY_MSG_SIZE`).
pub const KEY_BYTES: usize = 59;
/// A key message with the GID (perftest's `KEY_MSG_SIZE_GID`).
pub const KEY_GID_BYTES: usize = 108;
/// perftest's TCP port (`DEF_PORT`).
pub const DEFAULT_PORT: u16 = 18515;
/// The oldest peer perftest itself talks to (`check_version_compatibility`).
pub const OLDEST: f64 = 5.70;
/// The first perftest that sends the negotiation struct (to a peer of this version or later).
pub const NEGOTIATES: f64 = 628.0 / 100.0;

/// One QP as perftest describes it to its peer (`struct pingpong_dest`'s exchanged fields).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// The port's LID (0 on RoCE).
    pub lid: u16,
    /// Outstanding READs/atomics this side allows as a requester (perftest's `out_reads`).
    pub out_reads: u32,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Initial PSN (24 bits).
    pub psn: u32,
    /// The buffer's remote key.
    pub rkey: u32,
    /// The address the peer writes to (or reads from).
    pub vaddr: u64,
    /// SRQ number (0: none).
    pub srqn: u32,
    /// The GID, when the side's GID index is set (the 108-byte form).
    pub gid: Option<[u8; 16]>,
}

impl Key {
    /// The message bytes: exactly [`KEY_BYTES`] or [`KEY_GID_BYTES`], NUL-terminated.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads & 0xffff,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        if let Some(g) = self.gid {
            for b in g {
                s.push_str(&format!("{b:02x}:"));
            }
            s.push_str(&format!("{:08x}:", self.srqn));
        } else {
            s.push_str(&format!("{:08x}", self.srqn));
        }
        let mut v = s.into_bytes();
        v.push(0);
        v
    }

    /// Parses a key message of `with_gid`'s form, as perftest's `ethernet_read_keys` does
    /// (hexadecimal fields separated by ':'), but strictly: a field that is not hexadecimal, a
    /// missing one or a value too wide for its field is an error naming the field.
    pub fn decode(b: &[u8], with_gid: bool) -> Result<Key, String> {
        let want = if with_gid { KEY_GID_BYTES } else { KEY_BYTES };
        if b.len() != want {
            return Err(format!("a key message of {} bytes, not {want}", b.len()));
        }
        let text = b.split(|&c| c == 0).next().unwrap_or_default();
        let text = std::str::from_utf8(text).map_err(|_| "a key message that is not ASCII".to_string())?;
        let mut fields = text.split(':');
        let mut next = |name: &str, max: u64| -> Result<u64, String> {
            let f = fields
                .next()
                .filter(|f| !f.is_empty())
                .ok_or(format!("no {name} field"))?;
            let v = u64::from_str_radix(f, 16).map_err(|_| format!("a {name} field that is not hexadecimal"))?;
            if v > max {
                return Err(format!("{name} {v:#x} exceeds {max:#x}"));
            }
            Ok(v)
        };
        let lid = next("LID", 0xffff)? as u16;
        let out_reads = next("out_reads", 0xffff)? as u32;
        let qpn = next("QPN", 0xff_ffff)? as u32;
        let psn = next("PSN", 0xff_ffff)? as u32;
        let rkey = next("rkey", u64::from(u32::MAX))? as u32;
        let vaddr = next("address", u64::MAX)?;
        let gid = if with_gid {
            let mut g = [0u8; 16];
            for (i, x) in g.iter_mut().enumerate() {
                *x = next(&format!("GID byte {i}"), 0xff)? as u8;
            }
            Some(g)
        } else {
            None
        };
        let srqn = next("SRQN", u64::from(u32::MAX))? as u32;
        Ok(Key {
            lid,
            out_reads,
            qpn,
            psn,
            rkey,
            vaddr,
            srqn,
            gid,
        })
    }
}

/// The `ibv_mtu` enum value of an MTU in bytes (256 to 4096, powers of two).
pub fn mtu_enum(bytes: u32) -> Option<u32> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

/// The MTU in bytes of an `ibv_mtu` enum value.
pub fn mtu_bytes(e: u32) -> Option<u32> {
    (1..=5).contains(&e).then(|| 128 << e)
}

/// A version string as perftest reads it (`atof`: the leading decimal number; "6.06" is 6.06,
/// "5.33" 5.33, so a version compares as a decimal fraction, not as dotted parts).
pub fn version_value(v: &str) -> f64 {
    let end = v
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (c == '.' && !v[..i].contains('.'))))
        .map_or(v.len(), |(i, _)| i);
    v[..end].parse().unwrap_or(0.0)
}

/// Whether a GID is an IPv4-mapped address (RoCE v2 over IPv4; perftest's `ipv6_addr_v4mapped`:
/// `::ffff:a.b.c.d`, or an IPv4-encoded multicast address `ff0e::ffff:a.b.c.d`).
pub fn v4_mapped(gid: &[u8; 16]) -> bool {
    let tail = gid[8..12] == [0, 0, 0xff, 0xff];
    tail && (gid[..8] == [0; 8] || gid[..8] == [0xff, 0x0e, 0, 0, 0, 0, 0, 0])
}

/// What the opening exchanges settled.
#[derive(Debug, Clone, PartialEq)]
pub struct Opening {
    /// The peer's negotiation struct (a peer of 6.28 or later; it agreed with this side's).
    pub negotiated: Option<Negotiation>,
    /// The peer's version string (escaped for display).
    pub version: String,
    /// The cycle buffer both sides use (the larger), bytes.
    pub cycle_buffer: u32,
    /// The cache line both sides use (the larger), bytes.
    pub cache_line: u32,
    /// The path MTU both sides use (the smaller), bytes.
    pub mtu: u32,
    /// The peer's MTU, bytes.
    pub peer_mtu: u32,
}

impl Peer {
    /// Sends `b` in one write (perftest reads each message with one `read()`).
    pub fn send_raw(&mut self, b: &[u8]) -> Result<(), OobError> {
        self.stream.write_all(b).map_err(|source| OobError::Io {
            what: "sending to",
            peer: self.addr.clone(),
            source,
        })
    }

    /// Receives exactly `n` bytes within the message deadline (`what` names them in an error).
    pub fn recv_exact(&mut self, n: usize, what: &str) -> Result<Vec<u8>, OobError> {
        let deadline = Instant::now() + self.timeout;
        let mut buf = Vec::with_capacity(n);
        while buf.len() < n {
            let got = buf.len();
            let closed = || {
                format!(
                    "closed the connection before {what} ({got} of {n} bytes came; perftest stops so when its \
                     parameters or the device do not suit it: see its own output)"
                )
            };
            if !self.fill(deadline, what, closed)? {
                continue;
            }
            let chunk = self.reader.buffer();
            let take = chunk.len().min(n - buf.len());
            buf.extend_from_slice(&chunk[..take]);
            self.reader.consume(take);
        }
        Ok(buf)
    }

    /// One perftest exchange: the client sends `mine` then receives as many bytes; the server
    /// the other way round.
    pub fn perftest_xchg(&mut self, mine: &[u8], what: &str) -> Result<Vec<u8>, OobError> {
        if self.leads {
            let theirs = self.recv_exact(mine.len(), what)?;
            self.send_raw(mine)?;
            Ok(theirs)
        } else {
            self.send_raw(mine)?;
            self.recv_exact(mine.len(), what)
        }
    }

    /// The opening exchanges (version; cycle buffer and cache line; MTU; with a peer of 6.28 or
    /// later the negotiation, `mine`) with our `cycle_buffer`, `cache_line` and `mtu` (bytes); a
    /// peer older than perftest accepts, one that sends what perftest does not, or one whose
    /// negotiated parameters differ from `mine` is refused naming it.
    pub fn perftest_open(
        &mut self,
        (cycle_buffer, cache_line, mtu): (u32, u32, u32),
        mine: &Negotiation,
    ) -> Result<Opening, OobError> {
        let refuse = |peer: &Peer, why: String| OobError::Protocol {
            peer: peer.addr.clone(),
            why,
        };
        let mut v = [0u8; VERSION_BYTES];
        v[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
        let theirs = self.perftest_xchg(&v, "perftest's version")?;
        let text = theirs.split(|&c| c == 0).next().unwrap_or_default();
        let version = super::escape(&String::from_utf8_lossy(text));
        let value = version_value(&String::from_utf8_lossy(text));
        if value < OLDEST {
            return Err(refuse(
                self,
                format!("says it is perftest version '{version}': perftest talks to {OLDEST:.2} and later only (is it perftest?)"),
            ));
        }
        let be = |b: Vec<u8>| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let cb = be(self.perftest_xchg(&cycle_buffer.to_be_bytes(), "perftest's cycle buffer")?);
        let cl = be(self.perftest_xchg(&cache_line.to_be_bytes(), "perftest's cache line size")?);
        let e = mtu_enum(mtu).ok_or_else(|| refuse(self, format!("an MTU of {mtu} bytes has no ibv_mtu value")))?;
        let m = self.perftest_xchg(format!("{e}\0").as_bytes(), "perftest's MTU")?;
        let digits = m.split(|&c| c == 0).next().unwrap_or_default();
        let peer_mtu = std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse::<u32>().ok())
            .and_then(mtu_bytes)
            .ok_or_else(|| refuse(self, format!("sent an MTU that is not an ibv_mtu value ({m:02x?})")))?;
        // perftest's cycle buffer is the page size (sysconf), its cache line the CPU's
        if !(1..=1 << 21).contains(&cb) || !(1..=1 << 12).contains(&cl) {
            return Err(refuse(
                self,
                format!("sent a cycle buffer of {cb} bytes and a cache line of {cl}: not plausible"),
            ));
        }
        let negotiated = if value >= NEGOTIATES {
            let theirs = self.perftest_negotiate(mine)?;
            if let Some(m) = mine.mismatch(&theirs, value) {
                return Err(refuse(self, format!("is perftest {version}, which negotiates: {m}")));
            }
            Some(theirs)
        } else {
            None
        };
        Ok(Opening {
            negotiated,
            version,
            cycle_buffer: cb.max(cycle_buffer),
            cache_line: cl.max(cache_line),
            mtu: mtu.min(peer_mtu),
            peer_mtu,
        })
    }

    /// One key exchange (perftest's `ctx_hand_shake`): ours sent, the peer's parsed.
    pub fn perftest_keys(&mut self, mine: &Key) -> Result<Key, OobError> {
        let b = self.perftest_xchg(&mine.encode(), "perftest's QP key message")?;
        Key::decode(&b, mine.gid.is_some()).map_err(|why| OobError::Protocol {
            peer: self.addr.clone(),
            why: format!(
                "sent {why} (both ends must use a GID, or neither: -x on both, or on neither over InfiniBand)"
            ),
        })
    }
}

impl Peer {
    /// After perftest's closing key message, its end within `within`: perftest 6.06 writes
    /// "done" with its NUL and closes the connection, 6.17 and later close it (a reset is an end
    /// too). `None`: it ended. `Some(what)`: it did not, and `what` says what came instead: more
    /// bytes (a perftest with more to run: the key message of its `-a`'s next size, where this
    /// side took the one between two sizes for its closing) or nothing.
    pub fn perftest_await_end(&mut self, within: std::time::Duration) -> Result<Option<String>, OobError> {
        const CLOSED: &str = "closed the connection (its process ended)";
        let deadline = Instant::now() + within;
        let mut seen: Vec<u8> = Vec::new();
        loop {
            if Instant::now() >= deadline {
                return Ok(Some(format!("it did not close the connection within {within:?}")));
            }
            match self.fill(deadline, "perftest's end", || CLOSED.to_string()) {
                Ok(false) => continue,
                Ok(true) => {
                    let got = self.reader.buffer().to_vec();
                    self.reader.consume(got.len());
                    seen.extend_from_slice(&got);
                    if !b"done\0".starts_with(&seen) {
                        return Ok(Some(format!(
                            "it sent {} bytes more ({:?}), not its end",
                            seen.len(),
                            String::from_utf8_lossy(&seen[..seen.len().min(24)])
                        )));
                    }
                }
                Err(OobError::Protocol { why, .. }) if why == CLOSED => return Ok(None),
                Err(OobError::Io { source, .. }) if source.kind() == std::io::ErrorKind::ConnectionReset => {
                    return Ok(None)
                }
                Err(OobError::Timeout { .. }) => {
                    return Ok(Some(format!("it did not close the connection within {within:?}")))
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits up to `within` for perftest to close the connection (its process ending: after
    /// `ib_write_lat`'s last message, which has no closing exchange): `Ok(true)` when it closed,
    /// `Ok(false)` when it was still open then. Bytes from it, which perftest does not send
    /// there, are an error.
    pub fn perftest_await_close(&mut self, within: std::time::Duration) -> Result<bool, OobError> {
        let deadline = Instant::now() + within;
        loop {
            if Instant::now() >= deadline {
                return Ok(false);
            }
            const CLOSED: &str = "closed the connection (its process ended)";
            match self.fill(deadline, "perftest's end", || CLOSED.to_string()) {
                Ok(false) => continue,
                Ok(true) => {
                    return Err(OobError::Protocol {
                        peer: self.addr.clone(),
                        why: "sent bytes after its test, where perftest sends none".into(),
                    })
                }
                // the end of the stream (or a reset: perftest's process ended); a stop asked by
                // a signal is an error of its own
                Err(OobError::Protocol { why, .. }) if why == CLOSED => return Ok(true),
                Err(OobError::Io { source, .. }) if source.kind() == std::io::ErrorKind::ConnectionReset => {
                    return Ok(true)
                }
                Err(OobError::Timeout { .. }) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    }
}

/// perftest's bandwidth report as its ends exchange it (`xchg_bw_reports`: the fields of
/// `struct bw_report_data` it sends without `--report-per-port`), in the sender's units: MB/s
/// (2^20 bytes) or with `--report_gbits` Gb/s, and millions of messages per second.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct BwReport {
    /// Message size, bytes.
    pub size: u64,
    /// Messages, over every QP.
    pub iters: u64,
    /// Peak bandwidth.
    pub bw_peak: f64,
    /// Average bandwidth.
    pub bw_avg: f64,
    /// Average message rate, Mpps.
    pub msg_rate: f64,
}

impl BwReport {
    /// The unit the sender's bandwidths are in, read from the report itself (perftest does not
    /// exchange --report_gbits): MB/s of 2^20 bytes put an average of about 0.954 x rate x size
    /// (Mpps x bytes), Gb/s 0.008 x; `None` when it cannot tell (no messages).
    pub fn unit(&self) -> Option<&'static str> {
        let per = self.msg_rate * self.size as f64;
        if !(per > 0.0 && self.bw_avg > 0.0) {
            return None;
        }
        let r = self.bw_avg / per;
        let (mb, gb) = (1e6 / 1_048_576.0, 8e6 / 1e9);
        // the nearer on a log scale
        Some(if (r / mb).ln().abs() <= (r / gb).ln().abs() {
            "MB/sec"
        } else {
            "Gb/sec"
        })
    }

    /// The five messages of 8 bytes each, in their order: the integers big-endian
    /// (`hton_long`; the iterations are 8 bytes to a peer of 5.33 or later, and an older one is
    /// refused at the opening), the doubles' bits big-endian (`hton_double`: bswap_64 of the
    /// host's little-endian bits).
    pub fn encode(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    /// The report from its five messages.
    pub fn decode(m: &[[u8; 8]; 5]) -> BwReport {
        let f = |b: [u8; 8]| f64::from_bits(u64::from_be_bytes(b));
        BwReport {
            size: u64::from_be_bytes(m[0]),
            iters: u64::from_be_bytes(m[1]),
            bw_peak: f(m[2]),
            bw_avg: f(m[3]),
            msg_rate: f(m[4]),
        }
    }
}

impl Peer {
    /// perftest's report exchange after a bandwidth test: ours sent, the peer's taken (a passive
    /// server's report is whatever its memory held: perftest sends its uninitialised struct).
    pub fn perftest_bw_reports(&mut self, mine: &BwReport) -> Result<BwReport, OobError> {
        let names = [
            "size",
            "iterations",
            "peak bandwidth",
            "average bandwidth",
            "message rate",
        ];
        let mut theirs = [[0u8; 8]; 5];
        for ((m, t), name) in mine.encode().iter().zip(theirs.iter_mut()).zip(names) {
            let b = self.perftest_xchg(m, &format!("perftest's bandwidth report ({name})"))?;
            t.copy_from_slice(&b);
        }
        Ok(BwReport::decode(&theirs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_perftests_length_and_layout() {
        let k = Key {
            lid: 1,
            out_reads: 1,
            qpn: 0x1234,
            psn: 0xabcdef,
            rkey: 0xdead_beef,
            vaddr: 0x7f00_0000_1000,
            srqn: 0,
            gid: None,
        };
        let b = k.encode();
        assert_eq!(b.len(), KEY_BYTES);
        // perftest's KEY_PRINT_FMT "%04x:%04x:%06x:%06x:%08x:%016llx:%08x" with a NUL
        assert_eq!(&b[..58], b"0001:0001:001234:abcdef:deadbeef:00007f0000001000:00000000");
        assert_eq!(b[58], 0);
        assert_eq!(Key::decode(&b, false), Ok(k));
        let g = Key {
            gid: Some([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 2, 15]),
            ..k
        };
        let b = g.encode();
        assert_eq!(b.len(), KEY_GID_BYTES);
        assert!(std::str::from_utf8(&b[..107])
            .unwrap()
            .ends_with(":00:00:00:00:00:00:00:00:00:00:ff:ff:0a:00:02:0f:00000000:"));
        assert_eq!(Key::decode(&b, true), Ok(g));
        // the other form, a short message, garbage: errors naming what is wrong
        assert!(Key::decode(&b, false).unwrap_err().contains("108 bytes, not 59"));
        let mut bad = k.encode();
        bad[5] = b'z';
        assert!(Key::decode(&bad, false).unwrap_err().contains("out_reads"));
    }

    #[test]
    fn versions_compare_as_perftest_reads_them() {
        assert_eq!(version_value("6.06"), 6.06);
        assert_eq!(version_value("5.33"), 5.33);
        assert_eq!(version_value("6.29-rc1"), 6.29);
        assert_eq!(version_value("4.5.0.17"), 4.5);
        assert_eq!(version_value("x"), 0.0);
        assert!(version_value("5.7") >= OLDEST);
    }

    #[test]
    fn mtus_map_to_the_enum_and_back() {
        for (b, e) in [(256, 1), (512, 2), (1024, 3), (2048, 4), (4096, 5)] {
            assert_eq!(mtu_enum(b), Some(e));
            assert_eq!(mtu_bytes(e), Some(b));
        }
        assert_eq!(mtu_enum(1500), None);
        assert_eq!(mtu_bytes(0), None);
        assert_eq!(mtu_bytes(6), None);
    }

    /// Both roles over a socket pair: the client's messages reach the server in order and the
    /// opening settles the larger buffers and the smaller MTU on both sides.
    #[test]
    fn the_opening_settles_the_same_values_on_both_sides() {
        let l = super::super::Listener::bind("127.0.0.1", 0).unwrap();
        let port: u16 = l.local_addr().rsplit(':').next().unwrap().parse().unwrap();
        let srv = std::thread::spawn(move || {
            let mut p = l.accept(std::time::Duration::from_secs(10)).unwrap();
            let o = p.perftest_open((4096, 64, 1024), &negotiation(64)).unwrap();
            let k = p
                .perftest_keys(&Key {
                    lid: 2,
                    out_reads: 1,
                    qpn: 7,
                    psn: 9,
                    rkey: 3,
                    vaddr: 0x1000,
                    srqn: 0,
                    gid: None,
                })
                .unwrap();
            (o, k)
        });
        let mut c = Peer::connect("127.0.0.1", port, std::time::Duration::from_secs(10)).unwrap();
        let o = c.perftest_open((8192, 128, 4096), &negotiation(64)).unwrap();
        let mine = Key {
            lid: 1,
            out_reads: 1,
            qpn: 5,
            psn: 6,
            rkey: 4,
            vaddr: 0x2000,
            srqn: 0,
            gid: None,
        };
        let theirs = c.perftest_keys(&mine).unwrap();
        let (so, sk) = srv.join().unwrap();
        assert_eq!(
            (o.cycle_buffer, o.cache_line, o.mtu, o.peer_mtu),
            (8192, 128, 1024, 1024)
        );
        assert_eq!(
            (so.cycle_buffer, so.cache_line, so.mtu, so.peer_mtu),
            (8192, 128, 1024, 4096)
        );
        assert_eq!(o.version, VERSION);
        // both said 6.29: they negotiated, and agreed
        assert_eq!(o.negotiated, Some(negotiation(64)));
        assert_eq!(so.negotiated, Some(negotiation(64)));
        assert_eq!(theirs.qpn, 7);
        assert_eq!(sk, mine);
    }

    /// A negotiation struct of a WRITE latency test of `size` bytes, 1000 iterations.
    fn negotiation(size: u64) -> Negotiation {
        let mut fields = [0u64; 17];
        fields[2] = 2;
        fields[6] = 1;
        fields[7] = size;
        fields[8] = 1000;
        fields[10] = 1;
        fields[11] = 5;
        Negotiation {
            fields,
            max_qp_rd_atom: 16,
            mlx5dv_comp_mask: 0,
        }
    }

    #[test]
    fn a_negotiation_that_differs_ends_the_opening_on_both_sides_naming_it() {
        let l = super::super::Listener::bind("127.0.0.1", 0).unwrap();
        let port: u16 = l.local_addr().rsplit(':').next().unwrap().parse().unwrap();
        let srv = std::thread::spawn(move || {
            let mut p = l.accept(std::time::Duration::from_secs(10)).unwrap();
            p.perftest_open((4096, 64, 4096), &negotiation(8))
                .map(|_| ())
                .unwrap_err()
                .to_string()
        });
        let mut c = Peer::connect("127.0.0.1", port, std::time::Duration::from_secs(10)).unwrap();
        let e = c
            .perftest_open((4096, 64, 4096), &negotiation(64))
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains("is perftest 6.29, which negotiates: size mismatch: rdmaprobe 64, perftest 8: give both sides the same -s"), "{e}");
        let e = srv.join().unwrap();
        assert!(e.contains("size mismatch: rdmaprobe 8, perftest 64"), "{e}");
    }

    #[test]
    fn bandwidth_reports_are_big_endian_integers_and_swapped_doubles() {
        let r = BwReport {
            size: 65536,
            iters: 5000,
            bw_peak: 1234.5,
            bw_avg: 1000.25,
            msg_rate: 0.016004,
        };
        let m = r.encode();
        assert_eq!(m[0], [0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(m[1], [0, 0, 0, 0, 0, 0, 0x13, 0x88]);
        // 1000.25 is 0x408f420000000000: perftest's hton_double puts its high byte first
        assert_eq!(m[3], [0x40, 0x8f, 0x42, 0, 0, 0, 0, 0]);
        assert_eq!(BwReport::decode(&m), r);
        // 0.016004 Mpps x 65536 B = 1000.26 MB/s: MB/s
        assert_eq!(r.unit(), Some("MB/sec"));
        // perftest's GID types: IPv4-mapped (unicast or multicast) or not
        let mut g = [0u8; 16];
        assert!(!v4_mapped(&g));
        g[10..].copy_from_slice(&[0xff, 0xff, 192, 0, 2, 1]);
        assert!(v4_mapped(&g));
        g[..2].copy_from_slice(&[0xff, 0x0e]);
        assert!(v4_mapped(&g));
        g[..2].copy_from_slice(&[0xfe, 0x80]);
        assert!(!v4_mapped(&g));
        let g = BwReport {
            bw_avg: 0.016004 * 65536.0 * 8e6 / 1e9,
            ..r
        };
        assert_eq!(g.unit(), Some("Gb/sec"));
        assert_eq!(BwReport::default().unit(), None);
    }
}

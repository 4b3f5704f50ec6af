//! perftest's parameter negotiation (6.28 and later, `negotiate_params` in
//! `perftest_communication.c`): right after the MTU, each side sends its
//! `struct perftest_parameters_negotiate` (320 bytes: perftest built with mlx5dv, as every
//! build on an rdma-core with it) to a peer of 6.28 or later, compares the peer's field by
//! field and exits on the first that differs (`"<name> mismatch: local=..., remote=..."`).
//! perftest 6.28 as released (26.01) sends it to every peer; 6.29 only to a peer of 6.28 or
//! later. Without mlx5dv (a perftest built on an rdma-core without it) the struct is 312 bytes,
//! which rdmaprobe does not speak: the exchange then falls out of step at the next key message.
//! Layout (x86-64, read from perftest 6.28's and 6.29's `perftest_parameters.h`; the device
//! attributes in the sender's byte order, little-endian on x86-64 and arm64):
//!
//! | offset | field | encoding |
//! |---|---|---|
//! | 0..28 | test_method, connection_type, verb, tst, atomicType, test_type, report_fmt | `int`, big-endian (`hton_int`) |
//! | 28 | padding | |
//! | 32, 40 | size, iters | `uint64_t`, big-endian (`hton_64`) |
//! | 48..76 | aes_xts, num_of_qps, duration, use_rdma_cm, use_write_with_imm, no_enhanced_reorder, sig_offload | `int`, big-endian |
//! | 76 | data_validation (6.29; padding in 6.28) | `int`, big-endian |
//! | 80 | `struct ibv_device_attr` (232 bytes) | the host's own layout and byte order (`ibv_query_device`) |
//! | 312 | mlx5dv_comp_mask | `uint64_t`, big-endian |
//!
//! Of the peer's device attributes perftest reads `max_qp_rd_atom` alone (`compare_ibv_device`:
//! its own `out_reads` is lowered to it); of the mlx5dv mask the `MLX5DV_CONTEXT_MASK_OOO_RECV_WRS`
//! bit alone (`compare_mlx5dv`: where the two differ, it turns its enhanced reorder off).

use super::super::{OobError, Peer};

/// The struct's size.
pub const NEGOTIATION_BYTES: usize = 320;
/// Where `struct ibv_device_attr` starts.
const ATTR_AT: usize = 80;
/// `max_qp_rd_atom`'s offset within `struct ibv_device_attr` (x86-64).
const MAX_QP_RD_ATOM_IN_ATTR: usize = 144;
/// Where the mlx5dv comp mask is.
const DV_AT: usize = 312;

/// Where `struct ibv_device_attr` starts in the struct and where `max_qp_rd_atom` sits in it
/// (checked against libibverbs' layout where the bindings are).
pub fn negotiate_offsets() -> (usize, usize) {
    (ATTR_AT, MAX_QP_RD_ATOM_IN_ATTR)
}
/// perftest's default `-D` (`DEF_DURATION`), which it sends when the test runs by iterations.
pub const DEF_DURATION: u32 = 5;

/// The fields perftest compares, as it names them, with what to do where they differ (the flag
/// on its command line, and rdmaprobe's) and the names of its values (`None`: a number).
const FIELDS: [(&str, &str, Option<&[&str]>); 17] = [
    (
        "test_method",
        "give both sides -a, or neither",
        Some(&["RUN_REGULAR", "RUN_ALL", "RUN_INFINITELY"]),
    ),
    (
        "connection_type",
        "give both sides the same -c (RC, or UD for send, against perftest)",
        Some(&["RC", "UC", "UD", "RawEth", "XRC", "DC", "SRD"]),
    ),
    (
        "verb",
        "run the same test (ib_write_*, ib_send_*, ib_read_*, ib_atomic_* against write, send, read, atomic)",
        Some(&["SEND", "SEND_IMM", "WRITE", "WRITE_IMM", "READ", "ATOMIC"]),
    ),
    (
        "tst",
        "run the same test (ib_*_lat against lat, ib_*_bw against bw)",
        Some(&["LAT", "BW", "LAT_BY_BW", "FS_RATE"]),
    ),
    (
        "atomicType",
        "give both sides the same -A",
        Some(&["CMP_AND_SWAP", "FETCH_AND_ADD"]),
    ),
    (
        "test_type",
        "give perftest no -D (rdmaprobe runs by -n against it)",
        Some(&["ITERATIONS", "DURATION"]),
    ),
    (
        "report_fmt",
        "give both sides the same --report_gbits (lat: give perftest none)",
        Some(&["GBS", "MBS"]),
    ),
    ("size", "give both sides the same -s (-a: 8388608)", None),
    ("iters", "give both sides the same -n", None),
    (
        "aes_xts",
        "give perftest no --aes_xts (rdmaprobe does not take it)",
        Some(&["OFF", "ON"]),
    ),
    (
        "num_of_qps",
        "give both sides the same -q (lat: give perftest none)",
        None,
    ),
    (
        "duration",
        "give perftest no -D (rdmaprobe runs by -n against it)",
        None,
    ),
    (
        "use_rdma_cm",
        "give perftest no -R (rdmaprobe connects out of band against it)",
        Some(&["OFF", "ON"]),
    ),
    (
        "use_write_with_imm",
        "give perftest none of the options rdmaprobe does not take",
        Some(&["OFF", "ON"]),
    ),
    (
        "no_enhanced_reorder",
        "give perftest no --no_enhanced_reorder (rdmaprobe does not take it: its QPs never use enhanced reorder, \
         and its mlx5dv mask in this struct has no OOO_RECV_WRS bit, so perftest turns enhanced reorder off by \
         itself)",
        Some(&["OFF", "ON"]),
    ),
    (
        "sig_offload",
        "give perftest no --sig_offload (rdmaprobe does not take it)",
        Some(&["OFF", "ON"]),
    ),
    (
        "data_validation",
        "give perftest no --data_validation (rdmaprobe does not take it)",
        Some(&["OFF", "ON"]),
    ),
];

/// One side's `struct perftest_parameters_negotiate`: the 17 compared fields in their order
/// (the integers as perftest's enums and flags number them, `size` and `iters` included), its
/// device's `max_qp_rd_atom` and its mlx5dv comp mask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiation {
    /// `test_method` .. `data_validation`, in perftest's order (the module's table).
    pub fields: [u64; 17],
    /// `attr.max_qp_rd_atom`.
    pub max_qp_rd_atom: u32,
    /// `mlx5dv_comp_mask`.
    pub mlx5dv_comp_mask: u64,
}

/// Where each of [`FIELDS`] sits, and whether it is 8 bytes.
fn at(i: usize) -> (usize, bool) {
    match i {
        0..=6 => (4 * i, false),
        7 => (32, true),
        8 => (40, true),
        _ => (48 + 4 * (i - 9), false),
    }
}

impl Negotiation {
    /// The 320 bytes perftest sends (the device attributes other than `max_qp_rd_atom` zero:
    /// perftest reads no other).
    pub fn encode(&self) -> [u8; NEGOTIATION_BYTES] {
        let mut b = [0u8; NEGOTIATION_BYTES];
        for (i, v) in self.fields.iter().enumerate() {
            match at(i) {
                (o, true) => b[o..o + 8].copy_from_slice(&v.to_be_bytes()),
                (o, false) => b[o..o + 4].copy_from_slice(&(*v as u32).to_be_bytes()),
            }
        }
        let a = ATTR_AT + MAX_QP_RD_ATOM_IN_ATTR;
        b[a..a + 4].copy_from_slice(&self.max_qp_rd_atom.to_le_bytes());
        b[DV_AT..].copy_from_slice(&self.mlx5dv_comp_mask.to_be_bytes());
        b
    }

    /// A peer's struct from its bytes (`b` holds [`NEGOTIATION_BYTES`]).
    pub fn decode(b: &[u8; NEGOTIATION_BYTES]) -> Negotiation {
        let mut fields = [0u64; 17];
        for (i, f) in fields.iter_mut().enumerate() {
            *f = match at(i) {
                (o, true) => u64::from_be_bytes(b[o..o + 8].try_into().unwrap_or([0; 8])),
                (o, false) => u64::from(u32::from_be_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]))),
            };
        }
        let a = ATTR_AT + MAX_QP_RD_ATOM_IN_ATTR;
        Negotiation {
            fields,
            max_qp_rd_atom: u32::from_le_bytes(b[a..a + 4].try_into().unwrap_or([0; 4])),
            mlx5dv_comp_mask: u64::from_be_bytes(b[DV_AT..].try_into().unwrap_or([0; 8])),
        }
    }

    /// The first field perftest would find different, as it says it ("size mismatch:
    /// local=8, remote=64", this side local), with the flag both sides must share; `None`
    /// when they agree. A peer older than 6.29 has no `data_validation` (padding there).
    pub fn mismatch(&self, theirs: &Negotiation, peer_version: f64) -> Option<String> {
        let compared = if peer_version >= 6.29 { 17 } else { 16 };
        (0..compared).find(|&i| self.fields[i] != theirs.fields[i]).map(|i| {
            let (name, hint, names) = FIELDS[i];
            let show = |v: u64| match names.and_then(|n| n.get(v as usize)) {
                Some(s) => (*s).to_string(),
                None => v.to_string(),
            };
            format!(
                "{name} mismatch: rdmaprobe {}, perftest {}: {hint}",
                show(self.fields[i]),
                show(theirs.fields[i])
            )
        })
    }
}

impl Peer {
    /// The negotiation exchange: ours sent, the peer's taken.
    pub fn perftest_negotiate(&mut self, mine: &Negotiation) -> Result<Negotiation, OobError> {
        let b = self.perftest_xchg(&mine.encode(), "perftest's negotiation struct")?;
        let mut theirs = [0u8; NEGOTIATION_BYTES];
        theirs.copy_from_slice(&b);
        Ok(Negotiation::decode(&theirs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 6.29 `ib_write_bw` client's struct as its `negotiate_params` fills it, written byte by
    /// byte from perftest's source (not with [`Negotiation::encode`]): RUN_REGULAR, RC, WRITE,
    /// BW, atomicType 0 (not an atomic test: the zeroed struct), ITERATIONS, MBS, -s 65536,
    /// -n 5000, -q 2, duration 5, the rest OFF; a ConnectX's max_qp_rd_atom 16 in host order at
    /// 80 + 144; the mlx5dv mask with OOO_RECV_WRS (bit 0x400 here) big-endian at 312.
    fn perftest_write_bw() -> [u8; NEGOTIATION_BYTES] {
        let mut b = [0u8; NEGOTIATION_BYTES];
        let int = |b: &mut [u8; NEGOTIATION_BYTES], o: usize, v: i32| b[o..o + 4].copy_from_slice(&v.to_be_bytes());
        int(&mut b, 0, 0); // test_method RUN_REGULAR
        int(&mut b, 4, 0); // connection_type RC
        int(&mut b, 8, 2); // verb WRITE
        int(&mut b, 12, 1); // tst BW
        int(&mut b, 16, 0); // atomicType
        int(&mut b, 20, 0); // test_type ITERATIONS
        int(&mut b, 24, 1); // report_fmt MBS
        b[32..40].copy_from_slice(&65536u64.to_be_bytes());
        b[40..48].copy_from_slice(&5000u64.to_be_bytes());
        int(&mut b, 52, 2); // num_of_qps
        int(&mut b, 56, 5); // duration
        b[80..84].copy_from_slice(b"20.4"); // fw_ver: not read by the peer
        b[224] = 16; // max_qp_rd_atom, little-endian int
        b[312..320].copy_from_slice(&0x400u64.to_be_bytes());
        b
    }

    fn ours() -> Negotiation {
        let mut fields = [0u64; 17];
        fields[2] = 2;
        fields[3] = 1;
        fields[6] = 1;
        fields[7] = 65536;
        fields[8] = 5000;
        fields[10] = 2;
        fields[11] = u64::from(DEF_DURATION);
        Negotiation {
            fields,
            max_qp_rd_atom: 16,
            mlx5dv_comp_mask: 0,
        }
    }

    #[test]
    fn perftests_struct_is_read_field_by_field() {
        let t = Negotiation::decode(&perftest_write_bw());
        assert_eq!(t.fields, ours().fields);
        assert_eq!((t.max_qp_rd_atom, t.mlx5dv_comp_mask), (16, 0x400));
        assert_eq!(ours().mismatch(&t, 6.29), None);
        // ours at the same offsets, the mask without OOO_RECV_WRS (perftest then turns its
        // enhanced reorder off)
        let mut want = perftest_write_bw();
        want[80..84].copy_from_slice(&[0; 4]);
        want[312..320].copy_from_slice(&[0; 8]);
        assert_eq!(ours().encode(), want);
    }

    #[test]
    fn a_difference_is_named_as_perftest_names_it_with_the_flag() {
        let mut b = perftest_write_bw();
        b[32..40].copy_from_slice(&8u64.to_be_bytes());
        let m = ours().mismatch(&Negotiation::decode(&b), 6.29).expect("a mismatch");
        assert_eq!(
            m,
            "size mismatch: rdmaprobe 65536, perftest 8: give both sides the same -s (-a: 8388608)"
        );
        let mut b = perftest_write_bw();
        b[12..16].copy_from_slice(&0i32.to_be_bytes());
        let m = ours().mismatch(&Negotiation::decode(&b), 6.29).expect("a mismatch");
        assert!(m.starts_with("tst mismatch: rdmaprobe BW, perftest LAT: "), "{m}");
        // data_validation: compared with 6.29, padding in 6.28
        let mut b = perftest_write_bw();
        b[76..80].copy_from_slice(&1i32.to_be_bytes());
        assert!(ours()
            .mismatch(&Negotiation::decode(&b), super::super::NEGOTIATES)
            .is_none());
        let m = ours().mismatch(&Negotiation::decode(&b), 6.29).expect("a mismatch");
        assert!(
            m.starts_with("data_validation mismatch: rdmaprobe OFF, perftest ON"),
            "{m}"
        );
    }
}

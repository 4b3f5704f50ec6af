//! A histogram's encoding, read from a file someone else may have written, checked before
//! hdrhistogram's deserializer sees it. The deserializer believes the header: it sizes its
//! buffer to the payload length the header claims (a 40-byte V2 header, the length at bytes
//! 4..8) and its counters to the header's lowest and highest value and significant digits, so a
//! 383-byte results file claiming a 4 GiB payload allocated 4 GiB. Here every claim is held to
//! the bytes actually there and to a sane maximum first: the V2-deflate form's compressed length
//! to what follows it, the stream inflated here to at most [`MAX_HIST_BYTES`], the V2 payload
//! length to what follows the header, and the counters the header asks for to
//! [`MAX_HIST_COUNTS`].
#![forbid(unsafe_code)]

use std::borrow::Cow;
use std::io::Read;

/// The largest histogram encoding read (plain, or once inflated): 16 MiB. rdmaprobe's own
/// (1 ns to 1 h, 3 digits: 33,792 counters) take at most 300 KiB inflated even with every
/// counter set, a few hundred bytes to a few KiB as written; a histogram within
/// [`MAX_HIST_COUNTS`] takes at most 9 MiB.
pub const MAX_HIST_BYTES: usize = 16 << 20;

/// The most counters a histogram read may have: 2^20 (8 MiB of counts), enough for any range of
/// 1 to 2^64 at up to 4 significant digits; rdmaprobe's own have 33,792.
pub const MAX_HIST_COUNTS: u64 = 1 << 20;

/// HdrHistogram's V2 cookie, and that of its deflated form.
const V2: u32 = 0x1c84_9313;
const V2_DEFLATE: u32 = 0x1c84_9314;

/// The V2 header: cookie, payload length, normalizing offset, digits (4 bytes each), lowest and
/// highest value (8 each), integer-to-double ratio (8).
const V2_HEADER: usize = 40;

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    (u64::from(be32(b, at)) << 32) | u64::from(be32(b, at + 4))
}

/// The V2 encoding of the histogram in `bytes` (V2, or V2-deflate inflated here), every claim
/// of its header checked against the bytes and the bounds.
pub(super) fn checked(bytes: &[u8]) -> Result<Cow<'_, [u8]>, String> {
    if bytes.len() < 8 {
        return Err(format!("{} bytes: shorter than a histogram's header", bytes.len()));
    }
    match be32(bytes, 0) {
        V2 => check_v2(bytes).map(|()| Cow::Borrowed(bytes)),
        V2_DEFLATE => {
            let inner = inflate(bytes)?;
            check_v2(&inner).map_err(|e| format!("inflated: {e}"))?;
            Ok(Cow::Owned(inner))
        }
        c => Err(format!("not an HdrHistogram V2 encoding (cookie {c:#010x})")),
    }
}

/// The V2 encoding inside a V2-deflate one: its compressed length must be what follows, and it
/// inflates to at most [`MAX_HIST_BYTES`] (read to one byte more, never further).
fn inflate(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let claimed = u64::from(be32(bytes, 4));
    let there = bytes.len() as u64 - 8;
    if claimed != there {
        return Err(format!(
            "the compressed histogram claims {claimed} bytes, {there} follow"
        ));
    }
    let mut out = Vec::new();
    flate2::read::ZlibDecoder::new(&bytes[8..])
        .take(MAX_HIST_BYTES as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("the compressed histogram does not inflate: {e}"))?;
    if out.len() > MAX_HIST_BYTES {
        return Err(format!(
            "the compressed histogram inflates to more than {} (the most a histogram may hold)",
            super::read::size_text(MAX_HIST_BYTES as u64)
        ));
    }
    Ok(out)
}

/// A V2 encoding's header checked: the payload length it claims is what follows, and the
/// counters its range asks for are within [`MAX_HIST_COUNTS`].
fn check_v2(b: &[u8]) -> Result<(), String> {
    if b.len() < V2_HEADER {
        return Err(format!(
            "{} bytes: shorter than a V2 histogram's {V2_HEADER}-byte header",
            b.len()
        ));
    }
    if be32(b, 0) != V2 {
        return Err(format!("not a V2 histogram (cookie {:#010x})", be32(b, 0)));
    }
    let claimed = u64::from(be32(b, 4));
    let there = (b.len() - V2_HEADER) as u64;
    if claimed != there {
        return Err(format!(
            "the histogram claims a {claimed}-byte payload, {there} bytes follow its header"
        ));
    }
    if there > MAX_HIST_BYTES as u64 {
        return Err(format!(
            "a {there}-byte payload: more than {}, the most a histogram may hold",
            super::read::size_text(MAX_HIST_BYTES as u64)
        ));
    }
    let (digits, low, high) = (be32(b, 12), be64(b, 16), be64(b, 24));
    let range = format!("lowest {low}, highest {high}, {digits} significant digits");
    match counters(low, high, digits) {
        None => Err(format!("its header's range is not a histogram's ({range})")),
        Some(n) if n > MAX_HIST_COUNTS => Err(format!(
            "its header asks for {n} counters ({range}): more than the {MAX_HIST_COUNTS} a histogram may have"
        )),
        Some(_) => Ok(()),
    }
}

/// The counters of a histogram of `digits` significant digits from `low` to `high`, sized as
/// hdrhistogram sizes them (`None` for a range it refuses): single-unit resolution up to
/// 2 x 10^digits, so sub-buckets of the power of two above it; the first bucket starts at
/// `low`'s power of two and each further one doubles the reach until `high` is covered; each
/// bucket after the first holds half the sub-buckets (plus one half-bucket).
pub(super) fn counters(low: u64, high: u64, digits: u32) -> Option<u64> {
    if low == 0 || low > u64::MAX / 2 || high < 2 * low || digits > 5 {
        return None;
    }
    let single = 2 * 10u64.pow(digits);
    let sub_magnitude = 64 - (single - 1).leading_zeros();
    let unit_magnitude = 63 - low.leading_zeros();
    if unit_magnitude + sub_magnitude > 63 {
        return None;
    }
    let half = 1u64 << (sub_magnitude - 1);
    let mut reach = (1u64 << sub_magnitude) << unit_magnitude;
    let mut buckets = 1u64;
    while reach <= high {
        buckets += 1;
        if reach > u64::MAX / 2 {
            break;
        }
        reach <<= 1;
    }
    Some((buckets + 1) * half)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::Histogram;

    #[test]
    fn counters_are_what_hdrhistogram_allocates() {
        for digits in 0..=5u32 {
            for low in [1u64, 2, 3, 1000, 1 << 20] {
                for high in [2 * low, 1000 * low, 3_600_000_000_000, 1 << 50, u64::MAX] {
                    let n = counters(low, high, digits);
                    let h = Histogram::<u64>::new_with_bounds(low, high, digits as u8);
                    match (n, h) {
                        (Some(n), Ok(h)) => assert_eq!(n, h.distinct_values() as u64, "{low} {high} {digits}"),
                        (None, Err(_)) => {}
                        (n, h) => panic!("{low} {high} {digits}: {n:?} against {:?}", h.map(|h| h.len())),
                    }
                }
            }
        }
        // rdmaprobe's own histograms
        assert_eq!(counters(1, 3_600_000_000_000, 3), Some(33_792));
        assert_eq!(counters(0, 10, 3), None);
        assert_eq!(counters(1, 10, 6), None);
    }

    fn header(cookie: u32, len: u32, digits: u32, low: u64, high: u64) -> Vec<u8> {
        let mut v = Vec::new();
        for x in [cookie, len, 0, digits] {
            v.extend(x.to_be_bytes());
        }
        v.extend(low.to_be_bytes());
        v.extend(high.to_be_bytes());
        v.extend(1f64.to_be_bytes());
        v
    }

    #[test]
    fn lying_headers_are_refused_before_anything_is_allocated() {
        let cases = [
            (
                header(V2, u32::MAX, 3, 1, 3_600_000_000_000),
                "claims a 4294967295-byte payload",
            ),
            (header(V2, 0, 5, 1, u64::MAX), "more than the 1048576"),
            (header(V2, 0, 6, 1, 1000), "not a histogram's"),
            (header(V2, 0, 3, 0, 1000), "not a histogram's"),
            (header(V2, 0, 3, 1000, 1000), "not a histogram's"),
            (header(0x1234_5678, 0, 3, 1, 1000), "cookie 0x12345678"),
            (vec![0x1c, 0x84], "shorter than"),
            (header(V2, 0, 3, 1, 1000)[..39].to_vec(), "shorter than a V2"),
        ];
        for (b, why) in cases {
            let e = checked(&b).unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
        }
        assert!(checked(&header(V2, 0, 3, 1, 3_600_000_000_000)).is_ok());
    }
}

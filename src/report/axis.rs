//! The plots' log axes: each axis's range, its labelled ticks and its light grid lines, chosen
//! here rather than by plotters. Plotters' own log key points put decimal ticks on byte axes (then
//! labelled in binary units: "98K", "977K"), could give two ticks one label ("1000" drawn twice,
//! overlapping) and drew every minor line as dark as the next, a dark band where they crowd.
#![forbid(unsafe_code)]

/// What an axis measures, which decides its ticks and their labels.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    /// Message sizes in bytes: powers of two, labelled in binary units (`512`, `4K`, `2M`).
    Bytes,
    /// Whole counts that grow in powers of two (postlists): `1`, `2`, `4`, ..., `32`.
    Pow2,
    /// Measured values (ns, Gbit/s): the 1-2-5 steps or the decades, whichever gives a
    /// readable number of labels, with both ends labelled.
    Decimal,
    /// x = 1/(1 − q) of a quantile q (the log of 1 − q), labelled as the percentile: `0%` at
    /// x = 1, `50%`, `90%`, `99%`, `99.9%` ...
    Percentile,
}

/// One axis: its range, its labelled ticks and its light grid lines.
#[derive(Clone, Debug)]
pub struct Axis {
    /// Low end of the range (> 0).
    pub lo: f64,
    /// High end of the range.
    pub hi: f64,
    /// The labelled ticks (bold grid lines), ascending, each label different.
    pub major: Vec<(f64, String)>,
    /// Light grid lines between them.
    pub minor: Vec<f64>,
}

/// At most this many labels on a power-of-two axis (a 900-pixel plot has room for them).
const MAX_POW2_TICKS: usize = 14;
/// At most this many labels on a decimal axis.
const MAX_DECIMAL_TICKS: usize = 10;
/// A decimal axis's end is labelled when it is at least this many decades from the nearest
/// decade label (nearer, the two labels would touch; the decade's label is near enough).
const END_LABEL_GAP: f64 = 0.25;

impl Axis {
    /// The axis of `scale` over the finite positive `values`; `None` when there are none.
    pub fn of(scale: Scale, values: impl IntoIterator<Item = f64>) -> Option<Axis> {
        let (lo, hi) = values
            .into_iter()
            .filter(|v| v.is_finite() && *v > 0.0)
            .fold(None, |m: Option<(f64, f64)>, v| {
                Some(m.map_or((v, v), |(a, b)| (a.min(v), b.max(v))))
            })?;
        Some(match scale {
            Scale::Bytes | Scale::Pow2 => pow2(scale, lo, hi),
            Scale::Decimal => decimal(lo, hi),
            Scale::Percentile => percentile(hi),
        })
    }

    /// The label of tick `v` (one of [`Axis::major`]); a value between ticks gets none.
    pub fn label(&self, v: f64) -> String {
        self.major
            .iter()
            .find(|(t, _)| (t - v).abs() <= t.abs() * 1e-9)
            .map(|(_, l)| l.clone())
            .unwrap_or_default()
    }

    /// The tick values alone.
    pub fn ticks(&self) -> Vec<f64> {
        self.major.iter().map(|t| t.0).collect()
    }
}

/// The powers of two around `lo` and `hi` (a quarter of an octave more either side, so the end
/// points' markers are not on the frame): every one labelled, or every k-th from the lowest
/// when there are more than [`MAX_POW2_TICKS`], the highest then raised to a labelled one.
fn pow2(scale: Scale, lo: f64, hi: f64) -> Axis {
    let e0 = lo.log2().floor() as i32;
    let mut e1 = hi.log2().ceil() as i32;
    if e1 == e0 {
        e1 += 1;
    }
    let k = ((e1 - e0 + 1) as usize).div_ceil(MAX_POW2_TICKS).max(1) as i32;
    e1 += (k - (e1 - e0) % k) % k;
    let mut major = Vec::new();
    let mut minor = Vec::new();
    for e in e0..=e1 {
        let v = 2f64.powi(e);
        if (e - e0) % k == 0 {
            major.push((v, pow2_label(scale, e)));
        } else {
            minor.push(v);
        }
    }
    let pad = 2f64.powf(0.25);
    Axis {
        lo: 2f64.powi(e0) / pad,
        hi: 2f64.powi(e1) * pad,
        major,
        minor,
    }
}

/// `2^e` as a label: bytes in binary units (`4K`, `2M`, `1G`), counts as the number.
fn pow2_label(scale: Scale, e: i32) -> String {
    if e < 0 {
        return format!("{}", 2f64.powi(e));
    }
    match (scale, e) {
        (Scale::Bytes, 30..) => format!("{}G", 1u64 << (e - 30)),
        (Scale::Bytes, 20..) => format!("{}M", 1u64 << (e - 20)),
        (Scale::Bytes, 10..) => format!("{}K", 1u64 << (e - 10)),
        _ => format!("{}", 1u64 << e.min(63)),
    }
}

/// `m` × 10^`k`, a 1-2-5 (or 1-9) step, as a label: `200`, `0.5`, `20k`, `5M`.
fn decimal_label(m: u32, k: i32) -> String {
    match k {
        6.. => format!("{}M", m as u64 * 10u64.pow((k - 6) as u32)),
        4.. => format!("{}k", m as u64 * 10u64.pow((k - 3) as u32)),
        0.. => format!("{}", m as u64 * 10u64.pow(k as u32)),
        _ => format!("{:.*}", (-k) as usize, m as f64 * 10f64.powi(k)),
    }
}

/// The steps m × 10^k of `mantissas` from the one at or below `lo` to the one at or above `hi`.
fn steps(mantissas: &[u32], lo: f64, hi: f64) -> Vec<(u32, i32)> {
    let mut k = lo.log10().floor() as i32 - 1;
    let mut out: Vec<(u32, i32)> = Vec::new();
    while out
        .last()
        .is_none_or(|&(m, e)| (m as f64) * 10f64.powi(e) < hi * (1.0 - 1e-12))
    {
        for &m in mantissas {
            let v = m as f64 * 10f64.powi(k);
            if v <= lo * (1.0 + 1e-12) {
                out.clear();
            }
            out.push((m, k));
            if v >= hi * (1.0 - 1e-12) {
                break;
            }
        }
        k += 1;
    }
    out
}

/// A decimal axis over [lo, hi] widened by 5 %: the densest of the 1-9, 1-2-5 and decade steps
/// with at most [`MAX_DECIMAL_TICKS`] labels; with decades, both ends labelled too (unless a
/// decade label is within [`END_LABEL_GAP`]), so no decade at an end goes without a label.
fn decimal(lo: f64, hi: f64) -> Axis {
    let (lo, hi) = (lo / 1.05, hi * 1.05);
    let val = |&(m, k): &(u32, i32)| m as f64 * 10f64.powi(k);
    for set in [&[1, 2, 3, 4, 5, 6, 7, 8, 9][..], &[1, 2, 5]] {
        let s = steps(set, lo, hi);
        if s.len() <= MAX_DECIMAL_TICKS {
            let (a, b) = (val(&s[0]), val(&s[s.len() - 1]));
            let major: Vec<(f64, String)> = s.iter().map(|t| (val(t), decimal_label(t.0, t.1))).collect();
            let minor = light(a, b, &major);
            return Axis {
                lo: a,
                hi: b,
                major,
                minor,
            };
        }
    }
    // decades: the ends are 1-2-5 steps, labelled when not crowding a decade's label
    let s = steps(&[1, 2, 5], lo, hi);
    let (first, last) = (s[0], s[s.len() - 1]);
    let (a, b) = (val(&first), val(&last));
    let mut major: Vec<(f64, String)> = s
        .iter()
        .filter(|t| t.0 == 1)
        .map(|t| (val(t), decimal_label(t.0, t.1)))
        .collect();
    for end in [first, last] {
        let v = val(&end);
        if major.iter().all(|(t, _)| (t / v).log10().abs() >= END_LABEL_GAP) {
            major.push((v, decimal_label(end.0, end.1)));
        }
    }
    major.sort_by(|x, y| x.0.total_cmp(&y.0));
    let minor = light(a, b, &major);
    Axis {
        lo: a,
        hi: b,
        major,
        minor,
    }
}

/// The light grid lines of a decimal axis: 1-9 × 10^k within [a, b] that are not labelled.
fn light(a: f64, b: f64, major: &[(f64, String)]) -> Vec<f64> {
    steps(&[1, 2, 3, 4, 5, 6, 7, 8, 9], a, b)
        .into_iter()
        .map(|(m, k)| m as f64 * 10f64.powi(k))
        .filter(|v| *v >= a && *v <= b && major.iter().all(|(t, _)| (t - v).abs() > t * 1e-9))
        .collect()
}

/// A percentile axis from x = 1 (0 %, no space left of it) to the 1-2-5 step at or above the
/// largest x: labels at 50 % and each decade (90 %, 99 %, ...), and the end.
fn percentile(hi: f64) -> Axis {
    let d = decimal(1.0, hi.max(2.0));
    let hi = d.hi;
    let mut major = vec![(1.0, pct_label(1.0)), (2.0, pct_label(2.0))];
    let mut k = 1;
    while 10f64.powi(k) <= hi * (1.0 + 1e-12) {
        major.push((10f64.powi(k), pct_label(10f64.powi(k))));
        k += 1;
    }
    let last = major[major.len() - 1].0;
    if (hi / last).log10() >= END_LABEL_GAP {
        major.push((hi, pct_label(hi)));
    }
    let minor = light(1.0, hi, &major);
    Axis {
        lo: 1.0,
        hi,
        major,
        minor,
    }
}

/// x = 1/(1 − q) as the percentile 100·q: `50%`, `99%`, `99.99%`, never more digits than it has.
pub fn pct_label(x: f64) -> String {
    let p = (1.0 - 1.0 / x.max(1.0)) * 100.0;
    let s = format!("{p:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}%")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(a: &Axis) -> Vec<&str> {
        a.major.iter().map(|t| t.1.as_str()).collect()
    }

    /// Every label once, the ticks ascending and inside the range.
    fn sound(a: &Axis) {
        let mut l = labels(a);
        l.sort();
        let n = l.len();
        l.dedup();
        assert_eq!(l.len(), n, "a label twice: {:?}", a.major);
        assert!(a.major.windows(2).all(|w| w[0].0 < w[1].0), "{:?}", a.major);
        assert!(
            a.major
                .iter()
                .all(|t| t.0 >= a.lo * (1.0 - 1e-9) && t.0 <= a.hi * (1.0 + 1e-9)),
            "{a:?}"
        );
        assert!(a.major.len() >= 2, "{a:?}");
    }

    /// Issue 29 item 18: a size axis of 2..8 MiB has the powers of two 2M, 4M, 8M, not decimal
    /// ticks in binary units ("977K", "10M").
    #[test]
    fn size_ticks_are_powers_of_two() {
        let a = Axis::of(Scale::Bytes, [2.0 * 1048576.0, 8.0 * 1048576.0]).unwrap();
        assert_eq!(labels(&a), ["2M", "4M", "8M"]);
        assert_eq!(a.ticks(), [2097152.0, 4194304.0, 8388608.0]);
        sound(&a);
        // the suite's latency sizes: every power of two from 8 B to 64 KiB
        let a = Axis::of(Scale::Bytes, [8.0, 4096.0, 65536.0]).unwrap();
        assert_eq!(a.major.first().map(|t| t.1.as_str()), Some("8"));
        assert_eq!(a.major.last().map(|t| t.1.as_str()), Some("64K"));
        assert!(labels(&a).contains(&"1K") && labels(&a).contains(&"512"));
        sound(&a);
        // 1 B to 1 GiB: every other power, still from the lowest point
        let a = Axis::of(Scale::Bytes, [1.0, 1073741824.0]).unwrap();
        assert!(a.major.len() <= MAX_POW2_TICKS, "{:?}", a.major);
        assert_eq!(a.major[0].1, "1");
        assert!(a.major.iter().all(|t| t.0.log2().fract() == 0.0));
        sound(&a);
        let a = Axis::of(Scale::Pow2, [1.0, 8.0, 32.0]).unwrap();
        assert_eq!(labels(&a), ["1", "2", "4", "8", "16", "32"]);
    }

    /// No label twice on a log axis (plotters drew "1000" twice on latency versus size), over
    /// ranges from sub-unit to millions, and no decade at the ends without a label.
    #[test]
    fn no_label_twice_and_the_ends_labelled() {
        let ranges = [
            (8.0, 65536.0),
            (300.0, 110_000.0),
            (1000.0, 1100.0),
            (1.9, 110.0),
            (0.04, 3.0),
            (2.3, 15.0),
            (470.0, 5_400_000.0),
            (999.0, 1001.0),
            (5.0, 5.0),
        ];
        for (lo, hi) in ranges {
            for scale in [Scale::Decimal, Scale::Bytes, Scale::Pow2] {
                let a = Axis::of(scale, [lo, hi]).unwrap();
                sound(&a);
                if scale == Scale::Decimal {
                    // the lowest and highest labels within a quarter decade of the ends
                    let (first, last) = (a.major[0].0, a.major[a.major.len() - 1].0);
                    assert!((first / a.lo).log10() < END_LABEL_GAP + 1e-9, "{lo}..{hi}: {:?}", a);
                    assert!((a.hi / last).log10() < END_LABEL_GAP + 1e-9, "{lo}..{hi}: {:?}", a);
                    assert!(a.lo <= lo && a.hi >= hi);
                }
            }
        }
        // bandwidth from 1.9 to 110 Gbit/s: 1-2-5 steps, the lowest decade labelled
        let a = Axis::of(Scale::Decimal, [1.9, 110.0]).unwrap();
        assert_eq!(labels(&a), ["1", "2", "5", "10", "20", "50", "100", "200"]);
        let a = Axis::of(Scale::Decimal, [470.0, 5_400_000.0]).unwrap();
        assert_eq!(labels(&a), ["200", "1000", "10k", "100k", "1M", "10M"]);
        // the light lines are neither labelled ticks nor outside the range
        assert!(a.minor.iter().all(|v| *v > a.lo && *v < a.hi && a.label(*v).is_empty()));
    }

    /// The percentile axis starts at 0 % (x = 1): no empty space left of it.
    #[test]
    fn percentile_axis_starts_at_zero_percent() {
        let a = Axis::of(Scale::Percentile, [1.0, 1.5, 2000.0]).unwrap();
        assert_eq!(a.lo, 1.0);
        assert_eq!(labels(&a), ["0%", "50%", "90%", "99%", "99.9%", "99.98%"]);
        sound(&a);
        assert_eq!(pct_label(100000.0), "99.999%");
    }
}

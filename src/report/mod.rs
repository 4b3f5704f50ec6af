//! Statistics, histograms and the result document. No unsafe code here.
#![forbid(unsafe_code)]

mod axis;
pub mod compare;
pub mod env;
pub mod fleet;
mod hdr;
pub mod html;
pub mod output;
pub mod pdf;
pub mod plot;
pub mod png;
pub mod private;
pub mod read;
pub mod schema;
pub mod tdist;

pub use hdr::{MAX_HIST_BYTES, MAX_HIST_COUNTS};

use base64::Engine;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

/// Result document schema version.
pub const SCHEMA_VERSION: u32 = 2;

/// Summary statistics of a sample, in ns. Percentiles are nearest-rank over every sample.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    /// Number of samples.
    pub count: u64,
    /// Smallest.
    pub min: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p99_9: f64,
    /// 99.99th percentile.
    pub p99_99: f64,
    /// Largest (the real largest, not the second largest).
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Population standard deviation.
    pub stdev: f64,
}

/// A backend's overhead over its control (direct) as the summary and the report print it, from
/// each side's pooled p50 and per-block medians: the median over the rounds of blocks of the
/// backend's block p50 minus the control's in the same round, with the 95 % bootstrap interval
/// of that median (`+10 [+8, +14]`, [`compare::paired_difference`]); with fewer than 3 rounds
/// the median alone, saying so; with blocks that do not pair (none recorded, or other counts)
/// the difference of the pooled p50s, saying so. ns, whole; never `-0`.
pub fn overhead_text(control: (f64, &[f64]), other: (f64, &[f64])) -> String {
    match compare::paired_difference(control.1, other.1, 2000) {
        Some(p) => match p.interval {
            Some((lo, hi)) => format!("{} [{}, {}]", signed0(p.median), signed0(lo), signed0(hi)),
            None => format!(
                "{} ({} round{}: no interval)",
                signed0(p.median),
                p.rounds,
                if p.rounds == 1 { "" } else { "s" }
            ),
        },
        None => format!("{} (p50s: blocks not paired)", signed0(other.0 - control.0)),
    }
}

/// A signed whole number, `+0` for what rounds to zero (never `-0`).
pub fn signed0(x: f64) -> String {
    let r = x.round();
    if r == 0.0 {
        "+0".into()
    } else {
        format!("{r:+.0}")
    }
}

/// Nearest-rank percentile of sorted data (q in 0..=1).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Stats {
    /// Statistics of `samples` (ns); sorts a copy.
    pub fn of(samples: &[f64]) -> Option<Stats> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(|a, b| a.total_cmp(b));
        let n = s.len() as f64;
        let mean = s.iter().sum::<f64>() / n;
        let var = s.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
        Some(Stats {
            count: s.len() as u64,
            min: s[0],
            p50: percentile(&s, 0.5),
            p90: percentile(&s, 0.9),
            p99: percentile(&s, 0.99),
            p99_9: percentile(&s, 0.999),
            p99_99: percentile(&s, 0.9999),
            max: s[s.len() - 1],
            mean,
            stdev: var.sqrt(),
        })
    }
}

/// An HdrHistogram of ns values (1 ns .. 1 h, 3 significant digits), every sample recorded.
pub struct Hist {
    h: Histogram<u64>,
}

impl Default for Hist {
    fn default() -> Self {
        Self::new()
    }
}

impl Hist {
    /// An empty histogram.
    pub fn new() -> Self {
        Hist {
            h: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds"),
        }
    }

    /// Records one value in ns (values below 1 ns are recorded as 1, above 1 h as 1 h: the
    /// histogram saturates, it never drops a sample).
    pub fn record(&mut self, ns: f64) {
        let v = (ns.round() as u64).clamp(1, 3_600_000_000_000);
        self.h.saturating_record(v);
    }

    /// Number of recorded values.
    pub fn len(&self) -> u64 {
        self.h.len()
    }

    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.h.is_empty()
    }

    /// The value at quantile q.
    pub fn value_at_quantile(&self, q: f64) -> u64 {
        self.h.value_at_quantile(q)
    }

    /// Mean of the values between quantiles `lo` and `hi` (an interquantile mean: robust to
    /// outliers, and finer than any single quantile of quantised data).
    pub fn trimmed_mean(&self, lo: f64, hi: f64) -> f64 {
        let n = self.h.len() as f64;
        let (a, b) = (lo * n, hi * n);
        let (mut seen, mut sum, mut cnt) = (0f64, 0f64, 0f64);
        for v in self.h.iter_recorded() {
            let c = v.count_at_value() as f64;
            // the part of this bucket's count that falls inside [a, b)
            let take = (seen + c).min(b) - seen.max(a);
            if take > 0.0 {
                sum += take * self.h.median_equivalent(v.value_iterated_to()) as f64;
                cnt += take;
            }
            seen += c;
        }
        if cnt > 0.0 {
            sum / cnt
        } else {
            f64::NAN
        }
    }

    /// The underlying histogram.
    pub fn inner(&self) -> &Histogram<u64> {
        &self.h
    }

    /// The histogram in HdrHistogram's compressed V2 encoding, base64 (what other HdrHistogram
    /// tools read back).
    pub fn encode(&self) -> String {
        let mut buf = Vec::new();
        match V2DeflateSerializer::new().serialize(&self.h, &mut buf) {
            Ok(_) => base64::engine::general_purpose::STANDARD.encode(&buf),
            Err(e) => format!("error: {e:?}"),
        }
    }

    /// Decodes [`Hist::encode`]'s output (or any HdrHistogram V2 or V2-deflate encoding, base64),
    /// read from a file someone else may have written: every length its header claims is held to
    /// the bytes there, the inflated size to [`MAX_HIST_BYTES`] and the counters its range asks
    /// for to [`MAX_HIST_COUNTS`] before hdrhistogram's deserializer sees it (`hdr.rs`).
    pub fn decode(s: &str) -> Result<Hist, String> {
        // base64 takes 4 characters per 3 bytes
        if s.len() > (MAX_HIST_BYTES + 64) / 3 * 4 {
            return Err(format!(
                "{} characters: longer than any histogram's encoding (at most {} decoded)",
                s.len(),
                read::size_text(MAX_HIST_BYTES as u64)
            ));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(|e| e.to_string())?;
        let v2 = hdr::checked(&bytes)?;
        let mut d = hdrhistogram::serialization::Deserializer::new();
        let h: Histogram<u64> = d.deserialize(&mut &v2[..]).map_err(|e| e.to_string())?;
        Ok(Hist { h })
    }
}

/// One interval of an HdrHistogram interval log: a tag (the backend), when it started and how
/// long it lasted (seconds from the start of the run), and its values.
pub struct Interval {
    /// Tag (backend name).
    pub tag: String,
    /// Start, seconds since the run started.
    pub start_s: f64,
    /// Length, seconds.
    pub duration_s: f64,
    /// The values recorded in it.
    pub hist: Hist,
}

/// Writes an HdrHistogram interval log (the format HdrHistogram's tools read: `HistogramLogProcessor`,
/// `hdr-plot`), one interval per block and backend.
pub fn write_interval_log(out: &mut Vec<u8>, comment: &str, intervals: &[Interval]) -> Result<(), String> {
    use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
    let mut ser = V2DeflateSerializer::new();
    let mut b = IntervalLogWriterBuilder::new();
    b.add_comment(comment);
    b.with_start_time(std::time::SystemTime::now());
    let mut w = b.begin_log_with(out, &mut ser).map_err(|e| e.to_string())?;
    for i in intervals {
        let tag = Tag::new(&i.tag);
        w.write_histogram(
            i.hist.inner(),
            std::time::Duration::from_secs_f64(i.start_s.max(0.0)),
            std::time::Duration::from_secs_f64(i.duration_s.max(0.0)),
            tag,
        )
        .map_err(|e| format!("{e:?}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(|x| x as f64).collect();
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
        assert_eq!(percentile(&v, 0.999), 100.0);
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn stats_are_exact_and_keep_the_real_max() {
        let mut v = vec![10.0; 999];
        v.push(5000.0);
        let s = Stats::of(&v).unwrap();
        assert_eq!(
            (s.count, s.min, s.p50, s.p99, s.p99_9, s.max),
            (1000, 10.0, 10.0, 10.0, 10.0, 5000.0)
        );
        assert!((s.mean - 14.99).abs() < 1e-9);
        // stdev in ns, not truncated: sqrt(mean of squared deviations)
        let expect = ((999.0 * (10.0f64 - 14.99).powi(2) + (5000.0f64 - 14.99).powi(2)) / 1000.0).sqrt();
        assert!((s.stdev - expect).abs() < 1e-9);
        assert_eq!(Stats::of(&[]), None);
    }

    #[test]
    fn histogram_round_trips_and_never_drops() {
        let mut h = Hist::new();
        for v in [0.2, 1.0, 812.0, 1e13] {
            h.record(v);
        }
        assert_eq!(h.len(), 4);
        let d = Hist::decode(&h.encode()).unwrap();
        assert_eq!(d.len(), 4);
        assert_eq!(d.value_at_quantile(0.0), 1);
        let p50 = d.value_at_quantile(0.5);
        assert!((1..=1).contains(&p50) || (811..=813).contains(&p50), "{p50}");
        assert!(Hist::decode("not base64!").is_err());
    }

    #[test]
    fn trimmed_mean_ignores_the_tails() {
        let mut h = Hist::new();
        for v in [100.0, 200.0, 200.0, 300.0, 300.0, 400.0, 400.0, 500.0, 1e9, 1e9] {
            h.record(v);
        }
        // the middle 60 % (values 200..=500, one 200 and the 500 half-weighted... here exactly
        // the 3rd..8th values): 200, 300, 300, 400, 400, 500
        let m = h.trimmed_mean(0.2, 0.8);
        assert!((m - 350.0).abs() < 1.0, "{m}");
        assert!(Hist::new().trimmed_mean(0.1, 0.9).is_nan());
    }
}

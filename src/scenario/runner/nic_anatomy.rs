//! `--anatomy` with the NIC's completion timestamps: each round trip of a SEND (or WRITE with
//! immediate) ping-pong split at the moments the NICs completed its two messages.
//!
//! Per sample, with t1 the client's post call starting and t1' returning (its doorbell rung), Rs
//! the NIC clock of the server's receive completion of the request, t2 the server seeing it, t3
//! its reply's post returned, Rc the NIC clock of the client's receive completion of the reply,
//! t4 the client seeing it, and map() the NIC clock placed on the TSC (pairs of both clocks
//! taken before and after the run, fitted):
//!
//! - post: t1' − t1, the client's post call;
//! - doorbell to completion: map(Rc) − t1', the requester's doorbell to the NIC completing its
//!   round trip (the reply received);
//! - responder: t3 − map(Rs), the far end from its NIC completing the request to its reply's
//!   post returning (its polling delay t2 − map(Rs), then its turnaround t3 − t2);
//! - wire/NIC: doorbell to completion − responder: both messages through both NICs and the wire
//!   (on model0: the model executing them and its `--model-delay-ns`);
//! - poll: t4 − map(Rc), from the NIC completing the reply to the client seeing it.
//!
//! post + wire/NIC + responder + poll = t4 − t1 sample by sample (by their definition). Each
//! mapped timestamp must lie where causality puts it (after the doorbell that caused it, before
//! the host saw it): a sample with a component below minus its stated error is counted
//! (`outside_window`), and more than one in 1000 leaves no split. A map whose rate is wrong
//! fails the check against `hca_core_clock`; one whose offset is wrong is caught when the offset
//! exceeds the smallest polling delay (or half the wire/NIC time) plus the error, not below.

use crate::backend::setup::NicClock;
use crate::backend::OpKind;
use crate::clock::Calibration;
use crate::report::Stats;
use crate::scenario::lat::LatSamples;
use crate::verbs::nic_clock::NicClockMap;

/// Pairs of the NIC clock and the TSC taken before a `--anatomy` run's blocks, and as many
/// after, over [`MAP_WINDOW`] each (and one before each round of blocks but the first, see
/// [`RunMap::between`]):
/// the map they fit spans the run.
const MAP_PAIRS: usize = 11;
/// The time the pairs of each side of a run spread over.
const MAP_WINDOW: std::time::Duration = std::time::Duration::from_millis(10);

/// A device's NIC clock mapped to the TSC over a run: pairs taken before its blocks
/// ([`RunMap::start`]), between them ([`RunMap::between`]) and after ([`RunMap::finish`]),
/// fitted together.
pub struct RunMap(Option<Result<Pairs, String>>);

/// Pairs of the NIC clock and the TSC (see `NicClockMap::pairs`).
type Pairs = Vec<(u64, u64, u64)>;

fn pairs_of(c: &NicClock<'_>) -> Result<Pairs, String> {
    NicClockMap::pairs(&mut || c.read(), MAP_WINDOW, MAP_PAIRS).map_err(|e| e.to_string())
}

impl RunMap {
    /// Before the blocks: the first pairs, with `--anatomy` (`anatomy`) on a device with a NIC
    /// clock (`nic`).
    pub fn start(anatomy: bool, nic: &Result<NicClock<'_>, String>) -> Self {
        RunMap(match nic {
            Ok(c) if anatomy => Some(pairs_of(c)),
            _ => None,
        })
    }

    /// Between blocks (outside the timed region): one more pair, so the map follows the NIC
    /// clock through a long run (a crystal drifts against the TSC) rather than bridging it.
    /// A read that fails here is skipped (the pairs before and after still make the map).
    pub fn between(&mut self, nic: &Result<NicClock<'_>, String>) {
        if let (Ok(c), Some(Ok(pairs))) = (nic, self.0.as_mut()) {
            if let Ok(p) = NicClockMap::one_pair(&mut || c.read()) {
                pairs.push(p);
            }
        }
    }

    /// After the blocks: the map of all pairs, or why there is none.
    pub fn finish(self, nic: &Result<NicClock<'_>, String>, cal: &Calibration) -> Result<NicClockMap, String> {
        match (nic, self.0) {
            (Err(why), _) => Err(why.clone()),
            (Ok(c), Some(Ok(mut pre))) => pairs_of(c).and_then(|post| {
                pre.extend(post);
                NicClockMap::fit(&pre, cal.hz, c.stated_khz)
            }),
            (Ok(_), Some(Err(e))) => Err(e),
            (Ok(_), None) => Err("no --anatomy".into()),
        }
    }
}

/// How the NIC clock was placed on the TSC for a run.
pub use crate::verbs::nic_clock::MapSummary;

/// The round trips split at the NICs' completion timestamps (see the module), ns each.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NicAnatomy {
    /// t1' − t1: the client's post call.
    pub post_ns: Stats,
    /// map(Rc) − t1': the client's doorbell to its NIC completing the reply's receive.
    pub doorbell_to_completion_ns: Stats,
    /// t3 − map(Rs): the responder, from its NIC completing the request to its reply's post.
    pub responder_ns: Stats,
    /// t2 − map(Rs): the responder's polling delay (the responder less its turnaround).
    pub server_poll_ns: Stats,
    /// Doorbell to completion less the responder: both messages through the NICs and the wire.
    pub wire_ns: Stats,
    /// t4 − map(Rc): the client's polling delay.
    pub poll_ns: Stats,
    /// How the NIC clock was placed on the TSC: the client's (in one process: both ends').
    pub map: MapSummary,
    /// Between two processes: how the server placed its NIC clock on its TSC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_map: Option<MapSummary>,
    /// The stated error of a component with one timestamp on the client's map (doorbell to
    /// completion, poll): the map's error and one NIC tick, ns. Wire/NIC, with one timestamp on
    /// each end's map, is within this and `server_error_ns` together.
    pub error_ns: f64,
    /// The same for a component with one timestamp on the server's map (responder, its
    /// polling); in one process the same map's.
    #[serde(default)]
    pub server_error_ns: f64,
    /// Samples with a component below minus its error: a mapped timestamp outside the window
    /// causality puts it in (a wrong map, or timestamps that are not the completions'); more
    /// than one in 1000 and there is no split (`nic_absent` says why).
    pub outside_window: u64,
}

/// Why a ping-pong of `op` has no NIC split, if it has none by its nature.
fn op_absent(op: OpKind) -> Result<(), String> {
    if op.needs_recv() {
        return Ok(());
    }
    Err(
        "a WRITE ping-pong sees each message in memory, with no receive completion to carry the NIC clock \
         (--write-with-imm and send have one)"
            .into(),
    )
}

/// The NIC split of one backend's samples `s` (both ends in this process, on one device whose
/// clock `map` places on the TSC), or why there is none.
pub fn nic_anatomy(
    op: OpKind,
    s: &LatSamples,
    map: &Result<NicClockMap, String>,
    cal: &Calibration,
) -> Result<NicAnatomy, String> {
    op_absent(op)?;
    let map = map.as_ref().map_err(Clone::clone)?;
    let responder = responder_ticks(s, map)?;
    split(s, &responder, (map, None), cal)
}

/// The server's side (between two processes, or both in one): each iteration's responder,
/// t3 − map(Rs), in its own TSC's ticks; or why there is none (its NIC clock's rate not the
/// stated one, completions without the clock).
pub fn responder_ticks(s: &LatSamples, map: &NicClockMap) -> Result<Vec<f64>, String> {
    map.rate_check()?;
    if s.nic_request.len() != s.replied.len() {
        return Err(format!(
            "{} replies, but {} receive timestamps on the server: its completions do not all carry the NIC clock",
            s.replied.len(),
            s.nic_request.len()
        ));
    }
    // t3 − map(Rs), the TSC difference taken in integers first
    Ok(s.replied
        .iter()
        .zip(&s.nic_request)
        .map(|(&t3, &rs)| -map.tsc_since(rs, t3))
        .collect())
}

/// The client's side between two processes: its samples `s`, the server's responders
/// (`responder`: in this side's ticks, or why the server has none) and the server's map; this
/// side's NIC clock `map`.
pub fn nic_anatomy_net(
    op: OpKind,
    s: &LatSamples,
    responder: Result<Vec<f64>, String>,
    server_map: Option<MapSummary>,
    map: &Result<NicClockMap, String>,
    cal: &Calibration,
) -> Result<NicAnatomy, String> {
    op_absent(op)?;
    // this side's reason first (on one kind of device both ends have the same)
    let map = map.as_ref().map_err(Clone::clone)?;
    map.rate_check()?;
    let responder = responder.map_err(|why| format!("the server: {why}"))?;
    split(s, &responder, (map, server_map), cal)
}

/// Samples with a mapped timestamp outside its causal window, at most one in this many: more,
/// and the map (or the timestamps) cannot be right, so no split is shown.
const OUTSIDE_AT_MOST_ONE_IN: u64 = 1000;

/// Splits the samples `s` with the responders `responder` (this side's ticks) on this side's
/// `map` (and the server's, when it had its own).
fn split(
    s: &LatSamples,
    responder: &[f64],
    (map, server_map): (&NicClockMap, Option<MapSummary>),
    cal: &Calibration,
) -> Result<NicAnatomy, String> {
    map.fit.check()?;
    let n = s.rtt.len();
    let lens = [
        ("post", s.post.len()),
        ("doorbell", s.posted.len()),
        ("client receive timestamp", s.nic_reply.len()),
        ("server responder", responder.len()),
        ("server turnaround", s.turnaround.len()),
    ];
    if lens.iter().any(|&(_, l)| l != n) {
        let have: Vec<String> = lens.iter().map(|(k, l)| format!("{l} {k}s")).collect();
        return Err(format!(
            "{n} round trips, but {}: the completions do not all carry the NIC clock",
            have.join(", ")
        ));
    }
    let ns = |ticks: f64| ticks * 1e9 / cal.hz;
    // a component with one mapped timestamp is within its map's error and one NIC tick (a
    // timestamp is its counter truncated); wire/NIC, between two, within both
    let e_c = map.error_ns() + map.tick_ns();
    let e_s = server_map.map_or(e_c, |m| m.error_ns + 1e6 / m.stated_khz as f64);
    let base = s.posted.first().copied().unwrap_or(0);
    let rel = |t: u64| t.wrapping_sub(base) as i64 as f64;
    let mut c: [Vec<f64>; 6] = Default::default();
    let mut outside = 0u64;
    for i in 0..n {
        let t1e = rel(s.posted[i]);
        let t4 = t1e - s.post[i] as f64 + s.rtt[i] as f64;
        let rc = map.tsc_since(s.nic_reply[i], base);
        let d2c = ns(rc - t1e);
        let responder = ns(responder[i]);
        let server_poll = responder - ns(s.turnaround[i] as f64);
        let wire = d2c - responder;
        let poll = ns(t4 - rc);
        if d2c < -e_c || poll < -e_c || responder < -e_s || server_poll < -e_s || wire < -(e_c + e_s) {
            outside += 1;
        }
        for (v, x) in c
            .iter_mut()
            .zip([ns(s.post[i] as f64), d2c, responder, server_poll, wire, poll])
        {
            v.push(x);
        }
    }
    if outside * OUTSIDE_AT_MOST_ONE_IN > n as u64 {
        return Err(format!(
            "{outside} of {n} samples have a NIC completion timestamp outside the window causality puts it in \
             (before the doorbell that caused it, or after the host saw it, beyond the map's stated error of \
             {e_c:.0} ns): the map or the timestamps are not right (a device writing real-time timestamps?), so \
             no split is shown"
        ));
    }
    let st = |v: &[f64]| Stats::of(v).ok_or_else(|| "no samples".to_string());
    Ok(NicAnatomy {
        post_ns: st(&c[0])?,
        doorbell_to_completion_ns: st(&c[1])?,
        responder_ns: st(&c[2])?,
        server_poll_ns: st(&c[3])?,
        wire_ns: st(&c[4])?,
        poll_ns: st(&c[5])?,
        map: map.fit,
        server_map,
        error_ns: e_c,
        server_error_ns: e_s,
        outside_window: outside,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TSC of 1 GHz: a tick is a ns.
    fn cal() -> Calibration {
        Calibration::stated(1e9)
    }

    /// The NIC clock at 156.25 MHz, `ahead_ns` ahead of the TSC, `rate` times its stated rate.
    fn nic(tsc: f64, ahead_ns: f64, rate: f64) -> u64 {
        ((tsc + ahead_ns) * 0.15625 * rate) as u64
    }

    /// 100 round trips with known parts: post 60, request through the NICs 300, the server's
    /// polling 100 and turnaround 50, the reply 300, the client's polling 100 (ns).
    fn samples() -> LatSamples {
        let mut s = LatSamples::default();
        for i in 0..100u64 {
            let t0 = 1_000_000 + i * 10_000;
            let posted = t0 + 60;
            let rs = posted + 300;
            let t2 = rs + 100;
            let t3 = t2 + 50;
            let rc = t3 + 300;
            let t4 = rc + 100;
            s.rtt.push(t4 - t0);
            s.post.push(60);
            s.posted.push(posted);
            s.nic_reply.push(nic(rc as f64, 0.0, 1.0));
            s.turnaround.push(t3 - t2);
            s.replied.push(t3);
            s.nic_request.push(nic(rs as f64, 0.0, 1.0));
        }
        s
    }

    /// A map of pairs over the samples' time, reads 20 ns wide.
    fn map(ahead_ns: f64, rate: f64) -> Result<NicClockMap, String> {
        let pairs: Vec<(u64, u64, u64)> = (0..22u64)
            .map(|i| {
                let t = 900_000 + i * 60_000;
                (t, nic(t as f64, ahead_ns, rate), 20)
            })
            .collect();
        NicClockMap::fit(&pairs, 1e9, 156_250)
    }

    #[test]
    fn the_parts_come_out_where_they_were_put_and_add_up() {
        let s = samples();
        let n = nic_anatomy(OpKind::Send, &s, &map(0.0, 1.0), &cal()).unwrap();
        // within a NIC tick (6.4 ns) and the map's error
        let near = |st: &Stats, want: f64| (st.p50 - want).abs() <= 8.0 && (st.mean - want).abs() <= 8.0;
        assert!(near(&n.post_ns, 60.0), "{n:?}");
        assert!(near(&n.wire_ns, 600.0), "{n:?}");
        assert!(near(&n.responder_ns, 150.0), "{n:?}");
        assert!(near(&n.server_poll_ns, 100.0), "{n:?}");
        assert!(near(&n.poll_ns, 100.0), "{n:?}");
        assert!(near(&n.doorbell_to_completion_ns, 750.0), "{n:?}");
        assert_eq!(n.outside_window, 0, "{n:?}");
        // the means add up to the round trip's (910 ns)
        let sum = n.post_ns.mean + n.wire_ns.mean + n.responder_ns.mean + n.poll_ns.mean;
        assert!((sum - 910.0).abs() < 1e-6, "{sum}");
    }

    /// Point 4: a map whose offset is wrong by a microsecond puts the NIC's completions
    /// before the doorbells that caused them: every sample outside, and no split, the reason
    /// saying so; a NIC clock whose rate is not the stated one is refused, naming the check
    /// against hca_core_clock. One sample in 1000 outside is shown and counted.
    #[test]
    fn a_wrong_map_is_caught() {
        let mut s = samples();
        let e = nic_anatomy(OpKind::Send, &s, &map(1000.0, 1.0), &cal()).unwrap_err();
        assert!(
            e.starts_with("100 of 100 samples have a NIC completion timestamp outside"),
            "{e}"
        );
        let e = nic_anatomy(OpKind::Send, &s, &map(0.0, 1.01), &cal()).unwrap_err();
        assert!(e.contains("hca_core_clock") && e.contains("+10000 ppm"), "{e}");
        // 1000 samples, one with its reply's completion stamped before the server's post
        let more = samples();
        for _ in 0..9 {
            s.extend(more.clone());
        }
        s.nic_reply[7] = nic(s.replied[7] as f64 - 500.0, 0.0, 1.0);
        let n = nic_anatomy(OpKind::Send, &s, &map(0.0, 1.0), &cal()).unwrap();
        assert_eq!(n.outside_window, 1, "{n:?}");
        s.nic_reply[8] = s.nic_reply[7];
        assert!(nic_anatomy(OpKind::Send, &s, &map(0.0, 1.0), &cal()).is_err());
    }

    /// Between two hosts each NIC has its own clock: the server maps its own (here 5 ms ahead
    /// of the client's) and sends its responders; the split comes out as on one clock, with
    /// both maps' errors. Taken on the client's map alone, the server's timestamps fall outside.
    #[test]
    fn between_two_processes_each_end_maps_its_own_clock() {
        let mut s = samples();
        for (r, t3) in s.nic_request.iter_mut().zip(&s.replied) {
            *r = nic(*t3 as f64 - 150.0, 5e6, 1.0);
        }
        let theirs = map(5e6, 1.0).unwrap();
        let resp = responder_ticks(&s, &theirs).unwrap();
        let n = nic_anatomy_net(OpKind::Send, &s, Ok(resp), Some(theirs.fit), &map(0.0, 1.0), &cal()).unwrap();
        assert!(
            (n.responder_ns.p50 - 150.0).abs() <= 8.0 && (n.wire_ns.p50 - 600.0).abs() <= 8.0,
            "{n:?}"
        );
        assert_eq!(n.outside_window, 0, "{n:?}");
        assert!((n.error_ns - n.map.error_ns - 6.4).abs() < 1e-9, "{n:?}");
        assert!((n.server_error_ns - theirs.error_ns() - 6.4).abs() < 1e-9, "{n:?}");
        let e = nic_anatomy(OpKind::Send, &s, &map(0.0, 1.0), &cal()).unwrap_err();
        assert!(e.starts_with("100 of 100 samples"), "{e}");
        // a server without a split says why
        let e = nic_anatomy_net(OpKind::Send, &s, Err("no clock".into()), None, &map(0.0, 1.0), &cal()).unwrap_err();
        assert_eq!(e, "the server: no clock");
    }

    #[test]
    fn no_split_without_timestamps_or_for_a_write() {
        let mut s = samples();
        let e = nic_anatomy(OpKind::Write, &s, &map(0.0, 1.0), &cal()).unwrap_err();
        assert!(e.contains("WRITE ping-pong"), "{e}");
        let e = nic_anatomy(OpKind::Send, &s, &Err("rxe0: no clock".into()), &cal()).unwrap_err();
        assert_eq!(e, "rxe0: no clock");
        s.nic_reply.pop();
        let e = nic_anatomy(OpKind::Send, &s, &map(0.0, 1.0), &cal()).unwrap_err();
        assert!(e.contains("99 client receive timestamps"), "{e}");
        s.nic_request.pop();
        let e = nic_anatomy(OpKind::Send, &s, &map(0.0, 1.0), &cal()).unwrap_err();
        assert!(e.contains("99 receive timestamps on the server"), "{e}");
    }
}

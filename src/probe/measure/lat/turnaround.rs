//! `--anatomy` between two processes: the server's turnaround of every measured iteration
//! comes to the client after the run (never on the measured path), in its TSC's ticks with the
//! rate it calibrated, in messages of at most [`CHUNK`] samples (an out-of-band message is at
//! most 64 KiB); the client converts them to its own ticks and pairs them with its round trips,
//! backend by backend, in the blocks' order (the same on both ends). Where the server's
//! completions carry its NIC clock, each backend's responders (t3 − map(Rs), its ticks, signed)
//! follow its turnarounds in messages of their own, and the header says how the server mapped
//! its clock; where not, the header says why. Every message of a series but its last holds
//! [`CHUNK`] samples, and an end message closes the exchange: a server cannot stretch it beyond
//! an honest one's messages, nor leave more behind it.

use crate::oob::Rendezvous;
use crate::probe::ProbeError;
use crate::scenario::runner::MapSummary;
use serde_json::json;

/// Samples per message: 2000 of at most 20 digits (and a sign) each, under the 64 KiB bound.
pub(super) const CHUNK: usize = 2000;

/// What the client gets: per backend the server's turnarounds and its responders (or why it has
/// none), in this side's ticks; how the server mapped its NIC clock.
#[derive(Debug)]
pub(super) struct Received {
    pub rows: Vec<Vec<u64>>,
    pub responders: Vec<Result<Vec<f64>, String>>,
    pub server_map: Option<MapSummary>,
}

/// The server: each backend's turnarounds (`rows`, in the ends' order) and responders (or why
/// it has none), ticks at `hz`; how it mapped its NIC clock (`map`).
pub(super) fn send(
    rdv: &mut dyn Rendezvous,
    rows: &[Vec<u64>],
    responders: &[Result<Vec<i64>, String>],
    map: Option<MapSummary>,
    hz: f64,
) -> Result<(), ProbeError> {
    let counts: Vec<usize> = rows.iter().map(Vec::len).collect();
    let nic: Vec<serde_json::Value> = responders
        .iter()
        .map(|r| match r {
            Ok(_) => json!({ "responders": true }),
            Err(why) => json!({ "absent": why }),
        })
        .collect();
    rdv.put(&json!({ "turnaround": { "hz": hz, "counts": counts, "nic": nic, "nic_map": map } }))?;
    for (row, resp) in rows.iter().zip(responders) {
        for c in row.chunks(CHUNK) {
            rdv.put(&json!({ "turnaround_ticks": c }))?;
        }
        for c in resp.iter().flat_map(|r| r.chunks(CHUNK)) {
            rdv.put(&json!({ "responder_ticks": c }))?;
        }
    }
    rdv.put(&json!({ "turnaround_end": counts.iter().sum::<usize>() }))?;
    Ok(())
}

/// The client: the server's turnarounds per backend, `want[i]` for backend `i` (its round
/// trips: each turnaround pairs with one), and its responders, converted to this side's ticks
/// at `hz`. Anything else the server sends (another count, a rate that is not one, a sample too
/// many) is an error naming it.
pub(super) fn receive(rdv: &mut dyn Rendezvous, want: &[usize], hz: f64) -> Result<Received, ProbeError> {
    let bad = |why: String| ProbeError::Invalid(format!("--anatomy: the server's turnarounds: {why}"));
    let head: serde_json::Value = rdv.take()?;
    let theirs_hz = head["turnaround"]["hz"].as_f64().unwrap_or(f64::NAN);
    // a TSC between 1 MHz and 100 GHz
    if !(1e6..=1e11).contains(&theirs_hz) {
        return Err(bad(format!("its TSC rate is not one ({})", head["turnaround"]["hz"])));
    }
    let counts: Vec<usize> = serde_json::from_value(head["turnaround"]["counts"].clone())
        .map_err(|e| bad(format!("no counts ({e}): {head}")))?;
    if counts != want {
        return Err(bad(format!(
            "{counts:?} samples per backend, where this side has {want:?} round trips (both ends ran the same \
             iterations: a server of another version?)"
        )));
    }
    let nic = &head["turnaround"]["nic"];
    // responders are used only with the server's map of its clock, and only a map that is one
    let server_map = server_map(&head["turnaround"]["nic_map"]);
    let scale = hz / theirs_hz;
    let mut out = Received {
        rows: Vec::with_capacity(counts.len()),
        responders: Vec::with_capacity(counts.len()),
        server_map: server_map.as_ref().ok().copied(),
    };
    for (i, &n) in counts.iter().enumerate() {
        let row: Vec<u64> = series(rdv, n, "turnaround_ticks", &bad)?;
        out.rows
            .push(row.iter().map(|&t| (t as f64 * scale).round() as u64).collect());
        let resp = match (&nic[i]["responders"], nic[i]["absent"].as_str()) {
            (serde_json::Value::Bool(true), _) => {
                let r: Vec<i64> = series(rdv, n, "responder_ticks", &bad)?;
                match &server_map {
                    Ok(_) => Ok(r.iter().map(|&t| t as f64 * scale).collect()),
                    Err(why) => Err(why.clone()),
                }
            }
            (_, Some(why)) => Err(why.to_string()),
            _ => Err("it sent no NIC split (a server of another version?)".to_string()),
        };
        out.responders.push(resp);
    }
    let end: serde_json::Value = rdv.take()?;
    let total: usize = counts.iter().sum();
    if end["turnaround_end"].as_u64() != Some(total as u64) {
        return Err(bad(format!("not its end after {total} samples: {end}")));
    }
    Ok(out)
}

/// The server's map of its NIC clock as it sent it, if it is one (`MapSummary::check`); else
/// why not (its responders are then not used).
fn server_map(v: &serde_json::Value) -> Result<MapSummary, String> {
    let m: MapSummary =
        serde_json::from_value(v.clone()).map_err(|e| format!("it sent no map of its NIC clock ({e})"))?;
    m.check().map_err(|why| format!("{why}: {v}"))?;
    Ok(m)
}

/// `n` samples under `key`, in messages of [`CHUNK`] (the last the rest).
fn series<T: serde::de::DeserializeOwned>(
    rdv: &mut dyn Rendezvous,
    n: usize,
    key: &str,
    bad: &dyn Fn(String) -> ProbeError,
) -> Result<Vec<T>, ProbeError> {
    let mut row = Vec::with_capacity(n);
    while row.len() < n {
        let m: serde_json::Value = rdv.take()?;
        let c: Vec<T> = serde_json::from_value(m[key].clone())
            .map_err(|e| bad(format!("a message that is not a list of ticks under {key} ({e})")))?;
        // every message of a series but its last is full
        let due = (n - row.len()).min(CHUNK);
        if c.len() != due {
            return Err(bad(format!(
                "a message of {} samples where {due} were due ({CHUNK} a message, the last of a backend the rest)",
                c.len()
            )));
        }
        row.extend(c);
    }
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oob::Canned;
    use std::collections::VecDeque;

    /// A server's map of its NIC clock that is one.
    const GOOD: MapSummary = MapSummary {
        stated_khz: 156_250,
        measured_khz: 156_250.0,
        rate_error_ppm: 0.1,
        residual_max_ns: 8.0,
        read_span_ns: 60.0,
        window_ns: 100_000_000,
        pairs: 22,
        pairs_dropped: 0,
        error_ns: 38.0,
    };

    #[test]
    fn turnarounds_arrive_in_order_in_this_sides_ticks() {
        let rows = vec![(0..4500).collect::<Vec<u64>>(), vec![], vec![1000, 3000]];
        let resp = vec![Err("no clock".to_string()), Ok(vec![]), Ok(vec![-10, 400])];
        let mut server = Canned(VecDeque::new(), Vec::new());
        send(&mut server, &rows, &resp, Some(GOOD), 2e9).expect("sent");
        // 4500 samples take three messages, then the third row one and its responders', the end
        assert_eq!(server.1.len(), 1 + 3 + 1 + 1 + 1);
        let mut e = Canned(server.1.into(), Vec::new());
        // a server at 2 GHz, this side at 3 GHz: 1.5 of this side's ticks each
        let got = receive(&mut e, &[4500, 0, 2], 3e9).expect("received");
        let r = &got.rows;
        assert_eq!(r[0].len(), 4500);
        assert_eq!((r[0][2], r[0][4499]), (3, 6749));
        assert!(r[1].is_empty());
        assert_eq!(r[2], vec![1500, 4500]);
        assert_eq!(
            got.responders,
            vec![Err("no clock".to_string()), Ok(vec![]), Ok(vec![-15.0, 600.0])]
        );
        assert_eq!(got.server_map, Some(GOOD));
    }

    #[test]
    fn a_server_that_sends_otherwise_is_named_never_trusted() {
        let err = |msgs: Vec<serde_json::Value>, want: &[usize]| {
            receive(&mut Canned(msgs.into(), Vec::new()), want, 2e9)
                .expect_err("refused")
                .to_string()
        };
        let head =
            |hz: serde_json::Value, counts: serde_json::Value| json!({"turnaround": {"hz": hz, "counts": counts}});
        assert!(err(vec![head(json!(0.0), json!([1]))], &[1]).contains("its TSC rate is not one"));
        assert!(err(vec![head(json!("fast"), json!([1]))], &[1]).contains("its TSC rate is not one"));
        assert!(err(vec![head(json!(2e9), json!([2]))], &[1]).contains("[2] samples per backend"));
        assert!(err(vec![head(json!(2e9), json!("x"))], &[1]).contains("no counts"));
        let too_many = vec![head(json!(2e9), json!([1])), json!({"turnaround_ticks": [1, 2]})];
        assert!(err(too_many, &[1]).contains("a message of 2 samples where 1 were due"));
        let empty = vec![head(json!(2e9), json!([1])), json!({"turnaround_ticks": []})];
        assert!(err(empty, &[1]).contains("a message of 0 samples"));
        // a sample a message (one honest message of 3000 would be full): refused at the first
        let dribble = vec![head(json!(2e9), json!([3000])), json!({"turnaround_ticks": [1]})];
        assert!(err(dribble, &[3000]).contains("a message of 1 samples where 2000 were due"));
        // more after the announced samples, or no end
        let more = vec![
            head(json!(2e9), json!([1])),
            json!({"turnaround_ticks": [1]}),
            json!({"turnaround_ticks": [1]}),
        ];
        assert!(err(more, &[1]).contains("not its end after 1 samples"));
        let negative = vec![head(json!(2e9), json!([1])), json!({"turnaround_ticks": [-1]})];
        assert!(err(negative, &[1]).contains("not a list of ticks"));
        // responders announced: as many as the turnarounds, in their own messages
        let nic = |n: usize| {
            vec![
                json!({"turnaround": {"hz": 2e9, "counts": [n], "nic": [{"responders": true}]}}),
                json!({"turnaround_ticks": vec![1; n]}),
            ]
        };
        let mut short = nic(2);
        short.push(json!({"responder_ticks": [5]}));
        assert!(err(short, &[2]).contains("a message of 1 samples where 2 were due"));
        let mut missing = nic(1);
        missing.push(json!({"turnaround_end": 1}));
        assert!(err(missing, &[1]).contains("not a list of ticks under responder_ticks"));
        // the server stopped sending: the exchange's own error
        assert!(err(vec![head(json!(2e9), json!([1]))], &[1]).contains("nothing more"));
    }

    /// The responders come with the server's map of its clock, and only a map that is one: with
    /// none, or one whose stated error is not its residual and read span (a huge error would let
    /// any responder pass the causality check), the responders are not used and the reason says
    /// why.
    #[test]
    fn responders_need_a_map_that_is_one() {
        let good = GOOD;
        let take = |map: serde_json::Value| {
            let msgs = vec![
                json!({"turnaround": {"hz": 2e9, "counts": [1], "nic": [{"responders": true}], "nic_map": map}}),
                json!({"turnaround_ticks": [10]}),
                json!({"responder_ticks": [20]}),
                json!({"turnaround_end": 1}),
            ];
            receive(&mut Canned(msgs.into(), Vec::new()), &[1], 2e9).expect("received")
        };
        let got = take(json!(good));
        assert_eq!(got.responders, vec![Ok(vec![20.0])]);
        assert_eq!(got.server_map, Some(good));
        let cases = [
            (json!(null), "no map"),
            (
                json!(MapSummary {
                    measured_khz: -1.0,
                    ..good
                }),
                "not one",
            ),
            (
                json!(MapSummary {
                    error_ns: 1e300,
                    ..good
                }),
                "other than its residual",
            ),
            (
                json!(MapSummary {
                    residual_max_ns: 2e6,
                    error_ns: 2e6 + 30.0,
                    ..good
                }),
                "over 1 ms",
            ),
            (
                json!(MapSummary {
                    rate_error_ppm: 5000.0,
                    measured_khz: 157_031.25,
                    ..good
                }),
                "beyond the tolerance",
            ),
            (json!(MapSummary { pairs: 1, ..good }), "fewer than 3 pairs"),
        ];
        for (map, want) in cases {
            let got = take(map);
            let why = got.responders[0].as_ref().expect_err("not used");
            assert!(why.contains(want), "{why}");
            assert!(got.server_map.is_none());
        }
    }
}

//! `rdmaprobe ping`: the connectivity ladder (issue 13 point 2). Layer 1, the device: it opens,
//! its port is ACTIVE, a usable GID (RoCE). Layer 2, the connection: the peer reachable out of
//! band, both ends' QPs to RTS (read back), a 1-byte SEND and a 1-byte WRITE completing, with
//! the time each took. Layer 3, performance: a short latency and bandwidth run against limits
//! (given, or a baseline result file's figures with a tolerance). The report names the first
//! layer that fails and the likely cause; the exit status says which layer (10 + layer).

use crate::backend::OpKind;
use crate::model::{ExecMode, ModelConfig};
use crate::oob::{OobError, Rendezvous};
use crate::probe::{BwPlan, LatPlan, Observer, PeerSpec, Plan, ProbeError, Quiet, Runs, Scenario};
use crate::scenario::ScenarioError;
use std::fmt::Write;
use std::time::Duration;

/// What a ping checks and against what.
#[derive(Debug, Clone)]
pub struct PingPlan {
    /// Device, backends, peer, deadlines (the scenario in it is not used).
    pub plan: Plan,
    /// Layer 3: one-way latency p50 of an 8-byte WRITE at most this (ns).
    pub max_lat_ns: Option<f64>,
    /// Layer 3: 64 KiB WRITE bandwidth at least this (MB/s, 2^20 bytes).
    pub min_bw_mib_s: Option<f64>,
    /// Layer 3: limits from a baseline result's figures (latency p50 and bandwidth average of
    /// the same runs), with `tolerance_pct` of slack.
    pub baseline: Option<serde_json::Value>,
    /// Slack around the baseline, percent.
    pub tolerance_pct: f64,
    /// model0 only: this side's wire delay (a slow peer, for tests and demonstrations).
    pub model_delay_ns: Option<u64>,
}

/// A layer's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LayerStatus {
    /// Passed.
    Pass,
    /// Failed (the first failure stops the ladder).
    Fail,
    /// Not reached.
    NotRun,
}

/// One rung of the ladder.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Layer {
    /// 1, 2 or 3.
    pub layer: u8,
    /// `device`, `connection`, `performance`.
    pub name: &'static str,
    /// The outcome.
    pub status: LayerStatus,
    /// What was found, line by line.
    pub findings: Vec<String>,
    /// On a failure: the likely cause and what to check.
    pub cause: Option<String>,
}

/// The ladder's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PingReport {
    /// This side: `loopback`, `client` or `server`.
    pub role: &'static str,
    /// The three layers.
    pub layers: Vec<Layer>,
}

impl PingReport {
    /// The first layer that failed.
    pub fn failed_layer(&self) -> Option<u8> {
        self.layers
            .iter()
            .find(|l| l.status == LayerStatus::Fail)
            .map(|l| l.layer)
    }

    /// The exit status: 0 when every layer passed, else 10 + the first failing layer.
    pub fn exit_code(&self) -> u8 {
        self.failed_layer().map_or(0, |l| 10 + l)
    }

    /// As text.
    pub fn text(&self) -> String {
        let mut s = format!("rdmaprobe ping ({}):\n", self.role);
        for l in &self.layers {
            let st = match l.status {
                LayerStatus::Pass => "pass",
                LayerStatus::Fail => "FAIL",
                LayerStatus::NotRun => "not run",
            };
            let _ = writeln!(s, " layer {} {:<12} {st}", l.layer, l.name);
            for f in &l.findings {
                let _ = writeln!(s, "   {f}");
            }
            if let Some(c) = &l.cause {
                let _ = writeln!(s, "   likely cause: {c}");
            }
        }
        match self.failed_layer() {
            Some(n) => {
                let _ = writeln!(s, "first failing layer: {n} ({})", self.layers[n as usize - 1].name);
            }
            None => s.push_str("all layers pass\n"),
        }
        s
    }
}

fn layer(n: u8, name: &'static str) -> Layer {
    Layer {
        layer: n,
        name,
        status: LayerStatus::NotRun,
        findings: Vec::new(),
        cause: None,
    }
}

/// Runs the ladder; the peer is reached as `p.plan.peer` says (TCP).
pub fn run(p: &PingPlan, obs: &mut dyn Observer) -> Result<PingReport, ProbeError> {
    ladder(p, None, obs)
}

/// As [`run`], with the peer reached through `peer` (another launcher's exchange).
pub fn run_with_peer(
    p: &PingPlan,
    peer: &mut dyn Rendezvous,
    obs: &mut dyn Observer,
) -> Result<PingReport, ProbeError> {
    ladder(p, Some(peer), obs)
}

/// The ladder, layer by layer; the first layer that fails ends it (the later ones not run).
fn ladder(
    p: &PingPlan,
    given: Option<&mut (dyn Rendezvous + '_)>,
    obs: &mut dyn Observer,
) -> Result<PingReport, ProbeError> {
    let mut l = Ladder::new(p);
    if !l.device(obs) {
        return Ok(l.rep);
    }
    let mut tcp: Option<crate::oob::Peer>;
    let mut peer: Option<&mut (dyn Rendezvous + '_)> = match given {
        Some(g) => Some(g),
        None => match crate::probe::measure::session::tcp_peer(&p.plan, obs) {
            Ok(t) => {
                tcp = t;
                tcp.as_mut().map(|t| t as &mut dyn Rendezvous)
            }
            Err(e) => {
                l.fail(1, e.to_string(), cause(&e));
                return Ok(l.rep);
            }
        },
    };
    if l.connection(&mut peer) {
        l.performance(&mut peer);
    }
    Ok(l.rep)
}

/// The ladder under way: the plan, the report as the layers fill it in, and what layer 1 found
/// that a later failure's cause names (a RoCE link: the firewall's rules are looked at).
struct Ladder<'p> {
    p: &'p PingPlan,
    rep: PingReport,
    roce: bool,
}

impl<'p> Ladder<'p> {
    /// Every layer not run yet; the role the plan's peer gives this side.
    fn new(p: &'p PingPlan) -> Self {
        let role = match p.plan.peer {
            PeerSpec::Loopback => "loopback",
            PeerSpec::Connect { .. } => "client",
            PeerSpec::Listen { .. } => "server",
        };
        let rep = PingReport {
            role,
            layers: vec![layer(1, "device"), layer(2, "connection"), layer(3, "performance")],
        };
        Ladder { p, rep, roce: false }
    }

    /// Layer `i` (0-based) failed with `finding`; `cause` is the likely one.
    fn fail(&mut self, i: usize, finding: String, cause: String) {
        let l = &mut self.rep.layers[i];
        l.status = LayerStatus::Fail;
        l.findings.push(finding);
        l.cause = Some(cause);
    }

    /// Layer 1: the device opens; its port (state, link, MTU, GID index) said. Whether it passed.
    fn device(&mut self, obs: &mut dyn Observer) -> bool {
        let model = ModelConfig {
            exec: ExecMode::AfterPost,
            ..Default::default()
        };
        let dev = match crate::probe::measure::session::open_device(&self.p.plan, model, obs) {
            Ok(dev) => dev,
            Err(e) => {
                self.fail(0, e.to_string(), device_cause(&e.to_string()));
                return false;
            }
        };
        let l = &mut self.rep.layers[0];
        l.status = LayerStatus::Pass;
        l.findings.push(format!("{} ({}) opened", dev.name(), dev.provider()));
        if let crate::backend::setup::Dev::Verbs { port, gid, .. } = &dev {
            self.roce = port.link_layer.contains("Ethernet");
            l.findings.push(format!(
                "port {}: {} ({}), {} link, MTU {}{}",
                port.port,
                port.state,
                port.phys_state,
                port.link_layer,
                port.active_mtu,
                gid.map(|g| format!(", GID index {g}")).unwrap_or_default()
            ));
        } else {
            l.findings
                .push("model0: the built-in software model, its port always ACTIVE".into());
        }
        true
    }

    /// Layer 2: a 1-byte SEND, then a 1-byte WRITE, completing against the peer (each backend's
    /// time said); a failure, or a peer that ends badly, names the likely cause. Whether it passed.
    fn connection(&mut self, peer: &mut Option<&mut (dyn Rendezvous + '_)>) -> bool {
        for op in [OpKind::Send, OpKind::Write] {
            let mut lp = LatPlan::new(op, 1);
            (lp.iters, lp.warmup, lp.blocks) = (1, 0, 1);
            lp.model_delay_ns = self.p.model_delay_ns;
            let r = match step(self.p, Scenario::Lat(lp), peer.as_deref_mut()) {
                Ok(r) => r,
                Err(e) => {
                    let why = cause(&e) + &firewall_hint(self.roce);
                    self.fail(1, format!("1-byte {}: {e}", op.as_str().to_uppercase()), why);
                    return false;
                }
            };
            if let Runs::Lat(rs) = &r.runs {
                for x in rs {
                    self.rep.layers[1].findings.push(format!(
                        "1-byte {} on {}: completed, {:.0} ns one-way (half the round trip of the first, cold, operation)",
                        op.as_str().to_uppercase(),
                        x.backend,
                        x.latency.p50
                    ));
                }
            }
            if r.end_error.is_some() {
                let finding = format!("the peer ended badly: {}", r.end_error.unwrap_or_default());
                self.fail(1, finding, "the peer failed after the exchange: see its output".into());
                return false;
            }
        }
        self.rep.layers[1].status = LayerStatus::Pass;
        self.rep.layers[1].findings.insert(
            0,
            match self.rep.role {
                "loopback" => "both ends in this process; both QPs in RTS (read back)".into(),
                _ => "the peer reachable out of band; both ends' QPs in RTS (read back)".into(),
            },
        );
        true
    }

    /// Layer 3: a short latency run, then a bandwidth run, against the limits (given, or from
    /// the baseline). Both steps run whatever the first's verdict, so a peer running the same
    /// ladder stays in step; a latency run that failed leaves the peer out of step, and ends it.
    fn performance(&mut self, peer: &mut Option<&mut (dyn Rendezvous + '_)>) {
        let (max_lat, min_bw) = limits(self.p);
        let mut fail = Vec::new();
        if self.latency(max_lat, peer.as_deref_mut(), &mut fail)
            && self.bandwidth(min_bw, peer.as_deref_mut(), &mut fail)
        {
            if let Some(rdv) = peer.as_deref_mut() {
                self.agree(rdv, &mut fail);
            }
        }
        let l3 = &mut self.rep.layers[2];
        if max_lat.is_none() && min_bw.is_none() && self.rep.role != "server" {
            l3.findings
                .push("no limits given (--max-lat-ns, --min-bw, --baseline): figures only".into());
        }
        if fail.is_empty() {
            l3.status = LayerStatus::Pass;
        } else {
            l3.status = LayerStatus::Fail;
            l3.findings.extend(fail);
            l3.cause = Some(
                "the path or the peer is slow: run `rdmaprobe doctor` on both hosts (CPU frequency, NUMA, PCIe width, MTU, \
                 PFC/ECN), and compare with a known-good host"
                    .into(),
            );
        }
    }

    /// Layer 3's latency step: 8-byte WRITEs, each backend's p50 against `max_lat` (what is over
    /// it into `fail`). Whether the run itself went through (the peer still in step).
    fn latency(
        &mut self,
        max_lat: Option<f64>,
        peer: Option<&mut (dyn Rendezvous + '_)>,
        fail: &mut Vec<String>,
    ) -> bool {
        let mut lp = LatPlan::new(OpKind::Write, 8);
        (lp.iters, lp.warmup, lp.blocks) = (2000, 100, 10);
        lp.model_delay_ns = self.p.model_delay_ns;
        let r = match step(self.p, Scenario::Lat(lp), peer) {
            Ok(r) => r,
            Err(e) => {
                fail.push(format!("latency run: {e}"));
                return false;
            }
        };
        if let Runs::Lat(rs) = &r.runs {
            for x in rs {
                let verdict = match max_lat {
                    Some(m) if x.latency.p50 > m => {
                        fail.push(format!(
                            "{} latency p50 {:.0} ns over the limit {m:.0} ns",
                            x.backend, x.latency.p50
                        ));
                        " (over the limit)"
                    }
                    Some(_) => " (within the limit)",
                    None => "",
                };
                self.rep.layers[2].findings.push(format!(
                    "8-byte WRITE on {}: p50 {:.0} ns, p99 {:.0} ns{verdict}",
                    x.backend, x.latency.p50, x.latency.p99
                ));
            }
        }
        true
    }

    /// Layer 3's verdicts agreed between the two ends: each sends the other what its limits
    /// failed (both steps ran on both sides, so both are in step) and takes the other's into
    /// `fail`, so that a client over its --max-lat-ns fails layer 3 on the server too.
    fn agree(&mut self, rdv: &mut (dyn Rendezvous + '_), fail: &mut Vec<String>) {
        let me = self.rep.role;
        let msg = serde_json::json!({ "ping_layer3": { "role": me, "fail": fail.clone() } });
        let theirs = rdv.send_value(msg).and_then(|_| rdv.recv_value());
        match theirs {
            Ok(v) => {
                let peer_role = v["ping_layer3"]["role"].as_str().unwrap_or("peer").to_string();
                let list = v["ping_layer3"]["fail"].as_array().cloned().unwrap_or_default();
                for f in list.iter().filter_map(|f| f.as_str()) {
                    fail.push(format!("the {peer_role}'s limits: {f}"));
                }
                self.rep.layers[2].findings.push(format!(
                    "the {peer_role}'s layer 3: {}",
                    if list.is_empty() { "pass" } else { "FAIL" }
                ));
            }
            Err(e) => fail.push(format!("the peer's layer-3 verdict did not come: {e}")),
        }
    }

    /// Layer 3's bandwidth step: 64 KiB WRITEs, each backend's average against `min_bw` (what is
    /// under it into `fail`). Whether the run itself went through.
    fn bandwidth(
        &mut self,
        min_bw: Option<f64>,
        peer: Option<&mut (dyn Rendezvous + '_)>,
        fail: &mut Vec<String>,
    ) -> bool {
        let mut bp = BwPlan::new(OpKind::Write, 65536);
        (bp.iters, bp.min_duration) = (
            2000,
            Duration::from_millis(if self.p.plan.peer == PeerSpec::Loopback { 50 } else { 0 }),
        );
        let r = match step(self.p, Scenario::Bw(bp), peer) {
            Ok(r) => r,
            Err(e) => {
                fail.push(format!("bandwidth run: {e}"));
                return false;
            }
        };
        if let Runs::Bw(rs) = &r.runs {
            for x in rs {
                let avg = x.summary.bw_avg_mib_s;
                let verdict = match min_bw {
                    Some(m) if avg < m => {
                        fail.push(format!(
                            "{} bandwidth {avg:.0} MB/s under the limit {m:.0} MB/s",
                            x.backend
                        ));
                        " (under the limit)"
                    }
                    Some(_) => " (within the limit)",
                    None => "",
                };
                self.rep.layers[2].findings.push(format!(
                    "64 KiB WRITE bandwidth on {}: {avg:.0} MB/s{verdict}",
                    x.backend
                ));
            }
        }
        true
    }
}

/// One scenario of the ladder against the same peer.
fn step(
    p: &PingPlan,
    scenario: Scenario,
    rdv: Option<&mut (dyn Rendezvous + '_)>,
) -> Result<crate::probe::Report, ProbeError> {
    let plan = Plan {
        scenario,
        diag: None,
        ..p.plan.clone()
    };
    let mut quiet = Quiet;
    match &plan.scenario {
        Scenario::PostCost(_) => Err(ProbeError::Invalid("post-cost is not a ping step".into())),
        _ => crate::probe::measure::run(&plan, rdv, &mut quiet),
    }
}

/// Layer 3's limits: given, or from the baseline's figures with the tolerance.
fn limits(p: &PingPlan) -> (Option<f64>, Option<f64>) {
    let mut lat = p.max_lat_ns;
    let mut bw = p.min_bw_mib_s;
    if let Some(doc) = &p.baseline {
        let runs = doc["runs"].as_array().cloned().unwrap_or_default();
        let t = p.tolerance_pct / 100.0;
        let lat_base = runs
            .iter()
            .filter(|r| r["scenario"] == "lat" && r["op"] == "write")
            .filter_map(|r| r["latency_ns"]["p50"].as_f64())
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        let bw_base = runs
            .iter()
            .filter(|r| r["scenario"] == "bw" && r["op"] == "write")
            .filter_map(|r| r["summary"]["bw_avg_mib_s"].as_f64())
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.min(v))));
        lat = lat.or(lat_base.map(|v| v * (1.0 + t)));
        bw = bw.or(bw_base.map(|v| v * (1.0 - t)));
    }
    (lat, bw)
}

/// On RoCE: this host's nftables rules that drop RoCE v2 (UDP 4791), said after a connection
/// failure (empty when there are none, they cannot be read, or the link is not Ethernet).
fn firewall_hint(roce: bool) -> String {
    if !roce {
        return String::new();
    }
    let Some(rules) = super::doctor::nft_ruleset() else {
        return String::new();
    };
    firewall_text(&rules)
}

fn firewall_text(rules: &str) -> String {
    let bad = super::doctor::drops_4791(rules);
    if bad.is_empty() {
        String::new()
    } else {
        format!(
            "; this host's nftables drops RoCE v2 (UDP 4791): {} (remove it, or accept udp dport 4791 before it)",
            bad.join(" | ")
        )
    }
}

fn device_cause(e: &str) -> String {
    if e.contains("not ACTIVE") {
        "the port is down: check the cable and switch port; RoCE: `ip link set NETDEV up`; InfiniBand: a subnet manager"
            .into()
    } else if e.contains("GID index") || e.contains("GID table") {
        "the GID index (-x) names no usable entry: `rdmaprobe devices` shows the RoCE v2 entry of the netdev's address"
            .into()
    } else if e.contains("not found") || e.contains("unknown device") {
        "no such device: `rdmaprobe devices` lists them".into()
    } else {
        "the device cannot be used: see `rdmaprobe devices` and `rdmaprobe doctor`".into()
    }
}

/// The likely cause of a connection failure, from the error.
pub fn cause(e: &ProbeError) -> String {
    let text = e.to_string();
    match e {
        ProbeError::Bundled { source, .. } => cause(source),
        ProbeError::Oob(OobError::Io { what, .. }) if what.starts_with("connecting") || what.starts_with("resolving") => {
            "the peer is unreachable: is `rdmaprobe ping` running there (as server), the TCP port (-p) open, the address right?".into()
        }
        ProbeError::Oob(OobError::Protocol { why, .. }) if why.starts_with("interrupted while retrying the connection") => {
            "stopped (a signal) before the peer answered: is `rdmaprobe ping` running there (as server), the TCP port (-p) \
             open, the address right?"
                .into()
        }
        ProbeError::Oob(OobError::Io { .. }) | ProbeError::Oob(OobError::Timeout { .. }) => {
            "the peer did not answer out of band in time: a firewall, or the peer stopped".into()
        }
        ProbeError::Oob(OobError::Mismatch { .. }) => "the two ends were started with different parameters".into(),
        _ if matches!(e, ProbeError::Scenario(ScenarioError::Stalled { .. })) || text.contains("no progress for") => {
            "nothing came back: the peer stopped, or packets do not reach it (firewall on UDP 4791, wrong GID, MTU)".into()
        }
        _ if text.contains("REMOTE_ACCESS") => {
            "the peer refused the access: a wrong rkey or address, or memory not registered for remote write".into()
        }
        _ if text.contains("TRANSPORT_RETRY_EXC") => {
            "the peer never acknowledged: its QP is in error or gone, or packets do not reach it (UDP 4791, GID, MTU)".into()
        }
        _ if text.contains("RNR_RETRY_EXC") => "the peer posted no receive for the SEND".into(),
        _ if text.contains("modify_qp(RTR)") => {
            "the path to the peer cannot be set up: a wrong GID index (-x) on one end (both ends need GIDs of one type \
             and family: `rdmaprobe devices` shows the RoCE v2 entry of each netdev's address), a destination the route \
             cannot reach, or an MTU the port does not allow"
                .into()
        }
        _ if text.contains("is not a QP of model0") || text.contains("own QP") => {
            "the peer named a QP that is not its own: a wrong or forged QP address".into()
        }
        _ => "see the error above; `rdmaprobe doctor` on both hosts".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_come_from_the_baseline_with_the_tolerance() {
        let doc = serde_json::json!({"runs": [
            {"scenario": "lat", "op": "write", "latency_ns": {"p50": 200.0}},
            {"scenario": "lat", "op": "write", "latency_ns": {"p50": 250.0}},
            {"scenario": "bw", "op": "write", "summary": {"bw_avg_mib_s": 1000.0}},
        ]});
        let p = PingPlan {
            plan: Plan::loopback(Scenario::Lat(LatPlan::new(OpKind::Write, 8))),
            max_lat_ns: None,
            min_bw_mib_s: None,
            baseline: Some(doc),
            tolerance_pct: 20.0,
            model_delay_ns: None,
        };
        let (l, b) = limits(&p);
        assert_eq!((l.map(|v| v.round()), b.map(|v| v.round())), (Some(300.0), Some(800.0)));
    }

    #[test]
    fn a_stall_names_the_firewall_rule_that_drops_roce() {
        let stalled = ProbeError::Bundled {
            source: Box::new(ProbeError::Peer(
                "client: no progress for 10s at operation 0 (the server's SEND)".into(),
            )),
            note: "",
            dir: "/tmp/x".into(),
        };
        assert!(cause(&stalled).contains("firewall on UDP 4791"), "{}", cause(&stalled));
        let rtr = ProbeError::Peer("ibv_modify_qp(RTR) failed on device rxe1 port 1 QP 0x15: Invalid argument".into());
        assert!(cause(&rtr).starts_with("the path to the peer cannot be set up: a wrong GID index"));
        let rules = "table inet f {\n\tchain in {\n\t\ttype filter hook input priority filter; policy accept;\n\t\tudp dport 4791 drop\n\t}\n}\n";
        assert_eq!(
            firewall_text(rules),
            "; this host's nftables drops RoCE v2 (UDP 4791): udp dport 4791 drop (remove it, or accept udp dport 4791 before it)"
        );
        assert_eq!(firewall_text("table inet f {\n\tudp dport 22 drop\n}"), "");
        assert_eq!(firewall_hint(false), "");
    }
}

//! A fleet run's directory read and checked: the plan, the doctors' reports, the pairs. The
//! directory is filled by the nodes' results (and so by whoever can write there): every file is
//! read through [`Dir`] (regular files only, never through a symlink, each at most
//! [`MAX_FLEET_FILE_BYTES`]), so nothing outside the directory reaches the report and nothing
//! there can block or exhaust the reader.

use crate::report::read::{self, Dir};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The largest file of a fleet run read: 16 MiB (a doctor report takes a few KiB, a pair's short
/// lat or bw result some tens).
pub const MAX_FLEET_FILE_BYTES: u64 = 16 << 20;

/// A fleet directory that cannot be read as one.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// A file could not be read or parsed.
    #[error("{path}: {why}")]
    Bad {
        /// The file.
        path: String,
        /// Why.
        why: String,
    },
}

/// One pair's run, as read.
#[derive(Debug, Clone, Default)]
pub struct PairIn {
    /// The node that ran the servers.
    pub server: String,
    /// The node that ran the clients.
    pub client: String,
    /// Why the pair did not run (a node unreachable), when it did not.
    pub skipped: Option<String>,
    /// Exit statuses of the client's ping, lat and bw (`None`: not run or unreachable).
    pub rc: [Option<i64>; 3],
    /// Exit statuses of the server's ping, lat and bw.
    pub server_rc: [Option<i64>; 3],
    /// The server's and the client's ping reports.
    pub ping: [Option<Value>; 2],
    /// The client's lat and bw result documents.
    pub lat: Option<Value>,
    /// See `lat`.
    pub bw: Option<Value>,
}

/// A fleet run, as read.
#[derive(Debug, Clone, Default)]
pub struct FleetIn {
    /// Every node of the inventory, in its order.
    pub nodes: Vec<String>,
    /// `reference`, `ring` or `all`.
    pub pairing: String,
    /// The reference node of a `reference` plan.
    pub reference: Option<String>,
    /// The nodes that answered (the others were unreachable or failed before the doctor ran).
    pub reachable: Vec<String>,
    /// Each reachable node's doctor report and exit status.
    pub doctor: BTreeMap<String, (Option<Value>, Option<i64>)>,
    /// What doctor said on standard error, per node (why a report is missing).
    pub doctor_error: BTreeMap<String, String>,
    /// The pairs.
    pub pairs: Vec<PairIn>,
}

/// The JSON file `name` in `dir`; `None` when there is none.
fn read_json(dir: &Dir, name: &str) -> Result<Option<Value>, FleetError> {
    match dir.file(name, MAX_FLEET_FILE_BYTES)? {
        Some(b) => serde_json::from_slice(&b)
            .map(Some)
            .map_err(|e| FleetError::at(&dir.path().join(name), format!("not JSON: {e}"))),
        None => Ok(None),
    }
}

/// The directory `name` in `dir` (never a symlink); `None` when there is none.
fn sub(dir: Option<&Dir>, name: &str) -> Result<Option<Dir>, FleetError> {
    match dir {
        Some(d) => Ok(d.dir(name)?),
        None => Ok(None),
    }
}

impl From<read::ReadError> for FleetError {
    fn from(e: read::ReadError) -> Self {
        FleetError::Bad {
            path: e.path,
            why: e.why,
        }
    }
}

fn names(v: &Value, field: &str, path: &Path) -> Result<Vec<String>, FleetError> {
    let bad = |why: String| FleetError::at(path, why);
    let a = v[field]
        .as_array()
        .ok_or_else(|| bad(format!("'{field}' must be a list of node names")))?;
    a.iter()
        .map(|n| {
            n.as_str()
                .filter(|s| {
                    !s.is_empty()
                        && s.len() <= 255
                        && !s.contains(['/', '\\'])
                        && !s.chars().any(|c| c.is_control() || crate::oob::invisible(c))
                        && *s != "."
                        && *s != ".."
                })
                .map(str::to_string)
                .ok_or_else(|| bad(format!("'{field}' holds {n}, not a node name")))
        })
        .collect()
}

/// Reads a fleet directory (see the module's documentation).
pub fn load(dir: &Path) -> Result<FleetIn, FleetError> {
    let top = Dir::open(dir)?;
    let (plan, mut f) = read_plan(&top)?;
    read_doctors(&top, &plan, &mut f)?;
    if let Some(pairs) = top.dir("pairs")? {
        for name in pairs.subdirs()? {
            if let Some(pair) = read_pair(&pairs, &name, &f)? {
                f.pairs.push(pair);
            }
        }
    }
    Ok(f)
}

impl FleetError {
    fn at(path: &Path, why: String) -> Self {
        FleetError::Bad {
            path: path.display().to_string(),
            why,
        }
    }
}

/// `fleet.json` (in `dir`) read and checked: the document, and the run with its nodes, those
/// that answered, the pairing and the reference (no doctor and no pair yet).
fn read_plan(dir: &Dir) -> Result<(Value, FleetIn), FleetError> {
    let top = &dir.path().join("fleet.json");
    let plan = read_json(dir, "fleet.json")?.ok_or_else(|| {
        FleetError::at(
            top,
            "missing: not a fleet run's directory (the playbook writes it first)".into(),
        )
    })?;
    let nodes = names(&plan, "nodes", top)?;
    if nodes.is_empty() {
        return Err(FleetError::at(top, "no nodes".into()));
    }
    let reachable = names(&plan, "reachable", top)?;
    let bad = |why: String| FleetError::at(top, why);
    if let Some(n) = reachable.iter().find(|n| !nodes.contains(n)) {
        return Err(bad(format!("'reachable' names '{n}', which is not in 'nodes'")));
    }
    let pairing = plan["pairing"].as_str().unwrap_or("").to_string();
    if !["reference", "ring", "all"].contains(&pairing.as_str()) {
        return Err(bad(format!("'pairing' is '{pairing}', not reference, ring or all")));
    }
    let reference = plan["reference"].as_str().map(str::to_string);
    if pairing == "reference" && !reference.as_ref().is_some_and(|r| nodes.contains(r)) {
        return Err(bad("a reference plan needs 'reference', one of 'nodes'".into()));
    }
    let f = FleetIn {
        nodes,
        pairing,
        reference,
        reachable,
        ..Default::default()
    };
    Ok((plan, f))
}

/// Each node's doctor report (`nodes/NODE/doctor.json`), its exit status and what it said on
/// standard error (from the plan).
fn read_doctors(dir: &Dir, plan: &Value, f: &mut FleetIn) -> Result<(), FleetError> {
    let nodes = dir.dir("nodes")?;
    for n in &f.nodes {
        let doc = match sub(nodes.as_ref(), n)? {
            Some(d) => read_json(&d, "doctor.json")?,
            None => None,
        };
        let rc = plan["doctor_rc"][n].as_i64();
        f.doctor.insert(n.clone(), (doc, rc));
        if let Some(e) = plan["doctor_error"][n].as_str().filter(|e| !e.trim().is_empty()) {
            f.doctor_error.insert(n.clone(), e.trim().to_string());
        }
    }
    Ok(())
}

/// The pair's directory `name` in `pairs` read (the directories there, in name order: anything
/// else, a README or a stray file, is not a pair's), its status checked against the run `f` so
/// far (its nodes, the pairs already read); `None` when it is not a pair's (no status.json).
fn read_pair(pairs: &Dir, name: &str, f: &FleetIn) -> Result<Option<PairIn>, FleetError> {
    let Some(p) = pairs.dir(name)? else { return Ok(None) };
    let p = &p;
    let sp = p.path().join("status.json");
    let Some(st) = read_json(p, "status.json")? else {
        return Ok(None);
    };
    let (Some(server), Some(client)) = (st["server"].as_str(), st["client"].as_str()) else {
        return Err(FleetError::at(&sp, "needs 'server' and 'client'".into()));
    };
    check_pair(server, client, f).map_err(|why| FleetError::at(&sp, why))?;
    let skipped = st["skipped"].as_str().filter(|s| !s.is_empty()).map(str::to_string);
    let rc = |k: &str| st[k].as_i64();
    let src = |k: &str| st["server_rc"][k].as_i64();
    Ok(Some(PairIn {
        server: server.into(),
        client: client.into(),
        skipped,
        rc: [rc("ping_rc"), rc("lat_rc"), rc("bw_rc")],
        server_rc: [src("ping"), src("lat"), src("bw")],
        ping: [read_json(p, "ping-server.json")?, read_json(p, "ping-client.json")?],
        lat: read_json(p, "lat.json")?,
        bw: read_json(p, "bw.json")?,
    }))
}

/// Why a pair's status cannot be one of the run `f`: a node not in it, one node at both ends,
/// or a pair read already.
fn check_pair(server: &str, client: &str, f: &FleetIn) -> Result<(), String> {
    for n in [server, client] {
        if !f.nodes.iter().any(|m| m == n) {
            return Err(format!("node '{n}' is not in fleet.json's nodes"));
        }
    }
    if server == client {
        return Err(format!("server and client are the same node '{server}'"));
    }
    if f.pairs
        .iter()
        .any(|q| (q.server == server && q.client == client) || (q.server == client && q.client == server))
    {
        return Err(format!(
            "the pair {server}--{client} appears twice (a copied directory?)"
        ));
    }
    Ok(())
}

/// The pairs a plan runs (server, client), as the playbook makes them.
pub fn planned_pairs(f: &FleetIn) -> Vec<(String, String)> {
    let n = &f.nodes;
    match f.pairing.as_str() {
        "reference" => {
            let r = f.reference.clone().unwrap_or_default();
            n.iter().filter(|x| **x != r).map(|x| (r.clone(), x.clone())).collect()
        }
        "ring" => {
            let mut out: Vec<(String, String)> = Vec::new();
            for i in 0..n.len() {
                let (a, b) = (n[i].clone(), n[(i + 1) % n.len()].clone());
                // two nodes make one pair, not the same pair twice
                if a != b && !out.contains(&(b.clone(), a.clone())) {
                    out.push((a, b));
                }
            }
            out
        }
        "all" => (0..n.len())
            .flat_map(|i| (i + 1..n.len()).map(move |j| (i, j)))
            .map(|(i, j)| (n[i].clone(), n[j].clone()))
            .collect(),
        _ => Vec::new(),
    }
}

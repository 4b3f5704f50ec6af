//! The suite's matrix as the user names it: command-line flags, a TOML file (`--matrix`), or
//! both (a flag wins over the file's key of the same name). What is not named keeps the
//! default of the full or the quick matrix.

use crate::backend::{BackendKind, OpKind, Transport};
use crate::probe::KvThreads;
use std::time::Duration;

/// A part of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// Latency ping-pong.
    Lat,
    /// Bandwidth.
    Bw,
    /// The post call's cost.
    PostCost,
    /// The key-value workload (HERD over MICA stores), both sides in this process.
    Kv,
}

impl Part {
    /// The name on the command line and in the file.
    pub fn as_str(self) -> &'static str {
        match self {
            Part::Lat => "lat",
            Part::Bw => "bw",
            Part::PostCost => "post-cost",
            Part::Kv => "kv",
        }
    }
}

/// The matrix the user asked for (each `None`: the default).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MatrixSpec {
    /// The parts that run (default: all four).
    pub parts: Option<Vec<Part>>,
    /// Latency operations (default send, write, read, atomic).
    pub lat_ops: Option<Vec<OpKind>>,
    /// Bandwidth operations (default write, send).
    pub bw_ops: Option<Vec<OpKind>>,
    /// Latency message sizes (atomics always 8).
    pub lat_sizes: Option<Vec<u32>>,
    /// Bandwidth message sizes (atomics always 8).
    pub bw_sizes: Option<Vec<u32>>,
    /// Latency iterations per size and backend.
    pub iters: Option<u64>,
    /// Each latency point runs this long (blocks of 1000 per backend, interleaved), and each
    /// bandwidth point at least this long; instead of `iters` and `bw_min_ms`.
    pub duration: Option<Duration>,
    /// The backends (default: every one the device runs).
    pub backends: Option<Vec<BackendKind>>,
    /// Bandwidth QPs per thread (default 1).
    pub qps: Option<u64>,
    /// Bandwidth threads (default 1).
    pub threads: Option<u64>,
    /// Bandwidth messages per point before a run is sized to the minimum duration.
    pub bw_messages: Option<u64>,
    /// Shortest bandwidth run, ms.
    pub bw_min_ms: Option<u64>,
    /// Post-cost blocks per configuration.
    pub post_cost_blocks: Option<u64>,
    /// The transports the latency and bandwidth parts run on (default RC).
    pub transports: Option<Vec<Transport>>,
    /// The key-value part's client counts (a point each).
    pub kv_clients: Option<Vec<u32>>,
    /// The key-value part's windows (a point each, with every client count).
    pub kv_windows: Option<Vec<u32>>,
    /// Requests per client of each key-value point.
    pub kv_requests: Option<u64>,
    /// How the key-value points step their clients and workers (default: one thread).
    pub kv_threads: Option<KvThreads>,
    /// Keys in each store of a key-value point.
    pub kv_keys: Option<u32>,
}

/// The largest matrix file read, bytes (a matrix is a few keys).
pub const MAX_FILE: u64 = 1 << 20;

/// The shortest `-D` (a point shorter than a block of 1000 iterations measures nothing).
pub const MIN_DURATION_S: f64 = 0.01;

/// The largest message the suite sends (as `lat -s`).
pub const MAX_SIZE: u32 = 8 * 1024 * 1024;

impl MatrixSpec {
    /// `self` (the command line) over `file`: each field the command line names wins.
    pub fn over(self, file: MatrixSpec) -> MatrixSpec {
        // the run's length is one choice: -D on the command line replaces the file's counts,
        // and -n or --bw-min-ms there replace its duration
        let file = if self.duration.is_some() {
            MatrixSpec {
                iters: None,
                bw_min_ms: None,
                ..file
            }
        } else if self.iters.is_some() || self.bw_min_ms.is_some() {
            MatrixSpec { duration: None, ..file }
        } else {
            file
        };
        MatrixSpec {
            parts: self.parts.or(file.parts),
            lat_ops: self.lat_ops.or(file.lat_ops),
            bw_ops: self.bw_ops.or(file.bw_ops),
            lat_sizes: self.lat_sizes.or(file.lat_sizes),
            bw_sizes: self.bw_sizes.or(file.bw_sizes),
            iters: self.iters.or(file.iters),
            duration: self.duration.or(file.duration),
            backends: self.backends.or(file.backends),
            qps: self.qps.or(file.qps),
            threads: self.threads.or(file.threads),
            bw_messages: self.bw_messages.or(file.bw_messages),
            bw_min_ms: self.bw_min_ms.or(file.bw_min_ms),
            post_cost_blocks: self.post_cost_blocks.or(file.post_cost_blocks),
            transports: self.transports.or(file.transports),
            kv_clients: self.kv_clients.or(file.kv_clients),
            kv_windows: self.kv_windows.or(file.kv_windows),
            kv_requests: self.kv_requests.or(file.kv_requests),
            kv_threads: self.kv_threads.or(file.kv_threads),
            kv_keys: self.kv_keys.or(file.kv_keys),
        }
    }

    /// Checks what no single value shows: `duration` with `iters` or `bw_min_ms`.
    pub fn check(&self) -> Result<(), String> {
        if self.duration.is_some() {
            if self.iters.is_some() {
                return Err("-D/--duration and -n/--iters (or the file's duration_s and iters) name the latency run's length twice: give one".into());
            }
            if self.bw_min_ms.is_some() {
                return Err("-D/--duration and --bw-min-ms (or the file's duration_s and bw_min_ms) name the bandwidth run's length twice: give one".into());
            }
        }
        Ok(())
    }

    /// Reads the matrix file `path` ([`MatrixSpec::from_toml`]): a regular file (not a FIFO, a
    /// device, a directory: refused before any read) of at most [`MAX_FILE`] bytes, UTF-8.
    pub fn read(path: &std::path::Path) -> Result<MatrixSpec, String> {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        // never blocked on a FIFO's open: its type is checked first
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| e.to_string())?;
        let meta = f.metadata().map_err(|e| e.to_string())?;
        if !meta.file_type().is_file() {
            return Err("not a regular file".into());
        }
        if meta.len() > MAX_FILE {
            return Err(format!(
                "{} bytes: a matrix file is at most {} KiB",
                meta.len(),
                MAX_FILE >> 10
            ));
        }
        let mut text = Vec::new();
        // the file may grow meanwhile: never more than the bound is read
        f.take(MAX_FILE + 1).read_to_end(&mut text).map_err(|e| e.to_string())?;
        if text.len() as u64 > MAX_FILE {
            return Err(format!("a matrix file is at most {} KiB", MAX_FILE >> 10));
        }
        let text = String::from_utf8(text).map_err(|e| format!("not UTF-8 text ({e})"))?;
        MatrixSpec::from_toml(&text)
    }

    /// Reads a matrix file (TOML): keys `parts`, `ops` (both), `lat_ops`, `bw_ops`, `sizes`
    /// (both), `lat_sizes`, `bw_sizes`, `iters`, `duration_s`, `backends`, `transports`, `qps`, `threads`,
    /// `bw_messages`, `bw_min_ms`, `post_cost_blocks`, `kv_clients`, `kv_windows`,
    /// `kv_requests`, `kv_threads`, `kv_keys`. Sizes are numbers or strings as on the
    /// command line (`"64K"`, `"8-4M"`); an unknown key or a bad value is an error naming it.
    pub fn from_toml(text: &str) -> Result<MatrixSpec, String> {
        // the parser's message shows the line it stopped at: cut, as every quoted value
        let t: toml::Table = text.parse().map_err(|e: toml::de::Error| cut_lines(&e.to_string()))?;
        let mut m = MatrixSpec::default();
        let mut both_ops = None;
        let mut both_sizes = None;
        for (k, v) in &t {
            let bad = |what: &str| format!("key `{k}`: {what}");
            match k.as_str() {
                "parts" => m.parts = Some(parse_parts(&strings(v).map_err(|e| bad(&e))?.join(",")).map_err(|e| bad(&e))?),
                "ops" | "lat_ops" | "bw_ops" => {
                    let ops = parse_ops(&strings(v).map_err(|e| bad(&e))?.join(",")).map_err(|e| bad(&e))?;
                    match k.as_str() {
                        "ops" => both_ops = Some(ops),
                        "lat_ops" => m.lat_ops = Some(ops),
                        _ => m.bw_ops = Some(ops),
                    }
                }
                "sizes" | "lat_sizes" | "bw_sizes" => {
                    let sizes = toml_sizes(v).map_err(|e| bad(&e))?;
                    match k.as_str() {
                        "sizes" => both_sizes = Some(sizes),
                        "lat_sizes" => m.lat_sizes = Some(sizes),
                        _ => m.bw_sizes = Some(sizes),
                    }
                }
                "transports" => {
                    m.transports = Some(parse_transports(&strings(v).map_err(|e| bad(&e))?.join(",")).map_err(|e| bad(&e))?)
                }
                "backends" => m.backends = Some(parse_backends(&strings(v).map_err(|e| bad(&e))?.join(",")).map_err(|e| bad(&e))?),
                "duration_s" => m.duration = Some(toml_seconds(v).map_err(|e| bad(&e))?),
                "iters" => m.iters = Some(int(v, 10, 100_000_000).map_err(|e| bad(&e))?),
                "qps" => m.qps = Some(int(v, 1, 16384).map_err(|e| bad(&e))?),
                "threads" => m.threads = Some(int(v, 1, crate::probe::MAX_THREADS).map_err(|e| bad(&e))?),
                "bw_messages" => m.bw_messages = Some(int(v, 1, 1_000_000_000).map_err(|e| bad(&e))?),
                "bw_min_ms" => m.bw_min_ms = Some(int(v, 0, 3_600_000).map_err(|e| bad(&e))?),
                "post_cost_blocks" => m.post_cost_blocks = Some(int(v, 1, 10_000_000).map_err(|e| bad(&e))?),
                "kv_clients" => m.kv_clients = Some(toml_counts(v, MAX_KV_CLIENTS).map_err(|e| bad(&e))?),
                "kv_windows" => m.kv_windows = Some(toml_counts(v, MAX_KV_WINDOW).map_err(|e| bad(&e))?),
                "kv_requests" => m.kv_requests = Some(int(v, 1, MAX_KV_REQUESTS).map_err(|e| bad(&e))?),
                "kv_keys" => m.kv_keys = Some(int(v, 1, u64::from(MAX_KV_KEYS)).map_err(|e| bad(&e))? as u32),
                "kv_threads" => {
                    let t = v.as_str().ok_or_else(|| bad("one or per-role"))?;
                    m.kv_threads = Some(parse_kv_threads(t).map_err(|e| bad(&e))?)
                }
                _ => {
                    return Err(format!(
                        "unknown key `{}` (the keys: parts, ops, lat_ops, bw_ops, sizes, lat_sizes, bw_sizes, iters, duration_s, backends, transports, qps, threads, bw_messages, bw_min_ms, post_cost_blocks, kv_clients, kv_windows, kv_requests, kv_threads, kv_keys)",
                        quote(k)
                    ))
                }
            }
        }
        m.lat_ops = m.lat_ops.or(both_ops.clone());
        m.bw_ops = m.bw_ops.or(both_ops);
        m.lat_sizes = m.lat_sizes.or(both_sizes.clone());
        m.bw_sizes = m.bw_sizes.or(both_sizes);
        m.check()?;
        Ok(m)
    }
}

/// A value from the file or the command line as an error quotes it: its first 200 characters,
/// control characters escaped (as a peer's text is shown: a value of megabytes is not echoed).
fn quote(x: &str) -> String {
    crate::oob::escape(x)
}

/// A multi-line message (the TOML parser's, which shows the line it stopped at) with each line
/// cut as [`quote`] cuts, and at most 12 lines.
fn cut_lines(s: &str) -> String {
    s.lines().take(12).map(quote).collect::<Vec<_>>().join("\n")
}

/// A file's value as the command line's list: a number (or a string, where `strings` allows
/// them), or a list of them, joined with commas; `what` is the error otherwise.
fn toml_list(v: &toml::Value, strings: bool, what: &str) -> Result<String, String> {
    let items = match v {
        toml::Value::Array(a) => a.iter().collect::<Vec<_>>(),
        x => vec![x],
    };
    let mut text = Vec::new();
    for x in items {
        match x {
            toml::Value::Integer(n) => text.push(n.to_string()),
            toml::Value::String(s) if strings => text.push(s.clone()),
            _ => return Err(what.to_string()),
        }
    }
    Ok(text.join(","))
}

/// A file's sizes: a number, a string as on the command line (`"64K"`, `"8-4M"`), or a list of
/// them.
fn toml_sizes(v: &toml::Value) -> Result<Vec<u32>, String> {
    parse_sizes(&toml_list(
        v,
        true,
        "sizes are numbers or strings such as \"64K\" or \"8-4M\"",
    )?)
}

/// A file's counts: a whole number or a list of them, each 1 to `max`.
fn toml_counts(v: &toml::Value, max: u32) -> Result<Vec<u32>, String> {
    parse_counts(&toml_list(v, false, &format!("whole numbers from 1 to {max}"))?, max)
}

/// A file's duration: seconds, a whole or a decimal number from [`MIN_DURATION_S`] to a day.
fn toml_seconds(v: &toml::Value) -> Result<Duration, String> {
    let s = match v {
        toml::Value::Integer(n) => *n as f64,
        toml::Value::Float(f) => *f,
        _ => return Err("a number of seconds".into()),
    };
    if !(s.is_finite() && (MIN_DURATION_S..=86_400.0).contains(&s)) {
        return Err("seconds from 0.01 to 86400".into());
    }
    Ok(Duration::from_secs_f64(s))
}

fn strings(v: &toml::Value) -> Result<Vec<String>, String> {
    let items = match v {
        toml::Value::Array(a) => a.iter().collect::<Vec<_>>(),
        x => vec![x],
    };
    items
        .into_iter()
        .map(|x| {
            x.as_str()
                .map(str::to_string)
                .ok_or_else(|| "a list of strings".to_string())
        })
        .collect()
}

fn int(v: &toml::Value, lo: u64, hi: u64) -> Result<u64, String> {
    match v.as_integer() {
        Some(n) if n >= 0 && (lo..=hi).contains(&(n as u64)) => Ok(n as u64),
        _ => Err(format!("a whole number from {lo} to {hi}")),
    }
}

fn list(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').map(str::trim)
}

/// A list of names from `table` (in any order, each once): `'x' is not {what} ({shown})` for a
/// name it does not hold.
fn parse_named<T: Copy + PartialEq>(s: &str, table: &[(&str, T)], what: &str, shown: &str) -> Result<Vec<T>, String> {
    let mut v = Vec::new();
    for x in list(s) {
        let Some(&(_, t)) = table.iter().find(|(n, _)| *n == x) else {
            return Err(format!("'{}' is not {what} ({shown})", quote(x)));
        };
        if v.contains(&t) {
            return Err(format!("'{}' is named twice", quote(x)));
        }
        v.push(t);
    }
    Ok(v)
}

/// `lat,bw,post-cost,kv` (any of them, in any order; each once).
pub fn parse_parts(s: &str) -> Result<Vec<Part>, String> {
    let table = [
        ("lat", Part::Lat),
        ("bw", Part::Bw),
        ("post-cost", Part::PostCost),
        ("post_cost", Part::PostCost),
        ("kv", Part::Kv),
    ];
    parse_named(s, &table, "a part of the suite", "lat, bw, post-cost, kv")
}

/// The most clients a key-value point runs (the suite's own bound: a client is a thread).
pub const MAX_KV_CLIENTS: u32 = 64;

/// The largest key-value window a point takes (what `kv --window` takes: a client keeps two
/// windows of receives posted on its queue).
pub const MAX_KV_WINDOW: u32 = crate::backend::setup::DEPTH / 2;

/// The most keys a key-value point's store holds (MICA's index, as `kv --keys`).
pub const MAX_KV_KEYS: u32 = 16 << 20;

/// The most requests per client of a key-value point.
pub const MAX_KV_REQUESTS: u64 = 100_000_000;

/// `one` or `per-role`: how a key-value point steps its clients and workers.
pub fn parse_kv_threads(s: &str) -> Result<KvThreads, String> {
    match s.trim() {
        "one" => Ok(KvThreads::One),
        "per-role" | "per_role" => Ok(KvThreads::PerRole),
        x => Err(format!("'{}' is not one or per-role", quote(x))),
    }
}

/// Counts: `1,2,4` (whole numbers 1 to `max`; sorted, each once).
pub fn parse_counts(s: &str, max: u32) -> Result<Vec<u32>, String> {
    let mut v = Vec::new();
    for x in list(s) {
        match x.parse::<u32>() {
            Ok(n) if (1..=max).contains(&n) => v.push(n),
            _ => return Err(format!("'{}' is not a whole number from 1 to {max}", quote(x))),
        }
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// `send,write,read,atomic,cmp_swap,write_imm,send_imm` (`atomic` and `fetch_add` are
/// fetch-and-add).
pub fn parse_ops(s: &str) -> Result<Vec<OpKind>, String> {
    let table = [
        ("send", OpKind::Send),
        ("write", OpKind::Write),
        ("read", OpKind::Read),
        ("atomic", OpKind::FetchAdd),
        ("fetch_add", OpKind::FetchAdd),
        ("cmp_swap", OpKind::CmpSwap),
        ("write_imm", OpKind::WriteImm),
        ("send_imm", OpKind::SendImm),
    ];
    parse_named(
        s,
        &table,
        "an operation",
        "send, write, read, atomic, cmp_swap, write_imm, send_imm",
    )
}

/// `RC,UC,UD` (perftest's names; lower case too).
pub fn parse_transports(s: &str) -> Result<Vec<Transport>, String> {
    let table = [
        ("RC", Transport::Rc),
        ("rc", Transport::Rc),
        ("UC", Transport::Uc),
        ("uc", Transport::Uc),
        ("UD", Transport::Ud),
        ("ud", Transport::Ud),
    ];
    parse_named(s, &table, "a transport", "RC, UC, UD")
}

/// `verbs,wr,direct`.
pub fn parse_backends(s: &str) -> Result<Vec<BackendKind>, String> {
    let table = [
        ("verbs", BackendKind::Verbs),
        ("wr", BackendKind::Wr),
        ("direct", BackendKind::Direct),
    ];
    parse_named(s, &table, "a backend", "verbs, wr, direct")
}

/// Sizes: `8,64,4K,1M` (K and M are 1024 and 1024²), and `A-B`: the powers of two from A to B
/// (A and B powers of two). Sorted, each once, 1 B to 8 MiB.
pub fn parse_sizes(s: &str) -> Result<Vec<u32>, String> {
    let mut v = Vec::new();
    for x in list(s) {
        if let Some((a, b)) = x.split_once('-') {
            let (a, b) = (one_size(a)?, one_size(b)?);
            if !a.is_power_of_two() || !b.is_power_of_two() || a > b {
                return Err(format!(
                    "'{}': a range is two powers of two, the smaller first (as 8-4M)",
                    quote(x)
                ));
            }
            let mut s = a;
            while s <= b {
                v.push(s);
                s *= 2;
            }
        } else {
            v.push(one_size(x)?);
        }
    }
    v.sort_unstable();
    v.dedup();
    Ok(v)
}

/// Parses one size: bytes, or with K or M (`64K`, `1M`), 1 B to 8 MiB.
pub fn one_size(x: &str) -> Result<u32, String> {
    let x = x.trim();
    let (num, mul) = match x.char_indices().last() {
        Some((i, 'K' | 'k')) => (&x[..i], 1024u64),
        Some((i, 'M' | 'm')) => (&x[..i], 1024 * 1024),
        _ => (x, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{}' is not a size (bytes, or with K or M: 64K, 1M)", quote(x)))?;
    match n.checked_mul(mul) {
        Some(b) if (1..=u64::from(MAX_SIZE)).contains(&b) => Ok(b as u32),
        _ => Err(format!("'{}': sizes are 1 B to 8M", quote(x))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_lists_ranges_and_suffixes() {
        assert_eq!(parse_sizes("8,64,4K").unwrap(), vec![8, 64, 4096]);
        assert_eq!(parse_sizes("1M, 8").unwrap(), vec![8, 1 << 20]);
        assert_eq!(parse_sizes("8-64").unwrap(), vec![8, 16, 32, 64]);
        assert_eq!(parse_sizes("4K-16K,4096,2").unwrap(), vec![2, 4096, 8192, 16384]);
        assert_eq!(parse_sizes("8M").unwrap(), vec![8 << 20]);
        for bad in ["0", "16M", "x", "", "8-7", "3-8", "64-8", "4G", "-1", "1.5K"] {
            assert!(parse_sizes(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn ops_backends_parts_refuse_unknown_and_repeats() {
        assert_eq!(
            parse_ops("write,atomic").unwrap(),
            vec![OpKind::Write, OpKind::FetchAdd]
        );
        assert_eq!(parse_ops("cmp_swap").unwrap(), vec![OpKind::CmpSwap]);
        assert!(parse_ops("write,write").unwrap_err().contains("twice"));
        assert!(parse_ops("put").unwrap_err().contains("'put'"));
        assert_eq!(
            parse_backends("direct,verbs").unwrap(),
            vec![BackendKind::Direct, BackendKind::Verbs]
        );
        assert!(parse_backends("mlx5").is_err());
        assert_eq!(parse_parts("bw,lat").unwrap(), vec![Part::Bw, Part::Lat]);
        assert_eq!(parse_parts("kv,post_cost").unwrap(), vec![Part::Kv, Part::PostCost]);
        assert!(parse_parts("latency").is_err());
        assert!(parse_parts("kv,kv").unwrap_err().contains("twice"));
    }

    /// The key-value part's counts: sorted, each once, 1 to the bound; its threads by name.
    #[test]
    fn kv_counts_and_threads() {
        assert_eq!(parse_counts("4, 1,2,4", 64).unwrap(), vec![1, 2, 4]);
        for bad in ["0", "65", "x", "", "-1", "1.5", "1,,2"] {
            let e = parse_counts(bad, 64).unwrap_err();
            assert!(e.contains("a whole number from 1 to 64"), "{bad}: {e}");
        }
        assert_eq!(parse_kv_threads("per-role"), Ok(KvThreads::PerRole));
        assert_eq!(parse_kv_threads("one"), Ok(KvThreads::One));
        assert!(parse_kv_threads("two").unwrap_err().contains("'two'"));
        let f = MatrixSpec::from_toml(
            "kv_clients = [8, 1]\nkv_windows = 16\nkv_requests = 500\nkv_threads = \"per-role\"\nkv_keys = 4096\n",
        )
        .unwrap();
        assert_eq!(f.kv_clients, Some(vec![1, 8]));
        assert_eq!(f.kv_windows, Some(vec![16]));
        assert_eq!((f.kv_requests, f.kv_threads), (Some(500), Some(KvThreads::PerRole)));
        assert_eq!(f.kv_keys, Some(4096));
        let m = MatrixSpec {
            kv_clients: Some(vec![2]),
            ..Default::default()
        }
        .over(f);
        assert_eq!((m.kv_clients, m.kv_windows), (Some(vec![2]), Some(vec![16])));
    }

    #[test]
    fn file_keys_and_the_command_line_over_them() {
        let f = MatrixSpec::from_toml(
            r#"
            parts = ["lat", "bw"]
            ops = ["write", "send"]
            bw_ops = "read"
            sizes = [8, "4K", "64K-256K"]
            iters = 500
            backends = ["verbs", "direct"]
            qps = 4
            threads = 2
            transports = ["UC", "rc"]
            "#,
        )
        .unwrap();
        assert_eq!(f.parts, Some(vec![Part::Lat, Part::Bw]));
        assert_eq!(f.lat_ops, Some(vec![OpKind::Write, OpKind::Send]));
        assert_eq!(f.bw_ops, Some(vec![OpKind::Read]));
        assert_eq!(f.lat_sizes, Some(vec![8, 4096, 65536, 131072, 262144]));
        assert_eq!(f.bw_sizes, f.lat_sizes);
        assert_eq!((f.iters, f.qps, f.threads), (Some(500), Some(4), Some(2)));
        assert_eq!(f.transports, Some(vec![Transport::Uc, Transport::Rc]));
        let cli = MatrixSpec {
            iters: Some(50),
            backends: Some(vec![BackendKind::Wr]),
            ..Default::default()
        };
        // the run's length from the command line replaces the file's, whichever way it is given
        let dur = MatrixSpec {
            duration: Some(Duration::from_secs(2)),
            ..Default::default()
        }
        .over(f.clone());
        assert_eq!((dur.iters, dur.duration), (None, Some(Duration::from_secs(2))));
        assert!(dur.check().is_ok());
        let m = cli.over(f.clone());
        assert_eq!(m.iters, Some(50));
        assert_eq!(m.backends, Some(vec![BackendKind::Wr]));
        assert_eq!(m.qps, Some(4));
        assert_eq!(m.lat_ops, f.lat_ops);
    }

    #[test]
    fn quoted_values_are_cut() {
        let big = "y".repeat(1 << 20);
        for text in [
            format!("backends = \"{big}\""),
            format!("sizes = \"{big}\""),
            format!("{big} = 1"),
            format!("x = \"{big}\"\nparts = [1,"),
            format!("parts = \"lat,\u{1b}[31m{big}\""),
        ] {
            let e = MatrixSpec::from_toml(&text).unwrap_err();
            assert!(e.len() < 1000, "{} bytes: {}", e.len(), &e[..300]);
            assert!(!e.contains('\u{1b}'), "{e}");
        }
    }

    #[test]
    fn file_errors_name_the_key() {
        for (text, key) in [
            ("sizes = [0]", "sizes"),
            ("iters = 5", "iters"),
            ("qps = 20000", "qps"),
            ("backends = [\"mlx5\"]", "backends"),
            ("lat_ops = [1]", "lat_ops"),
            ("duration_s = -1", "duration_s"),
            ("colour = 1", "colour"),
            ("parts = [\"lat\", \"lat\"]", "parts"),
            ("transports = [\"XRC\"]", "transports"),
            ("kv_clients = [1, 0]", "kv_clients"),
            ("kv_windows = [\"4\"]", "kv_windows"),
            ("kv_requests = 0", "kv_requests"),
            ("kv_threads = 1", "kv_threads"),
            ("kv_keys = 16777217", "kv_keys"),
        ] {
            let e = MatrixSpec::from_toml(text).unwrap_err();
            assert!(e.contains(&format!("`{key}`")), "{text}: {e}");
        }
        assert!(MatrixSpec::from_toml("iters = ").is_err());
        let e = MatrixSpec::from_toml("duration_s = 2\niters = 100").unwrap_err();
        assert!(e.contains("twice"), "{e}");
        assert_eq!(
            MatrixSpec::from_toml("duration_s = 0.5").unwrap().duration,
            Some(Duration::from_millis(500))
        );
    }
}

//! The command line's values: the choices it offers (mapped to the library's types, so that the
//! library parses no arguments) and the parsers of its numbers and lists.

use rdmaprobe::backend::{BackendKind, OpKind, Transport};
use rdmaprobe::mlx5::sq::DbMode;
use rdmaprobe::probe::suite::matrix;
use rdmaprobe::probe::Backends;
use std::time::Duration;

/// The operation of `lat` and `bw` (the library's [`OpKind`]; `atomic` is fetch-and-add, the
/// other operations come from perftest's flags).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
pub enum OpArg {
    /// RDMA WRITE.
    Write,
    /// SEND (the peer must have receives posted).
    Send,
    /// RDMA READ.
    Read,
    /// Atomic: fetch-and-add of 1 (or compare-and-swap with -A CMP_AND_SWAP).
    #[value(name = "atomic")]
    FetchAdd,
}

impl From<OpArg> for OpKind {
    fn from(o: OpArg) -> Self {
        match o {
            OpArg::Write => OpKind::Write,
            OpArg::Send => OpKind::Send,
            OpArg::Read => OpKind::Read,
            OpArg::FetchAdd => OpKind::FetchAdd,
        }
    }
}

/// The transport of `-c` (the library's [`Transport`]).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
pub enum TransportArg {
    /// Reliable connected.
    #[value(name = "RC")]
    Rc,
    /// Unreliable connected: SEND and WRITE (and their immediates); nothing acknowledged.
    #[value(name = "UC")]
    Uc,
    /// Unreliable datagram: SEND (and with immediate), each to an address handle, up to the
    /// path MTU; the receive takes a 40-byte GRH area first.
    #[value(name = "UD")]
    Ud,
}

impl From<TransportArg> for Transport {
    fn from(t: TransportArg) -> Self {
        match t {
            TransportArg::Rc => Transport::Rc,
            TransportArg::Uc => Transport::Uc,
            TransportArg::Ud => Transport::Ud,
        }
    }
}

/// The doorbell mode of `--db-mode` (the library's [`DbMode`]).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
pub enum DbModeArg {
    /// BlueFlame when a single WQE of at most 256 B was posted (else the 8-byte doorbell), with
    /// the trailing `sfence` (rdma-core's default).
    Bf,
    /// As `Bf` without the trailing `sfence` after a BlueFlame copy (UCX `bf_post` on x86,
    /// single-threaded); an 8-byte doorbell keeps its fence (UCX skips the flush only after whole
    /// BlueFlame lines). For measurement: the store order across threads is the caller's.
    #[value(name = "bf-nofence")]
    BfNoFence,
    /// Always the 8-byte doorbell store.
    Db,
}

impl From<DbModeArg> for DbMode {
    fn from(m: DbModeArg) -> Self {
        match m {
            DbModeArg::Bf => DbMode::Bf,
            DbModeArg::BfNoFence => DbMode::BfNoFence,
            DbModeArg::Db => DbMode::Db,
        }
    }
}

/// The post paths of `--backend`: one, or `all`. (No docs on the variants: the help lists their
/// names alone.)
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq)]
pub enum BackendArg {
    Verbs,
    Wr,
    Direct,
    All,
}

impl BackendArg {
    /// The plan's backends.
    pub fn backends(self) -> Backends {
        match self {
            BackendArg::All => Backends::All,
            BackendArg::Verbs => Backends::Only(BackendKind::Verbs),
            BackendArg::Wr => Backends::Only(BackendKind::Wr),
            BackendArg::Direct => Backends::Only(BackendKind::Direct),
        }
    }
}

/// A CPU list argument (`2,3`, `4-7`).
#[derive(Clone, Debug)]
pub struct CpuList(pub Vec<usize>);

/// Parses `--pin-cores` (the library's CPU-list syntax, which `/sys` lists share).
pub fn cpu_list(s: &str) -> Result<CpuList, String> {
    rdmaprobe::workers::parse_cpu_list(s).map(CpuList)
}

/// A list argument (a newtype, so that clap takes it as one value).
#[derive(Clone, Debug)]
pub struct Listed<T>(pub Vec<T>);

/// Parses a list of operations (the suite matrix's syntax).
pub fn ops_list(s: &str) -> Result<Listed<OpKind>, String> {
    matrix::parse_ops(s).map(Listed)
}

/// Parses a list of sizes (the suite matrix's syntax).
pub fn sizes_list(s: &str) -> Result<Listed<u32>, String> {
    matrix::parse_sizes(s).map(Listed)
}

/// Parses a message size as the suite does: bytes, or with K or M (`4K`, `1M`), 1 B to 8 MiB.
pub fn size(s: &str) -> Result<u32, String> {
    matrix::one_size(s)
}

/// Parses a number of bandwidth threads, 1 to [`rdmaprobe::probe::MAX_THREADS`].
pub fn threads(s: &str) -> Result<u64, String> {
    let max = rdmaprobe::probe::MAX_THREADS;
    match s.trim().parse::<u64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        Ok(n) => Err(format!(
            "{n} threads: 1 to {max} (each thread drives its own QPs, CQs and buffers; more threads than CPUs \
             share them)"
        )),
        Err(_) => Err(format!("'{s}' is not a number of threads (1 to {max})")),
    }
}

/// Parses a message size of at most 1 MiB (post-cost's buffers).
pub fn size_1m(s: &str) -> Result<u32, String> {
    match matrix::one_size(s)? {
        b if b <= 1024 * 1024 => Ok(b),
        _ => Err(format!("'{s}': sizes are 1 B to 1M here")),
    }
}

/// Parses a number of seconds from the matrix's minimum to a day.
pub fn positive_secs(s: &str) -> Result<Duration, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && (matrix::MIN_DURATION_S..=86_400.0).contains(&v) => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!("'{s}' is not a number of seconds from 0.01 to 86400")),
    }
}

/// Parses a finite number, at least 0.
pub fn positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("'{s}' is not a number >= 0")),
    }
}

/// perftest's flags that rdmaprobe does not take, each with what to use instead (docs/perftest.md
/// says why).
#[rustfmt::skip]
const PERFTEST_ONLY: [(&[&str], &str); 12] = [
    (&["-H", "--report-histogram"], "the histograms are in --json FILE (HdrHistogram) and --hdr FILE (interval log); `rdmaprobe plot` draws them"),
    (&["-U", "--report-unsorted"], "every sample is in --hdr FILE's histograms (exact to 3 significant digits)"),
    (&["-C", "--report-cycles"], "rdmaprobe reports ns on a calibrated TSC (`rdmaprobe clock` shows the rate; post-cost gives ticks)"),
    (&["-o", "--outs"], "the outstanding READs and atomics are the device's limit, at most 16 (perftest's default); -t bounds what is in flight"),
    (&["-z", "--comm_rdma_cm"], "the exchange goes over rdmaprobe's TCP connection; -R connects the QPs through the CM"),
    (&["-w", "--limit_bw", "-y", "--limit_msgrate", "--rate_limit"], "rdmaprobe measures unthrottled"),
    (&["--cpu_util"], "lat and bw take it (the measuring threads' CPU use); the other commands do not"),
    (&["--out_json", "--out_json_file"], "use --json FILE"),
    (&["-r", "--rx-depth"], "bw takes -r; lat keeps 16 receives posted ahead of its one message in flight"),
    (&["-M", "--mcg", "-g"], "multicast is left out"),
    (&["-O", "--dualport"], "dual port is left out"),
    (&["--use_cuda", "--use_rocm", "--use_neuron", "--use_cuda_dmabuf"], "host memory only"),
];

/// When `arg` (an argument clap did not know, `--flag=value` or `-f`) is perftest's, what to say:
/// what rdmaprobe offers instead and where every perftest flag is mapped.
pub fn perftest_hint(arg: &str) -> Option<String> {
    let flag = arg.split('=').next().unwrap_or(arg);
    let (_, instead) = PERFTEST_ONLY.iter().find(|(names, _)| names.contains(&flag))?;
    Some(format!(
        "perftest's {flag} is not taken here: {instead} (docs/perftest.md maps every perftest flag)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    /// The name each choice has on the command line.
    fn name<T: ValueEnum>(v: &T) -> String {
        v.to_possible_value().expect("not skipped").get_name().to_string()
    }

    #[test]
    fn choices_are_named_as_the_library_names_them() {
        for v in OpArg::value_variants() {
            assert_eq!(name(v), OpKind::from(*v).cli_name());
        }
        for v in TransportArg::value_variants() {
            assert_eq!(name(v), Transport::from(*v).as_str());
        }
        for v in DbModeArg::value_variants() {
            assert_eq!(name(v), DbMode::from(*v).as_str());
        }
        for v in BackendArg::value_variants() {
            match v.backends() {
                Backends::Only(k) => assert_eq!(name(v), k.as_str()),
                Backends::All => assert_eq!(name(v), "all"),
                Backends::Perftest => panic!("{} is not a choice of --backend", name(v)),
            }
        }
    }
}

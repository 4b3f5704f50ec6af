//! The options every measurement shares (device, post paths, the QPs' path, CPUs, the peer) and
//! their mapping to a [`Plan`], with the refusals of what cannot go together.

use super::values::{cpu_list, BackendArg, CpuList, DbModeArg, TransportArg};
use anyhow::Result;
use clap::builder::TypedValueParser as _;
use rdmaprobe::backend::Transport;
use rdmaprobe::probe::{DeviceSpec, PathOpts, PeerSpec, Plan, ProbeError, Scenario};
use std::time::Duration;

/// Which device and port a scenario runs on (`-d`, `-i`, `-x`, as perftest).
#[derive(clap::Args, Debug)]
pub struct DevArgs {
    /// Device (default: the first RDMA device, else model0).
    #[arg(short = 'd', long = "ib-dev")]
    pub device: Option<String>,
    /// Port.
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..))]
    pub port: u8,
    /// GID index (RoCE; default: the RoCE v2 IPv4-mapped entry).
    #[arg(short = 'x', long = "gid-index")]
    pub gid: Option<u8>,
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Inline messages up to this size (default: the QP's max_inline_data; 0 disables).
    #[arg(short = 'I', long, visible_alias = "inline_size")]
    pub inline_size: Option<u32>,
    /// Device, port and GID index.
    #[command(flatten)]
    pub dev: DevArgs,
    /// Post path(s); `all` (the default) runs every backend the device supports, interleaved.
    /// With --output and no --backend: one, perftest's post path (wr, else verbs, else direct).
    #[arg(long, value_enum)]
    pub backend: Option<BackendArg>,
    /// Doorbell mode of the direct backend.
    #[arg(long, value_enum, default_value_t = DbModeArg::Bf)]
    pub db_mode: DbModeArg,
    /// Seconds without progress before a run is declared stalled.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub stall_secs: u64,
    /// Path MTU (perftest's -m): 256, 512, 1024, 2048 or 4096 (default: the port's active MTU).
    #[arg(short = 'm', long, value_parser = clap::builder::PossibleValuesParser::new(["256", "512", "1024", "2048", "4096"])
          .map(|v| v.parse::<u32>().unwrap_or(1024)))]
    pub mtu: Option<u32>,
    /// Service level (perftest's -S).
    #[arg(short = 'S', long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=15))]
    pub sl: u8,
    /// GRH traffic class (perftest's --tclass; RoCE and global routing).
    #[arg(short = 'T', long = "tclass", visible_alias = "tos", default_value_t = 0)]
    pub tclass: u8,
    /// Local ACK timeout exponent, 4.096 us x 2^N (perftest's -u).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14, value_parser = clap::value_parser!(u8).range(0..=31))]
    pub qp_timeout: u8,
    /// Transport retries (perftest's --retry_count).
    #[arg(long = "retry_count", default_value_t = 7, value_parser = clap::value_parser!(u8).range(0..=7))]
    pub retry_count: u8,
    /// P_Key index (perftest's --pkey_index).
    #[arg(long = "pkey_index", default_value_t = 0)]
    pub pkey_index: u16,
    /// Transport (perftest's -c): RC; UC (SEND and WRITE, nothing acknowledged: a message the
    /// responder cannot take is dropped, and a ping-pong stalls on it); UD (SEND up to the
    /// port's MTU; a datagram from another QP than the peer's stops the run). Between two
    /// processes: lat; bw UC/UD with --loopback.
    #[arg(short = 'c', long = "connection", value_enum, ignore_case = true, default_value_t = TransportArg::Rc)]
    pub connection: TransportArg,
    /// Buffers on 2 MiB huge pages (perftest's --use_hugepages; they must be reserved:
    /// `sysctl vm.nr_hugepages=N`, `rdmaprobe doctor` says how many are free).
    #[arg(long = "use-hugepages", visible_alias = "use_hugepages")]
    pub use_hugepages: bool,
    /// A memory region per QP (perftest's --mr_per_qp): what rdmaprobe always does (every QP has
    /// its own buffers, registered on their own); accepted for perftest's scripts.
    #[arg(long = "mr-per-qp", visible_alias = "mr_per_qp")]
    pub mr_per_qp: bool,
    /// Pin the measuring threads to these CPUs, taken in order (e.g. 2,3 or 4-7); a server and
    /// its client on one machine each take their own.
    #[arg(long, value_name = "LIST", value_parser = cpu_list)]
    pub pin_cores: Option<CpuList>,
    /// Run on the CPUs of this NUMA node and bind the memory to it (the node of the NIC:
    /// `rdmaprobe doctor` shows it).
    #[arg(long, value_name = "N")]
    pub numa_node: Option<u32>,
    /// Write the results as JSON.
    #[arg(long)]
    pub json: Option<std::path::PathBuf>,
    /// Write a diagnostics bundle into this directory (command, environment, devices, doctor,
    /// QP states, counters, error, kernel log): one of yours nobody else may write in, or a new
    /// one (made 0700); a failed run writes one anyway, into a new private directory under
    /// $TMPDIR or /tmp.
    #[arg(long)]
    pub diag: Option<std::path::PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct PeerArgs {
    /// Server to connect to; without it this side is the server and waits for a client.
    pub host: Option<String>,
    /// Run both ends in this process, on two pinned threads.
    #[arg(long, conflicts_with_all = ["port_tcp", "bind", "oob_timeout"])]
    pub loopback: bool,
    /// TCP port of the out-of-band exchange (server: 0 lets the system pick one, printed).
    #[arg(short = 'p', long, visible_alias = "port", default_value_t = rdmaprobe::oob::DEFAULT_PORT)]
    pub port_tcp: u16,
    /// Server: the address to listen on (default every IPv4 address).
    #[arg(long, default_value = "0.0.0.0", conflicts_with = "host")]
    pub bind: std::net::IpAddr,
    /// Seconds to wait for the peer to connect or answer out of band. A bandwidth server waits
    /// for the client's word at the end of each run, so a client/server bw run may last at most
    /// this plus --stall-secs (plus twice -D with -D): raise it for longer runs.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub oob_timeout: u64,
    /// Connect the QPs through the RDMA connection manager (perftest's -R): librdmacm resolves
    /// the server's IP address and the route and chooses the source GID (no -x on RoCE), the
    /// P_Key, the path MTU (-m caps it) and the PSNs; -T is its ToS. RC, client/server; the
    /// parameters still go over the TCP connection of -p. Needs the rdma_ucm kernel module.
    #[arg(
        short = 'R',
        long = "rdma-cm",
        visible_alias = "rdma_cm",
        conflicts_with = "loopback"
    )]
    pub rdma_cm: bool,
    /// The program at the other end: another rdmaprobe (default), or an unmodified perftest
    /// (`lat write|send|read|atomic` against `ib_*_lat`, `bw write|read|send` against `ib_*_bw`,
    /// either side the server; one --backend per run, -p as perftest's, 18515; give both the
    /// same -s (or -a), -n and -q). perftest's own conventions are followed: its handshake, which side
    /// sends first, no warm-up, its report and closing.
    #[arg(long = "peer", value_enum, default_value_t = PeerToolArg::Rdmaprobe, conflicts_with_all = ["loopback", "rdma_cm"])]
    pub peer_tool: PeerToolArg,
}

/// `--peer`'s values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerToolArg {
    /// Another rdmaprobe.
    Rdmaprobe,
    /// An unmodified perftest (Debian 12's 6.06, or any before 6.28).
    Perftest,
}

impl DevArgs {
    /// The plan's device.
    pub fn spec(&self) -> DeviceSpec {
        DeviceSpec {
            name: self.device.clone(),
            port: self.port,
            gid_index: self.gid,
        }
    }
}

impl PeerArgs {
    /// Where the peer is: in this process, a server to connect to, or this side listening;
    /// refuses a HOST with --loopback and a client's port 0.
    fn spec(&self) -> Result<PeerSpec, ProbeError> {
        peer_spec(self.host.as_deref(), self.loopback, self.port_tcp, self.bind)
    }
}

/// Where the peer is, from HOST, --loopback, -p and --bind: in this process, a server to connect
/// to, or this side listening; refuses a HOST with --loopback and a client's port 0.
pub(super) fn peer_spec(
    host: Option<&str>,
    loopback: bool,
    port: u16,
    bind: std::net::IpAddr,
) -> Result<PeerSpec, ProbeError> {
    if host.is_some() && loopback {
        return Err(ProbeError::Usage(
            "--loopback runs both ends in this process: give no HOST".into(),
        ));
    }
    if host.is_some() && port == 0 {
        return Err(ProbeError::Usage(
            "-p 0: a client needs the server's port (0 is for a server)".into(),
        ));
    }
    Ok(match (loopback, host) {
        (true, _) => PeerSpec::Loopback,
        (false, Some(h)) => PeerSpec::Connect {
            host: h.to_string(),
            port,
        },
        (false, None) => PeerSpec::Listen {
            bind: bind.to_string(),
            port,
        },
    })
}

impl RunArgs {
    /// The transport of `-c`.
    pub fn transport(&self) -> Transport {
        self.connection.into()
    }

    /// With -R: refuses what the connection manager chooses itself (a transport other than RC,
    /// -S, --pkey_index, -u).
    fn refuse_cm_choices(&self) -> Result<(), ProbeError> {
        let refuse = |what: &str| Err(ProbeError::Usage(format!("-R/--rdma-cm: {what}")));
        if self.transport() != Transport::Rc {
            return refuse(&format!(
                "connects RC QPs (-c {} is not supported with -R in this version)",
                self.transport().as_str()
            ));
        }
        if self.sl != 0 {
            return refuse("the connection manager chooses the service level (from -T's ToS on RoCE): give no -S");
        }
        if self.pkey_index != 0 {
            return refuse("the connection manager chooses the P_Key: give no --pkey_index");
        }
        if self.qp_timeout != 14 {
            return refuse("the connection manager sets the ACK timeout from the path: give no -u");
        }
        Ok(())
    }

    /// Chooses the CPUs (--pin-cores, --numa-node); refuses a choice of one CPU for the two
    /// spinning ends of --loopback.
    fn choose_cpus(&self, peer: &PeerSpec) -> Result<(), ProbeError> {
        rdmaprobe::workers::choose(self.pin_cores.as_ref().map(|c| c.0.as_slice()), self.numa_node)
            .map_err(ProbeError::Usage)?;
        if *peer == PeerSpec::Loopback
            && (self.pin_cores.is_some() || self.numa_node.is_some())
            && rdmaprobe::workers::cpus().len() < 2
        {
            // two spinning ends on one CPU measure the scheduler's time slice, not the path
            return Err(ProbeError::Usage(format!(
                "{}: --loopback runs its two ends on two CPUs (the client on the first, the server on the next): name two",
                if self.pin_cores.is_some() {
                    "--pin-cores"
                } else {
                    "--numa-node"
                }
            )));
        }
        Ok(())
    }

    /// The QPs' path options (-m, -S, -T, -u, --retry_count, --pkey_index).
    fn path(&self) -> PathOpts {
        PathOpts {
            mtu: self.mtu,
            sl: self.sl,
            traffic_class: self.tclass,
            timeout: self.qp_timeout,
            retry_count: self.retry_count,
            pkey_index: self.pkey_index,
            max_rd_atomic: None,
        }
    }
}

/// The plan from a scenario and the arguments every scenario shares.
pub fn plan(scenario: Scenario, r: &RunArgs, p: &PeerArgs) -> Result<Plan> {
    let peer = p.spec()?;
    if p.rdma_cm {
        r.refuse_cm_choices()?;
    }
    r.choose_cpus(&peer)?;
    Ok(Plan {
        scenario,
        device: r.dev.spec(),
        // against perftest one backend per run: without --backend perftest's own post path
        backends: match (r.backend, p.peer_tool) {
            (None, PeerToolArg::Perftest) => rdmaprobe::probe::Backends::Perftest,
            (b, _) => b.unwrap_or(BackendArg::All).backends(),
        },
        db_mode: r.db_mode.into(),
        peer,
        oob_timeout: Duration::from_secs(p.oob_timeout),
        stall: Duration::from_secs(r.stall_secs),
        path: r.path(),
        diag: r.diag.clone(),
        huge_pages: r.use_hugepages,
        transport: r.transport(),
        rdma_cm: p.rdma_cm,
        peer_tool: match p.peer_tool {
            PeerToolArg::Rdmaprobe => rdmaprobe::probe::PeerTool::Rdmaprobe,
            PeerToolArg::Perftest => rdmaprobe::probe::PeerTool::Perftest,
        },
    })
}

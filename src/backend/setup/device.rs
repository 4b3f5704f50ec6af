//! The device a run uses: a verbs device and its port, or model0 (the fallback to model0 when
//! there is no device, with the reason); which backends it runs and why not; how its QPs are made.

use super::SetupError;
use crate::backend::path::PathOpts;
use crate::backend::{BackendError, BackendKind, Transport};
use crate::mlx5::sq::DbMode;
use crate::model::{Model, ModelConfig};
use crate::verbs::device::pick_gid_index;
use crate::verbs::{Context, DeviceList, PortInfo, VerbsError};

/// model0: the model, and the same model opened through libibverbs and libmlx5 (its user-space
/// uverbs device, `crate::uverbs`) for the `verbs` and `wr` backends, or why it could not be.
pub struct ModelDev {
    /// The model (the direct backend drives it).
    pub model: Model,
    /// model0 as an mlx5 device of the machine's libibverbs: the context and its port.
    pub verbs: Result<(Context, PortInfo), String>,
    /// How its QPs are made (the path options and huge pages: the verbs QPs; model0's own
    /// direct QPs have no path and use the model's shared memory).
    pub opts: DevOpts,
}

/// How a device's QPs are made: what a plan sets on it once it is open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DevOpts {
    /// The path and QP options its verbs QPs connect with.
    pub path: PathOpts,
    /// The buffers of its verbs (and mlx5 direct) QPs on 2 MiB huge pages (perftest's
    /// --use_hugepages); a buffer that cannot have them is an error naming the reservation.
    pub huge_pages: bool,
    /// The QPs' transport (perftest's `-c`).
    pub transport: Transport,
    /// Its verbs and wr ends' CQs made with completion timestamps (`ibv_create_cq_ex` with
    /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`, polled with `ibv_start_poll`): `lat --anatomy` on
    /// a device whose completions carry its clock.
    pub timestamps: bool,
}

impl std::ops::Deref for ModelDev {
    type Target = Model;
    fn deref(&self) -> &Model {
        &self.model
    }
}

impl ModelDev {
    /// Opens model0 with `cfg`, and through libibverbs when this machine allows it.
    pub fn open(cfg: ModelConfig) -> Result<Self, SetupError> {
        let model = Model::open(cfg)?;
        #[cfg(target_os = "linux")]
        crate::uverbs::set_model(&model);
        let verbs = Context::open_model0()
            .and_then(|ctx| {
                let p = ctx.query_port(1)?;
                Ok((ctx, p))
            })
            .map_err(|e| e.to_string());
        Ok(ModelDev {
            model,
            verbs,
            opts: DevOpts::default(),
        })
    }
}

/// The libmlx5 environment variables that change what a ConnectX is told (read as libmlx5
/// reads them, providers/mlx5/mlx5.c and verbs.c, rdma-core 44).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mlx5Env {
    /// `MLX5_SHUT_UP_BF` set and not `0`: libmlx5 never uses BlueFlame, only the doorbell.
    pub shut_up_bf: bool,
    /// `MLX5_POST_SEND_PREFER_BF` unset or not `0`: BlueFlame for any single WQE that fits;
    /// `0`: for inline WQEs only.
    pub prefer_bf: bool,
    /// `MLX5_QP_SIGNATURE` set (any value): the NIC verifies WQE signatures.
    pub qp_signature: bool,
}

impl Mlx5Env {
    /// This process's.
    pub fn get() -> Self {
        let on = |k: &str| std::env::var_os(k).map(|v| v != "0");
        Mlx5Env {
            shut_up_bf: on("MLX5_SHUT_UP_BF").unwrap_or(false),
            prefer_bf: on("MLX5_POST_SEND_PREFER_BF").unwrap_or(true),
            qp_signature: std::env::var_os("MLX5_QP_SIGNATURE").is_some(),
        }
    }

    /// The doorbell mode the direct path uses for `asked`: the doorbell only when libmlx5 is
    /// told to shut up BlueFlame (both paths then ring alike).
    pub fn direct_mode(self, asked: DbMode) -> DbMode {
        if self.shut_up_bf {
            DbMode::Db
        } else {
            asked
        }
    }
}

/// A device's NIC clock (see [`Dev::nic_clock`]).
pub struct NicClock<'a> {
    /// The rate the device states (`hca_core_clock`), kHz.
    pub stated_khz: u64,
    /// Read through libibverbs; `None`: model0's counter read directly.
    ctx: Option<&'a Context>,
}

impl NicClock<'_> {
    /// The counter now, ticks.
    pub fn read(&self) -> Result<u64, VerbsError> {
        match self.ctx {
            Some(ctx) => ctx.nic_clock(),
            None => Ok(crate::model::clock::nic_clock()),
        }
    }
}

/// The device a run uses.
pub enum Dev {
    /// model0.
    Model(ModelDev),
    /// A verbs device and the port used.
    Verbs {
        /// The open device.
        ctx: Context,
        /// The port.
        port: PortInfo,
        /// The GID index (RoCE).
        gid: Option<u8>,
        /// Provider name.
        provider: String,
        /// Firmware version.
        fw: String,
        /// How its QPs are made.
        opts: DevOpts,
    },
}

impl Dev {
    /// Opens `name` (`model0` for the model); `None`: the first RDMA device, else model0 (the
    /// returned note says so). The port must be ACTIVE.
    pub fn open(
        name: Option<&str>,
        port: u8,
        gid: Option<u8>,
        model: ModelConfig,
    ) -> Result<(Dev, Option<String>), SetupError> {
        let (name, note) = match name {
            Some(n) => (n.to_string(), None),
            None => first_device()?,
        };
        let dev = if name == crate::model::DEVICE_NAME {
            Dev::open_model0(port, gid, model)?
        } else {
            Dev::open_verbs(&name, port, gid)?
        };
        Ok((dev, note))
    }

    /// model0, which has one port and no GID table.
    fn open_model0(port: u8, gid: Option<u8>, model: ModelConfig) -> Result<Dev, SetupError> {
        let name = crate::model::DEVICE_NAME;
        if port != 1 {
            return Err(port_error(name, port, "model0 has one port, port 1".into()));
        }
        if gid.is_some() {
            return Err(port_error(
                name,
                port,
                "model0 has no GID table (-x applies to RoCE devices)".into(),
            ));
        }
        Ok(Dev::Model(ModelDev::open(model)?))
    }

    /// The verbs device `name` on `port`, which must exist and be ACTIVE, with GID index `gid`
    /// (which must not be empty) or, on a RoCE port, the one [`pick_gid_index`] chooses.
    fn open_verbs(name: &str, port: u8, gid: Option<u8>) -> Result<Dev, SetupError> {
        let ctx = open_named(name)?;
        let info = ctx.query()?;
        if port == 0 || port > info.phys_port_cnt {
            return Err(port_error(
                name,
                port,
                format!("{name} has ports 1..={}", info.phys_port_cnt),
            ));
        }
        let p = ctx.query_port(port)?;
        if !p.is_active() {
            return Err(port_error(
                name,
                port,
                format!("port is {} (physical state {}), not ACTIVE", p.state, p.phys_state),
            ));
        }
        let gid = match gid {
            Some(g) => {
                if ctx.query_gid(port, g as u32)?.is_none() {
                    return Err(port_error(name, port, format!("GID index {g} is empty")));
                }
                Some(g)
            }
            None if p.is_ethernet() => pick_gid_index(&ctx.gids(port, 16)?).map(|i| i as u8),
            None => None,
        };
        Ok(Dev::Verbs {
            ctx,
            port: p,
            gid,
            provider: info.provider,
            fw: info.fw_ver,
            opts: DevOpts::default(),
        })
    }

    /// Device name.
    pub fn name(&self) -> String {
        match self {
            Dev::Model(_) => crate::model::DEVICE_NAME.into(),
            Dev::Verbs { ctx, .. } => ctx.name().into(),
        }
    }

    /// Provider name.
    pub fn provider(&self) -> String {
        match self {
            Dev::Model(_) => "model0".into(),
            Dev::Verbs { provider, .. } => provider.clone(),
        }
    }

    /// The provider library the verbs backends run through (libmlx5's path on model0 and on a
    /// ConnectX), when known.
    pub fn provider_library(&self) -> Option<String> {
        self.verbs_parts().and_then(|(ctx, _, _)| ctx.provider_library())
    }

    /// Firmware version.
    pub fn firmware(&self) -> Option<String> {
        match self {
            Dev::Model(_) => None,
            Dev::Verbs { fw, .. } => Some(fw.clone()),
        }
    }

    /// Whether this is model0.
    pub fn is_model(&self) -> bool {
        matches!(self, Dev::Model(_))
    }

    /// The NIC clock its completions carry: its stated rate and a reader of its counter now
    /// (`ibv_query_rt_values_ex`; model0 without libibverbs: its counter read directly), or why
    /// there is none (a device whose completions carry no timestamps, as rxe's).
    pub fn nic_clock(&self) -> Result<NicClock<'_>, String> {
        let ctx = match self {
            Dev::Verbs { ctx, .. } => ctx,
            Dev::Model(m) => match &m.verbs {
                Ok((ctx, _)) => ctx,
                Err(_) => {
                    return Ok(NicClock {
                        stated_khz: crate::model::clock::HCA_CORE_CLOCK_KHZ,
                        ctx: None,
                    })
                }
            },
        };
        let caps = ctx.nic_clock_caps().map_err(|e| e.to_string())?;
        if !caps.usable() {
            return Err(format!(
                "{}: completion_timestamp_mask {:#x}, hca_core_clock {} kHz (ibv_query_device_ex): its completions \
                 carry no NIC clock",
                ctx.name(),
                caps.timestamp_mask,
                caps.hca_core_clock_khz
            ));
        }
        Ok(NicClock {
            stated_khz: caps.hca_core_clock_khz,
            ctx: Some(ctx),
        })
    }

    /// Whether `kind` can run here, and why not.
    pub fn supports(&self, kind: BackendKind) -> Result<(), BackendError> {
        if kind == BackendKind::Direct && Mlx5Env::get().qp_signature {
            return Err(BackendError::Unsupported {
                backend: "direct",
                why: "MLX5_QP_SIGNATURE is set: the NIC would verify WQE signatures, which the direct path does \
                      not write; unset it to run the direct backend"
                    .into(),
            });
        }
        match (self, kind) {
            (Dev::Model(_), BackendKind::Direct) => Ok(()),
            (Dev::Model(m), k) => match &m.verbs {
                Ok(_) => Ok(()),
                Err(why) => Err(BackendError::Unsupported {
                    backend: k.as_str(),
                    why: format!("needs libibverbs to reach model0, and {why}"),
                }),
            },
            (Dev::Verbs { ctx, provider, .. }, BackendKind::Direct) if !ctx.is_mlx5() => {
                Err(BackendError::Unsupported {
                    backend: "direct",
                    why: format!(
                        "needs an mlx5 device or model0; {} uses the {provider} provider",
                        ctx.name()
                    ),
                })
            }
            _ => Ok(()),
        }
    }

    /// Refuses a message size above the port's maximum message size.
    pub fn check_size(&self, size: u32) -> Result<(), SetupError> {
        if let Dev::Verbs { ctx, port, .. } = self {
            if size > port.max_msg_sz {
                return Err(VerbsError::Invalid {
                    ctx: crate::verbs::Ctx::dev(ctx.name()).port(port.port),
                    why: format!("message size {size} exceeds the port's max_msg_sz {}", port.max_msg_sz),
                }
                .into());
            }
        }
        Ok(())
    }

    /// How its QPs are made.
    pub fn opts(&self) -> DevOpts {
        match self {
            Dev::Verbs { opts, .. } => *opts,
            Dev::Model(m) => m.opts,
        }
    }

    /// Sets how its QPs are made (the path options, huge pages, the transport).
    pub fn opts_mut(&mut self) -> &mut DevOpts {
        match self {
            Dev::Verbs { opts, .. } => opts,
            Dev::Model(m) => &mut m.opts,
        }
    }

    /// The path and QP options its verbs QPs connect with.
    pub fn path(&self) -> PathOpts {
        self.opts().path
    }

    /// The transport of the QPs made on it.
    pub fn transport(&self) -> Transport {
        self.opts().transport
    }

    /// Whether the buffers of its verbs (and mlx5 direct) QPs are on 2 MiB huge pages.
    pub fn huge_pages(&self) -> bool {
        self.opts().huge_pages
    }

    /// The verbs context, port and GID index the `verbs` and `wr` backends use (model0's through
    /// libmlx5), if any.
    pub fn verbs_parts(&self) -> Option<(&Context, &PortInfo, Option<u8>)> {
        match self {
            Dev::Verbs { ctx, port, gid, .. } => Some((ctx, port, *gid)),
            Dev::Model(m) => m.verbs.as_ref().ok().map(|(c, p)| (c, p, None)),
        }
    }

    /// The backends this device runs.
    pub fn backends(&self) -> Vec<BackendKind> {
        [BackendKind::Verbs, BackendKind::Wr, BackendKind::Direct]
            .into_iter()
            .filter(|k| self.supports(*k).is_ok())
            .collect()
    }
}

/// The device a run uses when none is named: the first RDMA device, else model0 with a note
/// saying why (none present, or why the machine has none).
fn first_device() -> Result<(String, Option<String>), SetupError> {
    Ok(match DeviceList::get() {
        Ok(l) => match l.names().into_iter().next() {
            Some(n) => (n, None),
            None => (
                crate::model::DEVICE_NAME.into(),
                Some("no RDMA device: using model0".to_string()),
            ),
        },
        Err(VerbsError::NoDevice(why)) => (
            crate::model::DEVICE_NAME.to_string(),
            Some(format!(
                "no RDMA device ({}): using model0, the built-in software model; its figures are not a NIC's",
                match why {
                    crate::verbs::NoDevice::KernelWithoutRdma => "kernel without RDMA support",
                    crate::verbs::NoDevice::NoDevices => "none present",
                    crate::verbs::NoDevice::NoUverbs => "ib_uverbs missing",
                    crate::verbs::NoDevice::NoPermission => "no permission",
                }
            )),
        ),
        Err(e) => return Err(e.into()),
    })
}

/// The refusal of port `port` of device `name`, saying `why`.
fn port_error(name: &str, port: u8, why: String) -> SetupError {
    VerbsError::Port {
        ctx: crate::verbs::Ctx::dev(name).port(port),
        why,
    }
    .into()
}

/// Opens the RDMA device `name`; a name that is not there is said as such, with model0 among
/// the devices present, whatever the kernel (one without RDMA support has model0 alone).
pub fn open_named(name: &str) -> Result<Context, VerbsError> {
    match Context::open(name) {
        Err(VerbsError::NoDevice(_)) => Err(VerbsError::UnknownDevice {
            name: name.into(),
            available: vec!["model0 (software model)".into()],
        }),
        Err(VerbsError::UnknownDevice { name, mut available }) => {
            available.push("model0 (software model)".into());
            Err(VerbsError::UnknownDevice { name, available })
        }
        r => r,
    }
}

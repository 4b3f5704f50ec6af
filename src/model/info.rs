//! What `rdmaprobe devices` says about model0, and the sweep of dead processes' objects.

use super::layout::owner_of;
use super::shm;
use super::{Model, ModelConfig, ModelError, BF_SIZE, DEVICE_NAME, MAX_INLINE};

/// Removes the objects of processes that died (crash recovery); returns how many.
pub fn sweep_dead() -> usize {
    shm::sweep(owner_of)
}

/// What `rdmaprobe devices` says about model0.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelInfo {
    /// `model0`.
    pub name: &'static str,
    /// Always true: this is not hardware.
    pub software_model: bool,
    /// What it is.
    pub description: &'static str,
    /// Where its shared-memory objects live.
    pub shm_dir: String,
    /// Largest queue depth.
    pub max_qp_wr: u32,
    /// Largest inline payload the device grants a QP (the device's limit; a QP's granted limit
    /// is in each result as `qp_max_inline_data`).
    #[serde(rename = "device_max_inline_data")]
    pub max_inline_data: u32,
    /// BlueFlame buffer size of its QPs.
    pub bf_size: u32,
    /// Backends it runs (`verbs` and `wr` when libibverbs reaches it: see `crate::uverbs`).
    pub backends: Vec<&'static str>,
    /// The provider library libibverbs runs it with (libmlx5's path), when it does.
    pub provider_library: Option<String>,
    /// Why libibverbs does not reach it here, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verbs_unavailable: Option<String>,
    /// Its NIC clock's rate, kHz (`hca_core_clock`: [`super::clock`]).
    pub hca_core_clock_khz: u64,
    /// The valid bits of its CQE timestamps (`completion_timestamp_mask`).
    pub timestamp_mask: u64,
    /// Objects of dead processes removed while checking it.
    pub swept: usize,
}

/// Checks that the model can be opened here and describes it.
pub fn info() -> Result<ModelInfo, ModelError> {
    // the directory is checked before anything in it is opened
    shm::secure_dir().map_err(|e| ModelError::Invalid(format!("opening {}: {e}", shm::dir().display())))?;
    let before = sweep_dead();
    let _m = Model::open(ModelConfig::default())?;
    Ok(ModelInfo {
        name: DEVICE_NAME,
        software_model: true,
        description: "built-in software model of an mlx5 HCA (shared memory); results are about the tool and \
                      the data path, not any NIC's performance; other verbs programs (perftest, ibv_rc_pingpong \
                      ...) run on it with `rdmaprobe model0 exec -- PROGRAM ARGS`",
        shm_dir: shm::dir().display().to_string(),
        max_qp_wr: 32768,
        max_inline_data: MAX_INLINE,
        bf_size: BF_SIZE,
        backends: vec!["direct"],
        provider_library: None,
        verbs_unavailable: None,
        hca_core_clock_khz: super::clock::HCA_CORE_CLOCK_KHZ,
        timestamp_mask: super::clock::TIMESTAMP_MASK,
        swept: before,
    })
}

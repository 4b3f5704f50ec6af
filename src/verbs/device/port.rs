//! Ports and GIDs: a port's state and link as `___ibv_query_port` gives them (with the names
//! of its states, MTUs, speeds and widths), GIDs and their types, and the GID index a
//! connection uses.

use crate::sys;
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// A port's state and link.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PortInfo {
    /// Port number.
    pub port: u8,
    /// `IBV_PORT_*` state, by name (`ACTIVE`, `DOWN`, ...).
    pub state: &'static str,
    /// Raw state value.
    pub state_raw: u32,
    /// Physical state by name (`LINK_UP`, `POLLING`, ...).
    pub phys_state: &'static str,
    /// `InfiniBand` or `Ethernet`.
    pub link_layer: &'static str,
    /// Active MTU in bytes.
    pub active_mtu: u32,
    /// Max MTU in bytes.
    pub max_mtu: u32,
    /// Raw active MTU enum (for `ibv_modify_qp`).
    #[serde(skip)]
    pub active_mtu_raw: u32,
    /// Active speed per lane, e.g. `25.0 Gbps (EDR)`.
    pub speed: String,
    /// Active width, e.g. `4X`.
    pub width: String,
    /// LID (InfiniBand).
    pub lid: u16,
    /// SM LID.
    pub sm_lid: u16,
    /// GID table length.
    pub gid_tbl_len: i32,
    /// Max message size.
    pub max_msg_sz: u32,
}

impl PortInfo {
    pub(super) fn from_attr(port: u8, a: &sys::ibv_port_attr) -> Self {
        PortInfo {
            port,
            state: port_state_str(a.state),
            state_raw: a.state,
            phys_state: phys_state_str(a.phys_state),
            link_layer: match a.link_layer as u32 {
                sys::IBV_LINK_LAYER_ETHERNET => "Ethernet",
                _ => "InfiniBand",
            },
            active_mtu: mtu_bytes(a.active_mtu),
            max_mtu: mtu_bytes(a.max_mtu),
            active_mtu_raw: a.active_mtu,
            speed: speed_str(a.active_speed),
            width: width_str(a.active_width),
            lid: a.lid,
            sm_lid: a.sm_lid,
            gid_tbl_len: a.gid_tbl_len,
            max_msg_sz: a.max_msg_sz,
        }
    }

    /// Whether the port can carry traffic.
    pub fn is_active(&self) -> bool {
        self.state_raw == sys::IBV_PORT_ACTIVE
    }

    /// Whether addressing needs a GID (RoCE) rather than a LID (InfiniBand).
    pub fn is_ethernet(&self) -> bool {
        self.link_layer == "Ethernet"
    }
}

/// `IBV_PORT_*` name.
pub fn port_state_str(s: u32) -> &'static str {
    match s {
        sys::IBV_PORT_NOP => "NOP",
        sys::IBV_PORT_DOWN => "DOWN",
        sys::IBV_PORT_INIT => "INIT",
        sys::IBV_PORT_ARMED => "ARMED",
        sys::IBV_PORT_ACTIVE => "ACTIVE",
        sys::IBV_PORT_ACTIVE_DEFER => "ACTIVE_DEFER",
        _ => "UNKNOWN",
    }
}

/// Physical port state name (IBTA values).
pub fn phys_state_str(s: u8) -> &'static str {
    match s {
        1 => "SLEEP",
        2 => "POLLING",
        3 => "DISABLED",
        4 => "PORT_CONFIGURATION_TRAINING",
        5 => "LINK_UP",
        6 => "LINK_ERROR_RECOVERY",
        7 => "PHY_TEST",
        _ => "UNKNOWN",
    }
}

/// `IBV_MTU_*` to bytes (0 for an unknown value).
pub fn mtu_bytes(m: u32) -> u32 {
    match m {
        1..=5 => 128 << m,
        _ => 0,
    }
}

/// Bytes to `IBV_MTU_*`.
pub fn mtu_from_bytes(b: u32) -> Option<u32> {
    (1..=5).find(|&m| 128u32 << m == b)
}

/// Per-lane speed code to text.
pub fn speed_str(s: u8) -> String {
    match s {
        1 => "2.5 Gbps (SDR)".into(),
        2 => "5.0 Gbps (DDR)".into(),
        4 | 8 => "10.0 Gbps (QDR/FDR10)".into(),
        16 => "14.0 Gbps (FDR)".into(),
        32 => "25.0 Gbps (EDR)".into(),
        64 => "50.0 Gbps (HDR)".into(),
        128 => "100.0 Gbps (NDR)".into(),
        other => format!("unknown ({other})"),
    }
}

/// Width code to text.
pub fn width_str(w: u8) -> String {
    match w {
        1 => "1X".into(),
        2 => "4X".into(),
        4 => "8X".into(),
        8 => "12X".into(),
        16 => "2X".into(),
        other => format!("unknown ({other})"),
    }
}

/// A 128-bit GID, as raw network-order bytes.
#[derive(Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// All zeros (an empty table slot).
    pub fn is_zero(&self) -> bool {
        self.0.iter().all(|&b| b == 0)
    }

    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`).
    pub fn ipv4_mapped(&self) -> Option<Ipv4Addr> {
        let b = &self.0;
        if b[..10].iter().all(|&x| x == 0) && b[10] == 0xff && b[11] == 0xff {
            Some(Ipv4Addr::new(b[12], b[13], b[14], b[15]))
        } else {
            None
        }
    }

    /// From the raw union of `ibv_ah_attr`.
    pub fn from_raw(g: sys::ibv_gid) -> Self {
        // SAFETY: every member of the union is plain bytes; raw covers all 16.
        Gid(unsafe { g.raw })
    }

    /// The raw union for `ibv_ah_attr`.
    pub fn to_raw(self) -> sys::ibv_gid {
        sys::ibv_gid { raw: self.0 }
    }
}

impl fmt::Display for Gid {
    /// The `ibv_devinfo` form: eight groups of four hex digits.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for i in 0..8 {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", self.0[2 * i], self.0[2 * i + 1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl serde::Serialize for Gid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

/// A GID that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a GID: '{0}' (expected an IPv6 address, e.g. fe80::1 or ::ffff:192.0.2.1)")]
pub struct GidParseError(pub String);

impl FromStr for Gid {
    type Err = GidParseError;
    /// Accepts any IPv6 text form (`fe80:0000:...`, `fe80::1`, `::ffff:192.0.2.1`).
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        s.trim()
            .parse::<std::net::Ipv6Addr>()
            .map(|a| Gid(a.octets()))
            .map_err(|_| GidParseError(s.to_string()))
    }
}

/// The GID type of a table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum GidType {
    /// InfiniBand GID.
    #[serde(rename = "IB")]
    Ib,
    /// RoCE v1 (Ethernet, no IP header).
    #[serde(rename = "RoCE v1")]
    RoceV1,
    /// RoCE v2 (UDP/IP).
    #[serde(rename = "RoCE v2")]
    RoceV2,
    /// A value this build does not know.
    #[serde(rename = "unknown")]
    Unknown(u32),
}

impl GidType {
    pub(super) fn from_raw(t: u32) -> Self {
        match t {
            sys::IBV_GID_TYPE_IB => GidType::Ib,
            sys::IBV_GID_TYPE_ROCE_V1 => GidType::RoceV1,
            sys::IBV_GID_TYPE_ROCE_V2 => GidType::RoceV2,
            other => GidType::Unknown(other),
        }
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GidType::Ib => f.write_str("IB"),
            GidType::RoceV1 => f.write_str("RoCE v1"),
            GidType::RoceV2 => f.write_str("RoCE v2"),
            GidType::Unknown(v) => write!(f, "unknown ({v})"),
        }
    }
}

/// One GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct GidEntry {
    /// Table index (what `-x` selects).
    pub index: u32,
    /// The GID.
    pub gid: Gid,
    /// Its type.
    pub gid_type: GidType,
}

impl GidEntry {
    /// The IPv4 address if this entry is IPv4-mapped.
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        self.gid.ipv4_mapped()
    }
}

/// The index to use on a RoCE port: the RoCE v2 entry holding an IPv4-mapped address, else the
/// first RoCE v2 entry, else the first entry.
pub fn pick_gid_index(entries: &[GidEntry]) -> Option<u32> {
    entries
        .iter()
        .find(|e| e.gid_type == GidType::RoceV2 && e.ipv4().is_some())
        .or_else(|| entries.iter().find(|e| e.gid_type == GidType::RoceV2))
        .or_else(|| entries.first())
        .map(|e| e.index)
}

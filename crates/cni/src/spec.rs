//! The CNI specification's wire formats (1.1.0, accepting 0.4.0 to 1.1.0):
//! the network configuration on stdin, the result on stdout in the
//! version the configuration asks for, and the error JSON with the spec's
//! codes. Fields peregrine does not use are carried through untouched, so a
//! chained result keeps what the plugins before it reported.
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use peregrine_agent::pods::{Bandwidth, PodKey};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The versions this plugin speaks, oldest first.
pub const SUPPORTED: [&str; 3] = ["0.4.0", "1.0.0", "1.1.0"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    V0_4_0,
    V1_0_0,
    V1_1_0,
}

impl Version {
    pub fn parse(s: &str) -> Result<Version, CniError> {
        match s {
            "0.4.0" => Ok(Version::V0_4_0),
            "1.0.0" => Ok(Version::V1_0_0),
            "1.1.0" => Ok(Version::V1_1_0),
            _ => Err(CniError::new(
                code::INCOMPATIBLE_VERSION,
                format!(
                    "CNI version {s:?} is not supported (this plugin speaks {})",
                    SUPPORTED.join(", ")
                ),
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Version::V0_4_0 => "0.4.0",
            Version::V1_0_0 => "1.0.0",
            Version::V1_1_0 => "1.1.0",
        }
    }
}

/// The spec's error codes (1-99 are the spec's, 100+ the plugin's).
pub mod code {
    pub const INCOMPATIBLE_VERSION: u32 = 1;
    pub const UNSUPPORTED_FIELD: u32 = 2;
    pub const UNKNOWN_CONTAINER: u32 = 3;
    pub const INVALID_ENV: u32 = 4;
    pub const IO_FAILURE: u32 = 5;
    pub const DECODE_FAILURE: u32 = 6;
    pub const INVALID_CONFIG: u32 = 7;
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// STATUS: the plugin cannot serve ADDs now.
    pub const NOT_AVAILABLE: u32 = 50;
    /// peregrine: the agent refused or failed the request.
    pub const AGENT_REFUSED: u32 = 100;
}

/// A CNI error: printed as the spec's error JSON on stdout, exit code 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniError {
    pub code: u32,
    /// One line naming the problem.
    pub msg: String,
    pub details: String,
}

impl CniError {
    pub fn new(code: u32, msg: impl Into<String>) -> CniError {
        CniError {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    pub fn json(&self, version: &str) -> Value {
        let mut m = Map::new();
        m.insert("cniVersion".into(), version.into());
        m.insert("code".into(), self.code.into());
        m.insert("msg".into(), self.msg.clone().into());
        if !self.details.is_empty() {
            m.insert("details".into(), self.details.clone().into());
        }
        Value::Object(m)
    }
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{} (CNI error {})", self.msg, self.code)
    }
}

/// `runtimeConfig`: the capabilities peregrine declares.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct RuntimeConfig {
    /// The pod's bandwidth annotations, as the `bandwidth` plugin reads.
    #[serde(default)]
    pub bandwidth: Option<Bandwidth>,
    /// containerd's pod annotations (peregrine reads `peregrine.io/...`).
    #[serde(default, rename = "io.kubernetes.cri.pod-annotations")]
    pub pod_annotations: BTreeMap<String, String>,
}

/// GC's list of attachments that still exist.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Attachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

impl From<&Attachment> for PodKey {
    fn from(a: &Attachment) -> PodKey {
        PodKey {
            container_id: a.container_id.clone(),
            ifname: a.ifname.clone(),
        }
    }
}

/// The network configuration a runtime hands the plugin on stdin.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetConf {
    pub cni_version: String,
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// Standalone mode: the IPAM plugin to delegate addresses to.
    #[serde(default)]
    pub ipam: Option<Value>,
    #[serde(default)]
    pub runtime_config: RuntimeConfig,
    /// Chained mode: what the plugins before this one made.
    #[serde(default)]
    pub prev_result: Option<Value>,
    #[serde(default, rename = "cni.dev/valid-attachments")]
    pub valid_attachments: Option<Vec<Attachment>>,
    /// peregrine: the agent's control socket (default: the agent's).
    #[serde(default)]
    pub agent_socket: Option<PathBuf>,
    /// peregrine, standalone: the pod interface's MTU (default 1500).
    #[serde(default)]
    pub mtu: Option<u32>,
}

impl NetConf {
    pub fn parse(stdin: &[u8]) -> Result<NetConf, CniError> {
        let c: NetConf = serde_json::from_slice(stdin).map_err(|e| {
            CniError::new(
                code::DECODE_FAILURE,
                format!("the network configuration on stdin is not valid: {e}"),
            )
        })?;
        if let Some(m) = c.mtu.filter(|m| !(68..=65535).contains(m)) {
            return Err(CniError::new(
                code::INVALID_CONFIG,
                format!("mtu {m}: an interface's MTU is 68 to 65535"),
            ));
        }
        if c.name.is_empty() {
            return Err(CniError::new(
                code::INVALID_CONFIG,
                "the network configuration has no name",
            ));
        }
        Ok(c)
    }

    /// The IPAM plugin's type, in standalone mode.
    pub fn ipam_type(&self) -> Result<Option<String>, CniError> {
        match &self.ipam {
            None => Ok(None),
            Some(v) => match v.get("type").and_then(Value::as_str) {
                Some(t) if !t.is_empty() && !t.contains('/') => Ok(Some(t.to_string())),
                _ => Err(CniError::new(
                    code::INVALID_CONFIG,
                    "ipam: \"type\" must name an IPAM plugin (for example \"host-local\")",
                )),
            },
        }
    }
}

/// A result's interface.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// The namespace it is in; absent on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// A result's address.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IpConfig {
    /// "4" or "6": 0.4.0 only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// CIDR notation.
    pub address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
    /// Index into `interfaces`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<usize>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl IpConfig {
    /// The address and prefix length.
    pub fn cidr(&self) -> Result<(std::net::IpAddr, u8), CniError> {
        parse_cidr(&self.address)
    }
}

/// A result's route.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Route {
    pub dst: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gw: Option<String>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// An ADD's result (also a chained plugin's `prevResult`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CniResult {
    #[serde(rename = "cniVersion")]
    pub cni_version: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<IpConfig>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<Route>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<Value>,
}

impl CniResult {
    /// A result in any supported version.
    pub fn from_value(v: &Value, what: &str) -> Result<CniResult, CniError> {
        let r: CniResult = serde_json::from_value(v.clone()).map_err(|e| {
            CniError::new(
                code::DECODE_FAILURE,
                format!("{what} is not a CNI result: {e}"),
            )
        })?;
        Version::parse(&r.cni_version)?;
        for ip in &r.ips {
            ip.cidr()?;
            if let Some(i) = ip.interface {
                if i >= r.interfaces.len() {
                    return Err(CniError::new(
                        code::INVALID_CONFIG,
                        format!(
                            "{what}: address {} names interface {i} of {}",
                            ip.address,
                            r.interfaces.len()
                        ),
                    ));
                }
            }
        }
        Ok(r)
    }

    /// The same result in version `to`: 0.4.0 says each address's IP
    /// version, 1.0.0 and later do not.
    pub fn to_version(&self, to: Version) -> CniResult {
        let mut r = self.clone();
        r.cni_version = to.as_str().into();
        for ip in &mut r.ips {
            ip.version = match to {
                Version::V0_4_0 => {
                    Some(if ip.address.contains(':') { "6" } else { "4" }.to_string())
                }
                _ => None,
            };
        }
        r
    }
}

/// "198.18.64.5/24" -> (address, 24).
pub fn parse_cidr(s: &str) -> Result<(std::net::IpAddr, u8), CniError> {
    let bad = || {
        CniError::new(
            code::INVALID_CONFIG,
            format!("{s:?} is not an address/prefix"),
        )
    };
    let (a, p) = s.split_once('/').ok_or_else(bad)?;
    let ip: std::net::IpAddr = a.parse().map_err(|_| bad())?;
    let plen: u8 = p.parse().map_err(|_| bad())?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    if plen > max {
        return Err(bad());
    }
    Ok((ip, plen))
}

/// The network of `ip/plen` ("198.18.64.5", 24 -> 198.18.64.0).
pub fn network(ip: std::net::IpAddr, plen: u8) -> std::net::IpAddr {
    use std::net::IpAddr;
    match ip {
        IpAddr::V4(a) => {
            let m = if plen == 0 {
                0
            } else {
                u32::MAX << (32 - plen)
            };
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = if plen == 0 {
                0
            } else {
                u128::MAX << (128 - plen)
            };
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_outside_the_range_are_refused_with_code_1() {
        for v in SUPPORTED {
            assert_eq!(Version::parse(v).unwrap().as_str(), v);
        }
        for v in ["0.3.1", "0.2.0", "1.2.0", "", "1.0"] {
            let e = Version::parse(v).unwrap_err();
            assert_eq!(e.code, code::INCOMPATIBLE_VERSION, "{v}");
            assert!(e.msg.contains("0.4.0, 1.0.0, 1.1.0"), "{}", e.msg);
        }
    }

    #[test]
    fn results_convert_between_versions_keeping_unknown_fields() {
        let v: Value = serde_json::from_str(
            r#"{"cniVersion":"0.4.0","interfaces":[{"name":"cni0","mac":"aa:bb:cc:dd:ee:ff"},
            {"name":"eth0","sandbox":"/var/run/netns/x","mtu":1400}],
            "ips":[{"version":"4","address":"198.18.64.5/24","gateway":"198.18.64.1","interface":1},
            {"version":"6","address":"2001:db8::5/64","interface":1}],
            "routes":[{"dst":"0.0.0.0/0","gw":"198.18.64.1"}],"dns":{"nameservers":[]}}"#,
        )
        .unwrap();
        let r = CniResult::from_value(&v, "prevResult").unwrap();
        let one = serde_json::to_value(r.to_version(Version::V1_1_0)).unwrap();
        assert_eq!(one["cniVersion"], "1.1.0");
        assert!(one["ips"][0].get("version").is_none());
        assert_eq!(one["interfaces"][1]["mtu"], 1400, "unknown fields are kept");
        let back = serde_json::to_value(r.to_version(Version::V0_4_0)).unwrap();
        assert_eq!(back["ips"][1]["version"], "6");
        assert_eq!(back, v, "0.4.0 -> 0.4.0 is the identity");
    }

    #[test]
    fn bad_results_and_configs_name_the_problem() {
        let bad_if: Value = serde_json::from_str(
            r#"{"cniVersion":"1.0.0","interfaces":[],"ips":[{"address":"198.18.64.5/24","interface":0}]}"#,
        )
        .unwrap();
        let e = CniResult::from_value(&bad_if, "prevResult").unwrap_err();
        assert!(e.msg.contains("names interface 0 of 0"), "{}", e.msg);
        let bad_ip: Value =
            serde_json::from_str(r#"{"cniVersion":"1.0.0","ips":[{"address":"198.18.64.5"}]}"#)
                .unwrap();
        assert_eq!(
            CniResult::from_value(&bad_ip, "prevResult")
                .unwrap_err()
                .code,
            code::INVALID_CONFIG
        );
        let e = NetConf::parse(b"{\"cniVersion\":\"1.0.0\"}").unwrap_err();
        assert_eq!(e.code, code::DECODE_FAILURE);
        assert!(e.msg.contains("name"), "{}", e.msg);
        let c = NetConf::parse(
            br#"{"cniVersion":"1.0.0","name":"n","type":"peregrine-cni","ipam":{}}"#,
        )
        .unwrap();
        assert_eq!(c.ipam_type().unwrap_err().code, code::INVALID_CONFIG);
        assert_eq!(
            network("198.18.64.5".parse().unwrap(), 24).to_string(),
            "198.18.64.0"
        );
        assert_eq!(
            network("2001:db8::5".parse().unwrap(), 64).to_string(),
            "2001:db8::"
        );
    }

    #[test]
    fn runtime_config_reads_bandwidth_and_annotations() {
        let c = NetConf::parse(
            br#"{"cniVersion":"1.1.0","name":"n","type":"peregrine-cni",
            "runtimeConfig":{"bandwidth":{"ingressRate":10000000,"ingressBurst":100000,"egressRate":20000000},
            "io.kubernetes.cri.pod-annotations":{"peregrine.io/acl":"deny","other":"x"}}}"#,
        )
        .unwrap();
        let b = c.runtime_config.bandwidth.unwrap();
        assert_eq!(b.ingress_rate, Some(10_000_000));
        assert_eq!(b.ingress_burst, Some(100_000));
        assert_eq!(b.egress_rate, Some(20_000_000));
        assert_eq!(b.egress_burst, None);
        assert_eq!(c.runtime_config.pod_annotations.len(), 2);
        // containerd's spelling (go-cni's field names), 0 for a direction
        // the annotations leave out and MaxUint32 for "no burst given".
        let c = NetConf::parse(
            br#"{"cniVersion":"1.0.0","name":"n","type":"peregrine-cni",
            "runtimeConfig":{"bandwidth":{"IngressRate":0,"IngressBurst":0,"EgressRate":10000000,"EgressBurst":4294967295}}}"#,
        )
        .unwrap();
        let b = c.runtime_config.bandwidth.unwrap().normalized();
        assert_eq!((b.ingress_rate, b.ingress_burst), (None, None));
        assert_eq!(b.egress_rate, Some(10_000_000));
        assert_eq!(b.egress_burst, Some(4_294_967_295));
    }
}

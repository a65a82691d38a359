//! The fleet registry's records (docs/PROTOCOL.md, "The fleet registry"): what a deployment
//! that opted in names (its `[registry]`), what repoch writes to etcd, and the fencing
//! token a grant carries.
//!
//! Keys, under the deployment's prefix:
//!
//! - `PREFIX/epochs/FLEET`: the fleet deployment's one epoch, a [`FleetClaim`] created only
//!   if absent, by the host whose intent won it, and never modified;
//! - `PREFIX/hosts/FLEET/HOST`: a [`FleetHost`], created at enrollment: the hosts that are
//!   candidates for the fleet deployment's recovery.

use ciborium::value::Value;

use crate::cbor::{self, Canonical, DecodeError, Fields};
use crate::limits::{NONCE_BYTES, PATH_BYTES_MAX, TEXT_BYTES_MAX};
use crate::types::{check_abs_path, DeploymentId, Hash};

/// Endpoints a `[registry]` may name (an etcd cluster of 1, 3, 5 or 7 members).
pub const REGISTRY_ENDPOINTS_MAX: usize = 7;
/// A fleet or host name: a key segment.
pub const FLEET_NAME_BYTES_MAX: usize = 64;
/// A key prefix.
pub const PREFIX_BYTES_MAX: usize = 128;
/// An endpoint, `https://HOST:PORT`.
pub const ENDPOINT_BYTES_MAX: usize = 256;

/// A deployment's `[registry]`, enrolled in its signed manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registry {
    /// `https://HOST:PORT`, one per etcd member.
    pub endpoints: Vec<String>,
    /// The CA bundle the members' certificates chain to, and this host's client
    /// certificate and key (PEM files, absolute paths).
    pub ca: String,
    pub cert: String,
    pub key: String,
    /// Where repoch's keys live in etcd: `/` followed by segments, no trailing `/`.
    pub prefix: String,
    /// The fleet-wide name of the deployment: every host that may recover it enrolls
    /// the same name.
    pub fleet: String,
    /// This host's name in the fleet.
    pub host: String,
}

/// A name that is one key segment: 1 to [`FLEET_NAME_BYTES_MAX`] bytes of
/// `A-Z a-z 0-9 . _ -`, not `.` or `..`.
pub fn check_name(what: &str, s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= FLEET_NAME_BYTES_MAX
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} {s:?}: 1 to {FLEET_NAME_BYTES_MAX} bytes of A-Z a-z 0-9 . _ - (one key segment)"
        ))
    }
}

/// The segments repoch's keys put after a prefix: no prefix may contain one, or one
/// deployment's prefix could nest in another's (`/p/hosts` + `/epochs/F` is `/p`'s host
/// record of fleet `epochs`, host `F`).
pub const RESERVED_SEGMENTS: &[&str] = &["epochs", "hosts"];

/// A prefix: `/` then segments of [`check_name`]'s alphabet, none of
/// [`RESERVED_SEGMENTS`], no trailing `/`, at most [`PREFIX_BYTES_MAX`] bytes.
pub fn check_prefix(s: &str) -> Result<(), String> {
    let segments: Vec<&str> = s
        .strip_prefix('/')
        .map(|r| r.split('/').collect())
        .unwrap_or_default();
    if s.len() > PREFIX_BYTES_MAX
        || segments.is_empty()
        || segments
            .iter()
            .any(|seg| check_name("prefix segment", seg).is_err())
    {
        return Err(format!(
            "prefix {s:?}: '/' then segments of A-Z a-z 0-9 . _ - separated by '/', no trailing '/', at most {PREFIX_BYTES_MAX} bytes"
        ));
    }
    if let Some(seg) = segments.iter().find(|seg| RESERVED_SEGMENTS.contains(seg)) {
        return Err(format!(
            "prefix {s:?}: the segment {seg:?} is repoch's own (its keys are PREFIX/epochs/FLEET and PREFIX/hosts/FLEET/HOST): a prefix holding it could nest in another's"
        ));
    }
    Ok(())
}

/// An endpoint: `https://HOST:PORT` (TLS is required), HOST a DNS name or an IPv4
/// address (`A-Z a-z 0-9 . -`) or an IPv6 one in brackets, PORT 1 to 65535 in digits;
/// nothing else (no user, path, query or fragment).
pub fn check_endpoint(s: &str) -> Result<(), String> {
    let host_ok = |h: &str| match h.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => {
            !h.is_empty()
                && !h.starts_with(['.', '-'])
                && h.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'))
        }
    };
    let ok = s.len() <= ENDPOINT_BYTES_MAX
        && s.strip_prefix("https://").is_some_and(|rest| {
            let rest = rest.strip_suffix('/').unwrap_or(rest);
            rest.rsplit_once(':').is_some_and(|(h, p)| {
                host_ok(h)
                    && !p.is_empty()
                    && p.bytes().all(|b| b.is_ascii_digit())
                    && p.parse::<u16>().is_ok_and(|p| p > 0)
            })
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "endpoint {s:?}: https://HOST:PORT (TLS is required; HOST a name, an IPv4 address or [an IPv6 one], PORT 1 to 65535; nothing else)"
        ))
    }
}

impl Registry {
    /// Every field within its bounds and alphabet.
    pub fn check(&self) -> Result<(), String> {
        if self.endpoints.is_empty() || self.endpoints.len() > REGISTRY_ENDPOINTS_MAX {
            return Err(format!(
                "{} endpoints: 1 to {REGISTRY_ENDPOINTS_MAX} are needed",
                self.endpoints.len()
            ));
        }
        for (i, e) in self.endpoints.iter().enumerate() {
            check_endpoint(e)?;
            if self.endpoints[..i].contains(e) {
                return Err(format!("endpoint {e:?} is listed twice"));
            }
        }
        for (what, p) in [("ca", &self.ca), ("cert", &self.cert), ("key", &self.key)] {
            check_abs_path(p).map_err(|e| format!("{what}: {e}"))?;
        }
        check_prefix(&self.prefix)?;
        check_name("fleet", &self.fleet)?;
        check_name("host", &self.host)
    }

    /// `PREFIX/epochs/FLEET`: the fleet deployment's epoch.
    pub fn epoch_key(&self) -> String {
        format!("{}/epochs/{}", self.prefix, self.fleet)
    }

    /// `PREFIX/hosts/FLEET/`: the candidates, each `PREFIX/hosts/FLEET/HOST`.
    pub fn hosts_prefix(&self) -> String {
        format!("{}/hosts/{}/", self.prefix, self.fleet)
    }

    pub fn host_key(&self) -> String {
        format!("{}{}", self.hosts_prefix(), self.host)
    }
}

impl Canonical for Registry {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::array(self.endpoints.iter().map(|e| cbor::text(e)).collect()),
            cbor::text(&self.ca),
            cbor::text(&self.cert),
            cbor::text(&self.key),
            cbor::text(&self.prefix),
            cbor::text(&self.fleet),
            cbor::text(&self.host),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "registry", 7)?;
        let r = Registry {
            endpoints: f.list(REGISTRY_ENDPOINTS_MAX, |v| {
                cbor::as_text(v, "registry", ENDPOINT_BYTES_MAX)
            })?,
            ca: f.text(PATH_BYTES_MAX)?,
            cert: f.text(PATH_BYTES_MAX)?,
            key: f.text(PATH_BYTES_MAX)?,
            prefix: f.text(PREFIX_BYTES_MAX)?,
            fleet: f.text(FLEET_NAME_BYTES_MAX)?,
            host: f.text(FLEET_NAME_BYTES_MAX)?,
        };
        r.check().map_err(|e| DecodeError::schema("registry", e))?;
        Ok(r)
    }
}

/// The fencing token a registry grant carries: the etcd cluster that holds the fleet
/// epoch and the revision at which this host's claim created it. Revisions only grow
/// within a cluster, so a later claim (a successor deployment's) carries a larger
/// revision; storage that keeps the largest revision it has seen rejects older writers
/// (docs/OPERATOR.md, "Fencing tokens").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FencingToken {
    pub cluster: u64,
    pub revision: u64,
}

impl std::fmt::Display for FencingToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "revision {} of cluster {:016x}",
            self.revision, self.cluster
        )
    }
}

impl Canonical for FencingToken {
    fn to_value(&self) -> Value {
        cbor::array(vec![cbor::uint(self.cluster), cbor::uint(self.revision)])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "fencing-token", 2)?;
        let t = FencingToken {
            cluster: f.uint()?,
            revision: f.uint()?,
        };
        if t.revision == 0 {
            return Err(DecodeError::schema("fencing-token", "revision 0"));
        }
        Ok(t)
    }
}

pub const FLEET_RECORD_VERSION: u64 = 1;

/// The value of `PREFIX/epochs/FLEET`: which host's intent used the fleet epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetClaim {
    pub fleet: String,
    pub host: String,
    pub deployment: DeploymentId,
    /// The hash of the winning host's intent record, and its evidence digest.
    pub intent: Hash,
    pub evidence: Hash,
    /// The issuance's custody challenge nonce (random, drawn after the intent): no two
    /// issuances write the same claim, not even two clones of one memory snapshot, so a
    /// claim read back as "ours" is this issuance's alone.
    pub nonce: [u8; NONCE_BYTES],
}

impl Canonical for FleetClaim {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::uint(FLEET_RECORD_VERSION),
            cbor::text(&self.fleet),
            cbor::text(&self.host),
            cbor::bytes(&self.deployment.0),
            cbor::bytes(&self.intent.0),
            cbor::bytes(&self.evidence.0),
            cbor::bytes(&self.nonce),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "fleet-claim", 7)?;
        if f.uint()? != FLEET_RECORD_VERSION {
            return Err(DecodeError::schema("fleet-claim", "unsupported version"));
        }
        Ok(FleetClaim {
            fleet: f.text(FLEET_NAME_BYTES_MAX)?,
            host: f.text(FLEET_NAME_BYTES_MAX)?,
            deployment: DeploymentId(f.bytes()?),
            intent: Hash(f.bytes()?),
            evidence: Hash(f.bytes()?),
            nonce: f.bytes()?,
        })
    }
}

impl std::fmt::Display for FleetClaim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "host {} (deployment {}, intent {})",
            self.host, self.deployment, self.intent
        )
    }
}

/// The value of `PREFIX/hosts/FLEET/HOST`: a host enrolled for the fleet deployment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetHost {
    pub fleet: String,
    pub host: String,
    pub deployment: DeploymentId,
    /// sha256 of the host's signed manifest file.
    pub manifest: Hash,
    pub label: String,
}

impl Canonical for FleetHost {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::uint(FLEET_RECORD_VERSION),
            cbor::text(&self.fleet),
            cbor::text(&self.host),
            cbor::bytes(&self.deployment.0),
            cbor::bytes(&self.manifest.0),
            cbor::text(&self.label),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "fleet-host", 6)?;
        if f.uint()? != FLEET_RECORD_VERSION {
            return Err(DecodeError::schema("fleet-host", "unsupported version"));
        }
        Ok(FleetHost {
            fleet: f.text(FLEET_NAME_BYTES_MAX)?,
            host: f.text(FLEET_NAME_BYTES_MAX)?,
            deployment: DeploymentId(f.bytes()?),
            manifest: Hash(f.bytes()?),
            label: f.text(TEXT_BYTES_MAX)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry() -> Registry {
        Registry {
            endpoints: vec![
                "https://127.0.0.1:2379".into(),
                "https://etcd-2:2379/".into(),
            ],
            ca: "/etc/repoch/etcd-ca.pem".into(),
            cert: "/etc/repoch/etcd.pem".into(),
            key: "/etc/repoch/etcd.key".into(),
            prefix: "/repoch/prod".into(),
            fleet: "billing".into(),
            host: "host-a".into(),
        }
    }

    #[test]
    fn a_registry_round_trips_and_names_its_keys() {
        let r = registry();
        assert_eq!(Registry::from_bytes(&r.to_bytes()).unwrap(), r);
        assert_eq!(r.epoch_key(), "/repoch/prod/epochs/billing");
        assert_eq!(r.host_key(), "/repoch/prod/hosts/billing/host-a");
    }

    #[test]
    fn names_that_would_reach_another_key_are_refused() {
        for bad in ["", ".", "..", "a/b", "a b", "ü", &"x".repeat(65)] {
            assert!(check_name("fleet", bad).is_err(), "{bad:?}");
        }
        for bad in [
            "",
            "/",
            "repoch",
            "/repoch/",
            "//x",
            "/a/../b",
            "/a b",
            "/ov/hosts",
            "/epochs",
            "/a/epochs/b",
        ] {
            assert!(check_prefix(bad).is_err(), "{bad:?}");
        }
        for bad in [
            "http://h:1",
            "https://h",
            "https://h:0",
            "https://:1",
            "https://h:99999",
            "https://a/b:1",
            "https://evil#@127.0.0.1:1",
            "https://user@127.0.0.1:1",
            "https://127.0.0.1:1?x=1:5",
            "https://127.0.0.1:+1",
            "https://[::1:1",
            "https://-h:1",
        ] {
            assert!(check_endpoint(bad).is_err(), "{bad:?}");
        }
        for good in [
            "https://127.0.0.1:2379",
            "https://[::1]:2379",
            "https://etcd-1.example:2379/",
        ] {
            assert!(check_endpoint(good).is_ok(), "{good}");
        }
        let mut r = registry();
        r.endpoints.push(r.endpoints[0].clone());
        assert!(r.check().unwrap_err().contains("listed twice"));
        let mut r = registry();
        r.fleet = "../x".into();
        assert!(Registry::from_bytes(&r.to_bytes()).is_err());
    }

    #[test]
    fn a_fencing_token_of_revision_0_is_refused() {
        let t = FencingToken {
            cluster: 7,
            revision: 0,
        };
        assert!(FencingToken::from_bytes(&t.to_bytes()).is_err());
        let t = FencingToken {
            cluster: 7,
            revision: 9,
        };
        assert_eq!(FencingToken::from_bytes(&t.to_bytes()).unwrap(), t);
    }
}

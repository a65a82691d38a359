//! The fleet registry's records (docs/PROTOCOL.md, "The fleet registry"): what a deployment
//! that opted in names (its `[registry]`), what repoch writes to etcd, and the fencing
//! token a grant carries.
//!
//! Keys, under the deployment's prefix:
//!
//! - `PREFIX/epochs/FLEET`: the fleet deployment's one epoch, a [`FleetClaim`] created only
//!   if absent, by the host whose intent won it, and never modified;
//! - `PREFIX/hosts/FLEET/HOST`: a [`FleetHost`], created at enrollment: the hosts that are
//!   candidates for the fleet deployment's recovery;
//! - `PREFIX/fleets/FLEET`: the [`FleetRecord`], created once by the enrollment that
//!   establishes the fleet: its random id and the cluster and members it lives on, which
//!   every host pins in its manifest ([`FleetPin`]) and every registry answer is checked
//!   against.

use ciborium::value::Value;

use crate::cbor::{self, Canonical, DecodeError, Fields};
use crate::limits::{NONCE_BYTES, SIGNATURE_BYTES, TEXT_BYTES_MAX};
use crate::types::{check_abs_path, DeploymentId, Hash, PublicKey};

mod records;

pub use records::*;

/// Endpoints a `[registry]` may name (an etcd cluster of 1, 3, 5 or 7 members).
pub const REGISTRY_ENDPOINTS_MAX: usize = 7;
/// A fleet or host name: a key segment.
pub const FLEET_NAME_BYTES_MAX: usize = 64;
/// A key prefix.
pub const PREFIX_BYTES_MAX: usize = 128;
/// An endpoint, `https://HOST:PORT`.
pub const ENDPOINT_BYTES_MAX: usize = 256;
/// Voting members a fleet pins: etcd advises at most 7; room for a replacement under way.
pub const MEMBERS_MAX: usize = 9;
/// A fleet id: random, drawn by the enrollment that establishes the fleet.
pub const FLEET_ID_BYTES: usize = 16;

/// The id of an established fleet, shown as 32 lowercase hex digits: derived from the key
/// that signs the fleet's record, its prefix and its name ([`FleetId::of`]), so that an id
/// names exactly one signing key (docs/PROTOCOL.md, "The fleet registry").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FleetId(pub [u8; FLEET_ID_BYTES]);

impl FleetId {
    /// The id of fleet `fleet` under `prefix` whose record `key` signs: the first 16 bytes
    /// of sha256 over the canonical array `["repoch/v1/fleet-id", key, prefix, fleet]`.
    pub fn of(key: &PublicKey, prefix: &str, fleet: &str) -> FleetId {
        let bytes = cbor::encode(&cbor::array(vec![
            cbor::text("repoch/v1/fleet-id"),
            cbor::bytes(&key.0),
            cbor::text(prefix),
            cbor::text(fleet),
        ]));
        let mut id = [0u8; FLEET_ID_BYTES];
        id.copy_from_slice(&Hash::of(&bytes).0[..FLEET_ID_BYTES]);
        FleetId(id)
    }
}

impl std::fmt::Display for FleetId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl std::str::FromStr for FleetId {
    type Err = crate::Invalid;
    /// Exactly 32 hex digits (either case): no prefix, no abbreviation.
    fn from_str(s: &str) -> Result<FleetId, crate::Invalid> {
        let bad = || crate::Invalid(format!("fleet id {s:?}: {} hex digits", 2 * FLEET_ID_BYTES));
        if s.len() != 2 * FLEET_ID_BYTES || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut id = [0u8; FLEET_ID_BYTES];
        for (b, pair) in id.iter_mut().zip(s.as_bytes().chunks_exact(2)) {
            let pair = std::str::from_utf8(pair).map_err(|_| bad())?;
            *b = u8::from_str_radix(pair, 16).map_err(|_| bad())?;
        }
        Ok(FleetId(id))
    }
}

/// What a host pins of its fleet at enrollment (from the fleet record, or the cluster's
/// own answer for the host that establishes it): an answer is the fleet's only from the
/// pinned cluster, from one of the pinned members, while that member lists a majority of
/// the pinned members, and from a cluster that holds the fleet record with this id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetPin {
    pub id: FleetId,
    pub cluster: u64,
    /// The voting members' ids, ascending, each once.
    pub members: Vec<u64>,
    /// Added to every fencing token's revision: 0, or, for a fleet established on a
    /// cluster rebuilt from nothing (its revisions start again), at least the largest
    /// token any host of the fleets before it recorded, so that tokens never go back.
    pub floor: u64,
}

/// The largest floor a fleet may take: room for any etcd revision above it.
pub const FLOOR_MAX: u64 = 1 << 62;

/// The fencing token of a claim created at `create_revision` in `cluster`, above `floor`
/// ([`FleetPin::token`]; a registry without a pin has the floor 0).
pub fn token_above(floor: u64, cluster: u64, create_revision: i64) -> Option<FencingToken> {
    let created = u64::try_from(create_revision).ok().filter(|r| *r > 0)?;
    Some(FencingToken {
        cluster,
        revision: floor.checked_add(created)?,
    })
}

impl Registry {
    /// The pinned fleet's token floor (0 without a pin).
    pub fn floor(&self) -> u64 {
        self.pin.as_ref().map_or(0, |p| p.floor)
    }
}

impl FleetPin {
    /// The fencing token of a claim created at `create_revision` in `cluster`: the revision
    /// above this fleet's floor. None for a revision that is no create revision (0 or
    /// less) or one whose sum with the floor leaves `u64`.
    pub fn token(&self, cluster: u64, create_revision: i64) -> Option<FencingToken> {
        token_above(self.floor, cluster, create_revision)
    }

    /// A cluster id and 1 to [`MEMBERS_MAX`] member ids, none 0, ascending.
    pub fn check(&self) -> Result<(), crate::Invalid> {
        if self.cluster == 0 {
            return Err("cluster id 0".into());
        }
        if self.members.is_empty() || self.members.len() > MEMBERS_MAX {
            return Err(format!(
                "{} members: 1 to {MEMBERS_MAX} are pinned",
                self.members.len()
            )
            .into());
        }
        if self.members[0] == 0 || self.members.windows(2).any(|w| w[0] >= w[1]) {
            return Err("member ids: none 0, ascending, each once".into());
        }
        if self.floor > FLOOR_MAX {
            return Err(format!("token floor {} over {FLOOR_MAX}", self.floor).into());
        }
        Ok(())
    }

    /// Whether `listed` (the voting members a member names) holds a majority of the pinned
    /// members: a member replaced one at a time keeps the cluster the fleet's; a member
    /// whose data was copied and started alone lists itself, a minority.
    pub fn majority_of(&self, listed: &[u64]) -> bool {
        let shared = self.members.iter().filter(|m| listed.contains(m)).count();
        shared > self.members.len() / 2
    }
}

impl Canonical for FleetPin {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::bytes(&self.id.0),
            cbor::uint(self.cluster),
            cbor::array(self.members.iter().map(|m| cbor::uint(*m)).collect()),
            cbor::uint(self.floor),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "fleet-pin", 4)?;
        let p = FleetPin {
            id: FleetId(f.bytes()?),
            cluster: f.uint()?,
            members: f.list(MEMBERS_MAX, |v| cbor::as_uint(v, "fleet-pin"))?,
            floor: f.uint()?,
        };
        p.check().map_err(|e| DecodeError::schema("fleet-pin", e))?;
        Ok(p)
    }
}

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
    /// The fleet as enrollment pinned it; `None` only in a manifest enrolled before fleets
    /// had records (its recovery is refused `registry-mismatch`) or in an auditor's table.
    pub pin: Option<FleetPin>,
    /// With a pin: the create revision of the fleet record the enrollment found (or made).
    /// Every call of a recovery holds only while the record is still there, created and
    /// last modified at this revision, in the cluster that answers (a cluster started from
    /// the same template answers with the same ids, and has no such record). 0 without.
    pub record_revision: u64,
}

/// A name that is one key segment: 1 to [`FLEET_NAME_BYTES_MAX`] bytes of
/// `A-Z a-z 0-9 . _ -`, not `.` or `..`.
pub fn check_name(what: &str, s: &str) -> Result<(), crate::Invalid> {
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
        )
        .into())
    }
}

/// The segments repoch's keys put after a prefix: no prefix may contain one, or one
/// deployment's prefix could nest in another's (`/p/hosts` + `/epochs/F` is `/p`'s host
/// record of fleet `epochs`, host `F`).
pub const RESERVED_SEGMENTS: &[&str] = &["epochs", "fleets", "hosts"];

/// A prefix: `/` then segments of [`check_name`]'s alphabet, none of
/// [`RESERVED_SEGMENTS`], no trailing `/`, at most [`PREFIX_BYTES_MAX`] bytes.
pub fn check_prefix(s: &str) -> Result<(), crate::Invalid> {
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
        ).into());
    }
    if let Some(seg) = segments.iter().find(|seg| RESERVED_SEGMENTS.contains(seg)) {
        return Err(format!(
            "prefix {s:?}: the segment {seg:?} is repoch's own (its keys are PREFIX/epochs/FLEET, PREFIX/fleets/FLEET and PREFIX/hosts/FLEET/HOST): a prefix holding it could nest in another's"
        ).into());
    }
    Ok(())
}

/// An endpoint: `https://HOST:PORT` (TLS is required), HOST a DNS name or an IPv4
/// address (`A-Z a-z 0-9 . -`) or an IPv6 one in brackets, PORT 1 to 65535 in digits;
/// nothing else (no user, path, query or fragment).
pub fn check_endpoint(s: &str) -> Result<(), crate::Invalid> {
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
        ).into())
    }
}

/// What makes two valid endpoints ([`check_endpoint`]) the same member: the host, in
/// lowercase (a name) or parsed (an address), and the port as a number; not a trailing
/// `/` or a leading zero.
pub fn endpoint_identity(s: &str) -> String {
    let rest = s.strip_prefix("https://").unwrap_or(s);
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (host, port) = rest.rsplit_once(':').unwrap_or((rest, ""));
    let port = port
        .parse::<u16>()
        .map_or_else(|_| port.to_owned(), |p| p.to_string());
    let host = match host.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
        Some(v6) => v6
            .parse::<std::net::Ipv6Addr>()
            .map_or_else(|_| v6.to_owned(), |a| a.to_string()),
        None => host.to_ascii_lowercase(),
    };
    format!("{host}|{port}")
}

impl Registry {
    /// Every field within its bounds and alphabet.
    pub fn check(&self) -> Result<(), crate::Invalid> {
        if self.endpoints.is_empty() || self.endpoints.len() > REGISTRY_ENDPOINTS_MAX {
            return Err(format!(
                "{} endpoints: 1 to {REGISTRY_ENDPOINTS_MAX} are needed",
                self.endpoints.len()
            )
            .into());
        }
        let mut seen = Vec::new();
        for e in &self.endpoints {
            check_endpoint(e)?;
            let same = endpoint_identity(e);
            if let Some(was) = seen.iter().find(|(_, s)| *s == same) {
                let (was, _): &(&String, String) = was;
                return Err(format!(
                    "endpoint {e:?} is listed twice (as {was:?}: the same host and port)"
                )
                .into());
            }
            seen.push((e, same));
        }
        for (what, p) in [("ca", &self.ca), ("cert", &self.cert), ("key", &self.key)] {
            check_abs_path(p).map_err(|e| format!("{what}: {e}"))?;
        }
        check_prefix(&self.prefix)?;
        check_name("fleet", &self.fleet)?;
        check_name("host", &self.host)?;
        self.pin.as_ref().map_or(Ok(()), FleetPin::check)
    }

    /// `PREFIX/fleets/FLEET`: the fleet's record.
    pub fn fleet_key(&self) -> String {
        format!("{}/fleets/{}", self.prefix, self.fleet)
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
        let mut fields = vec![
            cbor::array(self.endpoints.iter().map(|e| cbor::text(e)).collect()),
            cbor::text(&self.ca),
            cbor::text(&self.cert),
            cbor::text(&self.key),
            cbor::text(&self.prefix),
            cbor::text(&self.fleet),
            cbor::text(&self.host),
        ];
        if let Some(p) = &self.pin {
            fields.push(p.to_value());
            fields.push(cbor::uint(self.record_revision));
        }
        cbor::array(fields)
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open_between(v, "registry", 7, 9)?;
        let r = Registry {
            endpoints: f.list(REGISTRY_ENDPOINTS_MAX, |v| {
                cbor::as_text(v, "registry", ENDPOINT_BYTES_MAX)
            })?,
            ca: f.path()?,
            cert: f.path()?,
            key: f.path()?,
            prefix: f.text(PREFIX_BYTES_MAX)?,
            fleet: f.text(FLEET_NAME_BYTES_MAX)?,
            host: f.text(FLEET_NAME_BYTES_MAX)?,
            pin: match f.more() {
                true => Some(FleetPin::from_value(f.field()?)?),
                false => None,
            },
            record_revision: match f.more() {
                true => f.uint()?,
                false => 0,
            },
        };
        if r.pin.is_some() != (r.record_revision > 0) {
            return Err(DecodeError::schema(
                "registry",
                "a fleet pin comes with its record's create revision (above 0), and only with it",
            ));
        }
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
            pin: Some(pin()),
            record_revision: 5,
        }
    }

    fn pin() -> FleetPin {
        FleetPin {
            id: FleetId([7; FLEET_ID_BYTES]),
            cluster: 0xc1,
            members: vec![1, 2, 3],
            floor: 0,
        }
    }

    #[test]
    fn a_token_is_the_create_revision_above_the_floor_and_never_wraps() {
        let t = |floor: u64, created: i64| FleetPin { floor, ..pin() }.token(0xc1, created);
        assert_eq!(
            t(0, 7),
            Some(FencingToken {
                cluster: 0xc1,
                revision: 7
            })
        );
        assert_eq!(
            t(44, 3).map(|t| t.revision),
            Some(47),
            "above the predecessor's 44"
        );
        assert_eq!(t(44, 0), None);
        assert_eq!(t(44, -1), None);
        assert_eq!(t(u64::MAX, 1), None);
        let over = FleetPin {
            floor: FLOOR_MAX + 1,
            ..pin()
        };
        assert!(over
            .check()
            .unwrap_err()
            .to_string()
            .contains("token floor"));
        assert!(FleetPin::from_bytes(&over.to_bytes()).is_err());
        let at = FleetPin {
            floor: FLOOR_MAX,
            ..pin()
        };
        assert_eq!(FleetPin::from_bytes(&at.to_bytes()).unwrap(), at);
    }

    #[test]
    fn a_pinned_registry_and_an_unpinned_one_round_trip_and_a_bad_pin_is_refused() {
        let mut r = registry();
        assert_eq!(Registry::from_bytes(&r.to_bytes()).unwrap(), r);
        // A pin without its record's revision, or a revision without a pin.
        r.record_revision = 0;
        assert!(Registry::from_bytes(&r.to_bytes()).is_err());
        r.pin = None;
        r.record_revision = 5;
        let mut fields = match r.to_value() {
            ciborium::value::Value::Array(a) => a,
            _ => unreachable!(),
        };
        fields.push(crate::cbor::uint(5));
        let bytes = crate::cbor::encode(&crate::cbor::array(fields));
        assert!(Registry::from_bytes(&bytes).is_err());
        r.record_revision = 0;
        assert_eq!(Registry::from_bytes(&r.to_bytes()).unwrap(), r);
        for (bad, why) in [
            (vec![], "0 members"),
            (vec![2, 1], "ascending"),
            (vec![1, 1], "ascending"),
            (vec![0, 1], "none 0"),
            ((1..=10).collect(), "10 members"),
        ] {
            let p = FleetPin {
                members: bad,
                ..pin()
            };
            assert!(p.check().unwrap_err().to_string().contains(why), "{why}");
            r.pin = Some(p);
            assert!(Registry::from_bytes(&r.to_bytes()).is_err(), "{why}");
        }
        let p = FleetPin {
            cluster: 0,
            ..pin()
        };
        assert_eq!(p.check().unwrap_err(), "cluster id 0".into());
        assert!(FleetPin::from_bytes(&p.to_bytes()).is_err());
        assert_eq!(FleetPin::from_bytes(&pin().to_bytes()).unwrap(), pin());
    }

    #[test]
    fn a_majority_of_the_pinned_members_is_more_than_half_of_them() {
        let p = pin();
        assert!(p.majority_of(&[1, 2, 3]));
        assert!(p.majority_of(&[1, 3, 9]), "one member replaced");
        assert!(!p.majority_of(&[1]), "one member alone: a fork");
        assert!(!p.majority_of(&[3, 8, 9]));
        assert!(!p.majority_of(&[]));
        let four = FleetPin {
            members: vec![1, 2, 3, 4],
            ..pin()
        };
        assert!(!four.majority_of(&[1, 2]), "half is no majority");
        assert!(four.majority_of(&[1, 2, 4]));
    }

    #[test]
    fn a_fleet_id_reads_back_as_it_prints_and_nothing_shorter() {
        let id = FleetId([0xab; FLEET_ID_BYTES]);
        assert_eq!(id.to_string(), "ab".repeat(16));
        assert_eq!(id.to_string().parse::<FleetId>().unwrap(), id);
        assert_eq!("AB".repeat(16).parse::<FleetId>().unwrap(), id);
        for bad in [
            "",
            "ab",
            &"ab".repeat(17),
            &format!("{}zz", "ab".repeat(15)),
            &format!("+{}", "a".repeat(31)),
        ] {
            assert!(bad.parse::<FleetId>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_claim_verifies_only_under_its_hosts_key_and_only_as_signed() {
        let key = ed25519_dalek::SigningKey::from_bytes(&[3; 32]);
        let other = ed25519_dalek::SigningKey::from_bytes(&[4; 32]);
        let pk = |k: &ed25519_dalek::SigningKey| PublicKey(k.verifying_key().to_bytes());
        let c = FleetClaim {
            fleet: "billing".into(),
            fleet_id: FleetId([9; 16]),
            host: "host-a".into(),
            deployment: DeploymentId([1; 16]),
            intent: Hash([2; 32]),
            evidence: Hash([3; 32]),
            nonce: [4; 32],
            floor: 0,
            signature: [0; 64],
        }
        .signed(&key);
        assert!(c.signed_by(&pk(&key)));
        assert!(!c.signed_by(&pk(&other)));
        assert_eq!(FleetClaim::from_bytes(&c.to_bytes()).unwrap(), c);
        let moved = FleetClaim {
            host: "host-b".into(),
            ..c.clone()
        };
        assert!(!moved.signed_by(&pk(&key)), "a field changed after signing");
        let elsewhere = FleetClaim {
            fleet_id: FleetId([10; 16]),
            ..c.clone()
        };
        assert!(!elsewhere.signed_by(&pk(&key)), "the fleet id is signed");
        // Not a signature under another context.
        let under_grant = crate::sign::sign(&key, crate::sign::Context::Grant, &c.body_bytes());
        assert!(!FleetClaim {
            signature: under_grant,
            ..c.clone()
        }
        .signed_by(&pk(&key)));
    }

    fn record() -> FleetRecord {
        FleetRecord {
            fleet: "billing".into(),
            prefix: "/repoch/prod".into(),
            pin: pin(),
            host: "host-a".into(),
            established: 1_700_000_000,
            key: PublicKey([0; 32]),
            signature: [0; SIGNATURE_BYTES],
        }
        .signed(&ed25519_dalek::SigningKey::from_bytes(&[9; 32]))
    }

    #[test]
    fn a_fleet_record_is_genuine_only_signed_by_the_key_its_id_names() {
        let rec = record();
        assert_eq!(rec.genuine(), Ok(()));
        assert_eq!(
            rec.pin.id,
            FleetId::of(&rec.key, "/repoch/prod", "billing"),
            "the id is the key's, the prefix's and the name's"
        );
        // An etcd writer's copies: re-encoded under another prefix, with another floor, or
        // re-signed by a key of its own under the id it copied. None is genuine.
        let moved = FleetRecord {
            prefix: "/repoch/Prod".into(),
            ..rec.clone()
        };
        assert!(moved
            .genuine()
            .unwrap_err()
            .contains("not the id of its key"));
        let floored = FleetRecord {
            pin: FleetPin {
                floor: 1 << 62,
                ..rec.pin.clone()
            },
            ..rec.clone()
        };
        assert!(floored
            .genuine()
            .unwrap_err()
            .to_string()
            .contains("did not sign"));
        let resigned = rec
            .clone()
            .signed(&ed25519_dalek::SigningKey::from_bytes(&[10; 32]));
        assert_ne!(resigned.pin.id, rec.pin.id, "another key is another fleet");
        let forged = FleetRecord {
            pin: rec.pin.clone(),
            ..resigned
        };
        assert!(forged.genuine().is_err());
        let r = Registry {
            pin: Some(rec.pin.clone()),
            ..registry()
        };
        assert!(moved.matches(&r, &rec.pin).is_err());
    }

    #[test]
    fn a_fleet_record_round_trips_and_matches_only_its_own_fleet() {
        let rec = record();
        let pin = || rec.pin.clone();
        assert_eq!(FleetRecord::from_bytes(&rec.to_bytes()).unwrap(), rec);
        let registry = || Registry {
            pin: Some(pin()),
            ..registry()
        };
        let r = registry();
        assert_eq!(rec.matches(&r, &pin()), Ok(()));
        let other = |f: &dyn Fn(&mut Registry, &mut FleetPin)| {
            let (mut r, mut p) = (registry(), pin());
            f(&mut r, &mut p);
            rec.matches(&r, &p).unwrap_err()
        };
        assert!(other(&|r, _| r.prefix = "/repoch/Prod".into()).contains("\"/repoch/prod\""));
        assert!(other(&|r, _| r.fleet = "billing2".into()).contains("\"billing\""));
        assert_eq!(
            other(&|_, p| p.id = FleetId([8; 16])),
            format!("fleet id {}", rec.pin.id).into()
        );
        assert_eq!(
            other(&|_, p| p.cluster = 0xc2),
            "the record of cluster 00000000000000c1".into()
        );
        let bad = FleetRecord {
            prefix: "/a/hosts".into(),
            ..rec.clone()
        };
        assert!(FleetRecord::from_bytes(&bad.to_bytes()).is_err());
    }

    #[test]
    fn one_member_spelled_two_ways_is_listed_twice() {
        for (a, b) in [
            ("https://a:1", "https://a:1/"),
            ("https://a:1", "https://a:01"),
            ("https://A:1", "https://a:1"),
            ("https://[::1]:1", "https://[0::1]:1/"),
        ] {
            let mut r = registry();
            r.endpoints = vec![a.into(), b.into()];
            assert!(
                r.check().unwrap_err().to_string().contains("listed twice"),
                "{a} {b}"
            );
        }
        let mut r = registry();
        r.endpoints = vec![
            "https://a:1".into(),
            "https://a:2".into(),
            "https://b:1".into(),
        ];
        assert_eq!(r.check(), Ok(()));
    }

    #[test]
    fn a_registry_round_trips_and_names_its_keys() {
        let r = registry();
        assert_eq!(Registry::from_bytes(&r.to_bytes()).unwrap(), r);
        assert_eq!(r.epoch_key(), "/repoch/prod/epochs/billing");
        assert_eq!(r.fleet_key(), "/repoch/prod/fleets/billing");
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
            "/a/fleets",
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
        assert!(r.check().unwrap_err().to_string().contains("listed twice"));
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

//! The fleet's signed records in the registry (docs/PROTOCOL.md, "The fleet registry"):
//! the fleet record, a host's record and a claim of the fleet epoch.

use super::*;

pub const FLEET_RECORD_VERSION: u64 = 2;
/// Claims name the fleet id they were made for and its token floor: version 4 (versions 1
/// to 3 read as no claim). A claim of another fleet of the same name (another prefix,
/// another cluster), copied with its host's record, is then no claim of this fleet; and
/// the token a claim stands for is its create revision above a floor its host signed,
/// never one an etcd writer puts in a fleet record.
pub const FLEET_CLAIM_VERSION: u64 = 4;
/// Host records carry the host's key: version 2 (a version 1 value reads as no record).
pub const FLEET_HOST_VERSION: u64 = 2;

/// The value of `PREFIX/epochs/FLEET`: which host's intent used the fleet epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetClaim {
    pub fleet: String,
    /// The id of the fleet record the claiming host pinned.
    pub fleet_id: FleetId,
    pub host: String,
    pub deployment: DeploymentId,
    /// The hash of the winning host's intent record, and its evidence digest.
    pub intent: Hash,
    pub evidence: Hash,
    /// The issuance's custody challenge nonce (random, drawn after the intent): no two
    /// issuances write the same claim, not even two clones of one memory snapshot, so a
    /// claim read back as "ours" is this issuance's alone.
    pub nonce: [u8; NONCE_BYTES],
    /// The token floor of the fleet the claiming host pinned: its token is the claim's
    /// create revision above it.
    pub floor: u64,
    /// The host's issuer key's signature over the claim's other fields
    /// ([`FleetClaim::body`], context `repoch/v1/fleet-claim`): a claim no enrolled host
    /// signed is an etcd writer's, not a host's.
    pub signature: [u8; SIGNATURE_BYTES],
}

impl FleetClaim {
    /// The signed part: the claim's fields but the signature, in order.
    fn body(&self) -> Vec<Value> {
        vec![
            cbor::uint(FLEET_CLAIM_VERSION),
            cbor::text(&self.fleet),
            cbor::bytes(&self.fleet_id.0),
            cbor::text(&self.host),
            cbor::bytes(&self.deployment.0),
            cbor::bytes(&self.intent.0),
            cbor::bytes(&self.evidence.0),
            cbor::bytes(&self.nonce),
            cbor::uint(self.floor),
        ]
    }

    pub(crate) fn body_bytes(&self) -> Vec<u8> {
        cbor::encode(&cbor::array(self.body()))
    }

    /// This claim signed by `key` (the host's issuer key).
    pub fn signed(mut self, key: &ed25519_dalek::SigningKey) -> FleetClaim {
        self.signature =
            crate::sign::sign(key, crate::sign::Context::FleetClaim, &self.body_bytes());
        self
    }

    /// Whether `key` signed this claim.
    pub fn signed_by(&self, key: &PublicKey) -> bool {
        crate::sign::verify(
            key,
            crate::sign::Context::FleetClaim,
            &self.body_bytes(),
            &self.signature,
        )
    }
}

impl Canonical for FleetClaim {
    fn to_value(&self) -> Value {
        let mut fields = self.body();
        fields.push(cbor::bytes(&self.signature));
        cbor::array(fields)
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "fleet-claim", 10)?;
        if f.uint()? != FLEET_CLAIM_VERSION {
            return Err(DecodeError::schema("fleet-claim", "unsupported version"));
        }
        let c = FleetClaim {
            fleet: f.text(FLEET_NAME_BYTES_MAX)?,
            fleet_id: FleetId(f.bytes()?),
            host: f.text(FLEET_NAME_BYTES_MAX)?,
            deployment: DeploymentId(f.bytes()?),
            intent: Hash(f.bytes()?),
            evidence: Hash(f.bytes()?),
            nonce: f.bytes()?,
            floor: f.uint()?,
            signature: f.bytes()?,
        };
        if c.floor > FLOOR_MAX {
            return Err(DecodeError::schema("fleet-claim", "a floor over FLOOR_MAX"));
        }
        // Names an operator reads and types back: one key segment each, never raw text.
        check_name("fleet", &c.fleet)
            .and_then(|()| check_name("host", &c.host))
            .map_err(|e| DecodeError::schema("fleet-claim", e))?;
        Ok(c)
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

/// The value of `PREFIX/fleets/FLEET`: the fleet as the enrollment that established it
/// found it, signed by that host's issuer key, whose id names the key. Created only if
/// absent, with an administrator's credential (no host's may write it); never modified by
/// repoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetRecord {
    pub fleet: String,
    pub prefix: String,
    pub pin: FleetPin,
    /// The host whose enrollment established it.
    pub host: String,
    /// When it was established (Unix seconds).
    pub established: u64,
    /// The establishing host's issuer key: `pin.id` is [`FleetId::of`] it.
    pub key: PublicKey,
    /// `key`'s signature over the other fields ([`FleetRecord::body`], context
    /// `repoch/v1/fleet-record`).
    pub signature: [u8; SIGNATURE_BYTES],
}

impl FleetRecord {
    /// The signed part: every field but the signature, in order.
    fn body(&self) -> Vec<Value> {
        vec![
            cbor::uint(FLEET_RECORD_VERSION),
            cbor::text(&self.fleet),
            cbor::text(&self.prefix),
            self.pin.to_value(),
            cbor::text(&self.host),
            cbor::uint(self.established),
            cbor::bytes(&self.key.0),
        ]
    }

    /// This record signed by `key` (the establishing host's issuer key), its id derived
    /// from that key.
    pub fn signed(mut self, key: &ed25519_dalek::SigningKey) -> FleetRecord {
        self.key = PublicKey::from(&key.verifying_key());
        self.pin.id = FleetId::of(&self.key, &self.prefix, &self.fleet);
        let body = cbor::encode(&cbor::array(self.body()));
        self.signature = crate::sign::sign(key, crate::sign::Context::FleetRecord, &body);
        self
    }

    /// Whether this record is its own: its id derived from its key, prefix and name, and
    /// signed by that key. A record anyone else wrote (planted, re-encoded under another
    /// prefix or with another floor) is not.
    pub fn genuine(&self) -> Result<(), crate::Invalid> {
        if self.pin.id != FleetId::of(&self.key, &self.prefix, &self.fleet) {
            return Err(format!(
                "fleet id {} is not the id of its key, prefix and name",
                self.pin.id
            )
            .into());
        }
        let body = cbor::encode(&cbor::array(self.body()));
        match crate::sign::verify(
            &self.key,
            crate::sign::Context::FleetRecord,
            &body,
            &self.signature,
        ) {
            true => Ok(()),
            false => Err(format!("a record its key {} did not sign", self.key).into()),
        }
    }

    /// Whether this record is the fleet `r` names and pinned: genuine, its name, prefix,
    /// id and cluster. The reason when it is not.
    pub fn matches(&self, r: &Registry, pin: &FleetPin) -> Result<(), crate::Invalid> {
        self.genuine()?;
        if self.fleet != r.fleet || self.prefix != r.prefix {
            return Err(format!(
                "the record of fleet {:?} under prefix {:?}",
                self.fleet, self.prefix
            )
            .into());
        }
        if self.pin.id != pin.id {
            return Err(format!("fleet id {}", self.pin.id).into());
        }
        if self.pin.cluster != pin.cluster {
            return Err(format!("the record of cluster {:016x}", self.pin.cluster).into());
        }
        Ok(())
    }
}

impl Canonical for FleetRecord {
    fn to_value(&self) -> Value {
        let mut fields = self.body();
        fields.push(cbor::bytes(&self.signature));
        cbor::array(fields)
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "fleet-record", 8)?;
        if f.uint()? != FLEET_RECORD_VERSION {
            return Err(DecodeError::schema("fleet-record", "unsupported version"));
        }
        let r = FleetRecord {
            fleet: f.text(FLEET_NAME_BYTES_MAX)?,
            prefix: f.text(PREFIX_BYTES_MAX)?,
            pin: FleetPin::from_value(f.field()?)?,
            host: f.text(FLEET_NAME_BYTES_MAX)?,
            established: f.uint()?,
            key: PublicKey(f.bytes()?),
            signature: f.bytes()?,
        };
        check_prefix(&r.prefix)
            .and_then(|()| check_name("fleet", &r.fleet))
            .and_then(|()| check_name("host", &r.host))
            .map_err(|e| DecodeError::schema("fleet-record", e))?;
        Ok(r)
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
    /// The host's issuer key: what its claims are signed with.
    pub issuer_key: PublicKey,
}

impl Canonical for FleetHost {
    fn to_value(&self) -> Value {
        cbor::array(vec![
            cbor::uint(FLEET_HOST_VERSION),
            cbor::text(&self.fleet),
            cbor::text(&self.host),
            cbor::bytes(&self.deployment.0),
            cbor::bytes(&self.manifest.0),
            cbor::text(&self.label),
            cbor::bytes(&self.issuer_key.0),
        ])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "fleet-host", 7)?;
        if f.uint()? != FLEET_HOST_VERSION {
            return Err(DecodeError::schema("fleet-host", "unsupported version"));
        }
        let h = FleetHost {
            fleet: f.text(FLEET_NAME_BYTES_MAX)?,
            host: f.text(FLEET_NAME_BYTES_MAX)?,
            deployment: DeploymentId(f.bytes()?),
            manifest: Hash(f.bytes()?),
            label: f.text(TEXT_BYTES_MAX)?,
            issuer_key: PublicKey(f.bytes()?),
        };
        check_name("fleet", &h.fleet)
            .and_then(|()| check_name("host", &h.host))
            .map_err(|e| DecodeError::schema("fleet-host", e))?;
        Ok(h)
    }
}

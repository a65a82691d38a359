//! A fleet epoch taken by another claim than this issuance's: whose it is, judged by the
//! key of the host it names as a majority of the members hold it (docs/ARCHITECTURE.md,
//! "The fleet registry").

use repoch_protocol::cbor::Canonical;
use repoch_protocol::fleet::{FleetClaim, FleetHost, Registry};
use repoch_protocol::{PublicKey, Reason};

use super::{distinct, holder, majority, quorum, Entry, Fleet, Said};
use crate::refusal::Refusal;

/// Who holds the fleet epoch (`e`, the key's entry) when it is not this issuance's claim:
/// `epoch-consumed` naming a claim its host signed; `registry-forged` for anything else,
/// which no recovery wrote: a value that is no claim, a claim of another fleet, or one the
/// host it names did not sign. A claim naming this host is checked with this host's
/// issuer key (`own`); another host's with the key of its host record, which must be
/// unmodified and enroll the claim's deployment. A host record that cannot be read leaves
/// the claim unjudged: `registry-unavailable`, naming the holder.
pub(super) fn taken(
    fleet: &mut dyn Fleet,
    r: &Registry,
    own: &PublicKey,
    (subject, expected): (String, String),
    e: &Entry,
) -> Refusal {
    let held = holder(e);
    let refusal = |reason, observed: String| Refusal::new(reason, &subject, &expected, observed);
    let forged = |why: String| refusal(Reason::RegistryForged, format!("{held}: {why}"));
    let c = match fleet_claim(r, e) {
        Ok(c) => c,
        Err(why) => return forged(why.to_string()),
    };
    // A claim naming this host is judged by this host's own key alone: a host record
    // recreated by an etcd writer with a key of its own vouches for nothing here.
    if c.host == r.host {
        return match c.signed_by(own) {
            true => refusal(Reason::EpochConsumed, held),
            false => forged("it names this host, whose issuer key did not sign it".into()),
        };
    }
    let key = format!("{}{}", r.hosts_prefix(), c.host);
    let heard = match majority(fleet, r, &key) {
        Ok(heard) => heard,
        Err(unread) => {
            return refusal(
                Reason::RegistryUnavailable,
                format!("{held}; its host record {key} unread: {}", unread.observed),
            )
        }
    };
    // As a majority of the members say: a copy of the fleet one endpoint reaches, lacking
    // the record, cannot make a genuine claim read forged, nor vouch for a forged one.
    let (vouching, not, why) = signers_said(&heard, &c);
    if vouching >= quorum(r) {
        return refusal(Reason::EpochConsumed, held);
    }
    match why {
        Some(why) if not >= quorum(r) => forged(format!("{key} {why}")),
        _ => refusal(
            Reason::RegistryUnavailable,
            format!(
                "{held}; its host record {key}: the members disagree ({vouching} vouch for the claim, {not} do not)"
            ),
        ),
    }
}

/// Why an entry at the fleet epoch's key is no claim of this fleet's: none any of its
/// recoveries wrote.
#[derive(Debug, thiserror::Error)]
enum NotAClaim {
    #[error("no recovery writes such a value")]
    Undecodable,
    #[error("a claim for fleet {0}")]
    OtherFleet(String),
    #[error("a claim for fleet id {claimed}, not the pinned {pinned}")]
    OtherFleetId { claimed: String, pinned: String },
}

/// The fleet claim entry `e` holds, if it is one for this fleet (and the pinned fleet id);
/// else why it is none any recovery wrote.
fn fleet_claim(r: &Registry, e: &Entry) -> Result<FleetClaim, NotAClaim> {
    let c = match (
        e.value_bytes == e.value.len(),
        FleetClaim::from_bytes(&e.value),
    ) {
        (true, Ok(c)) => c,
        _ => return Err(NotAClaim::Undecodable),
    };
    if c.fleet != r.fleet {
        return Err(NotAClaim::OtherFleet(c.fleet.to_string()));
    }
    if let Some(pin) = r.pin.as_ref().filter(|p| p.id != c.fleet_id) {
        return Err(NotAClaim::OtherFleetId {
            claimed: c.fleet_id.to_string(),
            pinned: pin.id.to_string(),
        });
    }
    Ok(c)
}

/// What the members `heard` say of claim `c`'s signer, each by the host record it holds:
/// how many distinct members vouch for it, how many do not, and the first reason one does
/// not.
fn signers_said(heard: &[Said], c: &FleetClaim) -> (usize, usize, Option<NotTheSigner>) {
    let verdicts: Vec<(u64, Result<(), NotTheSigner>)> = heard
        .iter()
        .map(|said| (said.member, signer(said.entry.as_ref(), c)))
        .collect();
    let members = |vouching: bool| {
        distinct(
            verdicts
                .iter()
                .filter(|(_, v)| v.is_ok() == vouching)
                .map(|(m, _)| *m),
        )
    };
    let why = verdicts.iter().find_map(|(_, v)| v.clone().err());
    (members(true), members(false), why)
}

/// What a host record is instead of the signer of a claim (the registry's doing: a writer,
/// or a member's copy of the fleet). Each reads after the record's key.
#[derive(Debug, Clone, thiserror::Error)]
enum NotTheSigner {
    #[error("is absent: no host of that name is enrolled")]
    Absent,
    #[error("was modified (created at revision {created}, modified at {modified})")]
    Modified { created: i64, modified: i64 },
    #[error("is no host record ({0})")]
    NoHostRecord(repoch_protocol::cbor::DecodeError),
    #[error("is a value of {0} bytes")]
    Oversized(usize),
    #[error("enrolls host {host} of fleet {fleet} (deployment {deployment})")]
    AnotherHost {
        host: String,
        fleet: String,
        deployment: repoch_protocol::DeploymentId,
    },
    #[error("holds another issuer key than the claim's signer")]
    AnotherKey,
}

/// Whether the host record `record` (its entry, if any) signed claim `c`: unmodified since
/// its enrollment created it, enrolling the claim's host and deployment, and its issuer
/// key the claim's signer. Else what it is instead.
fn signer(record: Option<&Entry>, c: &FleetClaim) -> Result<(), NotTheSigner> {
    let e = record.ok_or(NotTheSigner::Absent)?;
    if e.mod_revision != e.create_revision {
        return Err(NotTheSigner::Modified {
            created: e.create_revision,
            modified: e.mod_revision,
        });
    }
    let h = match (
        e.value_bytes == e.value.len(),
        FleetHost::from_bytes(&e.value),
    ) {
        (true, Ok(h)) => h,
        (_, Err(err)) => return Err(NotTheSigner::NoHostRecord(err)),
        (false, _) => return Err(NotTheSigner::Oversized(e.value_bytes)),
    };
    if h.fleet != c.fleet || h.host != c.host || h.deployment != c.deployment {
        return Err(NotTheSigner::AnotherHost {
            host: h.host,
            fleet: h.fleet,
            deployment: h.deployment,
        });
    }
    match c.signed_by(&h.issuer_key) {
        true => Ok(()),
        false => Err(NotTheSigner::AnotherKey),
    }
}

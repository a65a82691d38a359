//! The fleet registry, as the issuance and enrollment use it (docs/ARCHITECTURE.md, "The
//! fleet registry"): a deployment whose manifest names a `[registry]` also claims its epoch
//! in etcd, so that no second host, restored backup or reverted snapshot can use it again.
//!
//! - right before the intent, [`look`]: the fleet epoch must be unclaimed (else
//!   `epoch-consumed` naming the holder), and the registry must answer (else
//!   `registry-unavailable`); nothing written either way;
//! - after the intent and the first final verification, before `consume`, [`claim`]: one
//!   create-if-absent transaction; only one host's claim ever wins, and its create
//!   revision with the cluster id is the fencing token the consume record and the grant
//!   carry;
//! - right before the dispatch, [`still_ours`]: the key still holds exactly that claim,
//!   never modified since (its mod revision is its create revision).

use std::time::Duration;

use repoch_protocol::cbor::Canonical;
use repoch_protocol::fleet::{
    token_above, FencingToken, FleetClaim, FleetPin, FleetRecord, Registry,
};
use repoch_protocol::PublicKey;
use repoch_protocol::Reason;
use repoch_registry::{Claimed, Vouch};
/// The registry client's types, for the audit's own walk through a prefix.
pub use repoch_registry::{Client, Entry, Error, Header, Pages, VALUE_BYTES_MAX};

use crate::refusal::Refusal;

mod taken;
use taken::taken;

/// One registry call's wait for an endpoint's answer.
pub const REGISTRY_CALL_SECONDS_MAX: u64 = 5;
/// Rounds of "create, and if the answer was lost, read back" before a claim's outcome is
/// called unknown.
pub const CLAIM_ROUNDS_MAX: u32 = 3;
/// No new round of a claim starts after this long: the consumer waits for its grant
/// meanwhile (a round may take one call's wait per endpoint).
pub const CLAIM_SECONDS_MAX: u64 = 15;

/// What the issuance asks of the registry ([`Client`] on a host; a test may script it).
pub trait Fleet: Send {
    /// A linearizable read: the cluster id, and the key's entry if it exists.
    fn get(&mut self, key: &[u8]) -> Result<(u64, Option<Entry>), Error>;
    /// [`Fleet::get`] asked of each endpoint alone ([`Client::get_each`]): what each
    /// member that answered said.
    fn get_each(&mut self, key: &[u8]) -> Vec<Result<Said, Error>>;
    /// Create-if-absent with read-back ([`Client::claim`]).
    fn claim(&mut self, key: &[u8], value: &[u8]) -> Result<Claimed, Error>;
    /// Whether the registry would take a write of `key` now, without writing it
    /// ([`Client::probe_write`]): no alarm (a full cluster, a corrupt one), and this host
    /// allowed to write it.
    fn writable(&mut self, key: &[u8]) -> Result<(), Error>;
    /// Whether this host's credential may write `key`, without writing it
    /// ([`Client::may_write`]): `false` when etcd refuses it the permission.
    fn may_write(&mut self, key: &[u8]) -> Result<bool, Error>;
    /// The first `max` keys under `prefix` whose last segment is a name (a linearizable
    /// read of every key, page by page; keys that name nothing, planted, are passed over).
    fn keys(&mut self, prefix: &[u8], max: usize) -> Result<Vec<Vec<u8>>, Error>;
}

/// One member's answer to a read of a key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Said {
    /// The member that answered, and its cluster, as the answer's header names them.
    pub member: u64,
    pub cluster: u64,
    /// The key's entry, if it exists.
    pub entry: Option<Entry>,
}

impl Fleet for Client {
    fn get(&mut self, key: &[u8]) -> Result<(u64, Option<Entry>), Error> {
        Client::get(self, key).map(|(h, e)| (h.cluster, e))
    }
    fn get_each(&mut self, key: &[u8]) -> Vec<Result<Said, Error>> {
        Client::get_each(self, key)
            .into_iter()
            .map(|(_, answer)| {
                answer.map(|(h, entry)| Said {
                    member: h.member,
                    cluster: h.cluster,
                    entry,
                })
            })
            .collect()
    }
    fn claim(&mut self, key: &[u8], value: &[u8]) -> Result<Claimed, Error> {
        Client::claim(
            self,
            key,
            value,
            CLAIM_ROUNDS_MAX,
            Duration::from_secs(CLAIM_SECONDS_MAX),
        )
    }
    fn writable(&mut self, key: &[u8]) -> Result<(), Error> {
        Client::probe_write(self, key)
    }
    fn may_write(&mut self, key: &[u8]) -> Result<bool, Error> {
        Client::may_write(self, key)
    }
    fn keys(&mut self, prefix: &[u8], max: usize) -> Result<Vec<Vec<u8>>, Error> {
        let mut keys = Vec::new();
        Client::scan(self, prefix, usize::MAX, |e| {
            let named = e.key.strip_prefix(prefix).is_some_and(|name| {
                std::str::from_utf8(name)
                    .is_ok_and(|n| repoch_protocol::fleet::check_name("host", n).is_ok())
            });
            if named && keys.len() < max {
                keys.push(e.key);
            }
        })?;
        Ok(keys)
    }
}

/// The host records of a fleet the permission proof probes, each other host's own key (the
/// first ones by name): a fleet has a few hosts.
pub const HOSTS_PROBED_MAX: usize = 256;

/// The keys no host's credential may write (docs/OPERATOR.md, "A fleet registry", "Roles first"): the fleet record,
/// another host's record of the fleet (and a key beside this host's own, which a grant of
/// its record as a prefix would cover), and keys outside the prefix: right after it
/// without its `/` (a grant of the prefix as a prefix), the first key there is and one past
/// every printable one (a grant of a range from some key).
pub fn forbidden_keys(r: &Registry) -> Vec<Vec<u8>> {
    vec![
        r.fleet_key().into_bytes(),
        format!("{}!", r.hosts_prefix()).into_bytes(),
        format!("{}!", r.host_key()).into_bytes(),
        format!("{}!", r.prefix).into_bytes(),
        b"\x00".to_vec(),
        b"\x7f".to_vec(),
    ]
}

/// Proves that this host's credential cannot write any of [`forbidden_keys`], one
/// transaction per key whose compare never holds (nothing is written): with etcd's
/// authentication off, or a role granting more, one host's credential could plant, copy
/// or replay the fleet record. `registry-overprivileged` naming the first key it could
/// write; `registry-unavailable` when a probe got no answer.
pub fn least_privilege(fleet: &mut dyn Fleet, r: &Registry) -> Result<(), Refusal> {
    // Each other host's own record too (a role may grant one host's key exactly, which no
    // fixed key names): the hosts enrolled now, as the registry lists them.
    let others = fleet
        .keys(r.hosts_prefix().as_bytes(), HOSTS_PROBED_MAX)
        .map_err(|e| unavailable(r, "the fleet's host records listed", e))?
        .into_iter()
        .filter(|k| *k != r.host_key().as_bytes());
    for key in forbidden_keys(r).into_iter().chain(others) {
        let shown = String::from_utf8_lossy(&key).into_owned();
        match fleet.may_write(&key) {
            Ok(false) => {}
            Ok(true) => {
                return Err(Refusal::new(
                    Reason::RegistryOverprivileged,
                    format!("registry credential {}", r.cert),
                    format!("a credential etcd refuses a write of {shown}"),
                    format!("etcd would take its write of {shown} (authentication off, or a role granting it)"),
                ))
            }
            Err(e) => {
                return Err(unavailable(
                    r,
                    &format!("an answer to the permission probe of {shown}"),
                    e,
                ))
            }
        }
    }
    Ok(())
}

/// The PEM bytes of a `[registry]`'s CA, client certificate and client key.
pub type Credentials = (Vec<u8>, Vec<u8>, Vec<u8>);

/// A PEM file: a certificate, a key or a CA bundle.
pub const PEM_BYTES_MAX: usize = 64 * 1024;

/// The `[registry]`'s credentials, as only root can have written them
/// (`repoch_sys::fs::read_protected`): the CA and the certificate writable by root alone,
/// the key readable by root alone. Anything else is `registry-unprotected`: whoever can
/// write the CA can stand up a registry of their own and win any claim.
/// With `protected` false (an auditor's own credentials, `repoch audit --registry`): any
/// regular file the caller can read.
pub fn credentials(r: &Registry, protected: bool) -> Result<Credentials, Refusal> {
    let read = |what: &str, p: &str, secret: bool| {
        let path = std::path::Path::new(p);
        match protected {
            true => repoch_sys::fs::read_protected(path, PEM_BYTES_MAX, secret),
            false => {
                repoch_sys::fs::read_regular(path, PEM_BYTES_MAX, repoch_sys::fs::Links::Follow)
            }
        }
        .map_err(|e| {
            Refusal::new(
                Reason::RegistryUnprotected,
                format!("registry.{what} {p}"),
                "a regular file only root can write",
                e.to_string(),
            )
        })
    };
    let (ca, cert, key) = (
        read("ca", &r.ca, false)?,
        read("cert", &r.cert, false)?,
        read("key", &r.key, true)?,
    );
    repoch_registry::check_credentials(&ca, &cert, &key).map_err(|(which, why)| {
        let (what, p) = match which {
            repoch_registry::Credential::Ca => ("ca", &r.ca),
            repoch_registry::Credential::Cert => ("cert", &r.cert),
            repoch_registry::Credential::Key => ("key", &r.key),
        };
        Refusal::new(
            Reason::RegistryUnavailable,
            format!("registry.{what} {p}"),
            "a usable PEM file",
            why,
        )
    })?;
    Ok((ca, cert, key))
}

/// The registry's client for a deployment's `[registry]`: credentials read (protected,
/// unless an auditor's: [`credentials`]), nothing sent.
pub fn connect(r: &Registry, protected: bool) -> Result<Client, Refusal> {
    let (ca, cert, key) = credentials(r, protected)?;
    let spec = repoch_registry::Spec {
        endpoints: r.endpoints.clone(),
        ca,
        cert,
        key,
    };
    Client::connect(&spec, Duration::from_secs(REGISTRY_CALL_SECONDS_MAX)).map_err(|e| match e {
        // An endpoint spelt so that no certificate can name it: the field to fix.
        Error::Config(why) if why.starts_with("endpoint ") => Refusal::new(
            Reason::RegistryUnavailable,
            "registry.endpoints",
            "endpoints spelt as the members' certificates name them",
            why,
        ),
        e => unavailable(r, "usable credentials", e),
    })
}

/// The client of a recovery: [`connect`]ed and pinned to the fleet the enrollment pinned
/// ([`Pinned`]). A manifest without a pin (enrolled before fleets had records) is refused.
pub fn connect_pinned(r: &Registry) -> Result<Client, Refusal> {
    let pin = r.pin.clone().ok_or_else(|| {
        Refusal::new(
            Reason::RegistryMismatch,
            format!("registry {}", r.fleet_key()),
            "a fleet pinned at enrollment",
            "none: enrolled before fleets had records (enroll a successor deployment)",
        )
    })?;
    let mut client = connect(r, true)?;
    client.pin(Box::new(Pinned { r: r.clone(), pin }));
    Ok(client)
}

/// What makes a registry answer the pinned fleet's (docs/THREAT-MODEL.md, "The fleet
/// registry"): the pinned cluster id and one of the pinned members in every header; a
/// member list holding a majority of the pinned members, asked on every call; and, once
/// per endpoint, the fleet record under the enrolled prefix with the pinned id.
#[derive(Debug)]
pub struct Pinned {
    pub r: Registry,
    pub pin: FleetPin,
}

fn ids(ids: &[u64]) -> String {
    let ids: Vec<String> = ids.iter().map(|m| format!("{m:016x}")).collect();
    format!("[{}]", ids.join(", "))
}

impl Vouch for Pinned {
    fn members(&self, h: &Header, voting: &[u64]) -> Result<(), repoch_registry::NotPinned> {
        if !self.pin.majority_of(voting) {
            return Err(format!(
                "member {:016x} lists the members {}: no majority of the pinned {}",
                h.member,
                ids(voting),
                ids(&self.pin.members)
            )
            .into());
        }
        // And the pinned members a majority of the listed ones: a fleet pinned on one
        // member of a cluster grown to three would take that member's copy, started alone,
        // for the fleet.
        let listed = FleetPin {
            members: voting.to_vec(),
            ..self.pin.clone()
        };
        if !listed.majority_of(&self.pin.members) {
            return Err(format!(
                "member {:016x} lists the members {}: the pinned {} are no majority of them (the cluster grew: enroll successor deployments, which pin its members of the day)",
                h.member,
                ids(voting),
                ids(&self.pin.members)
            ).into());
        }
        Ok(())
    }
    fn record_key(&self) -> Vec<u8> {
        self.r.fleet_key().into_bytes()
    }
    fn record(&self, entry: Option<&Entry>) -> Result<(), repoch_registry::NotPinned> {
        let key = self.r.fleet_key();
        let e = entry.ok_or_else(|| format!("no fleet record at {key}"))?;
        if e.value_bytes != e.value.len() {
            return Err(format!("{key}: a value of {} bytes", e.value_bytes).into());
        }
        let record = FleetRecord::from_bytes(&e.value)
            .map_err(|err| format!("{key}: no fleet record ({err})"))?;
        record.matches(&self.r, &self.pin).map_err(|other| {
            repoch_registry::NotPinned(format!("{key} holds {other}, not fleet id {}", self.pin.id))
        })
    }
    fn guard(&self) -> (Vec<u8>, i64) {
        let revision = i64::try_from(self.r.record_revision).unwrap_or(i64::MAX);
        (self.r.fleet_key().into_bytes(), revision)
    }
    fn header(&self, h: &Header) -> Result<(), repoch_registry::NotPinned> {
        if h.cluster != self.pin.cluster {
            return Err(format!(
                "cluster {:016x} answered, pinned {:016x}",
                h.cluster, self.pin.cluster
            )
            .into());
        }
        if !self.pin.members.contains(&h.member) {
            return Err(format!(
                "member {:016x} answered, not one of the pinned {}",
                h.member,
                ids(&self.pin.members)
            )
            .into());
        }
        Ok(())
    }
}

/// A call that got no usable answer: `registry-mismatch` when an endpoint answered as another
/// fleet's, else `registry-unavailable`.
fn unavailable(r: &Registry, expected: &str, e: Error) -> Refusal {
    let (reason, expected) = match e {
        Error::Foreign(_) => (Reason::RegistryMismatch, "the pinned fleet's cluster"),
        _ => (Reason::RegistryUnavailable, expected),
    };
    Refusal::new(
        reason,
        format!("registry {}", r.epoch_key()),
        expected,
        e.to_string(),
    )
}

/// Who holds the fleet epoch, as the key's value says.
pub fn holder(e: &Entry) -> String {
    if e.value_bytes != e.value.len() {
        return format!(
            "claimed at revision {} by a value of {} bytes, no fleet claim",
            e.create_revision, e.value_bytes
        );
    }
    match FleetClaim::from_bytes(&e.value) {
        Ok(c) => format!("claimed by {c} at revision {}", e.create_revision),
        Err(err) => format!(
            "claimed at revision {} by a value that is no fleet claim ({err})",
            e.create_revision
        ),
    }
}

/// Right before the intent: the fleet epoch is unclaimed (every answer of a majority of
/// the pinned members, each asked alone, says so), the registry answers, and it would take
/// the claim (a cluster out of space refuses every write: found after the
/// intent, it would burn the epoch).
pub fn look(fleet: &mut dyn Fleet, r: &Registry, own: &PublicKey) -> Result<(), Refusal> {
    let disagree = |heard: &[Said]| heard.iter().any(|said| said.entry != heard[0].entry);
    let mut heard = majority(fleet, r, &r.epoch_key())?;
    if disagree(&heard) {
        // Another host's claim landing between the reads (two recoveries at once) is read
        // so once; asked again, the members agree on it.
        heard = majority(fleet, r, &r.epoch_key())?;
    }
    let subject = format!("fleet epoch {}", r.epoch_key());
    if disagree(&heard) {
        // One member's answer against the others', twice: a copy of the fleet at one
        // endpoint. Not unclaimed, and not one claim to judge.
        let views: Vec<String> = heard
            .iter()
            .map(|said| {
                let view = said.entry.as_ref().map_or("unclaimed".into(), holder);
                format!("member {:016x}: {view}", said.member)
            })
            .collect();
        return Err(Refusal::new(
            Reason::RegistryMismatch,
            subject,
            "unclaimed, as every member answering says",
            format!("the members disagree: {}", views.join("; ")),
        ));
    }
    if let Some(e) = heard.into_iter().find_map(|said| said.entry) {
        return Err(taken(fleet, r, own, (subject, "unclaimed".into()), &e));
    }
    least_privilege(fleet, r)?;
    fleet
        .writable(r.epoch_key().as_bytes())
        .map_err(|e| unavailable(r, "a registry that takes the claim", e))
}

/// The pinned members that must answer a read of the fleet epoch: a majority of those
/// pinned (one, unpinned).
fn quorum(r: &Registry) -> usize {
    r.pin.as_ref().map_or(1, |p| quorum_of(p.members.len()))
}

/// The members a majority of `n` members is.
pub fn quorum_of(n: usize) -> usize {
    n / 2 + 1
}

/// How many members `heard` names, each once: a member answering at two endpoints (two
/// spellings of one address, a relay beside it) is one member.
pub fn distinct(heard: impl IntoIterator<Item = u64>) -> usize {
    let mut members: Vec<u64> = heard.into_iter().collect();
    members.sort_unstable();
    members.dedup();
    members.len()
}

/// What the members say of `key`, each endpoint asked alone
/// ([`Fleet::get_each`]): every answer, once at least a majority of the pinned members
/// answered (a member heard at two endpoints counts once). An endpoint relayed to a copy
/// of the fleet (one member's key and a route make one) speaks for one member: the
/// others' answers are beside its own. Too few answers: `registry-unavailable`, or
/// `registry-mismatch` when one endpoint answered as another fleet, naming each.
fn majority(fleet: &mut dyn Fleet, r: &Registry, key: &str) -> Result<Vec<Said>, Refusal> {
    let (mut heard, mut failed) = (Vec::new(), Vec::new());
    for answer in fleet.get_each(key.as_bytes()) {
        match answer {
            Ok(said) => heard.push(said),
            Err(e) => failed.push(e),
        }
    }
    let members = distinct(heard.iter().map(|said| said.member));
    let need = quorum(r);
    if members >= need {
        return Ok(heard);
    }
    let reason = match failed.iter().any(|e| matches!(e, Error::Foreign(_))) {
        true => Reason::RegistryMismatch,
        false => Reason::RegistryUnavailable,
    };
    let why: Vec<String> = failed.iter().map(ToString::to_string).collect();
    Err(Refusal::new(
        reason,
        format!("registry {key}"),
        format!("answers of a majority of the pinned members ({need}), each asked alone"),
        format!("{members} answered: {}", why.join("; ")),
    ))
}

/// How a claim ended when it did not win.
#[derive(Debug)]
pub enum Lost {
    /// Definitely not ours: refuse (withheld).
    Refused(Refusal),
    /// Unknown whether it applied: uncertain; the key, if it names this host, is never
    /// reused.
    Unknown(Refusal),
}

/// After the intent: create the fleet epoch's key holding `claim`, or learn whose it is.
pub fn claim(
    fleet: &mut dyn Fleet,
    r: &Registry,
    own: &PublicKey,
    claim: &FleetClaim,
) -> Result<FencingToken, Lost> {
    let subject = format!("fleet epoch {}", r.epoch_key());
    match fleet.claim(r.epoch_key().as_bytes(), &claim.to_bytes()) {
        Ok(Claimed::Ours { cluster, entry }) => {
            match token_above(r.floor(), cluster, entry.create_revision) {
                Some(token) => Ok(token),
                None => Err(Lost::Unknown(Refusal::new(
                    Reason::RegistryUnavailable,
                    subject,
                    format!(
                        "a create revision above 0, below {}",
                        u64::MAX.saturating_sub(r.floor())
                    ),
                    format!("revision {}", entry.create_revision),
                ))),
            }
        }
        Ok(Claimed::Theirs { entry, .. }) => {
            let what = (subject, format!("claimed by {claim}"));
            Err(Lost::Refused(taken(fleet, r, own, what, &entry)))
        }
        Err(e @ (Error::Refused(_) | Error::Config(_) | Error::Foreign(_))) => {
            Err(Lost::Refused(unavailable(r, "the claim applied", e)))
        }
        Err(e) => Err(Lost::Unknown(unavailable(r, "the claim's answer", e))),
    }
}

/// Right before the dispatch: the key still holds exactly this claim, created at the
/// token's revision in the token's cluster and never modified since, in every answer of a
/// majority of the pinned members, each asked alone: a claim won through a relay to a
/// copy of the fleet is not the fleet's, and is never dispatched.
pub fn still_ours(
    fleet: &mut dyn Fleet,
    r: &Registry,
    claim: &FleetClaim,
    token: &FencingToken,
) -> Result<(), Refusal> {
    let subject = format!("fleet epoch {}", r.epoch_key());
    let expected = format!("this host's claim, {token}, unmodified");
    for said in majority(fleet, r, &r.epoch_key())? {
        let changed = |observed: String| {
            let observed = format!("member {:016x}: {observed}", said.member);
            Refusal::new(Reason::RegistryChanged, &subject, &expected, observed)
        };
        let Some(e) = &said.entry else {
            return Err(changed("the key is gone".into()));
        };
        if said.cluster != token.cluster {
            return Err(changed(format!("cluster {:016x} answered", said.cluster)));
        }
        if e.value != claim.to_bytes() || e.value_bytes != e.value.len() {
            return Err(changed(holder(e)));
        }
        if token_above(r.floor(), token.cluster, e.create_revision) != Some(*token)
            || e.mod_revision != e.create_revision
        {
            return Err(changed(format!(
                "created at revision {}, modified at {}",
                e.create_revision, e.mod_revision
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    //! Each decision of the three steps against a scripted registry: what it answers and
    //! what the step concludes, word for word where the words are what an operator reads.
    use super::*;
    use repoch_protocol::fleet::FleetHost;
    use repoch_protocol::{DeploymentId, Hash};

    const CLUSTER: u64 = 0xc1;

    /// Answers every call with the next scripted answer.
    #[derive(Default)]
    struct Script {
        gets: Vec<Result<(u64, Option<Entry>), Error>>,
        claims: Vec<Result<Claimed, Error>>,
        /// The probes' answers; none scripted: every probe passes.
        writables: Vec<Result<(), Error>>,
        /// The host records read, each with the key it must be read at.
        hosts: Vec<(String, Read)>,
        /// Each endpoint's answer of a read of the epoch key asked of each alone; none
        /// scripted: one endpoint, member 1, answering the next of `gets`.
        each: Vec<Vec<Result<Said, Error>>>,
        /// The members each host record read is answered by, alike; none: member 1.
        host_members: Vec<u64>,
        /// Each member's answer of a host record read, when scripted so.
        host_each: Vec<Vec<Result<Said, Error>>>,
        /// The keys this host's credential may write, of those no host's may; none: the
        /// least privilege.
        privileged: Vec<Vec<u8>>,
        /// The host records' keys the registry lists.
        listed: Vec<Vec<u8>>,
    }

    /// A read's answer: the cluster and the key's entry, if any.
    type Read = Result<(u64, Option<Entry>), Error>;

    impl Fleet for Script {
        fn get_each(&mut self, key: &[u8]) -> Vec<Result<Said, Error>> {
            if key != reg().epoch_key().as_bytes() && !self.host_each.is_empty() {
                return self.host_each.remove(0);
            }
            if key != reg().epoch_key().as_bytes() {
                let answer = self.get(key);
                let members = match self.host_members.is_empty() {
                    true => vec![1],
                    false => self.host_members.clone(),
                };
                return members
                    .into_iter()
                    .map(|member| match &answer {
                        Ok((cluster, entry)) => Ok(Said {
                            member,
                            cluster: *cluster,
                            entry: entry.clone(),
                        }),
                        Err(_) => Err(no_answer()),
                    })
                    .collect();
            }
            if self.each.len() > 1 {
                return self.each.remove(0);
            }
            if let Some(last) = self.each.first() {
                // The last scripted answers, again.
                return last
                    .iter()
                    .map(|a| match a {
                        Ok(said) => Ok(said.clone()),
                        Err(Error::Config(e)) => Err(Error::Config(e.clone())),
                        Err(Error::Unanswered(e)) => Err(Error::Unanswered(e.clone())),
                        Err(Error::Refused(e)) => Err(Error::Refused(e.clone())),
                        Err(Error::Answer(e)) => Err(Error::Answer(e.clone())),
                        Err(Error::Foreign(e)) => Err(Error::Foreign(e.clone())),
                    })
                    .collect();
            }
            let answer = self.gets.remove(0).map(|(cluster, entry)| Said {
                member: 1,
                cluster,
                entry,
            });
            vec![answer]
        }
        fn get(&mut self, key: &[u8]) -> Result<(u64, Option<Entry>), Error> {
            if key == reg().epoch_key().as_bytes() {
                return self.gets.remove(0);
            }
            let (at, answer) = self.hosts.remove(0);
            assert_eq!(String::from_utf8_lossy(key), at);
            answer
        }
        fn claim(&mut self, key: &[u8], value: &[u8]) -> Result<Claimed, Error> {
            assert_eq!(key, reg().epoch_key().as_bytes());
            assert_eq!(value, ours().to_bytes());
            self.claims.remove(0)
        }
        fn writable(&mut self, key: &[u8]) -> Result<(), Error> {
            assert_eq!(key, reg().epoch_key().as_bytes());
            match self.writables.is_empty() {
                true => Ok(()),
                false => self.writables.remove(0),
            }
        }
        fn may_write(&mut self, key: &[u8]) -> Result<bool, Error> {
            Ok(self.privileged.iter().any(|k| k == key))
        }
        fn keys(&mut self, _prefix: &[u8], _max: usize) -> Result<Vec<Vec<u8>>, Error> {
            Ok(self.listed.clone())
        }
    }

    fn reg() -> Registry {
        Registry {
            endpoints: vec!["https://a:1".into()],
            ca: "/ca".into(),
            cert: "/cert".into(),
            key: "/key".into(),
            prefix: "/repoch".into(),
            fleet: "billing".into(),
            host: "a".into(),
            pin: None,
            record_revision: 0,
        }
    }

    /// Each host's issuer key: `a` is this host.
    fn key_of(host: &str) -> ed25519_dalek::SigningKey {
        ed25519_dalek::SigningKey::from_bytes(&[host.len() as u8 + host.as_bytes()[0]; 32])
    }

    fn own() -> PublicKey {
        PublicKey::from(&key_of("a").verifying_key())
    }

    /// Host `host`'s claim, signed with its key.
    fn claim_of(host: &str) -> FleetClaim {
        FleetClaim {
            fleet: "billing".into(),
            fleet_id: repoch_protocol::fleet::FleetId([5; 16]),
            host: host.into(),
            deployment: DeploymentId([1; 16]),
            intent: Hash([2; 32]),
            evidence: Hash([3; 32]),
            nonce: [4; 32],
            floor: 0,
            signature: [0; 64],
        }
        .signed(&key_of(host))
    }

    /// `host`'s record, as its enrollment created it, carrying `key`.
    fn host_record(host: &str, key: &ed25519_dalek::SigningKey) -> FleetHost {
        FleetHost {
            fleet: "billing".into(),
            host: host.into(),
            deployment: DeploymentId([1; 16]),
            manifest: Hash([6; 32]),
            label: "billing".into(),
            issuer_key: PublicKey::from(&key.verifying_key()),
        }
    }

    /// A host record's key and what reading it answers: `None`, no answer.
    type HostAnswer = (String, Option<Option<Entry>>);

    fn answer((at, e): &HostAnswer) -> (String, Read) {
        (
            at.clone(),
            e.clone().map(|e| (CLUSTER, e)).ok_or_else(no_answer),
        )
    }

    /// Host record `h`, found at `at` (where another host's should be), unmodified.
    fn host_entry_at(at: &str, h: &FleetHost) -> HostAnswer {
        let (_, e) = host_entry(h, 4, 4);
        let e = e.flatten().map(|e| Entry {
            key: at.as_bytes().to_vec(),
            ..e
        });
        (at.to_owned(), Some(e))
    }

    fn host_entry(h: &FleetHost, create: i64, modified: i64) -> HostAnswer {
        let at = format!("{}{}", reg().hosts_prefix(), h.host);
        let e = Entry {
            key: at.clone().into_bytes(),
            ..entry(h.to_bytes(), create, modified)
        };
        (at, Some(Some(e)))
    }

    fn ours() -> FleetClaim {
        claim_of("a")
    }

    fn entry(value: Vec<u8>, create: i64, modified: i64) -> Entry {
        Entry {
            key: reg().epoch_key().into_bytes(),
            value_bytes: value.len(),
            value,
            create_revision: create,
            mod_revision: modified,
            version: 1,
        }
    }

    fn token(revision: u64) -> FencingToken {
        FencingToken {
            cluster: CLUSTER,
            revision,
        }
    }

    fn gets(a: Result<(u64, Option<Entry>), Error>) -> Script {
        Script {
            gets: vec![a],
            ..Script::default()
        }
    }

    fn claims(a: Result<Claimed, Error>) -> Script {
        Script {
            claims: vec![a],
            ..Script::default()
        }
    }

    fn no_answer() -> Error {
        Error::Unanswered("deadline".into())
    }

    fn foreign() -> Error {
        Error::Foreign("get: https://a:1: no fleet record at /repoch/fleets/billing".into())
    }

    #[test]
    fn every_step_answered_only_by_other_fleets_is_a_mismatch_never_a_token() {
        let r = look(&mut gets(Err(foreign())), &reg(), &own()).unwrap_err();
        assert_eq!(r.reason, Reason::RegistryMismatch);
        assert_eq!(
            r.expected,
            "answers of a majority of the pinned members (1), each asked alone"
        );
        assert_eq!(r.observed, format!("0 answered: {}", foreign()));
        match claim(&mut claims(Err(foreign())), &reg(), &own(), &ours()) {
            Err(Lost::Refused(r)) => assert_eq!(r.reason, Reason::RegistryMismatch),
            other => panic!("{other:?}"),
        }
        let r = still_ours(&mut gets(Err(foreign())), &reg(), &ours(), &token(9)).unwrap_err();
        assert_eq!(r.reason, Reason::RegistryMismatch);
    }

    #[test]
    fn a_manifest_without_a_pin_is_refused_before_any_file_is_read() {
        let r = connect_pinned(&reg()).unwrap_err();
        assert_eq!(r.reason, Reason::RegistryMismatch);
        assert_eq!(r.subject, "registry /repoch/fleets/billing");
        assert!(
            r.observed.starts_with("none: enrolled before"),
            "{}",
            r.observed
        );
    }

    /// The key that signed the fleet record [`pinned`] pins.
    fn fleet_key() -> ed25519_dalek::SigningKey {
        ed25519_dalek::SigningKey::from_bytes(&[5; 32])
    }

    fn pinned() -> Pinned {
        Pinned {
            r: reg(),
            pin: FleetPin {
                id: repoch_protocol::fleet::FleetId::of(
                    &PublicKey::from(&fleet_key().verifying_key()),
                    &reg().prefix,
                    &reg().fleet,
                ),
                cluster: CLUSTER,
                members: vec![1, 2, 3],
                floor: 0,
            },
        }
    }

    fn header(cluster: u64, member: u64) -> Header {
        Header {
            cluster,
            member,
            revision: 1,
        }
    }

    #[test]
    fn a_pinned_answer_names_the_cluster_and_a_pinned_member_that_lists_a_majority() {
        let p = pinned();
        assert_eq!(p.header(&header(CLUSTER, 2)), Ok(()));
        assert_eq!(
            p.header(&header(0xc2, 2)).unwrap_err(),
            "cluster 00000000000000c2 answered, pinned 00000000000000c1"
        );
        assert_eq!(
            p.header(&header(CLUSTER, 4)).unwrap_err(),
            "member 0000000000000004 answered, not one of the pinned [0000000000000001, 0000000000000002, 0000000000000003]"
        );
        assert_eq!(p.members(&header(CLUSTER, 1), &[1, 2, 7]), Ok(()));
        assert_eq!(
            p.members(&header(CLUSTER, 1), &[1]).unwrap_err(),
            "member 0000000000000001 lists the members [0000000000000001]: no majority of the pinned [0000000000000001, 0000000000000002, 0000000000000003]"
        );
        // A fleet pinned on one member of a cluster grown to three: that member's copy,
        // started alone, would list a majority of the pin; the pin is no majority of what
        // the cluster lists.
        let one = Pinned {
            pin: FleetPin {
                members: vec![1],
                ..pinned().pin
            },
            ..pinned()
        };
        assert_eq!(one.members(&header(CLUSTER, 1), &[1]), Ok(()));
        assert_eq!(
            one.members(&header(CLUSTER, 1), &[1, 2, 3]).unwrap_err(),
            "member 0000000000000001 lists the members [0000000000000001, 0000000000000002, 0000000000000003]: the pinned [0000000000000001] are no majority of them (the cluster grew: enroll successor deployments, which pin its members of the day)"
        );
        assert_eq!(p.record_key(), b"/repoch/fleets/billing".to_vec());
        let mut p = pinned();
        p.r.record_revision = 9;
        assert_eq!(p.guard(), (b"/repoch/fleets/billing".to_vec(), 9));
        p.r.record_revision = u64::MAX;
        assert_eq!(p.guard().1, i64::MAX, "never a negative revision");
    }

    #[test]
    fn a_pinned_cluster_holds_the_fleet_record_with_the_pinned_id() {
        let p = pinned();
        let record = |pin: FleetPin, prefix: &str, key: &ed25519_dalek::SigningKey| {
            FleetRecord {
                fleet: "billing".into(),
                prefix: prefix.into(),
                pin,
                host: "a".into(),
                established: 0,
                key: PublicKey([0; 32]),
                signature: [0; 64],
            }
            .signed(key)
        };
        let ok = record(p.pin.clone(), "/repoch", &fleet_key()).to_bytes();
        assert_eq!(p.record(Some(&entry(ok.clone(), 3, 3))), Ok(()));
        assert_eq!(
            p.record(None).unwrap_err(),
            "no fleet record at /repoch/fleets/billing"
        );
        let mut big = entry(Vec::new(), 3, 3);
        big.value_bytes = 5000;
        assert_eq!(
            p.record(Some(&big)).unwrap_err(),
            "/repoch/fleets/billing: a value of 5000 bytes"
        );
        assert!(p
            .record(Some(&entry(b"junk".to_vec(), 3, 3)))
            .unwrap_err()
            .starts_with("/repoch/fleets/billing: no fleet record ("));
        // Another fleet's record: another key, so another id.
        let other = record(
            p.pin.clone(),
            "/repoch",
            &ed25519_dalek::SigningKey::from_bytes(&[6; 32]),
        );
        let e = p.record(Some(&entry(other.to_bytes(), 3, 3)));
        assert_eq!(
            e.unwrap_err(),
            format!(
                "/repoch/fleets/billing holds fleet id {}, not fleet id {}",
                other.pin.id, p.pin.id
            )
            .as_str()
        );
        let e = p.record(Some(&entry(
            record(p.pin.clone(), "/other", &fleet_key()).to_bytes(),
            3,
            3,
        )));
        assert!(e.unwrap_err().contains("under prefix \"/other\""));
        // The pinned fleet's own record re-encoded by an etcd writer (another floor, the
        // same id and signature): no record of that id.
        let mut copied = record(p.pin.clone(), "/repoch", &fleet_key());
        copied.pin.floor = 1 << 62;
        let e = p.record(Some(&entry(copied.to_bytes(), 3, 3)));
        assert!(e.unwrap_err().contains("did not sign"));
    }

    #[test]
    fn look_refuses_a_registry_that_would_not_take_the_claim() {
        let full =
            Error::Refused("ResourceExhausted: etcdserver: mvcc: database space exceeded".into());
        let mut f = Script {
            gets: vec![Ok((CLUSTER, None))],
            writables: vec![Err(full)],
            ..Script::default()
        };
        let r = look(&mut f, &reg(), &own()).unwrap_err();
        assert_eq!(r.reason, Reason::RegistryUnavailable);
        assert_eq!(r.expected, "a registry that takes the claim");
        assert!(
            r.observed.contains("database space exceeded"),
            "{}",
            r.observed
        );
        // A claimed epoch is refused as such, whatever the probe would say.
        let held = entry(claim_of("b").to_bytes(), 9, 9);
        let mut f = Script {
            gets: vec![Ok((CLUSTER, Some(held)))],
            writables: vec![Err(no_answer())],
            hosts: vec![answer(&host_entry(&host_record("b", &key_of("b")), 4, 4))],
            ..Script::default()
        };
        assert_eq!(
            look(&mut f, &reg(), &own()).unwrap_err().reason,
            Reason::EpochConsumed
        );
    }

    #[test]
    fn look_refuses_a_credential_that_could_write_what_no_hosts_may_naming_the_key() {
        for key in forbidden_keys(&reg()) {
            let mut f = Script {
                gets: vec![Ok((CLUSTER, None))],
                privileged: vec![key.clone()],
                ..Script::default()
            };
            let r = look(&mut f, &reg(), &own()).unwrap_err();
            assert_eq!(r.reason, Reason::RegistryOverprivileged);
            let shown = repoch_protocol::text::escape(&String::from_utf8_lossy(&key)).into_owned();
            assert_eq!(
                r.observed,
                format!(
                    "etcd would take its write of {shown} (authentication off, or a role granting it)"
                )
            );
        }
        // Among them the fleet record, another host's record and keys outside the prefix.
        let keys: Vec<String> = forbidden_keys(&reg())
            .iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        assert!(keys.contains(&reg().fleet_key()));
        assert!(keys.contains(&format!("{}!", reg().hosts_prefix())));
        assert!(keys
            .iter()
            .any(|k| !k.starts_with(&format!("{}/", reg().prefix))));
        // Another host's own record, granted exactly: found by listing the hosts.
        let other = format!("{}host-b", reg().hosts_prefix()).into_bytes();
        let mut f = Script {
            gets: vec![Ok((CLUSTER, None))],
            listed: vec![reg().host_key().into_bytes(), other.clone()],
            privileged: vec![other],
            ..Script::default()
        };
        let r = look(&mut f, &reg(), &own()).unwrap_err();
        assert_eq!(r.reason, Reason::RegistryOverprivileged);
        assert!(r.observed.contains("host-b"), "{}", r.observed);
        // A probe unanswered: unavailable, not overprivileged, not passed.
        struct Silent(Script);
        impl Fleet for Silent {
            fn get(&mut self, key: &[u8]) -> Result<(u64, Option<Entry>), Error> {
                self.0.get(key)
            }
            fn get_each(&mut self, key: &[u8]) -> Vec<Result<Said, Error>> {
                self.0.get_each(key)
            }
            fn claim(&mut self, key: &[u8], value: &[u8]) -> Result<Claimed, Error> {
                self.0.claim(key, value)
            }
            fn writable(&mut self, key: &[u8]) -> Result<(), Error> {
                self.0.writable(key)
            }
            fn may_write(&mut self, _: &[u8]) -> Result<bool, Error> {
                Err(no_answer())
            }
            fn keys(&mut self, p: &[u8], max: usize) -> Result<Vec<Vec<u8>>, Error> {
                self.0.keys(p, max)
            }
        }
        let r = look(&mut Silent(gets(Ok((CLUSTER, None)))), &reg(), &own()).unwrap_err();
        assert_eq!(r.reason, Reason::RegistryUnavailable);
    }

    #[test]
    fn look_passes_an_unclaimed_epoch_and_names_the_holder_of_a_claimed_one() {
        assert_eq!(look(&mut gets(Ok((CLUSTER, None))), &reg(), &own()), Ok(()));
        let held = entry(claim_of("b").to_bytes(), 9, 9);
        let mut f = Script {
            hosts: vec![answer(&host_entry(&host_record("b", &key_of("b")), 4, 4))],
            ..gets(Ok((CLUSTER, Some(held))))
        };
        let r = look(&mut f, &reg(), &own()).unwrap_err();
        assert_eq!(r.reason, Reason::EpochConsumed);
        assert_eq!(r.subject, "fleet epoch /repoch/epochs/billing");
        assert_eq!(r.expected, "unclaimed");
        assert_eq!(
            r.observed,
            format!("claimed by {} at revision 9", claim_of("b"))
        );
        let r = look(&mut gets(Err(no_answer())), &reg(), &own()).unwrap_err();
        assert_eq!(r.reason, Reason::RegistryUnavailable);
        assert_eq!(r.observed, "0 answered: no answer: deadline");
    }

    /// A fleet pinned to members 1, 2 and 3.
    fn three() -> Registry {
        Registry {
            pin: Some(FleetPin {
                id: repoch_protocol::fleet::FleetId([5; 16]),
                cluster: CLUSTER,
                members: vec![1, 2, 3],
                floor: 0,
            }),
            record_revision: 2,
            ..reg()
        }
    }

    fn said(member: u64, entry: Option<Entry>) -> Result<Said, Error> {
        Ok(Said {
            member,
            cluster: CLUSTER,
            entry,
        })
    }

    #[test]
    fn the_fleet_epoch_is_what_a_majority_of_the_pinned_members_say_each_asked_alone() {
        let each = |answers: Vec<Result<Said, Error>>| Script {
            each: vec![answers],
            hosts: vec![answer(&host_entry(&host_record("b", &key_of("b")), 4, 4))],
            host_members: vec![1, 2, 3],
            ..Script::default()
        };
        let looked = |answers| look(&mut each(answers), &three(), &own());
        // One member of three, or one member heard at two endpoints: too few.
        for answers in [
            vec![said(1, None), Err(no_answer()), Err(no_answer())],
            vec![said(1, None), said(1, None), Err(no_answer())],
        ] {
            let r = looked(answers).unwrap_err();
            assert_eq!(r.reason, Reason::RegistryUnavailable);
            assert_eq!(
                r.expected,
                "answers of a majority of the pinned members (2), each asked alone"
            );
            assert!(r.observed.starts_with("1 answered: no answer"), "{r:?}");
        }
        let r = looked(vec![Err(foreign()), Err(no_answer()), said(1, None)]).unwrap_err();
        assert_eq!(r.reason, Reason::RegistryMismatch);
        assert_eq!(
            looked(vec![said(1, None), said(2, None), Err(no_answer())]),
            Ok(())
        );
        // A relay to a copy of the fleet says unclaimed; the others name the claim.
        let held = entry(claim_of("b").to_bytes(), 9, 9);
        let r = looked(vec![
            said(1, None),
            said(2, Some(held.clone())),
            said(3, Some(held.clone())),
        ])
        .unwrap_err();
        assert_eq!(r.reason, Reason::RegistryMismatch);
        assert_eq!(
            r.observed,
            format!(
                "the members disagree: member 0000000000000001: unclaimed; member 0000000000000002: {0}; member 0000000000000003: {0}",
                holder(&held)
            )
        );
        // A claim landing between the reads: asked again, every member names it.
        let mut f = Script {
            each: vec![
                vec![
                    said(1, None),
                    said(2, Some(held.clone())),
                    said(3, Some(held.clone())),
                ],
                vec![said(1, Some(held.clone())), said(2, Some(held.clone()))],
            ],
            hosts: vec![answer(&host_entry(&host_record("b", &key_of("b")), 4, 4))],
            host_members: vec![1, 2, 3],
            ..Script::default()
        };
        let r = look(&mut f, &three(), &own()).unwrap_err();
        assert_eq!(r.reason, Reason::EpochConsumed, "{r:?}");
        // A claim every member names.
        let r = looked(vec![
            said(1, Some(held.clone())),
            said(3, Some(held.clone())),
        ]);
        let r = r.unwrap_err();
        assert_eq!(r.reason, Reason::EpochConsumed);
        assert_eq!(
            r.observed,
            format!("claimed by {} at revision 9", claim_of("b"))
        );

        // A claim of another fleet of the same name, signed by its host: no claim of ours.
        let elsewhere = FleetClaim {
            fleet_id: repoch_protocol::fleet::FleetId([6; 16]),
            signature: [0; 64],
            ..claim_of("b")
        }
        .signed(&key_of("b"));
        let copied = entry(elsewhere.to_bytes(), 9, 9);
        let r = looked(vec![said(1, Some(copied.clone())), said(2, Some(copied))]);
        let r = r.unwrap_err();
        assert_eq!(r.reason, Reason::RegistryForged);
        assert!(
            r.observed.ends_with(&format!(
                "a claim for fleet id {}, not the pinned {}",
                "06".repeat(16),
                "05".repeat(16)
            )),
            "{r:?}"
        );

        // Its host record as each member says: one copy lacking it is outvoted both ways.
        let rec = host_entry(&host_record("b", &key_of("b")), 4, 4).1.unwrap();
        let judged = |records: Vec<Result<Said, Error>>| {
            let answers = vec![
                said(1, Some(held.clone())),
                said(2, Some(held.clone())),
                said(3, Some(held.clone())),
            ];
            let mut f = Script {
                each: vec![answers],
                host_each: vec![records],
                ..Script::default()
            };
            look(&mut f, &three(), &own()).unwrap_err()
        };
        let r = judged(vec![
            said(1, None),
            said(2, rec.clone()),
            said(3, rec.clone()),
        ]);
        assert_eq!(r.reason, Reason::EpochConsumed);
        let r = judged(vec![said(1, rec.clone()), said(2, None), said(3, None)]);
        assert_eq!(r.reason, Reason::RegistryForged);
        let r = judged(vec![said(1, rec.clone()), said(2, None), Err(no_answer())]);
        assert_eq!(r.reason, Reason::RegistryUnavailable);
        assert!(
            r.observed
                .ends_with("the members disagree (1 vouch for the claim, 1 do not)"),
            "{r:?}"
        );

        // Right before the dispatch: a claim won in the copy is not the others'.
        let t = token(44);
        let ok = entry(ours().to_bytes(), 44, 44);
        let theirs = entry(claim_of("b").to_bytes(), 9, 9);
        let checked = |answers| still_ours(&mut each(answers), &three(), &ours(), &t);
        let r = checked(vec![
            said(1, Some(ok.clone())),
            said(2, Some(theirs.clone())),
            said(3, Some(theirs.clone())),
        ])
        .unwrap_err();
        assert_eq!(r.reason, Reason::RegistryChanged);
        assert_eq!(
            r.observed,
            format!("member 0000000000000002: {}", holder(&theirs))
        );
        let r = checked(vec![
            said(1, Some(ok.clone())),
            Err(no_answer()),
            Err(no_answer()),
        ]);
        assert_eq!(r.unwrap_err().reason, Reason::RegistryUnavailable);
        let r = checked(vec![
            said(1, Some(ok.clone())),
            said(3, Some(ok)),
            Err(no_answer()),
        ]);
        assert_eq!(r, Ok(()));
    }

    /// What `look` and `claim` conclude of the epoch key holding `held`, the host records
    /// read answered by `hosts`.
    fn judged(held: Vec<u8>, hosts: &[HostAnswer]) -> [Refusal; 2] {
        let mut f = Script {
            gets: vec![Ok((CLUSTER, Some(entry(held.clone(), 9, 9))))],
            hosts: hosts.iter().map(answer).collect(),
            ..Script::default()
        };
        let looked = look(&mut f, &reg(), &own()).unwrap_err();
        let theirs = Claimed::Theirs {
            cluster: CLUSTER,
            entry: entry(held, 9, 9),
        };
        let mut f = Script {
            claims: vec![Ok(theirs)],
            hosts: hosts.iter().map(answer).collect(),
            ..Script::default()
        };
        match claim(&mut f, &reg(), &own(), &ours()) {
            Err(Lost::Refused(claimed)) => [looked, claimed],
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_claim_no_enrolled_host_signed_is_forged_never_consumed() {
        let b = key_of("b");
        let forger = ed25519_dalek::SigningKey::from_bytes(&[200; 32]);
        let by_forger = |host: &str| {
            FleetClaim {
                signature: [0; 64],
                ..claim_of(host)
            }
            .signed(&forger)
        };
        let at_b = format!("{}b", reg().hosts_prefix());
        let cases: Vec<(Vec<u8>, Vec<HostAnswer>, Reason, String)> = vec![
            // Another host's claim, its record unmodified and holding its key.
            (
                claim_of("b").to_bytes(),
                vec![host_entry(&host_record("b", &b), 4, 4)],
                Reason::EpochConsumed,
                format!("claimed by {} at revision 9", claim_of("b")),
            ),
            // This host's own claim (an earlier intent's): no record read.
            (
                claim_of("a").to_bytes(),
                vec![],
                Reason::EpochConsumed,
                format!("claimed by {} at revision 9", claim_of("a")),
            ),
            (
                b"junk".to_vec(),
                vec![],
                Reason::RegistryForged,
                "no recovery writes such a value".into(),
            ),
            (
                FleetClaim {
                    fleet: "payroll".into(),
                    ..claim_of("b")
                }
                .to_bytes(),
                vec![],
                Reason::RegistryForged,
                "a claim for fleet payroll".into(),
            ),
            // A claim naming this host is this host's key's to vouch for, whatever its host
            // record says: no record is read for it, not even one an etcd writer recreated
            // holding the forger's key (once read as epoch-consumed, "claimed by host a").
            (
                by_forger("a").to_bytes(),
                vec![],
                Reason::RegistryForged,
                "it names this host, whose issuer key did not sign it".into(),
            ),
            (
                by_forger("a").to_bytes(),
                vec![host_entry(&host_record("a", &forger), 4, 4)],
                Reason::RegistryForged,
                "it names this host, whose issuer key did not sign it".into(),
            ),
            (
                by_forger("b").to_bytes(),
                vec![host_entry(&host_record("b", &b), 4, 4)],
                Reason::RegistryForged,
                format!("{at_b} holds another issuer key than the claim's signer"),
            ),
            (
                claim_of("b").to_bytes(),
                vec![(at_b.clone(), Some(None))],
                Reason::RegistryForged,
                format!("{at_b} is absent: no host of that name is enrolled"),
            ),
            (
                claim_of("b").to_bytes(),
                vec![host_entry(&host_record("b", &b), 4, 8)],
                Reason::RegistryForged,
                format!("{at_b} was modified (created at revision 4, modified at 8)"),
            ),
            (
                claim_of("b").to_bytes(),
                vec![host_entry(
                    &FleetHost {
                        deployment: DeploymentId([7; 16]),
                        ..host_record("b", &b)
                    },
                    4,
                    4,
                )],
                Reason::RegistryForged,
                format!(
                    "{at_b} enrolls host b of fleet billing (deployment {})",
                    DeploymentId([7; 16])
                ),
            ),
            (
                claim_of("b").to_bytes(),
                vec![host_entry_at(&at_b, &host_record("c", &b))],
                Reason::RegistryForged,
                format!(
                    "{at_b} enrolls host c of fleet billing (deployment {})",
                    DeploymentId([1; 16])
                ),
            ),
            (
                claim_of("b").to_bytes(),
                vec![host_entry_at(
                    &at_b,
                    &FleetHost {
                        fleet: "payroll".into(),
                        ..host_record("b", &b)
                    },
                )],
                Reason::RegistryForged,
                format!(
                    "{at_b} enrolls host b of fleet payroll (deployment {})",
                    DeploymentId([1; 16])
                ),
            ),
            (
                claim_of("b").to_bytes(),
                vec![(at_b.clone(), None)],
                Reason::RegistryUnavailable,
                format!("its host record {at_b} unread: 0 answered: no answer: deadline"),
            ),
        ];
        for (i, (held, hosts, reason, why)) in cases.into_iter().enumerate() {
            for r in judged(held, &hosts) {
                assert_eq!(r.reason, reason, "case {i}: {r:?}");
                assert!(r.observed.ends_with(&why), "{why:?} in {r:?}");
                assert!(r.observed.starts_with("claimed"), "{r:?}");
            }
        }
    }

    #[test]
    fn holder_says_what_holds_the_key_when_it_is_no_claim() {
        let mut big = entry(vec![], 5, 5);
        big.value_bytes = 70_000;
        assert_eq!(
            holder(&big),
            "claimed at revision 5 by a value of 70000 bytes, no fleet claim"
        );
        let junk = entry(b"junk".to_vec(), 6, 6);
        assert!(
            holder(&junk).starts_with("claimed at revision 6 by a value that is no fleet claim (")
        );
    }

    #[test]
    fn a_claim_won_is_its_create_revision_in_the_answering_cluster() {
        let won = Claimed::Ours {
            cluster: CLUSTER,
            entry: entry(ours().to_bytes(), 44, 44),
        };
        assert_eq!(
            claim(&mut claims(Ok(won)), &reg(), &own(), &ours()).unwrap(),
            token(44)
        );
    }

    /// The registry of a fleet established with a token floor of 44.
    fn floored() -> Registry {
        Registry {
            pin: Some(FleetPin {
                id: repoch_protocol::fleet::FleetId([5; 16]),
                cluster: CLUSTER,
                members: vec![1],
                floor: 44,
            }),
            record_revision: 2,
            ..reg()
        }
    }

    #[test]
    fn a_fleet_with_a_floor_gives_tokens_above_it_and_checks_them_so() {
        let won = Claimed::Ours {
            cluster: CLUSTER,
            entry: entry(ours().to_bytes(), 3, 3),
        };
        let t = claim(&mut claims(Ok(won)), &floored(), &own(), &ours()).unwrap();
        assert_eq!(t, token(47), "the create revision 3 above the floor 44");
        let check = |created: i64| {
            let e = entry(ours().to_bytes(), created, created);
            still_ours(&mut gets(Ok((CLUSTER, Some(e)))), &floored(), &ours(), &t)
        };
        assert_eq!(check(3), Ok(()));
        let r = check(47).unwrap_err();
        assert_eq!(r.reason, Reason::RegistryChanged);
        assert_eq!(
            r.observed,
            "member 0000000000000001: created at revision 47, modified at 47"
        );
        let huge = Registry {
            pin: floored().pin.map(|p| FleetPin {
                floor: u64::MAX,
                ..p
            }),
            ..floored()
        };
        let won = Claimed::Ours {
            cluster: CLUSTER,
            entry: entry(ours().to_bytes(), 3, 3),
        };
        match claim(&mut claims(Ok(won)), &huge, &own(), &ours()) {
            Err(Lost::Unknown(r)) => assert_eq!(r.expected, "a create revision above 0, below 0"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_claim_won_at_no_revision_is_unknown_never_a_token() {
        for rev in [0, -1] {
            let won = Claimed::Ours {
                cluster: CLUSTER,
                entry: entry(ours().to_bytes(), rev, rev),
            };
            match claim(&mut claims(Ok(won)), &reg(), &own(), &ours()) {
                Err(Lost::Unknown(r)) => {
                    assert_eq!(r.reason, Reason::RegistryUnavailable);
                    assert_eq!(r.observed, format!("revision {rev}"));
                }
                other => panic!("revision {rev}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_claim_lost_to_another_host_is_refused_naming_it() {
        let theirs = Claimed::Theirs {
            cluster: CLUSTER,
            entry: entry(claim_of("b").to_bytes(), 7, 7),
        };
        let mut f = Script {
            hosts: vec![answer(&host_entry(&host_record("b", &key_of("b")), 4, 4))],
            ..claims(Ok(theirs))
        };
        match claim(&mut f, &reg(), &own(), &ours()) {
            Err(Lost::Refused(r)) => {
                assert_eq!(r.reason, Reason::EpochConsumed);
                assert_eq!(r.expected, format!("claimed by {}", ours()));
                assert_eq!(
                    r.observed,
                    format!("claimed by {} at revision 7", claim_of("b"))
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_claim_refused_before_etcd_applied_it_is_refused_and_an_unanswered_one_unknown() {
        for e in [Error::Refused("quota".into()), Error::Config("cert".into())] {
            match claim(&mut claims(Err(e)), &reg(), &own(), &ours()) {
                Err(Lost::Refused(r)) => assert_eq!(r.expected, "the claim applied"),
                other => panic!("{other:?}"),
            }
        }
        for e in [no_answer(), Error::Answer("odd".into())] {
            match claim(&mut claims(Err(e)), &reg(), &own(), &ours()) {
                Err(Lost::Unknown(r)) => assert_eq!(r.expected, "the claim's answer"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn the_claim_still_ours_holds_only_unmodified_in_its_cluster() {
        let ok = entry(ours().to_bytes(), 44, 44);
        let check = |answer| still_ours(&mut gets(answer), &reg(), &ours(), &token(44));
        assert_eq!(check(Ok((CLUSTER, Some(ok.clone())))), Ok(()));
        let changed = |answer, observed: &str| {
            let r = check(answer).unwrap_err();
            assert_eq!(r.reason, Reason::RegistryChanged, "{observed}");
            assert_eq!(
                r.expected,
                format!("this host's claim, {}, unmodified", token(44))
            );
            assert_eq!(r.observed, format!("member 0000000000000001: {observed}"));
        };
        changed(Ok((CLUSTER, None)), "the key is gone");
        changed(
            Ok((0xc2, Some(ok.clone()))),
            "cluster 00000000000000c2 answered",
        );
        let theirs = entry(claim_of("b").to_bytes(), 44, 44);
        changed(Ok((CLUSTER, Some(theirs.clone()))), &holder(&theirs));
        let mut cut = ok.clone();
        cut.value_bytes += 1;
        changed(Ok((CLUSTER, Some(cut.clone()))), &holder(&cut));
        changed(
            Ok((CLUSTER, Some(entry(ours().to_bytes(), 45, 45)))),
            "created at revision 45, modified at 45",
        );
        changed(
            Ok((CLUSTER, Some(entry(ours().to_bytes(), 44, 46)))),
            "created at revision 44, modified at 46",
        );
        let r = check(Err(no_answer())).unwrap_err();
        assert_eq!(r.reason, Reason::RegistryUnavailable);
    }

    /// The test credentials of the registry crate (a CA, a client certificate and its key).
    fn fixture(name: &str) -> Vec<u8> {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../registry/tests/fixtures");
        std::fs::read(format!("{dir}/{name}")).unwrap()
    }

    /// An auditor's credentials (any regular file it can read): read whole up to 64 KiB
    /// each; one byte more is refused naming the field and its path.
    #[test]
    fn credentials_are_read_up_to_64_kib_each_and_refused_naming_the_file_past_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = |n: &str| dir.path().join(n).to_str().unwrap().to_owned();
        let mut r = reg();
        (r.ca, r.cert, r.key) = (path("ca"), path("cert"), path("key"));
        let mut padded = fixture("client.pem");
        padded.resize(65_536, b'\n');
        std::fs::write(&r.ca, fixture("ca.pem")).unwrap();
        std::fs::write(&r.cert, &padded).unwrap();
        std::fs::write(&r.key, fixture("client.key")).unwrap();
        let (ca, cert, key) = credentials(&r, false).unwrap();
        assert_eq!(
            (ca, cert.len(), key),
            (fixture("ca.pem"), 65_536, fixture("client.key"))
        );
        padded.push(b'\n');
        std::fs::write(&r.cert, &padded).unwrap();
        let e = credentials(&r, false).unwrap_err();
        assert_eq!(e.reason, Reason::RegistryUnprotected);
        assert_eq!(e.subject, format!("registry.cert {}", r.cert));
        assert!(e.observed.contains("65537 bytes"), "{}", e.observed);
    }

    /// Read, but unusable: refused naming the field and its path, with why.
    #[test]
    fn unusable_credentials_are_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = |n: &str| dir.path().join(n).to_str().unwrap().to_owned();
        let mut r = reg();
        (r.ca, r.cert, r.key) = (path("ca"), path("cert"), path("key"));
        let write = |ca: &[u8], cert: &[u8], key: &[u8]| {
            std::fs::write(path("ca"), ca).unwrap();
            std::fs::write(path("cert"), cert).unwrap();
            std::fs::write(path("key"), key).unwrap();
        };
        let (ca, cert, key) = (
            fixture("ca.pem"),
            fixture("client.pem"),
            fixture("client.key"),
        );
        for (which, file, bad) in [("ca", &r.ca, 0), ("cert", &r.cert, 1), ("key", &r.key, 2)] {
            let mut files = [ca.clone(), cert.clone(), key.clone()];
            files[bad] = b"garbage".to_vec();
            write(&files[0], &files[1], &files[2]);
            let e = credentials(&r, false).unwrap_err();
            assert_eq!(e.reason, Reason::RegistryUnavailable, "{which}");
            assert_eq!(e.subject, format!("registry.{which} {file}"));
            assert_eq!(e.expected, "a usable PEM file");
            assert!(e.observed.starts_with("no PEM"), "{which}: {}", e.observed);
        }
    }

    /// An endpoint no certificate can name is the field to fix (`registry.endpoints`,
    /// naming the host); another unusable client (here, too many endpoints) is the
    /// registry's, as before.
    #[test]
    fn an_endpoint_no_certificate_can_name_is_refused_as_the_endpoints_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = |n: &str| dir.path().join(n).to_str().unwrap().to_owned();
        let mut r = reg();
        (r.ca, r.cert, r.key) = (path("ca"), path("cert"), path("key"));
        std::fs::write(&r.ca, fixture("ca.pem")).unwrap();
        std::fs::write(&r.cert, fixture("client.pem")).unwrap();
        std::fs::write(&r.key, fixture("client.key")).unwrap();
        r.endpoints = vec!["https://127.1:2379".into()];
        let e = connect(&r, false).unwrap_err();
        assert_eq!(
            (e.reason, e.subject.as_str()),
            (Reason::RegistryUnavailable, "registry.endpoints")
        );
        assert!(
            e.observed.contains("127.1 is no DNS name"),
            "{}",
            e.observed
        );
        r.endpoints = (0..=repoch_registry::ENDPOINTS_MAX)
            .map(|i| format!("https://a:{}", i + 1))
            .collect();
        let e = connect(&r, false).unwrap_err();
        assert_eq!(e.reason, Reason::RegistryUnavailable);
        assert_eq!(e.subject, format!("registry {}", r.epoch_key()));
        assert_eq!(e.expected, "usable credentials");
    }
}

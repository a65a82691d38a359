//! The fleet registry's client (docs/ARCHITECTURE.md, "The fleet registry"): etcd's v3 KV
//! API over gRPC with mutual TLS, behind a blocking facade, so that the issuance stays one
//! synchronous thread of control and the CLI a plain blocking program. The runtime this
//! crate runs (tokio, current-thread) is private to each [`Client`]. It opens no file: the
//! caller reads the credentials (as root's own, for repochd) and passes their PEM bytes.
//!
//! A client may be pinned to one cluster ([`Client::pin`], a [`Vouch`]): then no endpoint's
//! answer is taken before that endpoint, on the same call, named the pinned cluster and one
//! of its members and listed the cluster's members for the vouch to judge (and, once per
//! endpoint, answered with the fleet's record), and every answer's header is judged again.
//! Every read and write is one transaction that holds only while the vouch's guard key (the
//! fleet record) exists at its pinned revision: a cluster that lacks it applies nothing.
//! An endpoint that fails is passed over and named; when every endpoint fails so:
//! [`Error::Foreign`].
//!
//! Its operations, each bounded by the client's deadline per endpoint and tried on each
//! endpoint at most once per call:
//!
//! - [`Client::get`]: a linearizable read of one key;
//! - [`Client::create`]: one transaction, "put only if the key's create revision is 0",
//!   that answers either [`Created::Won`] or [`Created::Exists`] with the value present;
//!   [`Client::remove`] deletes a key only if it is the one created at a given revision;
//!   [`Client::probe_write`] asks whether a write would be taken, writing nothing;
//! - [`Client::list`]: a linearizable read of the keys under a prefix, at most
//!   [`LIST_MAX`]; [`Client::scan`] pages through any number at one revision;
//! - [`Client::members`]: the cluster's voting members.
//!
//! etcd's key-value operations are strictly serializable; its lock API alone is not a
//! fence, and this crate never uses it (docs/THREAT-MODEL.md, "The fleet registry").
//!
//! An answer that does not come (a timeout, a connection lost after the request left)
//! does not say whether a transaction applied: [`Error::Unanswered`]. The caller resolves
//! it by reading the key back ([`Client::claim`] does).

#[allow(clippy::all, rust_2018_idioms, missing_debug_implementations, dead_code)]
#[rustfmt::skip]
mod gen {
    pub mod authpb {
        include!("gen/authpb.rs");
    }
    pub mod mvccpb {
        include!("gen/mvccpb.rs");
    }
    pub mod etcdserverpb {
        include!("gen/etcdserverpb.rs");
    }
}

use std::time::Duration;

use gen::etcdserverpb::{
    cluster_client::ClusterClient, compare, kv_client::KvClient, request_op, response_op, Compare,
    DeleteRangeRequest, MemberListRequest, MemberListResponse, PutRequest, RangeRequest,
    RangeResponse, RequestOp, ResponseHeader, TxnRequest, TxnResponse,
};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// Endpoints a deployment may name: etcd clusters have 1, 3, 5 or 7 members.
pub const ENDPOINTS_MAX: usize = 7;
/// A value this client writes or accepts: a claim is a few hundred bytes.
pub const VALUE_BYTES_MAX: usize = 4096;
/// Keys one [`Client::list`] returns; more is refused, never truncated.
pub const LIST_MAX: usize = 4096;
/// Reads in one transaction of [`Client::get_at`]: etcd's default `--max-txn-ops`.
pub const TXN_READS_MAX: usize = 128;
/// The longest wait for one endpoint's answer; the caller's deadline is clamped to it.
pub const CALL_SECONDS_MAX: u64 = 60;
/// A gRPC answer decoded from etcd: a list of [`LIST_MAX`] claims, with room.
const MESSAGE_BYTES_MAX: usize = LIST_MAX * (VALUE_BYTES_MAX + 1024);

/// Where the registry is and how to prove who we are to it: the PEM bytes of the CA the
/// members' certificates chain to, and of this client's certificate and key (read by the
/// caller: this crate opens no file).
#[derive(Clone, PartialEq, Eq)]
pub struct Spec {
    /// `https://HOST:PORT`, one per member.
    pub endpoints: Vec<String>,
    pub ca: Vec<u8>,
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl std::fmt::Debug for Spec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key's bytes.
        f.debug_struct("Spec")
            .field("endpoints", &self.endpoints)
            .finish_non_exhaustive()
    }
}

/// Which credential [`check_credentials`] found unusable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credential {
    Ca,
    Cert,
    Key,
}

/// Whether the PEM bytes of a CA bundle, a client certificate (chain) and its key make a
/// usable client configuration: each parses, the CA holds at least one certificate a
/// trust anchor can be made of, and the key is the certificate's. Which one is not, and
/// why.
pub fn check_credentials(ca: &[u8], cert: &[u8], key: &[u8]) -> Result<(), (Credential, String)> {
    use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
    let certs =
        |which, bytes: &[u8]| -> Result<Vec<CertificateDer<'static>>, (Credential, String)> {
            let all = CertificateDer::pem_slice_iter(bytes)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| (which, format!("not PEM certificates: {e}")))?;
            match all.is_empty() {
                true => Err((which, "no PEM certificate in it".into())),
                false => Ok(all),
            }
        };
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(Credential::Ca, ca)? {
        roots.add(c).map_err(|e| {
            (
                Credential::Ca,
                format!("a certificate that is no trust anchor: {e}"),
            )
        })?;
    }
    let chain = certs(Credential::Cert, cert)?;
    let key = PrivateKeyDer::from_pem_slice(key)
        .map_err(|e| (Credential::Key, format!("no PEM private key: {e}")))?;
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| (Credential::Cert, e.to_string()))?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|e| match e {
            rustls::Error::InconsistentKeys(_) => (
                Credential::Key,
                "not the key of the certificate (registry.cert)".to_owned(),
            ),
            e => (Credential::Cert, format!("unusable with its key: {e}")),
        })?;
    Ok(())
}

/// Why a call has no answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration or the credentials are unusable (never reached the network).
    #[error("{0}")]
    Config(String),
    /// No endpoint answered within the deadline, or an answer was lost: a write may or
    /// may not have applied.
    #[error("no answer: {0}")]
    Unanswered(String),
    /// An endpoint answered with an error status that says the request did not apply.
    #[error("refused by etcd: {0}")]
    Refused(String),
    /// The answer broke this client's bounds or etcd's own contract.
    #[error("unexpected answer: {0}")]
    Answer(String),
    /// No endpoint took the request, and at least one answered but failed the pin's
    /// [`Vouch`] (another cluster, a member that lists no majority of the pinned ones, no
    /// fleet record); the others did not answer before it was sent. A write was sent to
    /// none of them.
    #[error("not the pinned cluster: {0}")]
    Foreign(String),
}

/// Why an endpoint's answer is not the pinned fleet's (another cluster, a member list
/// without a majority of the pinned members, no fleet record at its revision): the
/// answering peer's fault, never this host's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotPinned(pub String);

impl From<String> for NotPinned {
    fn from(s: String) -> NotPinned {
        NotPinned(s)
    }
}

/// Its text, as a message (`e.contains(..)`, `e == "…"` in a test).
impl std::ops::Deref for NotPinned {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl PartialEq<&str> for NotPinned {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// What makes an endpoint's answers the pinned fleet's ([`Client::pin`]); each method says
/// why not.
pub trait Vouch: Send {
    /// An endpoint's member list: its header, and the voting members it lists.
    fn members(&self, header: &Header, voting: &[u64]) -> Result<(), NotPinned>;
    /// The key whose value proves the fleet lives in the cluster that answers.
    fn record_key(&self) -> Vec<u8>;
    /// That key as the endpoint read it.
    fn record(&self, entry: Option<&Entry>) -> Result<(), NotPinned>;
    /// The header of any answer.
    fn header(&self, header: &Header) -> Result<(), NotPinned>;
    /// A key every request holds to, in the same transaction: it must exist, created and
    /// last modified at this revision, or the request applies nothing and the endpoint is
    /// passed over (the fleet record, which a cluster of the same template lacks).
    fn guard(&self) -> (Vec<u8>, i64);
}

/// Member lists a [`Vouch`] judges: etcd advises at most 7 members; one list longer than
/// this is refused.
pub const MEMBERS_LISTED_MAX: usize = 64;

/// Which cluster, and at which revision, an answer was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub cluster: u64,
    pub member: u64,
    pub revision: i64,
}

/// A walk through every key under a prefix, a page at a time ([`Client::next_page`]).
#[derive(Debug, Clone)]
pub struct Pages {
    /// Where the next page starts; `None` once every key was read.
    from: Option<Vec<u8>>,
    end: Vec<u8>,
    /// The first page's header: every page is read at its revision.
    pub header: Option<Header>,
    /// Keys the next page asks for: [`LIST_MAX`], halved while answers are too large.
    limit: usize,
}

impl Pages {
    pub fn new(prefix: &[u8]) -> Pages {
        Pages {
            from: Some(prefix.to_vec()),
            end: prefix_end(prefix),
            header: None,
            limit: LIST_MAX,
        }
    }
}

impl From<Option<ResponseHeader>> for Header {
    fn from(h: Option<ResponseHeader>) -> Header {
        let h = h.unwrap_or_default();
        Header {
            cluster: h.cluster_id,
            member: h.member_id,
            revision: h.revision,
        }
    }
}

/// One key as read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: Vec<u8>,
    /// The value, or nothing when it is over [`VALUE_BYTES_MAX`] (`value_bytes` says how
    /// long it is): a value this client never writes is still a key that exists, and one
    /// planted to be large must not hide the others of a list.
    pub value: Vec<u8>,
    pub value_bytes: usize,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
}

/// What [`Client::create`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Created {
    /// The key did not exist and now holds the value; `header.revision` is its create
    /// revision.
    Won { header: Header },
    /// The key existed: its value is untouched.
    Exists { header: Header, entry: Entry },
}

/// What [`Client::claim`] decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Claimed {
    /// The key holds exactly our value (created by this call, or by an earlier attempt
    /// whose answer was lost): `entry.create_revision` is the fencing revision.
    Ours { cluster: u64, entry: Entry },
    /// Another value holds the key.
    Theirs { cluster: u64, entry: Entry },
}

/// An answer that carries etcd's response header.
trait Headed {
    fn header(&self) -> Header;
}

impl Headed for RangeResponse {
    fn header(&self) -> Header {
        Header::from(self.header)
    }
}

impl Headed for TxnResponse {
    fn header(&self) -> Header {
        Header::from(self.header)
    }
}

/// A read's answer: the answering member's header, and the key's entry if it exists.
pub type Read = (Header, Option<Entry>);

/// A connected client: one lazily connected channel per endpoint and a private runtime.
pub struct Client {
    rt: tokio::runtime::Runtime,
    endpoints: Vec<(String, KvClient<Channel>)>,
    clusters: Vec<ClusterClient<Channel>>,
    /// The pin, and which endpoints have answered with the fleet's record.
    pin: Option<Box<dyn Vouch>>,
    recorded: Vec<bool>,
    /// The endpoint asked first: the last one that answered.
    preferred: usize,
    /// The one endpoint every call asks, while [`Client::get_each`] asks them in turn.
    only: Option<usize>,
    deadline: Duration,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<&str> = self.endpoints.iter().map(|(u, _)| u.as_str()).collect();
        f.debug_struct("Client")
            .field("endpoints", &urls)
            .field("preferred", &self.preferred)
            .field("deadline", &self.deadline)
            .finish()
    }
}

/// The `HOST` of `https://HOST:PORT`: the name the member's certificate must carry.
fn host_of(url: &str) -> Result<String, Error> {
    let rest = url.strip_prefix("https://").ok_or_else(|| {
        Error::Config(format!(
            "endpoint {url:?}: not https://HOST:PORT (TLS is required)"
        ))
    })?;
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    if host.is_empty() || !authority.contains(':') {
        return Err(Error::Config(format!(
            "endpoint {url:?}: not https://HOST:PORT"
        )));
    }
    Ok(host.to_owned())
}

/// How [`status`] spells etcd's refusal of a request this client's user may not make.
const DENIED: &str = "PermissionDenied:";

fn status(e: tonic::Status) -> Error {
    use tonic::Code;
    match e.code() {
        // The request may have reached the leader and applied: unknown.
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::Unknown
        | Code::Cancelled
        | Code::Aborted
        | Code::Internal => Error::Unanswered(format!("{:?}: {}", e.code(), e.message())),
        _ => Error::Refused(format!("{:?}: {}", e.code(), e.message())),
    }
}

impl Client {
    /// Reads the credentials and prepares one channel per endpoint (connected on first
    /// use). `deadline` bounds each endpoint's answer (at most [`CALL_SECONDS_MAX`]).
    pub fn connect(spec: &Spec, deadline: Duration) -> Result<Client, Error> {
        if spec.endpoints.is_empty() || spec.endpoints.len() > ENDPOINTS_MAX {
            return Err(Error::Config(format!(
                "{} endpoints: between 1 and {ENDPOINTS_MAX} are needed",
                spec.endpoints.len()
            )));
        }
        let ca = Certificate::from_pem(&spec.ca);
        let identity = Identity::from_pem(&spec.cert, &spec.key);
        let deadline = deadline.min(Duration::from_secs(CALL_SECONDS_MAX));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| Error::Config(format!("a runtime for the registry client: {e}")))?;
        let mut endpoints = Vec::new();
        let mut clusters = Vec::new();
        for url in &spec.endpoints {
            let host = host_of(url)?;
            // The name TLS checks the member's certificate against: a spelling that is
            // neither a DNS name nor an address (`127.1`) is the endpoint's fault, said so
            // here, not a transport error at the first call.
            if rustls::pki_types::ServerName::try_from(host.as_str()).is_err() {
                return Err(Error::Config(format!(
                    "endpoint {url:?}: {host} is no DNS name or IP address a certificate can \
                     name (spell it as the member's certificate does: 127.0.0.1, localhost)"
                )));
            }
            let tls = ClientTlsConfig::new()
                .ca_certificate(ca.clone())
                .identity(identity.clone())
                .domain_name(host);
            let ep = Endpoint::from_shared(url.clone())
                .map_err(|e| Error::Config(format!("endpoint {url:?}: {e}")))?
                .connect_timeout(deadline)
                .timeout(deadline)
                .tls_config(tls)
                .map_err(|e| Error::Config(format!("endpoint {url:?}: TLS: {e}")))?;
            let channel = {
                let _in = rt.enter();
                ep.connect_lazy()
            };
            let kv = KvClient::new(channel.clone())
                .max_decoding_message_size(MESSAGE_BYTES_MAX)
                .max_encoding_message_size(MESSAGE_BYTES_MAX);
            endpoints.push((url.clone(), kv));
            clusters.push(ClusterClient::new(channel));
        }
        Ok(Client {
            rt,
            recorded: vec![false; endpoints.len()],
            endpoints,
            clusters,
            pin: None,
            preferred: 0,
            only: None,
            deadline,
        })
    }

    /// Asks the endpoints in turn, from the last one that answered, until one answers. An
    /// error status that says the request did not apply ends the call. A missing answer
    /// tries the next endpoint only if `resend` (a read) or if the request never left (no
    /// connection): a write whose answer was lost is the caller's to resolve first.
    fn ask<T: Headed, F, Fut>(&mut self, what: &str, resend: bool, call: F) -> Result<T, Error>
    where
        F: FnMut(KvClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        self.ask_judged(what, resend, call, |_| Ok(()))
    }

    /// [`Client::ask`], with `judge` saying of an answer that its endpoint is not the
    /// pinned fleet's (a guarded transaction that applied nothing): that endpoint is passed
    /// over like one that failed the vouch.
    fn ask_judged<T: Headed, F, Fut>(
        &mut self,
        what: &str,
        resend: bool,
        mut call: F,
        judge: impl Fn(&T) -> Result<(), NotPinned>,
    ) -> Result<T, Error>
    where
        F: FnMut(KvClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        let n = self.endpoints.len();
        let mut missed = Vec::new();
        let mut foreign = Vec::new();
        let first = self.preferred;
        // Each endpoint once, from the preferred one; an endpoint whose attempt failed
        // fast (a connection found broken, not a deadline) once more at the end: its
        // channel dials again, and a dropped connection must not read as no answer.
        let mut order: std::collections::VecDeque<usize> = match self.only {
            Some(i) => [i].into(),
            None => (0..n).map(|k| (first + k) % n).collect(),
        };
        let mut again = vec![true; n];
        let fast = self.deadline / 2;
        while let Some(i) = order.pop_front() {
            let started = std::time::Instant::now();
            let mut retry = |i: usize, order: &mut std::collections::VecDeque<usize>| {
                if std::mem::take(&mut again[i]) && started.elapsed() < fast {
                    order.push_back(i);
                }
            };
            match self.vouched(i) {
                Ok(()) => {}
                Err(Vouched::Missed(why)) => {
                    missed.push(format!("{}: {why}", self.endpoints[i].0));
                    self.preferred = (i + 1) % n;
                    retry(i, &mut order);
                    continue;
                }
                Err(Vouched::Foreign(why)) => {
                    foreign.push(format!("{}: {why}", self.endpoints[i].0));
                    self.preferred = (i + 1) % n;
                    continue;
                }
            }
            let (url, kv) = &self.endpoints[i];
            let fut = call(kv.clone());
            let deadline = self.deadline;
            let answer = self
                .rt
                .block_on(async { tokio::time::timeout(deadline, fut).await });
            let why = match answer {
                Ok(Ok(v)) => {
                    if let Err(why) = judge(&v) {
                        foreign.push(format!("{url}: {why}"));
                        self.preferred = (i + 1) % n;
                        continue;
                    }
                    self.preferred = i;
                    if let Some(pin) = &self.pin {
                        // Vouched for on this call: an answer from elsewhere now is no
                        // answer of the fleet's (and a write's fate is unknown).
                        pin.header(&v.header())
                            .map_err(|why| Error::Answer(format!("{what}: {url}: {why}")))?;
                    }
                    return Ok(v);
                }
                Ok(Err(e)) if resend || never_sent(&e) => match status(e) {
                    Error::Unanswered(why) => why,
                    other => return Err(other),
                },
                Ok(Err(e)) => {
                    return Err(match status(e) {
                        Error::Unanswered(why) => {
                            // The read-back that follows starts at the next endpoint.
                            self.preferred = (i + 1) % n;
                            Error::Unanswered(format!("{what}: {url}: {why}"))
                        }
                        other => other,
                    });
                }
                Err(_) if resend => format!("no answer within {} ms", deadline.as_millis()),
                Err(_) => {
                    self.preferred = (i + 1) % n;
                    return Err(Error::Unanswered(format!(
                        "{what}: {url}: no answer within {} ms",
                        deadline.as_millis()
                    )));
                }
            };
            missed.push(format!("{url}: {why}"));
            // The next call starts elsewhere.
            self.preferred = (i + 1) % n;
            retry(i, &mut order);
        }
        // No endpoint took the request. One that answered as another cluster makes it a
        // mismatch even beside others that did not answer: the cluster reachable is not
        // the fleet's. A request not resent was sent to none of the missed ones either
        // (one sent and unanswered returned above), so a write applied nowhere.
        let reason = match foreign.is_empty() {
            true => Error::Unanswered,
            false => Error::Foreign,
        };
        missed.extend(foreign);
        Err(reason(format!("{what}: {}", missed.join("; "))))
    }

    /// The pin's guard, if pinned.
    fn guard(&self) -> Option<(Vec<u8>, i64)> {
        self.pin.as_ref().map(|p| p.guard())
    }

    /// One transaction, asked as [`Client::ask_judged`] asks.
    fn txn(
        &mut self,
        what: &str,
        resend: bool,
        req: &TxnRequest,
        judge: impl Fn(&TxnResponse) -> Result<(), NotPinned>,
    ) -> Result<TxnResponse, Error> {
        self.ask_judged(
            what,
            resend,
            |mut kv| {
                let req = req.clone();
                async move { kv.txn(req).await.map(|r| r.into_inner()) }
            },
            judge,
        )
    }

    /// Pins this client: from now on every call is vouched for ([`Vouch`]).
    pub fn pin(&mut self, vouch: Box<dyn Vouch>) {
        self.pin = Some(vouch);
        self.recorded.iter_mut().for_each(|r| *r = false);
    }

    /// Endpoint `i`'s member list: its header and its voting members.
    fn members_of(&mut self, i: usize) -> Result<(Header, Vec<u64>), Vouched> {
        let mut cluster = self.clusters[i].clone();
        let deadline = self.deadline;
        let answer = self.rt.block_on(async {
            tokio::time::timeout(deadline, cluster.member_list(MemberListRequest::default())).await
        });
        let r: MemberListResponse = match answer {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(e)) => return Err(Vouched::Missed(format!("member list: {}", status(e)))),
            Err(_) => {
                return Err(Vouched::Missed(format!(
                    "member list: no answer within {} ms",
                    deadline.as_millis()
                )))
            }
        };
        if r.members.len() > MEMBERS_LISTED_MAX {
            return Err(Vouched::Foreign(format!(
                "{} members listed, over {MEMBERS_LISTED_MAX}",
                r.members.len()
            )));
        }
        let voting = r
            .members
            .iter()
            .filter(|m| !m.is_learner)
            .map(|m| m.id)
            .collect();
        Ok((Header::from(r.header), voting))
    }

    /// Whether endpoint `i` is the pinned fleet's, asked now (always, when pinned).
    fn vouched(&mut self, i: usize) -> Result<(), Vouched> {
        if self.pin.is_none() {
            return Ok(());
        }
        let (header, voting) = self.members_of(i)?;
        let pin = self.pin.as_ref().expect("pinned");
        pin.header(&header)
            .and_then(|()| pin.members(&header, &voting))
            .map_err(|e| Vouched::Foreign(e.0))?;
        if self.recorded[i] {
            return Ok(());
        }
        let req = RangeRequest {
            key: pin.record_key(),
            ..Default::default()
        };
        let mut kv = self.endpoints[i].1.clone();
        let deadline = self.deadline;
        let answer = self
            .rt
            .block_on(async { tokio::time::timeout(deadline, kv.range(req)).await });
        let r = match answer {
            Ok(Ok(r)) => r.into_inner(),
            Ok(Err(e)) => return Err(Vouched::Missed(format!("fleet record: {}", status(e)))),
            Err(_) => {
                return Err(Vouched::Missed(format!(
                    "fleet record: no answer within {} ms",
                    deadline.as_millis()
                )))
            }
        };
        let pin = self.pin.as_ref().expect("pinned");
        pin.header(&r.header()).map_err(|e| Vouched::Foreign(e.0))?;
        let record = r.kvs.into_iter().next().map(entry).transpose();
        let record = record.map_err(|e| Vouched::Foreign(e.to_string()))?;
        pin.record(record.as_ref())
            .map_err(|e| Vouched::Foreign(e.0))?;
        self.recorded[i] = true;
        Ok(())
    }

    /// The cluster's voting members, as the first endpoint that answers lists them
    /// (unvouched: what an enrollment pins, or compares with a fleet record).
    pub fn members(&mut self) -> Result<(Header, Vec<u64>), Error> {
        let n = self.endpoints.len();
        let mut missed = Vec::new();
        for k in 0..n {
            let i = (self.preferred + k) % n;
            match self.members_of(i) {
                Ok(answer) => {
                    self.preferred = i;
                    return Ok(answer);
                }
                Err(Vouched::Missed(why) | Vouched::Foreign(why)) => {
                    missed.push(format!("{}: {why}", self.endpoints[i].0))
                }
            }
        }
        Err(Error::Unanswered(format!(
            "member list: {}",
            missed.join("; ")
        )))
    }

    /// A linearizable read of `key`.
    pub fn get(&mut self, key: &[u8]) -> Result<(Header, Option<Entry>), Error> {
        if let Some((gk, rev)) = self.guard() {
            let req = TxnRequest {
                compare: guarded(&gk, rev),
                success: vec![read(key)],
                failure: vec![read(&gk)],
            };
            let r = self.txn("get", true, &req, |r| broken(r, 0, &gk, rev))?;
            if !r.succeeded {
                return Err(Error::Answer(
                    "a guarded read whose guard both failed and held".into(),
                ));
            }
            let header = Header::from(r.header);
            let kvs = ranges(r.responses).next().unwrap_or_default();
            if kvs.len() > 1 {
                return Err(Error::Answer(format!("{} values for one key", kvs.len())));
            }
            return Ok((header, kvs.into_iter().next().map(entry).transpose()?));
        }
        let req = RangeRequest {
            key: key.to_vec(),
            ..Default::default()
        };
        let r = self.ask("get", true, |mut kv| {
            let req = req.clone();
            async move { kv.range(req).await.map(|r| r.into_inner()) }
        })?;
        if r.kvs.len() > 1 {
            return Err(Error::Answer(format!("{} values for one key", r.kvs.len())));
        }
        let entry = r.kvs.into_iter().next().map(entry).transpose()?;
        Ok((Header::from(r.header), entry))
    }

    /// [`Client::get`] asked of each endpoint alone, in the order listed: each one's own
    /// answer (vouched for, when pinned), with the endpoint. An endpoint that is a relay to
    /// elsewhere speaks for itself only: what a majority of the members say cannot be
    /// made by whoever holds one member's key and a route.
    pub fn get_each(&mut self, key: &[u8]) -> Vec<(String, Result<Read, Error>)> {
        let preferred = self.preferred;
        let each = (0..self.endpoints.len())
            .map(|i| {
                self.only = Some(i);
                let answer = self.get(key);
                (self.endpoints[i].0.clone(), answer)
            })
            .collect();
        self.only = None;
        self.preferred = preferred;
        each
    }

    /// A linearizable read of every key under `prefix` (at most [`LIST_MAX`]).
    pub fn list(&mut self, prefix: &[u8]) -> Result<(Header, Vec<Entry>), Error> {
        let req = RangeRequest {
            key: prefix.to_vec(),
            range_end: prefix_end(prefix),
            limit: LIST_MAX as i64 + 1,
            ..Default::default()
        };
        let r = self.ask("list", true, |mut kv| {
            let req = req.clone();
            async move { kv.range(req).await.map(|r| r.into_inner()) }
        })?;
        if r.kvs.len() > LIST_MAX || r.more {
            return Err(Error::Answer(format!(
                "more than {LIST_MAX} keys under the prefix"
            )));
        }
        let entries = r.kvs.into_iter().map(entry).collect::<Result<_, _>>()?;
        Ok((Header::from(r.header), entries))
    }

    /// Every key under `prefix`, read page by page ([`LIST_MAX`] keys a page) at the
    /// revision of the first page's answer, so that the keys are one snapshot however
    /// many there are; at most `max` keys (more is an [`Error::Answer`], never a
    /// truncation). Each entry is handed to `each` as it is read.
    pub fn scan(
        &mut self,
        prefix: &[u8],
        max: usize,
        mut each: impl FnMut(Entry),
    ) -> Result<Header, Error> {
        let mut pages = Pages::new(prefix);
        let mut seen = 0usize;
        while let Some(page) = self.next_page(&mut pages)? {
            for e in page {
                seen = seen.saturating_add(1);
                if seen > max {
                    return Err(Error::Answer(format!(
                        "more than {max} keys under the prefix"
                    )));
                }
                each(e);
            }
        }
        pages
            .header
            .ok_or_else(|| Error::Answer("no page read".into()))
    }

    /// The next page of `pages` (at most [`LIST_MAX`] keys, in key order, each after
    /// the last key of the page before), read at the revision of the first page's
    /// linearizable answer; `None` once every key was read. Between pages the caller may
    /// ask other things of this client: memory holds one page, however many keys.
    pub fn next_page(&mut self, pages: &mut Pages) -> Result<Option<Vec<Entry>>, Error> {
        let Some(from) = pages.from.clone() else {
            return Ok(None);
        };
        let mut req = RangeRequest {
            key: from,
            range_end: pages.end.clone(),
            revision: pages.header.map_or(0, |h| h.revision),
            ..Default::default()
        };
        // A page of large values can pass the largest answer this client decodes
        // ([`MESSAGE_BYTES_MAX`]): then the page is asked again with half as many keys, down
        // to one, and grows back by doubling once pages pass again.
        let r = loop {
            req.limit = pages.limit as i64;
            let answer = self.ask("scan", true, |mut kv| {
                let req = req.clone();
                async move { kv.range(req).await.map(|r| r.into_inner()) }
            });
            match answer {
                Err(Error::Refused(why)) if too_large(&why) && pages.limit > 1 => {
                    pages.limit /= 2;
                }
                answer => break answer?,
            }
        };
        pages.limit = (pages.limit * 2).min(LIST_MAX);
        pages.header.get_or_insert(Header::from(r.header));
        if r.kvs.len() > LIST_MAX {
            return Err(Error::Answer(format!(
                "{} keys in a page of {LIST_MAX}",
                r.kvs.len()
            )));
        }
        let entries: Vec<Entry> = r.kvs.into_iter().map(entry).collect::<Result<_, _>>()?;
        // Each page starts right after the last key read; a page that does not move on
        // (a key at or before the last one, or outside the prefix) is not an answer.
        let in_order = entries.windows(2).all(|w| w[0].key < w[1].key)
            && entries.first().is_none_or(|e| e.key >= req.key)
            && entries
                .last()
                .is_none_or(|e| e.key < pages.end || pages.end == [0]);
        if !in_order {
            return Err(Error::Answer("a page whose keys are out of order".into()));
        }
        pages.from = match (r.more, entries.last()) {
            (true, Some(last)) => Some([&last.key[..], &[0]].concat()),
            (true, None) => return Err(Error::Answer("more keys promised, none given".into())),
            (false, _) => None,
        };
        Ok(Some(entries))
    }

    /// The values of `keys` at `revision` (a page's, so that they are of its snapshot), in
    /// the order given: one transaction of reads per [`TXN_READS_MAX`] keys.
    pub fn get_at(&mut self, keys: &[Vec<u8>], revision: i64) -> Result<Vec<Option<Entry>>, Error> {
        let mut values = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(TXN_READS_MAX) {
            let req = TxnRequest {
                compare: Vec::new(),
                success: chunk
                    .iter()
                    .map(|k| RequestOp {
                        request: Some(request_op::Request::RequestRange(RangeRequest {
                            key: k.clone(),
                            revision,
                            ..Default::default()
                        })),
                    })
                    .collect(),
                failure: Vec::new(),
            };
            let r = self.txn("get", true, &req, |_| Ok(()))?;
            let answers: Vec<_> = ranges(r.responses).collect();
            if !r.succeeded || answers.len() != chunk.len() {
                return Err(Error::Answer(format!(
                    "{} answers to {} reads",
                    answers.len(),
                    chunk.len()
                )));
            }
            for (k, kvs) in chunk.iter().zip(answers) {
                if kvs.len() > 1 || kvs.first().is_some_and(|kv| &kv.key != k) {
                    return Err(Error::Answer(format!("{} values for one key", kvs.len())));
                }
                values.push(kvs.into_iter().next().map(entry).transpose()?);
            }
        }
        Ok(values)
    }

    /// One transaction: put `value` at `key` only if the key does not exist (its create
    /// revision is 0); otherwise read it. [`Error::Unanswered`] says nothing about
    /// whether the put applied.
    pub fn create(&mut self, key: &[u8], value: &[u8]) -> Result<Created, Error> {
        if value.len() > VALUE_BYTES_MAX {
            return Err(Error::Config(format!(
                "a value of {} bytes, over its bound of {VALUE_BYTES_MAX} bytes",
                value.len()
            )));
        }
        let guard = self.guard();
        let mut req = TxnRequest {
            compare: vec![absent(key)],
            success: vec![put(key, value)],
            failure: vec![read(key)],
        };
        if let Some((gk, rev)) = &guard {
            req.compare.extend(guarded(gk, *rev));
            req.failure.push(read(gk));
        }
        // One endpoint only: a lost answer is the caller's to resolve (by reading back). A
        // guard that failed applied nothing: the next endpoint is asked.
        let r = self.txn("create", false, &req, |r| match &guard {
            Some((gk, rev)) if !r.succeeded => broken(r, 1, gk, *rev),
            _ => Ok(()),
        })?;
        let header = Header::from(r.header);
        if r.succeeded {
            return Ok(Created::Won { header });
        }
        let range = r
            .responses
            .into_iter()
            .find_map(|op| match op.response {
                Some(response_op::Response::ResponseRange(range)) => Some(range),
                _ => None,
            })
            .ok_or_else(|| Error::Answer("a failed create without its read".into()))?;
        match range.kvs.into_iter().next() {
            Some(kv) => Ok(Created::Exists {
                header,
                entry: entry(kv)?,
            }),
            None => Err(Error::Answer(
                "the create failed, yet the key does not exist".into(),
            )),
        }
    }

    /// Creates `key` holding `value` if it does not exist, and decides whose it is. A lost
    /// answer is resolved by reading the key back (on any endpoint): our exact value there
    /// is ours, whichever attempt wrote it; an absent key is created again (the same
    /// value, so a late first attempt and a retry cannot both win against each other);
    /// `tries` bounds the rounds, and no round starts once `budget` has passed since the
    /// call (a round may take one deadline per endpoint). [`Error::Unanswered`] at the
    /// end: the outcome is unknown and the key, if it names us, must never be used.
    pub fn claim(
        &mut self,
        key: &[u8],
        value: &[u8],
        tries: u32,
        budget: Duration,
    ) -> Result<Claimed, Error> {
        let start = std::time::Instant::now();
        let mut last = None;
        for round in 0..tries.max(1) {
            if round > 0 && start.elapsed() >= budget {
                break;
            }
            match self.create(key, value) {
                Ok(Created::Won { header }) => {
                    // The put applied at the transaction's revision: that is the key's
                    // create and mod revision, its version 1.
                    let entry = Entry {
                        key: key.to_vec(),
                        value: value.to_vec(),
                        value_bytes: value.len(),
                        create_revision: header.revision,
                        mod_revision: header.revision,
                        version: 1,
                    };
                    return Ok(Claimed::Ours {
                        cluster: header.cluster,
                        entry,
                    });
                }
                Ok(Created::Exists { header, entry }) => {
                    return Ok(decide(header.cluster, entry, value));
                }
                Err(Error::Unanswered(why)) => last = Some(why),
                Err(e) => return Err(e),
            }
            match self.get(key) {
                Ok((header, Some(entry))) => return Ok(decide(header.cluster, entry, value)),
                Ok((_, None)) => continue,
                // A create whose answer was lost may have applied: whatever the read-back
                // meets, the outcome is unknown.
                Err(e) => last = Some(e.to_string()),
            }
        }
        Err(Error::Unanswered(last.unwrap_or_default()))
    }
}

/// Why an endpoint was passed over before a call was sent to it.
enum Vouched {
    /// It did not answer the vouching questions.
    Missed(String),
    /// It answered as another cluster, member or fleet.
    Foreign(String),
}

fn absent(key: &[u8]) -> Compare {
    Compare {
        result: compare::CompareResult::Equal as i32,
        target: compare::CompareTarget::Create as i32,
        key: key.to_vec(),
        range_end: Vec::new(),
        target_union: Some(compare::TargetUnion::CreateRevision(0)),
    }
}

fn put(key: &[u8], value: &[u8]) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestPut(PutRequest {
            key: key.to_vec(),
            value: value.to_vec(),
            ..Default::default()
        })),
    }
}

fn read(key: &[u8]) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestRange(RangeRequest {
            key: key.to_vec(),
            ..Default::default()
        })),
    }
}

impl Client {
    /// Whether a write of `key` would be taken now, without writing it: one transaction
    /// whose compare never holds (`create_revision(key) < 0`) and whose success branch
    /// puts the key. etcd refuses such a transaction whole when an alarm is raised (the
    /// space quota exceeded: `NOSPACE`; `CORRUPT`) or when this client may not write the
    /// key, and otherwise applies nothing (no revision is used).
    pub fn probe_write(&mut self, key: &[u8]) -> Result<(), Error> {
        let guard = self.guard();
        let mut req = TxnRequest {
            compare: vec![Compare {
                result: compare::CompareResult::Less as i32,
                ..absent(key)
            }],
            success: vec![put(key, b"")],
            failure: Vec::new(),
        };
        if let Some((gk, _)) = &guard {
            req.failure.push(read(gk));
        }
        let r = self.txn("probe", true, &req, |r| match &guard {
            Some((gk, rev)) => broken(r, 0, gk, *rev),
            None => Ok(()),
        })?;
        if r.succeeded {
            return Err(Error::Answer(
                "a compare that cannot hold held: the probe wrote the key".into(),
            ));
        }
        Ok(())
    }

    /// Whether this client may write `key`, without writing it: the probe of
    /// [`Client::probe_write`], answered (`true`: a write would be taken) or refused with
    /// etcd's `PermissionDenied` (`false`). etcd checks a transaction's permissions on every
    /// key its branches name before it evaluates the compare, so a compare that never holds
    /// proves the permission and applies nothing either way.
    pub fn may_write(&mut self, key: &[u8]) -> Result<bool, Error> {
        match self.probe_write(key) {
            Ok(()) => Ok(true),
            Err(Error::Refused(why)) if why.starts_with(DENIED) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// One transaction: delete `key` only if it was created at `create_revision` (the
    /// record this caller made, not a later one of the same name). Whether it was.
    pub fn remove(&mut self, key: &[u8], create_revision: i64) -> Result<bool, Error> {
        let req = TxnRequest {
            compare: vec![Compare {
                target_union: Some(compare::TargetUnion::CreateRevision(create_revision)),
                ..absent(key)
            }],
            success: vec![RequestOp {
                request: Some(request_op::Request::RequestDeleteRange(
                    DeleteRangeRequest {
                        key: key.to_vec(),
                        ..Default::default()
                    },
                )),
            }],
            failure: Vec::new(),
        };
        Ok(self.txn("remove", false, &req, |_| Ok(()))?.succeeded)
    }
}

/// The compares that hold a request to the guard: `key` created and last modified at
/// `revision`.
fn guarded(key: &[u8], revision: i64) -> Vec<Compare> {
    vec![
        Compare {
            target_union: Some(compare::TargetUnion::CreateRevision(revision)),
            ..absent(key)
        },
        Compare {
            target: compare::CompareTarget::Mod as i32,
            target_union: Some(compare::TargetUnion::ModRevision(revision)),
            ..absent(key)
        },
    ]
}

/// The range answers of a transaction, in order.
fn ranges(
    responses: Vec<gen::etcdserverpb::ResponseOp>,
) -> impl Iterator<Item = Vec<gen::mvccpb::KeyValue>> {
    responses.into_iter().filter_map(|op| match op.response {
        Some(response_op::Response::ResponseRange(range)) => Some(range.kvs),
        _ => None,
    })
}

/// Whether a guarded transaction's read of the guard key (its `at`-th range answer, read
/// when the transaction did not succeed) shows the guard broken: the endpoint answers for
/// a cluster without the fleet's record at its revision.
fn broken(r: &TxnResponse, at: usize, key: &[u8], revision: i64) -> Result<(), NotPinned> {
    if r.succeeded {
        return Ok(());
    }
    let kvs = ranges(r.responses.clone()).nth(at).unwrap_or_default();
    let name = String::from_utf8_lossy(key);
    match kvs.first() {
        None => Err(format!("no fleet record at {name}").into()),
        Some(kv) if kv.create_revision != revision || kv.mod_revision != revision => Err(format!(
            "the fleet record at {name} created at revision {}, modified at {}, not the pinned {revision}",
            kv.create_revision, kv.mod_revision
        ).into()),
        Some(_) => Ok(()),
    }
}

fn decide(cluster: u64, entry: Entry, value: &[u8]) -> Claimed {
    if entry.value == value && entry.value_bytes == value.len() {
        Claimed::Ours { cluster, entry }
    } else {
        Claimed::Theirs { cluster, entry }
    }
}

/// A transport error before the request was written (no connection): safe to send
/// elsewhere.
fn never_sent(e: &tonic::Status) -> bool {
    e.code() == tonic::Code::Unavailable
        && (e.message().contains("error trying to connect")
            || e.message().contains("transport error")
            || e.message().contains("tcp connect error"))
}

fn entry(kv: gen::mvccpb::KeyValue) -> Result<Entry, Error> {
    let value_bytes = kv.value.len();
    let value = if value_bytes > VALUE_BYTES_MAX {
        Vec::new()
    } else {
        kv.value
    };
    Ok(Entry {
        key: kv.key,
        value,
        value_bytes,
        create_revision: kv.create_revision,
        mod_revision: kv.mod_revision,
        version: kv.version,
    })
}

/// Whether a refusal says the answer was over the size this client decodes (tonic's
/// `OutOfRange`, "decoded message length too large").
fn too_large(why: &str) -> bool {
    why.starts_with("OutOfRange") && why.contains("message length too large")
}

/// The end of the range of keys that start with `prefix` (etcd's convention: the prefix
/// with its last byte below 0xff incremented).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_end_is_the_next_key_after_every_key_with_the_prefix() {
        assert_eq!(prefix_end(b"/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_end(b"\xff\xff"), vec![0]);
    }

    #[test]
    fn an_endpoint_must_be_https_with_a_port() {
        assert_eq!(host_of("https://127.0.0.1:2379").unwrap(), "127.0.0.1");
        assert_eq!(host_of("https://[::1]:2379").unwrap(), "::1");
        assert_eq!(host_of("https://etcd-1:2379/").unwrap(), "etcd-1");
        for bad in [
            "http://127.0.0.1:2379",
            "127.0.0.1:2379",
            "https://etcd",
            "https://:1",
        ] {
            assert!(matches!(host_of(bad), Err(Error::Config(_))), "{bad}");
        }
    }
}

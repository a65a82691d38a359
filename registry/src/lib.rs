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

mod asking;
mod operations;

use asking::*;
use operations::*;

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

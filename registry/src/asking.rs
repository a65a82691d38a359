//! How a call reaches the cluster: connecting, the pin and its vouch on each endpoint,
//! each endpoint asked at most once per call, and the guarded transaction.

use crate::*;

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
    pub(crate) fn ask<T: Headed, F, Fut>(
        &mut self,
        what: &str,
        resend: bool,
        call: F,
    ) -> Result<T, Error>
    where
        F: FnMut(KvClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        self.ask_judged(what, resend, call, |_| Ok(()))
    }

    /// [`Client::ask`], with `judge` saying of an answer that its endpoint is not the
    /// pinned fleet's (a guarded transaction that applied nothing): that endpoint is passed
    /// over like one that failed the vouch.
    pub(crate) fn ask_judged<T: Headed, F, Fut>(
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
        let mut order = self.asking_order();
        let mut again = vec![true; n];
        let fast = self.deadline / 2;
        while let Some(i) = order.pop_front() {
            let started = std::time::Instant::now();
            let asked = match self.vouched(i) {
                Ok(()) => self.ask_endpoint(i, what, resend, &mut call, &judge)?,
                Err(Vouched::Missed(why)) => {
                    Asked::Missed(format!("{}: {why}", self.endpoints[i].0))
                }
                Err(Vouched::Foreign(why)) => {
                    Asked::Foreign(format!("{}: {why}", self.endpoints[i].0))
                }
            };
            match asked {
                Asked::Answered(v) => return Ok(v),
                Asked::Foreign(why) => {
                    foreign.push(why);
                    self.preferred = (i + 1) % n;
                }
                Asked::Missed(why) => {
                    missed.push(why);
                    // The next call starts elsewhere.
                    self.preferred = (i + 1) % n;
                    if std::mem::take(&mut again[i]) && started.elapsed() < fast {
                        order.push_back(i);
                    }
                }
            }
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

    /// The endpoints a call asks, in turn: each once, from the preferred one (or only the
    /// one this client is held to). An endpoint whose attempt failed fast (a connection
    /// found broken, not a deadline) is asked once more at the end by
    /// [`Client::ask_judged`]: its channel dials again, and a dropped connection must not
    /// read as no answer.
    fn asking_order(&self) -> std::collections::VecDeque<usize> {
        let n = self.endpoints.len();
        let first = self.preferred;
        match self.only {
            Some(i) => [i].into(),
            None => (0..n).map(|k| (first + k) % n).collect(),
        }
    }

    /// Sends the call to endpoint `i`, already vouched for, and judges its answer: taken
    /// (the endpoint preferred from now on, the answer's header checked against the pin),
    /// passed over as foreign or as missed (the caller tries the next endpoint), or an
    /// error that ends the call (an error status that says the request did not apply, or a
    /// write sent and unanswered: the caller's to resolve first).
    fn ask_endpoint<T: Headed, F, Fut>(
        &mut self,
        i: usize,
        what: &str,
        resend: bool,
        call: &mut F,
        judge: &impl Fn(&T) -> Result<(), NotPinned>,
    ) -> Result<Asked<T>, Error>
    where
        F: FnMut(KvClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        let n = self.endpoints.len();
        let (url, kv) = &self.endpoints[i];
        let fut = call(kv.clone());
        let deadline = self.deadline;
        let answer = self
            .rt
            .block_on(async { tokio::time::timeout(deadline, fut).await });
        let why = match answer {
            Ok(Ok(v)) => {
                if let Err(why) = judge(&v) {
                    return Ok(Asked::Foreign(format!("{url}: {why}")));
                }
                self.preferred = i;
                if let Some(pin) = &self.pin {
                    // Vouched for on this call: an answer from elsewhere now is no
                    // answer of the fleet's (and a write's fate is unknown).
                    pin.header(&v.header())
                        .map_err(|why| Error::Answer(format!("{what}: {url}: {why}")))?;
                }
                return Ok(Asked::Answered(v));
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
        Ok(Asked::Missed(format!("{url}: {why}")))
    }

    /// The pin's guard, if pinned.
    pub(crate) fn guard(&self) -> Option<(Vec<u8>, i64)> {
        self.pin.as_ref().map(|p| p.guard())
    }

    /// One transaction, asked as [`Client::ask_judged`] asks.
    pub(crate) fn txn(
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
    pub(crate) fn members_of(&mut self, i: usize) -> Result<(Header, Vec<u64>), Vouched> {
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
    pub(crate) fn vouched(&mut self, i: usize) -> Result<(), Vouched> {
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
}

/// What one endpoint made of a call ([`Client::ask_endpoint`]); each string names the
/// endpoint.
enum Asked<T> {
    /// It answered, and the answer is the fleet's.
    Answered(T),
    /// It answered as another cluster, member or fleet: passed over.
    Foreign(String),
    /// It gave no answer the call can take, and the request may go elsewhere.
    Missed(String),
}

/// Why an endpoint was passed over before a call was sent to it.
pub(crate) enum Vouched {
    /// It did not answer the vouching questions.
    Missed(String),
    /// It answered as another cluster, member or fleet.
    Foreign(String),
}

pub(crate) fn absent(key: &[u8]) -> Compare {
    Compare {
        result: compare::CompareResult::Equal as i32,
        target: compare::CompareTarget::Create as i32,
        key: key.to_vec(),
        range_end: Vec::new(),
        target_union: Some(compare::TargetUnion::CreateRevision(0)),
    }
}

pub(crate) fn put(key: &[u8], value: &[u8]) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestPut(PutRequest {
            key: key.to_vec(),
            value: value.to_vec(),
            ..Default::default()
        })),
    }
}

pub(crate) fn read(key: &[u8]) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestRange(RangeRequest {
            key: key.to_vec(),
            ..Default::default()
        })),
    }
}

/// The compares that hold a request to the guard: `key` created and last modified at
/// `revision`.
pub(crate) fn guarded(key: &[u8], revision: i64) -> Vec<Compare> {
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
pub(crate) fn ranges(
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
pub(crate) fn broken(
    r: &TxnResponse,
    at: usize,
    key: &[u8],
    revision: i64,
) -> Result<(), NotPinned> {
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

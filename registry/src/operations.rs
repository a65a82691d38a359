//! The operations a caller asks: reads (one key, each endpoint alone, a prefix, pages at
//! one revision), the member list, the create-once claim, and writes probed or removed.

use crate::*;

impl Client {
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

pub(crate) fn decide(cluster: u64, entry: Entry, value: &[u8]) -> Claimed {
    if entry.value == value && entry.value_bytes == value.len() {
        Claimed::Ours { cluster, entry }
    } else {
        Claimed::Theirs { cluster, entry }
    }
}

/// A transport error before the request was written (no connection): safe to send
/// elsewhere.
pub(crate) fn never_sent(e: &tonic::Status) -> bool {
    e.code() == tonic::Code::Unavailable
        && (e.message().contains("error trying to connect")
            || e.message().contains("transport error")
            || e.message().contains("tcp connect error"))
}

pub(crate) fn entry(kv: gen::mvccpb::KeyValue) -> Result<Entry, Error> {
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
pub(crate) fn too_large(why: &str) -> bool {
    why.starts_with("OutOfRange") && why.contains("message length too large")
}

/// The end of the range of keys that start with `prefix` (etcd's convention: the prefix
/// with its last byte below 0xff incremented).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

//! The issuance before its intent (docs/ARCHITECTURE.md, "Issuance", steps 1 to 3): the
//! epoch reserved, the world observed, the consumer authenticated and connected. A refusal
//! here writes nothing.

use super::*;

/// Step 1 done: the issuer lock is held and the epoch is `enrolled`.
pub struct Reserved<W: World = Host> {
    pub(super) c: Common<W>,
}

impl<W: World> Reserved<W> {
    /// Opens the deployment's objects, takes its issuer lock (busy names the holder), then
    /// reads and checks the epoch under it: never a classification read before the lock.
    /// A contender that paused after opening cannot act on a classification read before
    /// another issuance finished.
    pub fn reserve(
        world: &mut W,
        key: SigningKey,
        id: DeploymentId,
        approve_ready: Option<Hash>,
        mut progress: Progress,
    ) -> Result<Reserved<W>, Ended> {
        let issuer = repoch_protocol::PublicKey::from(&key.verifying_key());
        let o = world.open(&issuer, id).map_err(Ended::one)?;
        crate::barrier::reach("after-open");
        if o.read_only {
            return Err(Ended::one(read_only_refusal()));
        }
        world.lock(&o.lock).map_err(Ended::one)?;
        let mut storage = world.storage();
        let log = read_epoch_log(&mut storage, o.log, &issuer, id, &o.manifest_hash)
            .map_err(Ended::one)?;
        let class = log.report().classification;
        if let Some(r) = epoch_refusal(id, class, log.report().problem.as_ref()) {
            return Err(Ended::one(r));
        }
        progress(AdminEvent::Progress {
            step: "reserve".into(),
            detail: format!("issuer lock held; epoch {}", class.as_str()),
        });
        let fleet = match &o.manifest.registry {
            Some(r) => Some(world.fleet(r).map_err(Ended::one)?),
            None => None,
        };
        let observer = world.observer(&o.manifest, approve_ready);
        let stop = world.stop();
        Ok(Reserved {
            c: Common {
                id,
                manifest: o.manifest,
                storage,
                log,
                key,
                observer,
                fences: Fences::default(),
                progress,
                stop,
                fleet,
                _lock: o.lock,
            },
        })
    }

    pub fn manifest(&self) -> &Manifest {
        &self.c.manifest
    }

    /// Step 2: observe everything; acquire and hold the fences. Any failed fact refuses.
    pub fn observe(mut self) -> Result<Observed<W>, Ended> {
        self.c.say(
            "observe",
            "lineage, containment, fences, READY, consumer executable",
        );
        let first = self.c.observer.observe(&mut self.c.fences);
        self.c.facts(&first);
        if !first.holds() {
            let refusals: Vec<Refusal> = first.failed().filter_map(Refusal::from_fact).collect();
            return Err(Ended::refused(
                refusals,
                "observation failed; nothing written",
            ));
        }
        self.c.say(
            "evidence",
            format!(
                "digest {}; READY sha256 {}",
                first.digest, first.ready_sha256
            ),
        );
        Ok(Observed { c: self.c, first })
    }
}

/// One call of [`Observed::connect`], as a lifetime: invariant, and chosen by `connect` for
/// its `wait` closure alone (`for<'id>`), so an [`Authenticated`] made from one call's
/// [`Expected`] has a type no other call accepts.
pub(super) type Brand<'id> = PhantomData<fn(&'id ()) -> &'id ()>;

/// What the consumer must be: from the manifest and the first observation of one issuance,
/// made by [`Observed::connect`] only (its fields are private) and branded with that call.
#[derive(Debug)]
pub struct Expected<'id> {
    pub(super) brand: Brand<'id>,
    pub(super) deployment: DeploymentId,
    pub(super) uid: u32,
    pub(super) gid: u32,
    pub(super) key: repoch_protocol::PublicKey,
    pub(super) exe: Option<(Identity, Hash)>,
    pub(super) cgroup: Option<String>,
}

/// A consumer peer that [`Expected::authenticate`] accepted, branded with the `connect`
/// call whose `Expected` accepted it; nothing else builds one, and [`Observed::connect`]
/// takes no other (`issuer/tests/compile-fail/`).
#[derive(Debug)]
pub struct Authenticated<'id> {
    pub(super) brand: Brand<'id>,
    pub(super) peer: ConsumerPeer,
}

impl Authenticated<'_> {
    /// The peer as described and authenticated.
    pub fn peer(&self) -> &ConsumerPeer {
        &self.peer
    }
}

impl<'id> Expected<'id> {
    /// The deployment whose consumer is expected.
    pub fn deployment(&self) -> DeploymentId {
        self.deployment
    }

    /// Transport authentication: credentials, executable identity and digest, cgroup, key.
    pub fn authenticate(
        &self,
        peer: &ConsumerPeer,
        key: &repoch_protocol::PublicKey,
    ) -> Result<Authenticated<'id>, Refusal> {
        let subject = format!("grant socket peer pid {}", peer.pid);
        let fail = |what: &str, want: String, got: String| {
            Err(Refusal::consumer_rejected(&subject, what, want, got))
        };
        if peer.uid != self.uid || peer.gid != self.gid {
            return fail(
                "uid/gid",
                format!("{}/{}", self.uid, self.gid),
                format!("{}/{}", peer.uid, peer.gid),
            );
        }
        match &self.exe {
            Some((id, sha)) if id.same_object(&peer.exe) && *sha == peer.exe_sha256 => {}
            Some((id, sha)) => {
                return fail(
                    "executable",
                    format!("ino {} sha256 {sha}", id.ino),
                    format!("ino {} sha256 {}", peer.exe.ino, peer.exe_sha256),
                )
            }
            None => return fail("executable", "observed".into(), "no baseline".into()),
        }
        if let Some(cg) = &self.cgroup {
            if !repoch_sys::cgroup::is_within(&peer.cgroup, cg) {
                return fail("cgroup", cg.clone(), peer.cgroup.clone());
            }
        }
        if key != &self.key {
            return fail("key", self.key.to_hex(), key.to_hex());
        }
        Ok(Authenticated {
            brand: PhantomData,
            peer: peer.clone(),
        })
    }
}

/// Step 2 done: every fact holds, the fences are held.
pub struct Observed<W: World = Host> {
    pub(super) c: Common<W>,
    pub(super) first: Observation,
}

impl<W: World> Observed<W> {
    /// Only `connect` calls this, once, for its `wait` closure.
    fn expected<'id>(&self) -> Expected<'id> {
        let m = &self.c.manifest;
        Expected {
            brand: PhantomData,
            deployment: m.deployment,
            uid: m.consumer.uid,
            gid: m.consumer.gid,
            key: m.consumer.key,
            exe: self.c.observer.consumer_exe_baseline(),
            cgroup: m.consumer.cgroup.clone(),
        }
    }

    /// Step 3: wait (bounded, in `wait`) for a consumer authenticated by the [`Expected`]
    /// given to `wait`: the closure must work for a brand it cannot name, so only that
    /// `Expected`'s [`Authenticated`] type-checks. Nothing is written if none comes:
    /// `consumer-absent`. (That the link is the authenticated peer's is checked before the
    /// intent: `same_peer`.)
    pub fn connect<C: ConsumerLink>(
        mut self,
        wait: impl for<'id> FnOnce(
            &Expected<'id>,
            &mut dyn FnMut(AdminEvent),
        ) -> Result<(C, Authenticated<'id>), Refusal>,
    ) -> Result<Connected<C, W>, Ended> {
        let expected = self.expected();
        let progress = &mut self.c.progress;
        let (consumer, auth) = wait(&expected, &mut |e| progress(e)).map_err(Ended::one)?;
        let peer = auth.peer;
        self.c.say(
            "connect",
            format!("consumer pid {} uid {} authenticated", peer.pid, peer.uid),
        );
        Ok(Connected {
            s: Session {
                c: self.c,
                first: self.first,
                consumer,
                peer,
                claim: None,
            },
        })
    }
}

/// What every state from [`Connected`] to [`Verified2`] carries: the issuance's common
/// part, the first observation (the evidence every later one must equal), the consumer's
/// link, and the peer pinned at connect.
pub(super) struct Session<C, W: World> {
    pub(super) c: Common<W>,
    pub(super) first: Observation,
    pub(super) consumer: C,
    pub(super) peer: ConsumerPeer,
    /// The fleet registry's claim this issuance won, and its fencing token (from step 7).
    pub(super) claim: Option<(FleetClaim, FencingToken)>,
}

/// Step 5's proof: the challenge and the consumer's signature of it with its enrolled key.
pub(super) struct Custody {
    pub(super) challenge: Challenge,
    pub(super) custody: [u8; 64],
}

/// Step 3 done: the consumer is authenticated at transport level.
pub struct Connected<C, W: World = Host> {
    pub(super) s: Session<C, W>,
}

impl<C: ConsumerLink, W: World> Connected<C, W> {
    /// Step 4: describe the peer again (it must be the one authenticated: refused, nothing
    /// written, otherwise), observe everything again (a failed fact refuses, nothing
    /// written), then append and fsync the intent. From here the epoch is used.
    pub fn intent(mut self, contender: Contender) -> Result<Intended<C, W>, Ended> {
        if let Err(r) = same_peer(&mut self.s.consumer, &self.s.peer) {
            self.s.consumer.refuse(r.reason, &r.detail());
            self.s.c.say(
                "connect",
                format!("rejected the consumer before the intent: {r}"),
            );
            return Err(Ended::one(r));
        }
        // The first observation may be minutes old (the wait for the consumer): observe
        // again right before the intent. A failed fact refuses with its own reason and
        // nothing written (the operator retries); the intent records this observation.
        self.s.c.say("observe", "again, right before the intent");
        let now = self.s.c.observer.observe(&mut self.s.c.fences);
        self.s.c.facts(&now);
        if !now.holds() {
            let refusals: Vec<Refusal> = now.failed().filter_map(Refusal::from_fact).collect();
            if let Some(r) = refusals.first() {
                self.s.consumer.refuse(r.reason, &r.detail());
            }
            return Err(Ended::refused(
                refusals,
                "observation before the intent failed; nothing written",
            ));
        }
        self.s.first = now;
        // The fleet epoch must be unclaimed, and the registry answering, before anything
        // is written: a restored or second host is refused here, nothing written.
        if let Some(r) = self.s.c.manifest.registry.clone() {
            self.s.c.say(
                "registry",
                format!("fleet epoch {}: unclaimed?", r.epoch_key()),
            );
            let own = repoch_protocol::PublicKey::from(&self.s.c.key.verifying_key());
            let looked = match &mut self.s.c.fleet {
                Some(fleet) => crate::fleet::look(fleet.as_mut(), &r, &own),
                None => Ok(()),
            };
            if let Err(r) = looked {
                self.s.consumer.refuse(r.reason, &r.detail());
                return Err(Ended::one(r));
            }
        }
        crate::barrier::reach("before-intent");
        // The last point before anything is written: a stopping repochd ends here, and
        // never after the intent (crate::stop).
        if self.s.c.stop.is_set() {
            let r = Stop::refusal("the recovery ended before its intent");
            self.s.consumer.refuse(r.reason, &r.detail());
            return Err(Ended::one(r));
        }
        if let Err(r) = operator_present(&mut self.s.consumer, "before the intent; nothing written")
        {
            self.s.consumer.refuse(r.reason, &r.detail());
            return Err(Ended::one(r));
        }
        let body = EpochBody::Intent {
            evidence: self.s.first.digest,
            facts: self.s.first.facts.clone(),
            contender,
            consumer: self.s.peer.clone(),
        };
        let h = publish(&mut self.s.c, &mut self.s.consumer, body)?;
        Ok(Intended {
            s: self.s,
            intent: h,
        })
    }
}

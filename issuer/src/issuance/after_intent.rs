//! The issuance from its intent on (docs/ARCHITECTURE.md, "Issuance", steps 4 to 9): the
//! intent, the custody answer, the two final verifications around the consume and the
//! receipt, and the dispatch. A refusal here withholds: the epoch is used.

use super::*;

/// Step 4 done: the intent is durable.
pub struct Intended<C, W: World = Host> {
    pub(super) s: Session<C, W>,
    pub(super) intent: Hash,
}

impl<C: ConsumerLink, W: World> Intended<C, W> {
    /// Step 5: challenge the consumer; its enrolled key must sign (strictly verified).
    pub fn custody(mut self) -> Result<Custodied<C, W>, Ended> {
        let nonce = match crate::keys::random() {
            Ok(n) => n,
            Err(e) => {
                return Err(withhold(
                    self.s.c,
                    &mut self.s.consumer,
                    Refusal::new(Reason::Internal, "getrandom", "a nonce", e.to_string()),
                ))
            }
        };
        let challenge = Challenge {
            deployment: self.s.c.id,
            intent: self.intent,
            nonce,
        };
        self.s.c.say("custody", "challenge sent");
        let sig = match self.s.consumer.challenge(&challenge) {
            Ok(s) => s,
            Err(e) => {
                return Err(withhold(
                    self.s.c,
                    &mut self.s.consumer,
                    Refusal::new(
                        Reason::ConsumerLost,
                        "consumer",
                        "a custody answer",
                        e.to_string(),
                    ),
                ))
            }
        };
        if !challenge.check(&self.s.c.manifest.consumer.key, &sig) {
            let r = Refusal::new(
                Reason::CustodyInvalid,
                "custody signature",
                "signed by the enrolled consumer key",
                "does not verify",
            );
            return Err(withhold(self.s.c, &mut self.s.consumer, r));
        }
        Ok(Custodied {
            s: self.s,
            intent: self.intent,
            proof: Custody {
                challenge,
                custody: sig,
            },
        })
    }
}

/// Observes everything again; the digest must be identical.
pub(super) fn verify_final<W: World>(
    c: &mut Common<W>,
    first: &Observation,
    which: &str,
) -> Result<(), Refusal> {
    c.say(which, "observing again");
    let again = c.observer.observe(&mut c.fences);
    if again.digest == first.digest && again.holds() {
        c.say(which, format!("digest {} unchanged", again.digest));
        return Ok(());
    }
    c.facts(&again);
    let changed = again
        .facts
        .iter()
        .zip(first.facts.iter())
        .find(|(a, b)| a != b)
        .map(|(a, _)| a.clone());
    let failed = again.failed().next().cloned();
    let (subject, observed) = match failed.or(changed) {
        Some(f) => (
            format!("{} {}", f.kind, f.subject),
            format!(
                "{} ({})",
                f.observed,
                f.reason.map_or("changed", |r| r.as_str())
            ),
        ),
        None => ("evidence".into(), format!("digest {}", again.digest)),
    };
    Err(Refusal::new(
        Reason::EvidenceChanged,
        subject,
        format!("digest {}", first.digest),
        observed,
    ))
}

/// Step 5 done: the consumer proved custody of its enrolled key.
pub struct Custodied<C, W: World = Host> {
    pub(super) s: Session<C, W>,
    pub(super) intent: Hash,
    pub(super) proof: Custody,
}

impl<C: ConsumerLink, W: World> Custodied<C, W> {
    /// Step 6: final verification #1. Only its success, [`Verified1`], can consume.
    pub fn verify(mut self) -> Result<Verified1<C, W>, Ended> {
        match verify_final(&mut self.s.c, &self.s.first, "final-verification-1") {
            Ok(()) => Ok(Verified1 {
                s: self.s,
                intent: self.intent,
                proof: self.proof,
            }),
            Err(r) => Err(withhold(self.s.c, &mut self.s.consumer, r)),
        }
    }
}

/// Step 6 done: final verification #1 observed the first observation's digest.
pub struct Verified1<C, W: World = Host> {
    pub(super) s: Session<C, W>,
    pub(super) intent: Hash,
    pub(super) proof: Custody,
}

impl<C: ConsumerLink, W: World> Verified1<C, W> {
    /// The fleet registry's claim (a manifest with a `[registry]`): after the intent and
    /// the first final verification, right before `consume`. Won: the fencing token the
    /// consume record and the grant carry. Another host's: `Err((refusal, false))`,
    /// withheld `epoch-consumed` naming it. No answer: `Err((refusal, true))`, withheld and
    /// uncertain (the claim may have applied; a key naming this host is never reused).
    fn claim_fleet_epoch(&mut self) -> Result<Option<FencingToken>, (Refusal, bool)> {
        let (Some(r), Some(fleet)) = (&self.s.c.manifest.registry, &mut self.s.c.fleet) else {
            // No registry: no claim to make (the barrier is still reached, in one place).
            crate::barrier::reach("after-claim");
            return Ok(None);
        };
        let claim = FleetClaim {
            fleet: r.fleet.clone(),
            // Pinned in every recovery (`fleet::connect_pinned`); none only in a world
            // whose manifest pins none.
            fleet_id: r.pin.as_ref().map_or(FleetId([0; 16]), |p| p.id),
            host: r.host.clone(),
            deployment: self.s.c.id,
            intent: self.intent,
            evidence: self.s.first.digest,
            nonce: self.proof.challenge.nonce,
            floor: r.pin.as_ref().map_or(0, |p| p.floor),
            signature: [0; repoch_protocol::limits::SIGNATURE_BYTES],
        }
        .signed(&self.s.c.key);
        let own = repoch_protocol::PublicKey::from(&self.s.c.key.verifying_key());
        let won = crate::fleet::claim(fleet.as_mut(), r, &own, &claim);
        let key = r.epoch_key();
        crate::barrier::reach("after-claim");
        match won {
            Ok(token) => {
                self.s
                    .c
                    .say("registry", format!("fleet epoch {key} claimed: {token}"));
                self.s.claim = Some((claim, token));
                Ok(Some(token))
            }
            Err(crate::fleet::Lost::Refused(r)) => Err((r, false)),
            Err(crate::fleet::Lost::Unknown(r)) => Err((r, true)),
        }
    }

    /// Step 7: the consumer must still be there (else `withheld{consumer-lost}`, nothing
    /// consumed); append and fsync `consume`.
    pub fn consume(mut self) -> Result<Consumed<C, W>, Ended> {
        if let Err(r) = still_alive(&mut self.s.consumer, &self.s.peer) {
            return Err(withhold(self.s.c, &mut self.s.consumer, r));
        }
        if let Err(r) = operator_present(&mut self.s.consumer, "before consume; nothing claimed") {
            return Err(withhold(self.s.c, &mut self.s.consumer, r));
        }
        let fencing = match self.claim_fleet_epoch() {
            Ok(f) => f,
            Err((r, unknown)) => {
                let mut ended = withhold(self.s.c, &mut self.s.consumer, r);
                if unknown {
                    ended.outcome = Verdict::Uncertain;
                    ended.detail = format!(
                        "{}; whether the fleet registry recorded this host's claim is unknown: this host's epoch is used either way, and the fleet epoch is used if the claim applied (`repoch audit --registry` tells)",
                        ended.detail
                    );
                }
                return Err(ended);
            }
        };
        let body = EpochBody::Consume {
            consumer: self.s.peer.clone(),
            challenge: self.proof.challenge.clone(),
            custody: self.proof.custody,
            fencing,
        };
        let h = publish(&mut self.s.c, &mut self.s.consumer, body)?;
        Ok(Consumed {
            s: self.s,
            intent: self.intent,
            consume: h,
        })
    }
}

/// Step 7 done.
pub struct Consumed<C, W: World = Host> {
    pub(super) s: Session<C, W>,
    pub(super) intent: Hash,
    pub(super) consume: Hash,
}

use repoch_sys::time::now;

impl<C: ConsumerLink, W: World> Consumed<C, W> {
    /// Step 8: sign the grant and append it in the receipt; fsync.
    pub fn receipt(mut self) -> Result<Receipted<C, W>, Ended> {
        let m = &self.s.c.manifest;
        let grant = Grant {
            deployment: m.deployment,
            intent: self.intent,
            consume: self.consume,
            evidence: self.s.first.digest,
            consumer_key: m.consumer.key,
            ready_path: m.target.ready_path.clone(),
            ready_sha256: self.s.first.ready_sha256,
            fences: self.s.c.fences.grant_fences(),
            frontier_seq: self.s.first.frontier_seq,
            frontier_hash: self.s.first.frontier_hash,
            unknown_ops: self.s.first.unknown_ops.clone(),
            issued_at: now(),
            listeners: self.s.c.fences.grant_listeners(),
            fencing: self.s.claim.as_ref().map(|(_, t)| *t),
        };
        let bytes = SignedGrant::sign(grant, &self.s.c.key).to_bytes();
        publish(
            &mut self.s.c,
            &mut self.s.consumer,
            EpochBody::Receipt {
                grant: bytes.clone(),
            },
        )?;
        Ok(Receipted {
            s: self.s,
            grant: bytes,
        })
    }
}

/// Step 8 done: consume and receipt are durable.
pub struct Receipted<C, W: World = Host> {
    pub(super) s: Session<C, W>,
    pub(super) grant: Vec<u8>,
}

impl<C: ConsumerLink, W: World> Receipted<C, W> {
    /// Step 9: final verification #2. Only its success, [`Verified2`], can dispatch.
    pub fn verify(mut self) -> Result<Verified2<C, W>, Ended> {
        match verify_final(&mut self.s.c, &self.s.first, "final-verification-2") {
            Ok(()) => Ok(Verified2 {
                s: self.s,
                grant: self.grant,
            }),
            Err(r) => Err(withhold(self.s.c, &mut self.s.consumer, r)),
        }
    }
}

/// Step 9 done: final verification #2 observed the first observation's digest.
pub struct Verified2<C, W: World = Host> {
    pub(super) s: Session<C, W>,
    pub(super) grant: Vec<u8>,
}

impl<C: ConsumerLink, W: World> Verified2<C, W> {
    /// Step 10: send the grant and pass the held fence fds. A failure here is a lost reply:
    /// the outcome is uncertain, and the epoch is preserved as receipted.
    pub fn dispatch(mut self) -> Result<Dispatched<C, W>, Ended> {
        // A consumer that went away gets nothing: `withheld{consumer-lost}`.
        if let Err(r) = still_alive(&mut self.s.consumer, &self.s.peer) {
            return Err(withhold(self.s.c, &mut self.s.consumer, r));
        }
        // The peer that gets the grant is still the one recorded in intent and consume.
        if let Err(r) = same_peer(&mut self.s.consumer, &self.s.peer) {
            return Err(withhold(self.s.c, &mut self.s.consumer, r));
        }
        // The fleet epoch still holds this issuance's claim, unmodified.
        if let (Some(r), Some(fleet), Some((claim, token))) = (
            &self.s.c.manifest.registry,
            &mut self.s.c.fleet,
            &self.s.claim,
        ) {
            if let Err(r) = crate::fleet::still_ours(fleet.as_mut(), r, claim, token) {
                return Err(withhold(self.s.c, &mut self.s.consumer, r));
            }
        }
        // What the observer follows (engine events) still shows no change: final
        // verification #2's look is not the dispatch.
        if let Some(r) = self.s.c.observer.still_held() {
            return Err(withhold(self.s.c, &mut self.s.consumer, r));
        }
        self.s.c.say(
            "dispatch",
            format!(
                "sending the grant with {} fence fd(s) and {} listener fd(s)",
                self.s.c.fences.len(),
                self.s.c.fences.listeners_len()
            ),
        );
        let fds: Vec<&OwnedFd> = self.s.c.fences.fds();
        // The log's head now (its receipt last), for the consumer to keep.
        let checkpoint = repoch_protocol::checkpoint::Checkpoint {
            origin: repoch_protocol::checkpoint::origin(&self.s.c.id),
            size: self.s.c.log.next_seq(),
            head: self.s.c.log.last_hash(),
        }
        .sign(repoch_protocol::checkpoint::KEY_NAME, &self.s.c.key);
        match self.s.consumer.dispatch(&self.grant, &checkpoint, &fds) {
            Ok(()) => {
                // The fences are the consumer's now: repochd keeps none while it waits for
                // the acknowledgement (only the issuer lock, until the issuance ends).
                let mut c = self.s.c;
                std::mem::take(&mut c.fences).hand_over();
                Ok(Dispatched {
                    c,
                    consumer: self.s.consumer,
                    grant: self.grant,
                })
            }
            Err(e) => Err(Ended {
                outcome: Verdict::Uncertain,
                refusals: vec![Refusal::new(Reason::ConsumerLost, "dispatch", "grant delivered", e.to_string())],
                detail: format!("the grant may not have reached the consumer ({e}); the epoch is receipted and preserved"),
                poisoned: false,
                used: self.s.c.used(),
            }),
        }
    }
}

/// Step 10 done: the grant and the fences left; whether the consumer holds them durably is
/// not known yet.
pub struct Dispatched<C, W: World = Host> {
    pub(super) c: Common<W>,
    pub(super) consumer: C,
    pub(super) grant: Vec<u8>,
}

impl<C: ConsumerLink, W: World> Dispatched<C, W> {
    /// Step 11: the consumer's acknowledgement that its grant file is durable, naming the
    /// grant's sha256, then the handoff's last word ([`ConsumerLink::last_word`]: the
    /// pinned consumer alive and alone on its connection, `granted` sent). Only then is the
    /// issuance granted (docs/OPERATOR.md, "Outcomes"). Without both, in time and for these
    /// very bytes: "dispatched, not acknowledged", the outcome uncertain (the consumer is
    /// told so and starts nothing), the epoch receipted and preserved, never reissued.
    /// Nothing is appended: the receipt already holds the grant.
    pub fn acknowledged(mut self) -> Result<Granted, Ended> {
        let sha = Hash::of(&self.grant);
        let used = self.c.used();
        self.c.say(
            "acknowledge",
            "waiting for the consumer to acknowledge a durable grant",
        );
        let failed = |consumer: &mut C, reason: Reason, observed: String| {
            let r = Refusal::new(
                reason,
                "grant acknowledgement",
                format!("the consumer's persisted {sha}"),
                observed,
            );
            // The consumer waits for the last word: tell it there is none (best effort; a
            // closed connection says the same).
            consumer.refuse(
                reason,
                &format!("not granted: {}; the outcome is uncertain", r.detail()),
            );
            Ended {
                outcome: Verdict::Uncertain,
                detail: format!(
                    "dispatched, not acknowledged: {r}; the consumer may or may not hold the grant; the epoch is receipted and preserved, never reissued"
                ),
                refusals: vec![r],
                poisoned: false,
                used,
            }
        };
        let ack = self.consumer.acknowledgement();
        crate::barrier::reach("after-acknowledgement");
        match ack {
            Ok(h) if h == sha => match self.consumer.last_word(&sha) {
                Ok(()) => {
                    self.c.say(
                        "acknowledge",
                        format!(
                            "the consumer acknowledged its grant durable (sha256 {sha}) and was told granted"
                        ),
                    );
                    Ok(Granted {
                        grant: self.grant,
                        epoch: self.c.log.report().classification,
                    })
                }
                Err((reason, e)) => Err(failed(
                    &mut self.consumer,
                    reason,
                    format!("persisted {sha}, but no last word: {e}"),
                )),
            },
            Ok(h) => Err(failed(
                &mut self.consumer,
                Reason::ProtocolError,
                format!("persisted {h}"),
            )),
            Err(e) => Err(failed(
                &mut self.consumer,
                Reason::ConsumerLost,
                e.to_string(),
            )),
        }
    }
}

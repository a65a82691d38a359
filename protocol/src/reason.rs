//! Stable refusal reason codes. Generated table: code, meaning, what an operator does.
//! `docs/REASONS.md` lists the same table; a test keeps them equal.

use ciborium::value::Value;

use crate::cbor::{self, DecodeError};

macro_rules! reasons {
    ($($variant:ident = $code:literal, $meaning:literal, $action:literal;)*) => {
        /// A refusal reason. Its text form is a stable kebab-case code.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Reason { $($variant,)* }
        impl Reason {
            /// Every code, in documentation order.
            pub const ALL: &'static [Reason] = &[$(Reason::$variant,)*];
            pub fn as_str(self) -> &'static str { match self { $(Reason::$variant => $code,)* } }
            pub fn meaning(self) -> &'static str { match self { $(Reason::$variant => $meaning,)* } }
            pub fn action(self) -> &'static str { match self { $(Reason::$variant => $action,)* } }
            pub fn parse(s: &str) -> Option<Reason> { match s { $($code => Some(Reason::$variant),)* _ => None } }
        }
    };
}

reasons! {
    EpochConsumed = "epoch-consumed", "The epoch is already used (intended, consumed, receipted or withheld): a deployment recovers at most once.", "Do not retry. Read `repoch status`; a new recovery needs a new enrollment linked to this one.";
    EpochTorn = "epoch-torn", "The epoch log ends in what a crash during an append leaves: a record cut short, zeros (from the record's start or from a 512-byte sector boundary to the end), or bytes that form no valid record after the last valid one.", "Preserve the log for auditors; the epoch is uncertain. Enroll a successor.";
    EpochCorrupt = "epoch-corrupt", "The epoch log has a record no crash explains: an undecodable record followed by a valid one, or an issuer-signed record out of sequence, hash chain or phase order.", "Preserve the log; investigate tampering. Enroll a successor.";
    EpochForged = "epoch-forged", "An epoch-log record is well formed but its signature does not verify under the host issuer key (signed by another key, or altered after signing).", "Treat as tampering; preserve the log. Enroll a successor.";
    EpochForeign = "epoch-foreign", "The epoch log holds a record validly signed by the host issuer for another deployment (a log copied or spliced from elsewhere).", "Restore this deployment's own log, or enroll a successor; do not recover from it.";
    EpochMissing = "epoch-missing", "The deployment has no epoch log, or its log has no genesis.", "Check the deployment id; a failed enrollment leaves no deployment.";
    StateReplaced = "state-replaced", "The state directory, manifest, epoch log or issuer lock is not the enrolled inode.", "Treat as tampering. Do not recover from this state.";
    StateUnprotected = "state-unprotected", "A state object has the wrong owner or mode, or is a symlink.", "Restore root ownership and 0700/0600 modes only if you know why they changed.";
    StateReadOnly = "state-read-only", "The deployment's state is on a read-only file system: it can be read, never issued from.", "Remount it read-write if it is the live state; a read-only copy is for auditors.";
    ManifestInvalid = "manifest-invalid", "The manifest fails validation (the message names the field).", "Fix the manifest and enroll again.";
    EnrollFailed = "enroll-failed", "Enrollment could not create its files (disk, permission or randomness); nothing was kept.", "Fix the cause named in the message and enroll again.";
    ManifestForged = "manifest-forged", "The enrolled manifest's signature or hash does not match the issuer key or the genesis.", "Treat as tampering.";
    DeploymentUnknown = "deployment-unknown", "No enrolled deployment matches the id or prefix.", "Run `repoch list`.";
    DeploymentAmbiguous = "deployment-ambiguous", "The id prefix matches several deployments (they are listed).", "Type more digits.";
    IssuerBusy = "issuer-busy", "Another issuer holds the deployment's issuer lock now (named with pid and start time).", "Wait for it to finish; never kill it mid-epoch.";
    StorePoisoned = "store-poisoned", "A write or fsync of the epoch log failed; it is never retried (fsyncgate).", "The epoch is uncertain. Check the disk; restart repochd.";
    LineageMissing = "lineage-missing", "The producer journal does not exist.", "Find out who removed it; recovery without lineage is unsafe.";
    LineageReplaced = "lineage-replaced", "The producer journal is another inode than the enrolled one.", "Treat as tampering or a restore from backup; enroll anew if intended.";
    LineageUnprotected = "lineage-unprotected", "The producer journal lost its append-only flag, or its owner or mode changed.", "Investigate; restore with `chattr +a` only if the content is known good.";
    LineageTorn = "lineage-torn", "The producer journal ends in an incomplete record.", "The producer crashed mid-append; the journal is not a verifiable frontier.";
    LineageMutated = "lineage-mutated", "A journal record fails decoding, its hash chain or order.", "Treat as tampering.";
    LineageForged = "lineage-forged", "A journal record is signed by a key other than the enrolled one.", "Treat as tampering.";
    LineageForeign = "lineage-foreign", "The journal's genesis belongs to another deployment.", "A journal was copied from elsewhere; do not recover.";
    LineageUnknownOverflow = "lineage-unknown-overflow", "More operations without a definite outcome than a grant may carry.", "Resolve operations by hand; enroll anew.";
    StoreMissing = "store-missing", "An original store does not exist.", "Find out why; the new root would start from nothing.";
    StoreReplaced = "store-replaced", "An original store is another object than the enrolled one (another inode, or the same inode number with another birth time).", "Treat as tampering or an unplanned restore.";
    PredecessorMismatch = "predecessor-mismatch", "The predecessor's log does not end in the recorded final hash, or is not the named deployment.", "Check the chain with `repoch audit`.";
    ChainFork = "chain-fork", "Two deployments name the same predecessor: the lineage forks (each successor could recover once).", "Find out which successor is legitimate; never recover the other.";
    ChainDuplicate = "chain-duplicate", "Two different logs claim the same deployment id.", "Find out which log is the deployment's own; treat the other as tampering.";
    CheckpointRollback = "checkpoint-rollback", "The epoch log has fewer records than a checkpoint its issuer signed earlier: it was rolled back (truncated at a record boundary).", "Treat as tampering: an epoch may have been recovered twice. Keep the checkpoint and the log as evidence.";
    CheckpointFork = "checkpoint-fork", "The epoch log's record at a signed checkpoint's size is not the checkpoint's head: the log was rewritten (rolled back and appended again) or forked.", "Treat as tampering: an epoch may have been recovered twice. Keep the checkpoint and the log as evidence.";
    CheckpointTruncated = "checkpoint-truncated", "The epoch log's verified records end before a signed checkpoint's size and bytes that are not a valid record follow: it was cut inside a record or damaged below the checkpoint.", "Treat as tampering or media damage; keep the checkpoint and the log as evidence.";
    CheckpointInvalid = "checkpoint-invalid", "A checkpoint note is malformed, no signature line verifies under the issuer key, or its origin names no log given.", "Check the note, the issuer key and the log it belongs to.";
    ControllerUnknown = "controller-unknown", "systemd or a container engine could not be asked, or answered what cannot be read (an engine's event stream that ended is one): the containment of a unit or container is unknown.", "Make systemd or the engine reachable, or remove the unit or container from the profile if it does not exist on this host.";
    ControllerUnnamed = "controller-unnamed", "A loaded systemd service runs an enrolled executable (its ExecStart or another of its commands names it) and the manifest does not name the service under containment.units: a controller that could start the old root again after the grant.", "Name the service under `containment.units` and mask it, or remove the executable from its commands (`systemctl daemon-reload`).";
    UnitNotMasked = "unit-not-masked", "A unit is not masked.", "`systemctl mask` the old controller's unit.";
    UnitActive = "unit-active", "A unit is active, activating or deactivating.", "Stop it.";
    UnitMainPid = "unit-main-pid", "A unit still has a main pid.", "Stop it and make sure the process is gone.";
    UnitReloadPending = "unit-reload-pending", "systemd needs a daemon-reload for a unit.", "Run `systemctl daemon-reload`, then observe again.";
    ContainerRunning = "container-running", "A named container is running, restarting or paused, has a process, or holds exec sessions, as its engine reports it.", "Stop it (`docker stop`, `podman stop`), and set its restart policy to `no`.";
    ContainerRestartable = "container-restartable", "A named container is stopped, but its restart policy lets its engine start it again (when the engine restarts, at boot, or on a failure).", "Set its policy to `no` (`docker update --restart=no`; podman: create it again without `--restart`), or remove it.";
    ContainerReplaced = "container-replaced", "A named container is another container than at the first observation of this recovery (removed and created again under its name, or created since).", "Find out who created it; recover again once the container is the one you stopped.";
    ContainerChanged = "container-changed", "Its engine reported an event that could start or change a named container (a start, restart, unpause, exec, update or create) after the first observation of this recovery.", "Find out who acted on it; recover again once it stays stopped.";
    ContainerEngineUnprotected = "container-engine-unprotected", "A container engine's socket is not root's: owned by another user, writable by everyone, or in a directory others can write (anyone could answer as the engine).", "Name the engine's own socket, owned by root, in a directory only root can write, and enroll anew.";
    CgroupPopulated = "cgroup-populated", "A cgroup (or a descendant) holds processes or threads, or reports populated.", "Kill the old controller's cgroup (`cgroup.kill`).";
    EscapedTask = "escaped-task", "A live task runs a contained executable outside its cgroup.", "Find and kill it; it escaped containment.";
    ListenerPresent = "listener-present", "Something is bound on a contained unix path or TCP/UDP port, or accepts connections there (holder pids named where they can be found, else \"holder unknown\").", "Stop the holder; if it is unknown, look in every network namespace (`lsns -t net`).";
    ListenerUnprotected = "listener-unprotected", "A contained unix path's directory can be written by someone other than root and the old root's uids (a world-writable directory such as /tmp), or is owned by another user: anyone could take the name before repochd holds it.", "Keep the listener in a directory only root or the old root's user can write (e.g. under /run), and enroll anew.";
    ObserveFailed = "observe-failed", "An observation could not be made (permission, unknown format): unknown is never fine.", "Read the detail; fix the cause.";
    FenceMissing = "fence-missing", "A lock fence does not exist.", "Find out who removed it.";
    FenceReplaced = "fence-replaced", "A lock fence is another object than the enrolled one (another inode, or the same inode number with another birth time), before or during locking.", "Treat as tampering: a replaced lock gives no exclusion.";
    FenceBusy = "fence-busy", "Another process holds a lock fence (named).", "That process still acts as a root: contain it first.";
    FenceCustody = "fence-custody", "The kernel does not show our lock on the fence.", "Investigate; exclusion is not proven.";
    FenceUnprotected = "fence-unprotected", "A lock fence can be opened by others (a mode bit for others, or an access ACL), or its owner or mode widened since enrollment: anyone who can open it can hold it shared.", "Restore the enrolled owner and a mode without other bits (0600 or 0640), remove any ACL (`setfacl -b`); find out who changed it.";
    ReadyMissing = "ready-missing", "The READY target does not exist.", "Create it as the new root expects.";
    ReadyUnprotected = "ready-unprotected", "The READY target is a symlink, not a regular file, not root-owned, or writable by others.", "Fix ownership and mode.";
    ReadyUnapproved = "ready-unapproved", "The READY digest differs from the one the operator approved.", "Check the READY content, then approve its digest.";
    ReadyChanged = "ready-changed", "The READY target changed between observations.", "Something still writes it; contain it.";
    ConsumerExeMissing = "consumer-exe-missing", "The consumer executable does not exist.", "Install the worker supervisor.";
    ConsumerExeUnprotected = "consumer-exe-unprotected", "The consumer executable is not root-owned, or is writable by others.", "Fix ownership and mode.";
    ConsumerExeMismatch = "consumer-exe-mismatch", "The consumer executable does not match its pinned sha256.", "Install the enrolled release or enroll anew.";
    ConsumerExeChanged = "consumer-exe-changed", "The consumer executable changed between observations.", "Something replaced it during the recovery; investigate.";
    EvidenceChanged = "evidence-changed", "A final verification saw a different evidence digest than the first observation.", "The world changed during issuance; the epoch is used and withheld.";
    ConsumerAbsent = "consumer-absent", "No authenticated consumer connected before the deadline. Nothing was written.", "Start `repoch-consume receive` and recover again.";
    ConsumerRejected = "consumer-rejected", "A peer on the grant socket failed authentication (uid not any deployment's consumer, gid, executable, cgroup, key, the proof of its key, or not the sole holder of its connection).", "Only the enrolled consumer may receive the grant; nothing was written.";
    CustodyInvalid = "custody-invalid", "The consumer's custody signature does not verify against its enrolled key.", "Check the consumer's key file.";
    RegistryUnavailable = "registry-unavailable", "The deployment's fleet registry (etcd) did not answer: before the intent (refused, nothing written), or while its claim was made or checked (the claim's outcome unknown: the epoch is kept, and a claim naming this host is never reused).", "Restore a majority of the etcd cluster and this host's path to it (`repoch audit --registry`). Before the intent: retry. After it: the epoch is used; recovery needs a new enrollment linked to this one.";
    RegistryUnprotected = "registry-unprotected", "A fleet registry credential (its CA, this host's client certificate or key) is not a regular file only root can write (the key: only root can read), or sits in a directory others can write: whoever can replace the CA can stand up a registry of their own.", "Make the file root's, 0644 (the key 0600), in root's directories; then retry: nothing was written.";
    RegistryRollback = "registry-rollback", "A host's epoch log and the fleet registry disagree: the registry recorded this deployment's claim and the log does not hold it (rolled back or replaced), or the log consumed with a fencing token the registry does not hold (the key deleted, or the cluster restored from an older snapshot).", "Treat as tampering: an epoch may have been recovered twice. Keep the log and `repoch audit --registry --json`'s evidence pair.";
    RegistryChanged = "registry-changed", "The fleet registry's epoch key no longer holds this host's claim as created (deleted, rewritten, or restored from an older snapshot) when the grant was about to be sent: withheld.", "Do not retry. Someone with write access to etcd changed the key: find who (`repoch audit --registry`); the epoch is used and kept.";
    RegistryMismatch = "registry-mismatch", "The fleet registry that answered is not the fleet this deployment enrolled in: no fleet record under its prefix, or one with another fleet id, name, prefix or cluster; a cluster id or member the enrollment did not pin; or a member list sharing no majority with the pinned members (a member's data copied and started alone, a cluster rebuilt from its template, a second cluster, a typo in a prefix); or members, each asked alone, that disagree about the fleet epoch (a copy of the fleet at one endpoint). Before the intent: refused, nothing written; after it: withheld.", "Do not point the host elsewhere to get a grant: compare the `[registry]` (endpoints, prefix, fleet id) with the fleet's other hosts and the cluster's `etcdctl member list`. A fleet record gone with a rebuilt cluster is re-established by the operator (docs/OPERATOR.md, \"A fleet registry\").";
    RegistryForged = "registry-forged", "The fleet epoch's key holds what no recovery wrote: a value that is no claim, or a claim naming a host whose issuer key (its host record's, or this host's own) did not sign it. Someone with write access to etcd wrote it; the host it names is not the one at fault.", "Treat as tampering of the registry: find who writes to etcd with another host's credential (etcd's audit, the client certificates); the fleet epoch is burnt either way. Keep `repoch audit --registry --json`'s evidence pair.";
    RegistryOverprivileged = "registry-overprivileged", "This host's fleet registry credential could write a key no host's may: the fleet record, another host's record, or a key outside the prefix (etcd's authentication off, or a role granting more). With it, one host's credential could plant, copy or replay the fleet record. Proven by a transaction whose compare never holds: nothing was written.", "Enable etcd's authentication and give each host's user read on the prefix and write on its own host record and the fleet epochs only (docs/OPERATOR.md, \"A fleet registry\", \"Roles first\"); then retry.";
    ConsumerLost = "consumer-lost", "The consumer went away after the intent: gone before `consume` or before the dispatch (withheld: no grant sent), or silent after the dispatch without acknowledging a durable grant (uncertain: dispatched, not acknowledged).", "The epoch is used and kept, never reissued. When uncertain, look for the grant file at the consumer's `--out` (`repoch-consume verify`).";
    DaemonUnreachable = "daemon-unreachable", "repoch could not reach repochd on its admin socket.", "Start repochd (or its socket unit) and retry; nothing was written.";
    DaemonStopping = "daemon-stopping", "repochd was stopping (SIGTERM: `systemctl stop`, a restart or a package upgrade) before this recovery wrote its intent, or before this consumer was taken; nothing was written.", "Recover again once repochd is back (socket activation starts it on the next request); a consumer started by its unit is restarted by it.";
    RecoverCancelled = "recover-cancelled", "The operator's `repoch recover` went away (interrupted: Ctrl-C, a closed terminal, a killed shell) before this recovery wrote its intent (refused, nothing written), or after it, before `consume` and the fleet claim (withheld: the epoch is used, nothing claimed, no grant).", "Before the intent: recover again. After it: the epoch is used and kept; recovery needs a new enrollment linked to this one.";
    AdminDenied = "admin-denied", "The admin socket peer is not root.", "Run as root.";
    ProtocolError = "protocol-error", "A peer sent a malformed, oversized or unexpected frame, or timed out.", "Check versions of repoch and the peer.";
    Internal = "internal", "A bug in repoch. Never a silent success.", "Report it with the log.";
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Reason {
    pub fn to_value(self) -> Value {
        cbor::text(self.as_str())
    }
    pub fn from_value(v: Value) -> Result<Reason, DecodeError> {
        let s = cbor::as_text(v, "reason", 64)?;
        Reason::parse(&s)
            .ok_or_else(|| DecodeError::schema("reason", format!("unknown reason code {s:?}")))
    }
}

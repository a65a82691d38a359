//! The protocol's bounds: frames, records, logs, journals, grants and checkpoints, and the
//! operator's and producer's inputs. Names carry the unit last. The daemon's connection
//! and time bounds are `daemon/src/limits.rs`; an observer's bound lives beside the code
//! that keeps it, in `repoch-sys` or `repoch-issuer` (docs/ARCHITECTURE.md, "Limits").
//!
//! Each limit says why it has its value. Related limits are checked against each other at
//! compile time, so a change that breaks a relation does not build.

/// Largest frame accepted on either socket, and the largest record in any log.
/// Bounds the buffer a peer can make us allocate before anything is authenticated.
pub const FRAME_BYTES_MAX: usize = 64 * 1024;

/// Largest signed record (epoch log or journal) in bytes. A record travels in one frame
/// (the receipt carries a grant), so it must leave room for the frame's own envelope.
pub const RECORD_BYTES_MAX: usize = 60 * 1024;

/// Records in one epoch log: genesis, intent, consume, receipt and withheld is five;
/// anything beyond eight is corrupt by construction, never read further.
pub const LOG_RECORDS_MAX: usize = 8;

/// Bytes in one epoch log: every record at its largest, plus the 4-byte length prefixes.
pub const LOG_BYTES_MAX: usize = LOG_RECORDS_MAX * (RECORD_BYTES_MAX + 4);

/// Records in one producer journal. A root that logs one operation a minute for ten years
/// stays below this; verification cost is linear (one strict signature check per record).
pub const JOURNAL_RECORDS_MAX: usize = 4 * 1024 * 1024;

/// Bytes in one producer journal read for lineage verification.
pub const JOURNAL_BYTES_MAX: usize = 512 * 1024 * 1024;

/// Largest journal record. Journal records are small (an operation name and an outcome).
pub const JOURNAL_RECORD_BYTES_MAX: usize = 4 * 1024;

/// Operations without a definite outcome carried into one grant. More than this is refused
/// (`lineage-unknown-overflow`): the grant must carry every one of them or none.
pub const UNKNOWN_OPS_MAX: usize = 64;

/// Longest operation name in a journal `op-begin` record.
pub const OP_NAME_BYTES_MAX: usize = 128;

/// Longest absolute path in a manifest. Keeps every fact and the grant within one frame.
pub const PATH_BYTES_MAX: usize = 256;

/// Largest TOML manifest read by `repoch enroll`. Every list and text in it is bounded far
/// below this; a larger file is refused before it is read into memory.
pub const MANIFEST_TOML_BYTES_MAX: usize = 256 * 1024;

/// Longest free text (labels, unit names, refusal details).
pub const TEXT_BYTES_MAX: usize = 256;
/// Longest checkpoint note accepted (docs/AUDITOR.md, "Checkpoints"); a repoch note is
/// under 300 bytes: an origin of 50, a size, 44 of base64 head, one signature line.
pub const CHECKPOINT_BYTES_MAX: usize = 1024;

/// Lock fences per deployment (each is an fd passed with `SCM_RIGHTS`).
pub const FENCES_MAX: usize = 8;
/// Original stores per deployment (checked by identity only).
pub const STORES_MAX: usize = 16;
/// systemd units in a containment profile.
pub const UNITS_MAX: usize = 8;
/// cgroups in a containment profile (each checked recursively).
pub const CGROUPS_MAX: usize = 8;
/// Listeners (unix paths, TCP/UDP ports) in a containment profile.
pub const LISTENERS_MAX: usize = 16;
/// Descriptors passed with a grant: every fence, then every held listener.
pub const GRANT_FDS_MAX: usize = FENCES_MAX + LISTENERS_MAX;
/// Executables no live process may run, in a containment profile.
pub const EXECUTABLES_MAX: usize = 8;
/// The old root's own uids (besides root) in a containment profile.
pub const OLD_ROOT_UIDS_MAX: usize = 8;
/// Containers in a containment profile, each asked of its engine.
pub const CONTAINERS_MAX: usize = 8;
/// Longest container name or id (Docker's ids are 64 hex digits; names are short).
pub const CONTAINER_NAME_BYTES_MAX: usize = 128;
/// Waivers in one manifest (`containment.waived`: authorities left out on purpose).
pub const WAIVERS_MAX: usize = 32;
/// Bytes of a waiver's `what` and of its reason.
pub const WAIVER_TEXT_BYTES_MAX: usize = 256;

/// Facts that are not per-item: journal, frontier, predecessor, target, consumer, epoch.
pub const FACTS_FIXED_MAX: usize = 16;

/// Facts in one evidence set: one per inventory or containment item, plus the fixed ones.
pub const FACTS_MAX: usize = FACTS_FIXED_MAX
    + FENCES_MAX
    + STORES_MAX
    + UNITS_MAX
    + CGROUPS_MAX
    + LISTENERS_MAX
    + EXECUTABLES_MAX
    + CONTAINERS_MAX;

/// Longest `expected` or `observed` text in a fact; longer observations are cut at a
/// character boundary and marked, which is deterministic.
pub const FACT_TEXT_BYTES_MAX: usize = 96;

/// Upper bound of one encoded fact: kind, subject (a path), expected, observed, reason.
pub const FACT_BYTES_MAX: usize = 32 + PATH_BYTES_MAX + 2 * FACT_TEXT_BYTES_MAX + 48;

/// Bytes of an ed25519 public key, signature, sha256 hash, deployment id, nonce.
/// The handoff's last word (docs/PROTOCOL.md, "The grant socket"): repochd sends `granted`
/// within this many seconds of reading the consumer's `persisted`, or never; the consumer
/// waits twice as long from sending it, so a `granted` repochd sent is always read.
pub const LAST_WORD_SECONDS_MAX: u64 = 10;
/// How long the consumer waits for the last word from sending `persisted`: twice
/// [`LAST_WORD_SECONDS_MAX`], from an earlier point than repochd's wait starts.
pub const LAST_WORD_WAIT_SECONDS_MAX: u64 = 2 * LAST_WORD_SECONDS_MAX;
pub const KEY_BYTES: usize = 32;
pub const SIGNATURE_BYTES: usize = 64;
pub const HASH_BYTES: usize = 32;
pub const DEPLOYMENT_ID_BYTES: usize = 16;
pub const NONCE_BYTES: usize = 32;

// An intent carries every fact; it must fit in a record with room for the rest.
const _: () = assert!(FACTS_MAX * FACT_BYTES_MAX + 4 * 1024 <= RECORD_BYTES_MAX);
// A receipt carries a grant: fences and unknown operations must fit with room to spare.
const _: () = assert!(
    FENCES_MAX * (PATH_BYTES_MAX + 64)
        + LISTENERS_MAX * (PATH_BYTES_MAX + 16)
        + UNKNOWN_OPS_MAX * (OP_NAME_BYTES_MAX + 16)
        + 4 * 1024
        <= RECORD_BYTES_MAX
);
const _: () = assert!(RECORD_BYTES_MAX + 1024 <= FRAME_BYTES_MAX);
const _: () = assert!(JOURNAL_RECORD_BYTES_MAX <= RECORD_BYTES_MAX);
const _: () = assert!(OP_NAME_BYTES_MAX <= TEXT_BYTES_MAX);

/// Operations begun and not yet ended that a journal may hold open at once.
pub const OPEN_OPS_MAX: usize = 4096;

// The operator's and the producer's inputs.

/// Longest consumer wait an operator may ask for (`repoch recover --consumer-wait`).
pub const CONSUMER_WAIT_SECONDS_MAX: u64 = 3600;
/// Shortest consumer wait an operator may ask for.
pub const CONSUMER_WAIT_SECONDS_MIN: u64 = 1;
/// Largest pid a journal `root-start` may name (the kernel's `PID_MAX_LIMIT`).
pub const PID_MAX: i64 = 4_194_304;
/// Largest op id `journal append op-end` accepts: a journal naming `u64::MAX` is refused
/// (lineage-mutated), the largest id leaving no next one.
pub const OP_ID_MAX: u64 = u64::MAX - 1;

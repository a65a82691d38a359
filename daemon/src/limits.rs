//! The daemon's bounds, with the unit last.

/// Concurrent admin connections (each may run one issuance).
pub const ADMIN_CONNECTIONS_MAX: usize = 8;
/// Concurrent grant-socket connections being read (handshakes).
pub const GRANT_CONNECTIONS_MAX: usize = 32;
/// Consumers connected and waiting for a recovery.
pub const PENDING_CONSUMERS_MAX: usize = 16;
/// Consumers of one uid connected and waiting (one uid cannot take every waiting place).
pub const PENDING_PER_UID_MAX: usize = 4;
/// Handshakes (hello, description, key proof) in progress for one uid.
pub const HANDSHAKES_PER_UID_MAX: usize = 4;
/// How long a consumer may wait connected for a recovery before it is dropped.
pub const PENDING_CONSUMER_SECONDS_MAX: u64 = 3600;
/// Epoch verdicts the grant socket keeps (daemon/src/epochs.rs): one per deployment.
pub const EPOCH_VERDICTS_MAX: usize = repoch_issuer::store::DEPLOYMENTS_MAX;
/// Longest a waiting consumer that hung up or exited stays in the registry: the registry is
/// swept this often (and on every arrival and every take).
pub const REGISTRY_SWEEP_SECONDS_MAX: u64 = 1;
/// Grant-socket warnings logged per window; the rest are counted and reported once.
pub const WARNINGS_PER_WINDOW_MAX: u32 = 20;
/// The window of `WARNINGS_PER_WINDOW_MAX`.
pub const WARNING_WINDOW_SECONDS_MAX: u64 = 60;
/// Time a peer gets to send its whole first frame (hello, or an admin request).
pub const HANDSHAKE_SECONDS_MAX: u64 = 5;
/// Time the consumer gets for its whole custody answer (every byte of the frame, however
/// it is dripped), and to take the whole grant.
pub const CUSTODY_SECONDS_MAX: u64 = 10;
/// Time the consumer gets, after the grant was sent, to make its grant file durable and
/// acknowledge it (`persisted`); none in time is "dispatched, not acknowledged" (uncertain).
pub const PERSISTED_ACK_SECONDS_MAX: u64 = 30;
/// Time a peer gets to take a whole refusal or `accepted` frame before it is dropped.
pub const REFUSAL_WRITE_SECONDS_MAX: u64 = 5;
/// Longest consumer wait an operator may ask for (`repoch recover --consumer-wait`).
pub const CONSUMER_WAIT_SECONDS_MAX: u64 = 3600;
/// Shortest consumer wait an operator may ask for.
pub const CONSUMER_WAIT_SECONDS_MIN: u64 = 1;
/// Largest pid a journal `root-start` may name (the kernel's `PID_MAX_LIMIT`).
pub const PID_MAX: i64 = 4_194_304;
/// Largest op id `journal append op-end` accepts: a journal naming `u64::MAX` is refused
/// (lineage-mutated), the largest id leaving no next one.
pub const OP_ID_MAX: u64 = u64::MAX - 1;
/// Longest wait to write one event to the admin client before it is dropped.
pub const ADMIN_WRITE_SECONDS_MAX: u64 = 5;
/// Events buffered between an issuance and its admin connection.
pub const EVENTS_BUFFERED_MAX: usize = 256;

const _: () = assert!(PENDING_CONSUMERS_MAX <= GRANT_CONNECTIONS_MAX);
const _: () = assert!(PENDING_PER_UID_MAX < PENDING_CONSUMERS_MAX);
const _: () = assert!(HANDSHAKES_PER_UID_MAX < GRANT_CONNECTIONS_MAX);

//! The daemon's bounds, with the unit last. The wire's, the logs' and the consumer wait's
//! are `repoch_protocol::limits`; the observers' are beside them in `repoch-issuer` and
//! `repoch-sys` (docs/ARCHITECTURE.md, "Limits").

pub use repoch_protocol::limits::{CONSUMER_WAIT_SECONDS_MAX, CONSUMER_WAIT_SECONDS_MIN};

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
/// Longest a waiting consumer that hung up or exited stays in the registry: while one
/// waits, the registry is swept this often (and on every arrival and every take); while
/// none waits, nothing is swept and nothing wakes repochd.
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
/// Longest wait to write one event to the admin client before it is dropped.
pub const ADMIN_WRITE_SECONDS_MAX: u64 = 5;
/// Beyond the deadlines of a recovery past its intent (custody, then the acknowledgement),
/// how long a stopping repochd waits for it: its final verifications and appends.
pub const STOP_MARGIN_SECONDS_MAX: u64 = 30;
/// Events buffered between an issuance and its admin connection.
pub const EVENTS_BUFFERED_MAX: usize = 256;

const _: () = assert!(PENDING_CONSUMERS_MAX <= GRANT_CONNECTIONS_MAX);
const _: () = assert!(PENDING_PER_UID_MAX < PENDING_CONSUMERS_MAX);
const _: () = assert!(HANDSHAKES_PER_UID_MAX < GRANT_CONNECTIONS_MAX);

/// Largest value `repochd --config` accepts for a count of connections or consumers.
pub const CONFIG_CONNECTIONS_CEILING: u64 = 1024;
/// Largest `limits.warnings_per_window`.
pub const CONFIG_WARNINGS_CEILING: u64 = 10_000;
/// Bytes read from a `--config` file.
pub const CONFIG_BYTES_MAX: u64 = 64 * 1024;

/// The limits and waits `repochd --config FILE` may set (docs/OPERATOR.md, "Configuring
/// repochd"); the constants above are the defaults. Read once at start ([`set_config`]),
/// then by every task through [`config`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub admin_connections: usize,
    pub grant_connections: usize,
    pub pending_consumers: usize,
    pub pending_per_uid: usize,
    pub handshakes_per_uid: usize,
    pub warnings_per_window: u32,
    pub handshake_seconds: u64,
    pub custody_seconds: u64,
    pub persisted_ack_seconds: u64,
    pub pending_consumer_seconds: u64,
    pub warning_window_seconds: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            admin_connections: ADMIN_CONNECTIONS_MAX,
            grant_connections: GRANT_CONNECTIONS_MAX,
            pending_consumers: PENDING_CONSUMERS_MAX,
            pending_per_uid: PENDING_PER_UID_MAX,
            handshakes_per_uid: HANDSHAKES_PER_UID_MAX,
            warnings_per_window: WARNINGS_PER_WINDOW_MAX,
            handshake_seconds: HANDSHAKE_SECONDS_MAX,
            custody_seconds: CUSTODY_SECONDS_MAX,
            persisted_ack_seconds: PERSISTED_ACK_SECONDS_MAX,
            pending_consumer_seconds: PENDING_CONSUMER_SECONDS_MAX,
            warning_window_seconds: WARNING_WINDOW_SECONDS_MAX,
        }
    }
}

/// One key of the file: its table and name, the range it accepts, and where it goes.
struct Key {
    table: &'static str,
    name: &'static str,
    min: u64,
    max: u64,
    set: fn(&mut Config, u64),
}

const KEYS: &[Key] = &[
    Key {
        table: "limits",
        name: "admin_connections",
        min: 1,
        max: CONFIG_CONNECTIONS_CEILING,
        set: |c, v| c.admin_connections = v as usize,
    },
    Key {
        table: "limits",
        name: "grant_connections",
        min: 1,
        max: CONFIG_CONNECTIONS_CEILING,
        set: |c, v| c.grant_connections = v as usize,
    },
    Key {
        table: "limits",
        name: "pending_consumers",
        min: 1,
        max: CONFIG_CONNECTIONS_CEILING,
        set: |c, v| c.pending_consumers = v as usize,
    },
    Key {
        table: "limits",
        name: "pending_per_uid",
        min: 1,
        max: CONFIG_CONNECTIONS_CEILING,
        set: |c, v| c.pending_per_uid = v as usize,
    },
    Key {
        table: "limits",
        name: "handshakes_per_uid",
        min: 1,
        max: CONFIG_CONNECTIONS_CEILING,
        set: |c, v| c.handshakes_per_uid = v as usize,
    },
    Key {
        table: "limits",
        name: "warnings_per_window",
        min: 1,
        max: CONFIG_WARNINGS_CEILING,
        set: |c, v| c.warnings_per_window = v as u32,
    },
    Key {
        table: "waits",
        name: "handshake_seconds",
        min: 1,
        max: 60,
        set: |c, v| c.handshake_seconds = v,
    },
    Key {
        table: "waits",
        name: "custody_seconds",
        min: 1,
        max: 300,
        set: |c, v| c.custody_seconds = v,
    },
    Key {
        table: "waits",
        name: "persisted_ack_seconds",
        min: 1,
        max: 600,
        set: |c, v| c.persisted_ack_seconds = v,
    },
    Key {
        table: "waits",
        name: "pending_consumer_seconds",
        min: 1,
        max: 86_400,
        set: |c, v| c.pending_consumer_seconds = v,
    },
    Key {
        table: "waits",
        name: "warning_window_seconds",
        min: 1,
        max: 3600,
        set: |c, v| c.warning_window_seconds = v,
    },
];

impl Config {
    /// Parses and validates a config file's text. Every error names the key (`table.key`).
    pub fn parse(text: &str) -> Result<Config, String> {
        let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let at = e.span().map_or(0, |r| r.start).min(text.len());
            let line = text[..at].matches('\n').count() + 1;
            let column = at - text[..at].rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("line {line}, column {column}: {}", e.message())
        })?;
        let mut c = Config::default();
        for (table, v) in &doc {
            if !KEYS.iter().any(|k| k.table == table) {
                return Err(format!("{table}: unknown table (known: limits, waits)"));
            }
            let Some(t) = v.as_table() else {
                return Err(format!("{table}: must be a table ([{table}])"));
            };
            for (name, v) in t {
                let Some(k) = KEYS.iter().find(|k| k.table == table && k.name == name) else {
                    return Err(format!("{table}.{name}: unknown key"));
                };
                let n = v
                    .as_integer()
                    .and_then(|n| u64::try_from(n).ok())
                    .filter(|n| (k.min..=k.max).contains(n))
                    .ok_or_else(|| {
                        format!(
                            "{table}.{name}: must be an integer from {} to {}, found {v}",
                            k.min, k.max
                        )
                    })?;
                (k.set)(&mut c, n);
            }
        }
        let rel = |a: &str, av: usize, op: &str, b: &str, bv: usize| {
            format!("limits.{a} ({av}) must be {op} limits.{b} ({bv})")
        };
        if c.pending_consumers > c.grant_connections {
            return Err(rel(
                "pending_consumers",
                c.pending_consumers,
                "at most",
                "grant_connections",
                c.grant_connections,
            ));
        }
        if c.pending_per_uid >= c.pending_consumers {
            return Err(rel(
                "pending_per_uid",
                c.pending_per_uid,
                "less than",
                "pending_consumers",
                c.pending_consumers,
            ));
        }
        if c.handshakes_per_uid >= c.grant_connections {
            return Err(rel(
                "handshakes_per_uid",
                c.handshakes_per_uid,
                "less than",
                "grant_connections",
                c.grant_connections,
            ));
        }
        Ok(c)
    }

    /// Reads and validates `path` (at most [`CONFIG_BYTES_MAX`] bytes).
    pub fn load(path: &std::path::Path) -> Result<Config, String> {
        // Non-blocking and a regular file only: a FIFO must not hang repochd's start.
        let bytes = repoch_sys::fs::read_regular(
            path,
            CONFIG_BYTES_MAX as usize,
            repoch_sys::fs::Links::Refuse,
        )
        .map_err(|e| format!("{}: {e}", path.display()))?;
        let text =
            String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", path.display()))?;
        if text.len() as u64 > CONFIG_BYTES_MAX {
            return Err(format!(
                "{}: more than {CONFIG_BYTES_MAX} bytes",
                path.display()
            ));
        }
        Config::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }
}

static CONFIG: std::sync::OnceLock<Config> = std::sync::OnceLock::new();

/// Sets the process's config; only the first call counts (repochd's start).
pub fn set_config(c: Config) {
    let _ = CONFIG.set(c);
}

/// The process's config: what [`set_config`] set, else the defaults.
pub fn config() -> &'static Config {
    CONFIG.get_or_init(Config::default)
}

/// How long a stopping repochd waits for its recoveries in progress: a recovery past its
/// intent waits at most `custody_seconds` for the custody answer and `persisted_ack_seconds`
/// for the acknowledgement, plus [`STOP_MARGIN_SECONDS_MAX`] for the rest (70s with the
/// defaults, under systemd's `TimeoutStopSec` of 90s; docs/OPERATOR.md, "Stopping").
pub fn stop_seconds() -> u64 {
    let c = config();
    c.custody_seconds
        .saturating_add(c.persisted_ack_seconds)
        .saturating_add(STOP_MARGIN_SECONDS_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_hold_the_relations_and_an_empty_file_is_the_defaults() {
        assert_eq!(Config::parse("").unwrap(), Config::default());
        let c = Config::parse("[limits]\nadmin_connections = 2\n[waits]\ncustody_seconds = 20\n")
            .unwrap();
        assert_eq!((c.admin_connections, c.custody_seconds), (2, 20));
        assert_eq!(c.grant_connections, GRANT_CONNECTIONS_MAX);
    }
}

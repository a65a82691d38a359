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
/// How often a write to an admin client that does not read looks whether repochd is
/// stopping (the client itself is waited for, never dropped for being slow).
pub const ADMIN_STOP_CHECK_SECONDS: u64 = 1;
/// Beyond the deadlines of a recovery past its intent (custody, then the acknowledgement),
/// how long a stopping repochd waits for it: its final verifications and appends.
pub const STOP_MARGIN_SECONDS_MAX: u64 = 30;
/// Peers turned away during one consumer wait that the operator's stream names one by one
/// (the rest are counted, said once).
pub const PEER_EVENTS_SHOWN_MAX: usize = 16;
/// Seconds between two "waiting for the consumer" events of one wait.
pub const WAIT_TICK_SECONDS: u64 = 10;
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

/// `repochd --config`'s file as written: two tables, every key optional (absent: the
/// default), nothing else (an unknown table or key is an error, never ignored).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    waits: Waits,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Limits {
    admin_connections: Option<i64>,
    grant_connections: Option<i64>,
    pending_consumers: Option<i64>,
    pending_per_uid: Option<i64>,
    handshakes_per_uid: Option<i64>,
    warnings_per_window: Option<i64>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Waits {
    handshake_seconds: Option<i64>,
    custody_seconds: Option<i64>,
    persisted_ack_seconds: Option<i64>,
    pending_consumer_seconds: Option<i64>,
    warning_window_seconds: Option<i64>,
}

/// Where a TOML error is, as a reader finds it: `table.key` when the error is on a key's
/// line, then the line and column, then what is wrong.
fn located(text: &str, e: &toml::de::Error) -> String {
    let at = e.span().map_or(0, |r| r.start).min(text.len());
    let line = text[..at].matches('\n').count() + 1;
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let column = at - start + 1;
    let table = text[..start]
        .lines()
        .rev()
        .find_map(|l| Some(l.trim().strip_prefix('[')?.split(']').next()?.trim()));
    let key = text[start..]
        .lines()
        .next()
        .and_then(|l| l.split_once('='))
        .map(|(k, _)| k.trim());
    match (table, key) {
        (Some(t), Some(k)) => format!("{t}.{k} (line {line}, column {column}): {}", e.message()),
        _ => format!("line {line}, column {column}: {}", e.message()),
    }
}

/// The smallest value of every key: no limit or wait may be zero.
const CONFIG_VALUE_MIN: u64 = 1;

/// A key's value, if set, within `CONFIG_VALUE_MIN..=max`; else the default. Read as TOML's
/// own integer, so that a negative one is told the range too.
fn within(name: &str, v: Option<i64>, max: u64, default: u64) -> Result<u64, String> {
    match v {
        None => Ok(default),
        Some(n) if u64::try_from(n).is_ok_and(|n| (CONFIG_VALUE_MIN..=max).contains(&n)) => {
            Ok(n as u64)
        }
        Some(n) => Err(format!(
            "{name}: must be an integer from {CONFIG_VALUE_MIN} to {max}, found {n}"
        )),
    }
}

impl Config {
    /// Parses and validates a config file's text. Every error names the key (`table.key`).
    pub fn parse(text: &str) -> Result<Config, String> {
        // Each table must be one: serde's derived reader would also take a list, matched
        // to the keys by position, dropping what does not fit.
        let doc: toml::Table = text.parse().map_err(|e| located(text, &e))?;
        for name in ["limits", "waits"] {
            if doc.get(name).is_some_and(|v| !v.is_table()) {
                return Err(format!("{name}: must be a table ([{name}])"));
            }
        }
        let f: File = toml::from_str(text).map_err(|e| located(text, &e))?;
        let d = Config::default();
        // Each key: its value within 1..=MAX (its name, `table.key`, from the field itself),
        // else the default. The casts cannot truncate: every MAX fits the field's type.
        macro_rules! key {
            ($t:ident . $k:ident, $max:expr, $ty:ty) => {
                within(
                    concat!(stringify!($t), ".", stringify!($k)),
                    f.$t.$k,
                    $max,
                    d.$k as u64,
                )? as $ty
            };
        }
        let c = Config {
            admin_connections: key!(limits.admin_connections, CONFIG_CONNECTIONS_CEILING, usize),
            grant_connections: key!(limits.grant_connections, CONFIG_CONNECTIONS_CEILING, usize),
            pending_consumers: key!(limits.pending_consumers, CONFIG_CONNECTIONS_CEILING, usize),
            pending_per_uid: key!(limits.pending_per_uid, CONFIG_CONNECTIONS_CEILING, usize),
            handshakes_per_uid: key!(limits.handshakes_per_uid, CONFIG_CONNECTIONS_CEILING, usize),
            warnings_per_window: key!(limits.warnings_per_window, CONFIG_WARNINGS_CEILING, u32),
            handshake_seconds: key!(waits.handshake_seconds, 60, u64),
            custody_seconds: key!(waits.custody_seconds, 300, u64),
            persisted_ack_seconds: key!(waits.persisted_ack_seconds, 600, u64),
            pending_consumer_seconds: key!(waits.pending_consumer_seconds, 86_400, u64),
            warning_window_seconds: key!(waits.warning_window_seconds, 3600, u64),
        };
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

    /// Each error names its key as `table.key` where it is on a key's line, and where it is.
    #[test]
    fn an_error_names_the_key_and_where_it_is() {
        let e = |t: &str| Config::parse(t).unwrap_err();
        assert_eq!(
            e("[limits]\nadmin_connections = 0\n"),
            "limits.admin_connections: must be an integer from 1 to 1024, found 0"
        );
        assert!(
            e("[limits]\nadmin_connections = \"8\"\n")
                .starts_with("limits.admin_connections (line 2, column 21): invalid type: string"),
            "{}",
            e("[limits]\nadmin_connections = \"8\"\n")
        );
        assert_eq!(
            e("[waits]\ncustody_seconds = -1\n"),
            "waits.custody_seconds: must be an integer from 1 to 300, found -1"
        );
        assert!(e("\n[waits]\npersisted_ack_secs = 30\n").starts_with(
            "waits.persisted_ack_secs (line 3, column 1): unknown field `persisted_ack_secs`"
        ));
        assert!(
            e("[limit]\n").contains("unknown field `limit`"),
            "{}",
            e("[limit]\n")
        );
        assert!(
            e("not toml at all").starts_with("line 1, column "),
            "{}",
            e("not toml at all")
        );
    }

    /// A table must be written as a table: serde's derived reader would also take a list
    /// matched to the keys by position, dropping what does not fit (found by attacking the
    /// release binary: `limits = [2, 33, 17, 3, 5, 21, "junk"]` started repochd).
    #[test]
    fn a_table_written_as_a_list_or_an_array_of_tables_is_refused() {
        for text in [
            "limits = [2, 33, 17, 3, 5, 21, \"junk\", {x = 1}]\n",
            "waits = [7, 11, 31, 3601, 61]\n",
            "[[limits]]\nadmin_connections = 3\n",
            "limits = 3\n",
        ] {
            let e = Config::parse(text).unwrap_err();
            let table = text
                .trim_start_matches('[')
                .split([' ', ']'])
                .next()
                .unwrap();
            assert_eq!(
                e,
                format!("{table}: must be a table ([{table}])"),
                "{text:?}"
            );
        }
        // The same keys as a table, inline or dotted, are the file's own.
        let c = Config::parse("limits = {admin_connections = 3}\n").unwrap();
        assert_eq!(c.admin_connections, 3);
        let c = Config::parse("limits.admin_connections = 4\n").unwrap();
        assert_eq!(c.admin_connections, 4);
    }

    /// A value of the right type out of its range, negative included, says the range; a
    /// header with spaces or a comment still names `table.key`.
    #[test]
    fn an_out_of_range_value_says_the_range_and_a_spaced_header_names_the_key() {
        let e = |t: &str| Config::parse(t).unwrap_err();
        assert_eq!(
            e("[limits]\nadmin_connections = -3\n"),
            "limits.admin_connections: must be an integer from 1 to 1024, found -3"
        );
        assert!(
            e("[ limits ] # c\nadmin_connections = \"8\"\n")
                .starts_with("limits.admin_connections (line 2, column 21): invalid type"),
            "{}",
            e("[ limits ] # c\nadmin_connections = \"8\"\n")
        );
    }
}

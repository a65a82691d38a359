//! repoch's records and wire messages: deterministic CBOR, hashing, ed25519 signatures and
//! chain verification. Pure: bytes in, values out; no I/O, no async.
//!
//! * [`cbor`]: the canonical encoding and the strict decoder every type goes through.
//! * [`epoch`]: epoch-log records, [`epoch::verify_log`] and [`epoch::verify_chain`].
//! * [`journal`]: the producer journal, its writer and [`journal::verify_journal`].
//! * [`grant`], [`manifest`], [`wire`]: grants, challenges, the manifest and socket frames.
//! * [`limits`]: every bound, in one place; [`path`]: the schema's paths.
//! * [`outcome`]: every command's outcome and its exit code (docs/EXIT-CODES.md).
#![forbid(unsafe_code)]
// Every value here is decoded from adversarial bytes (even when signed): arithmetic is
// checked, and an overflow is a refusal with its reason, never a panic.
#![deny(clippy::arithmetic_side_effects)]

pub mod cbor;
pub mod checkpoint;
pub mod epoch;
pub mod fleet;
/// The fuzz targets' entry points, with their fixed test keys: only with the `fuzz`
/// feature (the fuzz crate and this crate's own tests enable it), never in a production
/// build.
#[cfg(feature = "fuzz")]
pub mod fuzz;
pub mod grant;
pub mod invalid;
pub mod journal;
pub mod limits;
pub mod manifest;
pub mod outcome;
pub mod path;
pub mod reason;
pub mod sign;
pub mod text;
pub mod types;
pub mod wire;

pub use cbor::{Canonical, DecodeError};
pub use invalid::Invalid;
pub use outcome::Outcome;
pub use reason::Reason;
pub use types::{Birth, DeploymentId, Fact, Hash, Identity, PublicKey};

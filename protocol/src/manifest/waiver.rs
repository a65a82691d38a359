//! A waiver: an authority the old root held when it was enrolled that the manifest does not
//! name, kept out on purpose, with the operator's reason (docs/OPERATOR.md, "Discovering the
//! old root"). Signed with the manifest, so the genesis says what enrollment was told to
//! leave out, and why.

use super::*;

/// One authority left out of the manifest on purpose: `what` as enrollment's cross-check
/// names it (`KIND:VALUE`, e.g. `unit:billing-root.timer`), and why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Waiver {
    pub what: String,
    pub reason: String,
}

/// The kinds a waiver's `what` may name (the cross-check's own).
pub const WAIVER_KINDS: &[&str] = &[
    "unit",
    "cgroup",
    "executable",
    "uid",
    "listener",
    "lock",
    "container",
    "starter",
    "scheduled",
    "unknown",
];

impl Waiver {
    /// Whether `what` is `KIND:VALUE` with a known kind and a value, and both texts are
    /// non-empty, within their bounds and hold no forging character (docs/PROTOCOL.md,
    /// "Text").
    pub fn well_formed(&self) -> bool {
        let kind_ok = self
            .what
            .split_once(':')
            .is_some_and(|(k, v)| WAIVER_KINDS.contains(&k) && !v.is_empty());
        kind_ok
            && !self.reason.trim().is_empty()
            && self.what.len() <= WAIVER_TEXT_BYTES_MAX
            && self.reason.len() <= WAIVER_TEXT_BYTES_MAX
            && crate::text::check(&self.what).is_ok()
            && crate::text::check(&self.reason).is_ok()
    }
}

impl Canonical for Waiver {
    fn to_value(&self) -> Value {
        cbor::array(vec![cbor::text(&self.what), cbor::text(&self.reason)])
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open(v, "waiver", 2)?;
        let w = Waiver {
            what: f.text(WAIVER_TEXT_BYTES_MAX)?,
            reason: f.text(WAIVER_TEXT_BYTES_MAX)?,
        };
        if !w.well_formed() {
            return Err(DecodeError::schema(
                "waiver",
                "KIND:VALUE with a known kind, and a reason; no forging character",
            ));
        }
        Ok(w)
    }
}

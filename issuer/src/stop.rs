//! The daemon's stop, as an issuance sees it (docs/ARCHITECTURE.md, "Stopping").
//!
//! repochd sets it once, on SIGTERM, SIGINT or SIGQUIT, and never clears it. An issuance asks it at
//! two points before anything is written: while it waits for its consumer, and right
//! before it appends the intent (after the last observation). Set there, the issuance ends
//! refused `daemon-stopping`, nothing written. From the intent on it is never asked: the
//! issuance runs to its own end within its deadlines, and the client gets the real
//! outcome.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use repoch_protocol::Reason;

use crate::refusal::Refusal;

/// A stop flag shared by repochd's tasks; clones share it.
#[derive(Clone, Debug, Default)]
pub struct Stop(Arc<(AtomicBool, AtomicBool)>);

impl Stop {
    /// Sets it (idempotent).
    pub fn set(&self) {
        self.0 .0.store(true, Ordering::SeqCst);
    }

    /// Whether it is set.
    pub fn is_set(&self) -> bool {
        self.0 .0.load(Ordering::SeqCst)
    }

    /// repochd stopped waiting for its recoveries (its bound passed) and is exiting: no
    /// operator will read their outcomes, so none may end granted (the handoff's last word
    /// is not given; daemon/src/link.rs).
    pub fn abandon(&self) {
        self.0 .1.store(true, Ordering::SeqCst);
    }

    /// Whether repochd abandoned its recoveries.
    pub fn abandoned(&self) -> bool {
        self.0 .1.load(Ordering::SeqCst)
    }

    /// The refusal of whatever the stop ends before it wrote anything: `what` names it.
    pub fn refusal(what: &str) -> Refusal {
        Refusal::new(
            Reason::DaemonStopping,
            "repochd",
            "running",
            format!("stopping (SIGTERM, SIGINT or SIGQUIT): {what}; nothing written"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clone_sees_the_stop() {
        let a = Stop::default();
        let b = a.clone();
        assert!(!b.is_set());
        a.set();
        assert!(b.is_set());
        assert!(!b.abandoned());
        a.abandon();
        assert!(b.abandoned());
        assert_eq!(Stop::refusal("x").reason, Reason::DaemonStopping);
    }
}

//! What repochd puts on a peer's socket and in its log, shared by the accept loop
//! (`server.rs`) and the admin connection (`admin.rs`): a peer's first frame read whole
//! under the handshake deadline, an admin event sent within the receiver's bounds, an
//! issuance's last event built from its refusals, and each event logged.

use std::time::Duration;

use repoch_issuer::Refusal;
use repoch_protocol::cbor::Canonical;
use repoch_protocol::wire::{bounded, frame, frame_len, AdminEvent, Verdict};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use crate::limits::config;

/// Reads a peer's first frame, the WHOLE of it within `HANDSHAKE_SECONDS_MAX` (not per
/// read: a peer dripping a byte at a time is cut off at the deadline).
pub(crate) async fn read_first_frame(s: &mut UnixStream) -> Result<Vec<u8>, String> {
    let whole = async {
        let mut h = [0u8; 4];
        s.read_exact(&mut h).await.map_err(|e| e.to_string())?;
        let len = frame_len(h).map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; len];
        s.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
        Ok(buf)
    };
    let secs = config().handshake_seconds;
    tokio::time::timeout(Duration::from_secs(secs), whole)
        .await
        .map_err(|_| format!("the whole first frame did not arrive within {secs}s"))?
}

/// Sends an admin event, its texts clipped to the receiver's bounds ([`bounded`]).
pub(crate) async fn send(s: &mut UnixStream, e: &AdminEvent) -> std::io::Result<()> {
    s.write_all(&frame(&bounded(e.clone()).to_bytes())).await
}

pub(crate) fn outcome_event(
    outcome: Verdict,
    refusals: Vec<Refusal>,
    detail: &str,
    grant: Option<Vec<u8>>,
) -> AdminEvent {
    // The reasons travel as codes; subject/expected/observed go into the detail text.
    let mut text = detail.to_owned();
    for r in refusals.iter().map(ToString::to_string) {
        if !text.contains(&r) {
            text.push_str(&format!("\n{r}"));
        }
    }
    AdminEvent::Outcome {
        outcome,
        reasons: refusals.iter().map(|r| r.reason).collect(),
        detail: repoch_protocol::types::clip(&text, 4 * repoch_protocol::limits::TEXT_BYTES_MAX),
        grant,
    }
}

pub(crate) fn log_event(e: &AdminEvent) {
    match e {
        AdminEvent::Progress { step, detail } => tracing::info!(step, "{detail}"),
        AdminEvent::Fact(f) if f.holds() => {
            tracing::debug!(kind = %f.kind, subject = %f.subject, "fact holds")
        }
        AdminEvent::Fact(f) => {
            tracing::warn!(kind = %f.kind, subject = %f.subject, reason = ?f.reason, expected = %f.expected, observed = %f.observed, "fact fails")
        }
        AdminEvent::Record { kind, seq, hash } => {
            tracing::info!(kind, seq, %hash, "record appended and fsynced")
        }
        AdminEvent::Outcome {
            outcome, reasons, ..
        } => tracing::info!(outcome = outcome.as_str(), ?reasons, "issuance ended"),
    }
}

//! The admin and grant messages' text and list bounds, and the outcomes with their exit
//! codes (docs/EXIT-CODES.md).

use repoch_protocol::cbor::{Canonical, DecodeError};
use repoch_protocol::limits::{FACTS_MAX, TEXT_BYTES_MAX};
use repoch_protocol::wire::{AdminEvent, GrantMsg, Verdict, STEP_BYTES_MAX, WIRE_TEXT_BYTES_MAX};
use repoch_protocol::Reason;

#[test]
fn every_outcome_reads_back_as_itself_with_its_exit_code() {
    let all = [
        (Verdict::Granted, 0),
        (Verdict::Refused, 2),
        (Verdict::Uncertain, 3),
        (Verdict::Busy, 4),
        (Verdict::Internal, 70),
    ];
    for (o, code) in all {
        assert_eq!(Verdict::parse(o.as_str()), Some(o));
        assert_eq!(o.outcome().code(), code, "{o:?}");
        if o != Verdict::Granted {
            assert_eq!(o.outcome().name(), o.as_str(), "{o:?}");
        }
        let e = AdminEvent::Outcome {
            outcome: o,
            reasons: vec![],
            detail: String::new(),
            grant: None,
        };
        assert_eq!(AdminEvent::from_bytes(&e.to_bytes()).unwrap(), e);
    }
    assert_eq!(Verdict::parse("granted "), None);
}

#[test]
fn a_wire_text_of_four_times_the_text_bound_is_accepted_and_no_more() {
    // Every receiver accepts what every sender clips to: 4 × TEXT_BYTES_MAX bytes.
    assert_eq!(WIRE_TEXT_BYTES_MAX, 4 * TEXT_BYTES_MAX);
    let refusal = |n: usize| GrantMsg::Refused {
        reason: Reason::ConsumerRejected,
        detail: "x".repeat(n),
    };
    let m = refusal(4 * TEXT_BYTES_MAX);
    assert_eq!(GrantMsg::from_bytes(&m.to_bytes()).unwrap(), m);
    assert_eq!(
        GrantMsg::from_bytes(&refusal(4 * TEXT_BYTES_MAX + 1).to_bytes()).unwrap_err(),
        DecodeError::schema(
            "refused",
            format!("text of 1025 bytes > {}", 4 * TEXT_BYTES_MAX)
        )
    );
    let progress = |step: usize, detail: usize| AdminEvent::Progress {
        step: "s".repeat(step),
        detail: "d".repeat(detail),
    };
    let e = progress(STEP_BYTES_MAX, 4 * TEXT_BYTES_MAX);
    assert_eq!(AdminEvent::from_bytes(&e.to_bytes()).unwrap(), e);
    assert!(AdminEvent::from_bytes(&progress(STEP_BYTES_MAX + 1, 1).to_bytes()).is_err());
    assert!(AdminEvent::from_bytes(&progress(1, 4 * TEXT_BYTES_MAX + 1).to_bytes()).is_err());
}

#[test]
fn an_outcome_carries_a_reason_per_fact_and_four_more_at_most() {
    let outcome = |n: usize| AdminEvent::Outcome {
        outcome: Verdict::Refused,
        reasons: vec![Reason::FenceBusy; n],
        detail: "refused".into(),
        grant: None,
    };
    let e = outcome(FACTS_MAX + 4);
    assert_eq!(AdminEvent::from_bytes(&e.to_bytes()).unwrap(), e);
    assert_eq!(
        AdminEvent::from_bytes(&outcome(FACTS_MAX + 5).to_bytes()).unwrap_err(),
        DecodeError::schema(
            "outcome",
            format!("{} items > {}", FACTS_MAX + 5, FACTS_MAX + 4)
        )
    );
}

#[test]
fn an_outcome_carries_a_grant_of_at_most_a_record() {
    use repoch_protocol::limits::RECORD_BYTES_MAX;
    let outcome = |n: usize| AdminEvent::Outcome {
        outcome: Verdict::Granted,
        reasons: vec![],
        detail: String::new(),
        grant: Some(vec![7; n]),
    };
    let e = outcome(RECORD_BYTES_MAX);
    assert_eq!(AdminEvent::from_bytes(&e.to_bytes()).unwrap(), e);
    assert_eq!(
        AdminEvent::from_bytes(&outcome(RECORD_BYTES_MAX + 1).to_bytes()).unwrap_err(),
        DecodeError::schema("outcome", "grant must be bytes within bounds")
    );
}

#[test]
fn a_hello_names_one_to_32_lowercase_hex_digits() {
    use repoch_protocol::PublicKey;
    let hello = |d: &str| GrantMsg::Hello {
        deployment: d.into(),
        key: PublicKey([3; 32]),
    };
    for ok in ["0", "3f", &"ab".repeat(16)] {
        let m = hello(ok);
        assert_eq!(GrantMsg::from_bytes(&m.to_bytes()).unwrap(), m, "{ok}");
    }
    let digits = DecodeError::schema("hello", "deployment must be 1 to 32 lowercase hex digits");
    for bad in ["", "3F", "3g", "-1"] {
        assert_eq!(
            GrantMsg::from_bytes(&hello(bad).to_bytes()).unwrap_err(),
            digits,
            "{bad:?}"
        );
    }
    assert_eq!(
        GrantMsg::from_bytes(&hello(&"a".repeat(33)).to_bytes()).unwrap_err(),
        DecodeError::schema("hello", "text of 33 bytes > 32")
    );
}

//! The strict decoder refuses every non-canonical or non-repoch form (docs/PROTOCOL.md, "Encoding rules").

use repoch_protocol::cbor::{decode_strict, Canonical, DecodeError};
use repoch_protocol::grant::Challenge;
use repoch_protocol::limits::FRAME_BYTES_MAX;
use repoch_protocol::wire::{frame_len, GrantMsg};

use crate::common::*;

fn refused(bytes: &[u8]) -> DecodeError {
    Challenge::from_bytes(bytes).expect_err("must be refused")
}

#[test]
fn canonical_challenge_is_accepted() {
    let b = challenge().to_bytes();
    assert_eq!(Challenge::from_bytes(&b).unwrap(), challenge());
}

#[test]
fn trailing_bytes_are_refused() {
    let mut b = challenge().to_bytes();
    b.push(0);
    assert_eq!(refused(&b), DecodeError::Trailing(1));
}

#[test]
fn non_minimal_integer_is_refused() {
    // [1] encoded canonically is 81 01; 81 18 01 is the same value with a 1-byte argument.
    assert!(decode_strict(&[0x81, 0x01], 16).is_ok());
    assert_eq!(
        decode_strict(&[0x81, 0x18, 0x01], 16).unwrap_err(),
        DecodeError::NonCanonical
    );
    assert_eq!(
        decode_strict(&[0x81, 0x19, 0x00, 0x01], 16).unwrap_err(),
        DecodeError::NonCanonical
    );
}

#[test]
fn non_minimal_length_is_refused() {
    // a 1-byte byte string with its length in a 1-byte argument
    assert_eq!(
        decode_strict(&[0x58, 0x01, 0xaa], 16).unwrap_err(),
        DecodeError::NonCanonical
    );
    // an array of length 1 with a 1-byte length argument
    assert_eq!(
        decode_strict(&[0x98, 0x01, 0x01], 16).unwrap_err(),
        DecodeError::NonCanonical
    );
}

#[test]
fn indefinite_lengths_are_refused() {
    assert_eq!(
        decode_strict(&[0x9f, 0x01, 0xff], 16).unwrap_err(),
        DecodeError::NonCanonical
    );
    assert_eq!(
        decode_strict(&[0x5f, 0x41, 0xaa, 0xff], 16).unwrap_err(),
        DecodeError::NonCanonical
    );
    assert_eq!(
        decode_strict(&[0x7f, 0x61, 0x61, 0xff], 16).unwrap_err(),
        DecodeError::NonCanonical
    );
}

#[test]
fn maps_and_duplicate_keys_are_refused() {
    // {1: 2} and {1: 2, 1: 3}: repoch has no maps, so neither order nor duplicates can sneak in.
    assert_eq!(
        decode_strict(&[0xa1, 0x01, 0x02], 16).unwrap_err(),
        DecodeError::Forbidden("map")
    );
    assert_eq!(
        decode_strict(&[0xa2, 0x01, 0x02, 0x01, 0x03], 16).unwrap_err(),
        DecodeError::Forbidden("map")
    );
}

#[test]
fn tags_floats_and_negative_integers_are_refused() {
    // tag 24 around a byte string
    assert!(decode_strict(&[0xd8, 0x18, 0x41, 0x00], 16).is_err());
    // a bignum tag that ciborium would otherwise turn into an integer
    assert!(decode_strict(&[0xc2, 0x41, 0x01], 16).is_err());
    assert_eq!(
        decode_strict(&[0xf9, 0x3c, 0x00], 16).unwrap_err(),
        DecodeError::Forbidden("float")
    );
    // -1 does not decode: encoding rule 3 allows unsigned integers only
    assert_eq!(
        decode_strict(&[0x20], 16).unwrap_err(),
        DecodeError::Forbidden("negative integer")
    );
    // undefined (0xf7) is not null (0xf6)
    assert!(decode_strict(&[0xf7], 16).is_err());
}

#[test]
fn unknown_fields_and_wrong_arity_are_refused() {
    let mut v = challenge().to_value();
    if let ciborium::value::Value::Array(items) = &mut v {
        items.push(repoch_protocol::cbor::uint(0));
    }
    let b = repoch_protocol::cbor::encode(&v);
    assert!(matches!(refused(&b), DecodeError::Schema { .. }));
}

#[test]
fn unknown_discriminant_is_refused() {
    let b = repoch_protocol::cbor::encode(&repoch_protocol::cbor::array(vec![
        repoch_protocol::cbor::text("grants"),
    ]));
    assert!(matches!(
        GrantMsg::from_bytes(&b).unwrap_err(),
        DecodeError::Schema { .. }
    ));
}

#[test]
fn oversized_input_is_refused_before_decoding() {
    let b = vec![0u8; FRAME_BYTES_MAX + 1];
    assert!(matches!(refused(&b), DecodeError::TooLarge { .. }));
}

#[test]
fn frame_length_is_checked_before_allocation() {
    assert_eq!(frame_len(1u32.to_be_bytes()).unwrap(), 1);
    assert_eq!(
        frame_len((FRAME_BYTES_MAX as u32).to_be_bytes()).unwrap(),
        FRAME_BYTES_MAX
    );
    assert_eq!(
        frame_len((FRAME_BYTES_MAX as u32 + 1).to_be_bytes()),
        Err(DecodeError::TooLarge {
            len: FRAME_BYTES_MAX + 1,
            max: FRAME_BYTES_MAX
        })
    );
    assert!(frame_len(u32::MAX.to_be_bytes()).is_err());
    // An empty frame is refused as what it is, not as one over the bound.
    let empty = frame_len(0u32.to_be_bytes()).unwrap_err();
    assert_eq!(empty, DecodeError::EmptyFrame);
    assert_eq!(
        empty.to_string(),
        "a frame of 0 bytes (every frame holds one value)"
    );
}

#[test]
fn truncated_input_is_refused() {
    let b = challenge().to_bytes();
    for n in 0..b.len() {
        assert!(
            Challenge::from_bytes(&b[..n]).is_err(),
            "prefix of {n} bytes accepted"
        );
    }
}

#[test]
fn a_persisted_acknowledgement_is_decoded_strictly() {
    use repoch_protocol::cbor::{array, bytes, encode, text, uint};
    let ok = GrantMsg::Persisted {
        grant_sha256: repoch_protocol::Hash([7; 32]),
    };
    assert_eq!(GrantMsg::from_bytes(&ok.to_bytes()).unwrap(), ok);
    // A short hash, a missing hash, an extra field: each refused.
    for bad in [
        array(vec![text("persisted"), bytes(&[7; 31])]),
        array(vec![text("persisted")]),
        array(vec![text("persisted"), bytes(&[7; 32]), uint(0)]),
        array(vec![text("persisted"), text("00")]),
    ] {
        assert!(
            matches!(
                GrantMsg::from_bytes(&encode(&bad)).unwrap_err(),
                DecodeError::Schema { .. }
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn the_last_word_granted_is_decoded_strictly() {
    use repoch_protocol::cbor::{array, bytes, encode, text, uint};
    let ok = GrantMsg::Granted {
        grant_sha256: repoch_protocol::Hash([7; 32]),
    };
    assert_eq!(GrantMsg::from_bytes(&ok.to_bytes()).unwrap(), ok);
    // A short hash, a missing hash, an extra field: each refused.
    for bad in [
        array(vec![text("granted"), bytes(&[7; 31])]),
        array(vec![text("granted")]),
        array(vec![text("granted"), bytes(&[7; 32]), uint(0)]),
        array(vec![text("granted"), text("00")]),
    ] {
        assert!(
            matches!(
                GrantMsg::from_bytes(&encode(&bad)).unwrap_err(),
                DecodeError::Schema { .. }
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn a_path_field_that_is_not_absolute_and_canonical_does_not_decode() {
    // Proves: every `path` of the schema (docs/PROTOCOL.md: "absolute, canonical, at most
    // 256 bytes") is checked as such by the decoder, not its length alone: a grant whose
    // ready path or fence path is relative, holds an empty, "." or ".." component, or ends
    // in "/" does not decode; a manifest whose inventory path does neither. Found by an
    // outsider implementing the auditor from docs/ alone: only the length was checked.
    use repoch_protocol::grant::{Grant, GrantFence, SignedGrant};
    for bad in [
        "srv/READY",
        "/srv//READY",
        "/srv/./READY",
        "/srv/../READY",
        "/srv/",
    ] {
        let g = Grant {
            ready_path: bad.into(),
            ..grant()
        };
        let b = SignedGrant::sign(g, &issuer()).to_bytes();
        assert!(
            matches!(SignedGrant::from_bytes(&b), Err(DecodeError::Schema { .. })),
            "ready path {bad:?} decoded"
        );
        let mut g = grant();
        g.fences = vec![GrantFence {
            path: bad.into(),
            ..grant().fences[0].clone()
        }];
        let b = SignedGrant::sign(g, &issuer()).to_bytes();
        assert!(
            SignedGrant::from_bytes(&b).is_err(),
            "fence path {bad:?} decoded"
        );
        let mut m = manifest();
        m.inventory[0].path = bad.into();
        let b = repoch_protocol::manifest::SignedManifest::sign(m, &issuer()).to_bytes();
        assert!(
            repoch_protocol::manifest::SignedManifest::from_bytes(&b).is_err(),
            "inventory path {bad:?} decoded"
        );
    }
    // The root itself is canonical.
    let g = Grant {
        ready_path: "/".into(),
        ..grant()
    };
    let b = SignedGrant::sign(g, &issuer()).to_bytes();
    assert!(SignedGrant::from_bytes(&b).is_ok());
}

#[test]
fn a_hello_names_a_deployment_by_1_to_32_lowercase_hex_digits() {
    // Proves: the one check of a hello's deployment (and of the consumer's --deployment):
    // an id of 32 digits or a prefix of 1 is taken; nothing, 33 digits, an uppercase or a
    // non-hex digit is not.
    use repoch_protocol::wire::check_deployment_prefix;
    for ok in ["0", "d5", &"f".repeat(32)] {
        assert_eq!(check_deployment_prefix(ok), Ok(()), "{ok}");
    }
    for bad in ["", &"a".repeat(33), "D5", "d5g", "d5 "] {
        assert!(check_deployment_prefix(bad).is_err(), "{bad:?}");
    }
}

//! The strict decoder's building blocks, each bound at its edge (the bound accepted, one
//! over refused) and each refusal with its own message: a refusal that only reads as some
//! other refusal hides which check ran.

use ciborium::value::Value;
use repoch_protocol::cbor::{self, decode_strict, Canonical, DecodeError, Fields};

use crate::common::*;

fn schema(what: &'static str, why: &str) -> DecodeError {
    DecodeError::schema(what, why)
}

fn one(v: Value) -> Fields {
    Fields::open(cbor::array(vec![v]), "t", 1).unwrap()
}

#[test]
fn input_of_exactly_the_bound_is_decoded_and_one_byte_more_is_not() {
    let b = challenge().to_bytes();
    assert!(decode_strict(&b, b.len()).is_ok());
    assert_eq!(
        decode_strict(&b, b.len() - 1).unwrap_err(),
        DecodeError::TooLarge {
            len: b.len(),
            max: b.len() - 1
        }
    );
}

#[test]
fn a_tag_is_refused_as_a_tag() {
    // tag 24 (embedded CBOR) around a byte string, inside an array too
    assert_eq!(
        decode_strict(&[0xd8, 0x18, 0x41, 0x00], 16).unwrap_err(),
        DecodeError::Forbidden("tag")
    );
    assert_eq!(
        decode_strict(&[0x81, 0xd8, 0x18, 0x41, 0x00], 16).unwrap_err(),
        DecodeError::Forbidden("tag")
    );
}

#[test]
fn an_array_of_another_arity_is_refused_naming_both_counts() {
    let v = || cbor::array(vec![cbor::uint(1), cbor::uint(2)]);
    assert!(Fields::open(v(), "t", 2).is_ok());
    assert_eq!(
        Fields::open(v(), "t", 3).unwrap_err(),
        schema("t", "expected 3 fields, found 2")
    );
    assert_eq!(
        Fields::open(v(), "t", 1).unwrap_err(),
        schema("t", "expected 1 fields, found 2")
    );
    assert_eq!(
        Fields::open(cbor::uint(1), "t", 1).unwrap_err(),
        schema("t", "expected an array")
    );
}

/// A record whose last fields are optional: each length of the range opened, one under and
/// one over refused naming the range and the count (never "expected an array", which
/// would say that something other than an array came).
#[test]
fn an_array_outside_its_range_of_arities_is_refused_naming_the_range_and_the_count() {
    let v = |n: u64| cbor::array((0..n).map(cbor::uint).collect());
    for n in 2..=4 {
        let mut f = Fields::open_between(v(n), "t", 2, 4).unwrap();
        for i in 0..n {
            assert_eq!(f.uint().unwrap(), i);
        }
        assert!(!f.more());
    }
    assert_eq!(
        Fields::open_between(v(1), "t", 2, 4).unwrap_err(),
        schema("t", "expected 2 to 4 fields, found 1")
    );
    assert_eq!(
        Fields::open_between(v(5), "t", 2, 4).unwrap_err(),
        schema("t", "expected 2 to 4 fields, found 5")
    );
    assert_eq!(
        Fields::open_between(cbor::uint(1), "t", 2, 4).unwrap_err(),
        schema("t", "expected an array")
    );
}

#[test]
fn a_byte_string_field_is_bounded_at_its_maximum() {
    assert_eq!(one(cbor::bytes(&[7; 5])).bstr(5).unwrap(), vec![7; 5]);
    assert_eq!(
        one(cbor::bytes(&[7; 6])).bstr(5).unwrap_err(),
        schema("t", "6 bytes > 5")
    );
    assert_eq!(
        one(cbor::text("x")).bstr(5).unwrap_err(),
        schema("t", "expected a byte string")
    );
}

#[test]
fn a_text_field_is_bounded_at_its_maximum() {
    assert_eq!(one(cbor::text("abcde")).text(5).unwrap(), "abcde");
    assert_eq!(
        one(cbor::text("abcdef")).text(5).unwrap_err(),
        schema("t", "text of 6 bytes > 5")
    );
    assert_eq!(
        one(cbor::bytes(b"abc")).text(5).unwrap_err(),
        schema("t", "expected a text string")
    );
}

#[test]
fn a_list_field_is_bounded_at_its_maximum() {
    let items = |n| cbor::array((0..n).map(cbor::uint).collect());
    let read = |v: Value| cbor::as_uint(v, "item");
    assert_eq!(one(items(3)).list(3, read).unwrap(), vec![0, 1, 2]);
    assert_eq!(
        one(items(4)).list(3, read).unwrap_err(),
        schema("t", "4 items > 3")
    );
    assert_eq!(
        one(cbor::uint(1)).list(3, read).unwrap_err(),
        schema("t", "expected an array")
    );
    // each item goes through the item reader
    assert_eq!(
        one(cbor::array(vec![cbor::text("x")]))
            .list(3, read)
            .unwrap_err(),
        schema("item", "expected an unsigned integer")
    );
}

#[test]
fn fixed_size_byte_fields_take_exactly_their_size() {
    assert_eq!(one(cbor::bytes(&[1; 4])).bytes::<4>().unwrap(), [1; 4]);
    assert_eq!(
        one(cbor::bytes(&[1; 3])).bytes::<4>().unwrap_err(),
        schema("t", "expected 4 bytes, found 3")
    );
    assert_eq!(
        one(cbor::bytes(&[1; 5])).bytes::<4>().unwrap_err(),
        schema("t", "expected 4 bytes, found 5")
    );
    assert_eq!(
        one(cbor::uint(1)).bytes::<4>().unwrap_err(),
        schema("t", "expected a byte string")
    );
}

#[test]
fn unsigned_integers_only() {
    assert_eq!(one(cbor::uint(u64::MAX)).uint().unwrap(), u64::MAX);
    // A negative integer does not even decode (encoding rule 3); a field reader given one
    // all the same refuses it.
    assert_eq!(
        decode_strict(&[0x20], 16).unwrap_err(),
        repoch_protocol::cbor::DecodeError::Forbidden("negative integer")
    );
    let negative = Value::Integer((-1).into());
    assert_eq!(
        one(negative).uint().unwrap_err(),
        schema("t", "expected an unsigned integer")
    );
    assert_eq!(
        one(cbor::text("1")).uint().unwrap_err(),
        schema("t", "expected an unsigned integer")
    );
}

#[test]
fn optional_fields_and_missing_fields() {
    assert_eq!(
        one(Value::Null).opt(|v| cbor::as_uint(v, "t")).unwrap(),
        None
    );
    assert_eq!(
        one(cbor::uint(4)).opt(|v| cbor::as_uint(v, "t")).unwrap(),
        Some(4)
    );
    let mut f = one(cbor::uint(4));
    f.uint().unwrap();
    assert_eq!(f.uint().unwrap_err(), schema("t", "missing field"));
}

#[test]
fn a_discriminant_must_be_the_expected_text() {
    one(cbor::text("grant")).expect_text("grant").unwrap();
    assert_eq!(
        one(cbor::text("grants")).expect_text("grant").unwrap_err(),
        schema("t", "expected \"grant\", found \"grants\"")
    );
}

#[test]
fn old_root_uids_are_a_fifth_containment_field_only_when_present_and_canonical() {
    use repoch_protocol::manifest::Containment;
    let mut c = manifest().containment;
    assert!(c.old_root_uids.is_empty());
    let four = c.to_bytes();
    assert_eq!(Containment::from_bytes(&four).unwrap(), c);
    assert_eq!(c.principals(), [0]);
    c.old_root_uids = vec![7, 990];
    let five = c.to_bytes();
    assert_ne!(five, four);
    assert_eq!(Containment::from_bytes(&five).unwrap(), c);
    assert_eq!(c.principals(), [0, 7, 990]);
    let with = |uids: Vec<u64>| {
        let Value::Array(mut items) = manifest().containment.to_value() else {
            unreachable!()
        };
        items.push(cbor::array(uids.into_iter().map(cbor::uint).collect()));
        Containment::from_value(cbor::array(items))
    };
    let refused = schema(
        "containment",
        "old-root uids must be sorted, distinct, not 0, and present only when not empty",
    );
    for bad in [vec![], vec![990, 7], vec![7, 7], vec![0, 7]] {
        assert_eq!(with(bad.clone()).unwrap_err(), refused, "{bad:?}");
    }
    assert_eq!(
        with(vec![1 << 32]).unwrap_err(),
        schema("containment", "uid over 32 bits")
    );
    assert!(with((1..=8).collect()).is_ok());
    assert!(
        with((1..=9).collect()).is_err(),
        "more than OLD_ROOT_UIDS_MAX"
    );
}

#[test]
fn held_listeners_are_a_fourteenth_grant_field_only_when_present() {
    use repoch_protocol::grant::Grant;
    let mut g = grant();
    assert!(g.listeners.is_empty());
    let thirteen = g.to_bytes();
    assert_eq!(Grant::from_bytes(&thirteen).unwrap(), g);
    g.listeners = manifest().containment.listeners;
    let fourteen = g.to_bytes();
    assert_eq!(Grant::from_bytes(&fourteen).unwrap(), g);
    let Value::Array(mut items) = grant().to_value() else {
        unreachable!()
    };
    items.push(cbor::array(vec![]));
    assert_eq!(
        Grant::from_value(cbor::array(items)).unwrap_err(),
        schema(
            "grant",
            "a listener list is present only when not empty or followed by a fencing token"
        )
    );
}

#[test]
fn a_fencing_token_is_a_fifteenth_grant_field_after_a_listener_list_that_may_be_empty() {
    use repoch_protocol::fleet::FencingToken;
    use repoch_protocol::grant::Grant;
    let token = FencingToken {
        cluster: 7,
        revision: 42,
    };
    for listeners in [vec![], manifest().containment.listeners] {
        let g = Grant {
            listeners,
            fencing: Some(token),
            ..grant()
        };
        let Value::Array(items) = g.to_value() else {
            unreachable!()
        };
        assert_eq!(items.len(), 15);
        assert_eq!(Grant::from_bytes(&g.to_bytes()).unwrap(), g);
    }
    // A token of revision 0 is no token.
    let Value::Array(mut items) = grant().to_value() else {
        unreachable!()
    };
    items.push(cbor::array(vec![]));
    items.push(cbor::array(vec![cbor::uint(7), cbor::uint(0)]));
    assert!(Grant::from_value(cbor::array(items)).is_err());
}

#[test]
fn a_registry_is_an_eleventh_manifest_field_and_a_token_a_fifth_consume_field() {
    use repoch_protocol::manifest::Manifest;
    let m = Manifest {
        registry: Some(crate::common::registry()),
        ..manifest()
    };
    let Value::Array(items) = m.to_value() else {
        unreachable!()
    };
    assert_eq!(items.len(), 11);
    assert_eq!(Manifest::from_bytes(&m.to_bytes()).unwrap(), m);
    let Value::Array(items) = manifest().to_value() else {
        unreachable!()
    };
    assert_eq!(
        items.len(),
        10,
        "no registry: the ten-field form, as before"
    );
}

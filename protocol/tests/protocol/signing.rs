//! Signing keys from their on-disk form and domain separation.

use repoch_protocol::sign::{self, signing_key_from_hex, Context};

use crate::common::*;

/// RFC 8032 §7.1 test 1: the secret key and its public key.
const RFC8032_SECRET: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
const RFC8032_PUBLIC: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";

#[test]
fn a_signing_key_is_read_from_64_hex_digits_with_surrounding_whitespace() {
    let key = signing_key_from_hex(&format!(" {RFC8032_SECRET}\n")).expect("a valid key file");
    assert_eq!(hex::encode(key.verifying_key().to_bytes()), RFC8032_PUBLIC);
}

#[test]
fn a_signing_key_of_the_wrong_length_or_not_hex_is_refused() {
    assert!(signing_key_from_hex(&RFC8032_SECRET[..62]).is_none());
    assert!(signing_key_from_hex(&format!("{RFC8032_SECRET}00")).is_none());
    assert!(signing_key_from_hex(&RFC8032_SECRET.replace('9', "g")).is_none());
    assert!(signing_key_from_hex("").is_none());
}

#[test]
fn a_signature_verifies_only_under_its_own_context() {
    let key = issuer();
    let sig = sign::sign(&key, Context::Grant, b"bytes");
    assert!(sign::verify(&pk(&key), Context::Grant, b"bytes", &sig));
    assert!(!sign::verify(&pk(&key), Context::Custody, b"bytes", &sig));
    assert!(!sign::verify(&pk(&key), Context::Grant, b"bytez", &sig));
    assert!(!sign::verify(
        &pk(&consumer()),
        Context::Grant,
        b"bytes",
        &sig
    ));
}

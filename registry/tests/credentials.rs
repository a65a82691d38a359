//! The credential check names the file that is unusable, and why, before any connection.

use repoch_registry::{check_credentials, Credential};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

#[test]
fn a_ca_a_certificate_and_its_key_are_usable() {
    let (ca, cert, key) = (
        fixture("ca.pem"),
        fixture("client.pem"),
        fixture("client.key"),
    );
    assert_eq!(check_credentials(&ca, &cert, &key), Ok(()));
}

#[test]
fn each_unusable_credential_is_named_with_why() {
    let (ca, cert, key) = (
        fixture("ca.pem"),
        fixture("client.pem"),
        fixture("client.key"),
    );
    let not_der = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_vec();
    type Case<'a> = (&'a [u8], &'a [u8], &'a [u8], Credential, &'a str);
    let cases: [Case<'_>; 6] = [
        (
            b"garbage",
            &cert,
            &key,
            Credential::Ca,
            "no PEM certificate in it",
        ),
        (&not_der, &cert, &key, Credential::Ca, "no trust anchor"),
        (
            &key,
            &cert,
            &key,
            Credential::Ca,
            "no PEM certificate in it",
        ),
        (&ca, b"", &key, Credential::Cert, "no PEM certificate in it"),
        (
            &ca,
            &cert,
            b"garbage",
            Credential::Key,
            "no PEM private key",
        ),
        (
            &ca,
            &cert,
            &fixture("other.key"),
            Credential::Key,
            "not the key of the certificate",
        ),
    ];
    for (ca, cert, key, which, why) in cases {
        let (got, said) = check_credentials(ca, cert, key).unwrap_err();
        assert_eq!(got, which, "{why}");
        assert!(said.contains(why), "{why}: {said}");
    }
}

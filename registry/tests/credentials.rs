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

/// An endpoint whose HOST no certificate can name (`127.1`: neither a DNS name nor an IP
/// address as TLS spells them) is refused naming the endpoint and its host, as the
/// operator's spelling to fix, never as a TLS transport error of the credentials.
#[test]
fn an_endpoint_whose_host_no_certificate_can_name_is_named() {
    let spec = repoch_registry::Spec {
        endpoints: vec!["https://127.1:2379".into()],
        ca: fixture("ca.pem"),
        cert: fixture("client.pem"),
        key: fixture("client.key"),
    };
    let e = repoch_registry::Client::connect(&spec, std::time::Duration::from_secs(1))
        .expect_err("no name a certificate carries");
    let text = e.to_string();
    assert!(matches!(e, repoch_registry::Error::Config(_)), "{text}");
    assert!(
        text.contains("\"https://127.1:2379\"")
            && text.contains("127.1 is no DNS name or IP address"),
        "{text}"
    );
}

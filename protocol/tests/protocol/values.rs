//! The small value types and the manifest's helpers: their text forms (what refusals,
//! facts and `repoch` print), file identity, facts, and the inventory's bound.

use repoch_protocol::cbor::{Canonical, DecodeError};
use repoch_protocol::limits::{FENCES_MAX, STORES_MAX};
use repoch_protocol::manifest::{InventoryEntry, Listener, Role, SignedManifest, INVENTORY_MAX};
use repoch_protocol::types::evidence_digest;
use repoch_protocol::{Birth, DeploymentId, Fact, Hash, Identity, PublicKey, Reason};

use crate::common::*;

#[test]
fn ids_digests_and_keys_print_and_parse_as_lowercase_hex() {
    let d = DeploymentId([0xab; 16]);
    let hex_d = "ab".repeat(16);
    assert_eq!(d.to_string(), hex_d);
    assert_eq!(format!("{d:?}"), format!("DeploymentId({hex_d})"));
    assert_eq!(DeploymentId::from_hex(&hex_d), Some(d));
    assert_eq!(DeploymentId::from_hex(&hex_d[..30]), None);

    let h = Hash([0x0f; 32]);
    let hex_h = "0f".repeat(32);
    assert_eq!((h.to_string(), h.to_hex()), (hex_h.clone(), hex_h.clone()));
    assert_eq!(format!("{h:?}"), format!("Hash({hex_h})"));
    assert_eq!(Hash::from_hex(&hex_h), Some(h));
    assert_eq!(Hash::from_hex(&hex_h.replace('f', "g")), None);

    let k = pk(&issuer());
    let hex_k = hex::encode(k.0);
    assert_eq!((k.to_string(), k.to_hex()), (hex_k.clone(), hex_k.clone()));
    assert_eq!(format!("{k:?}"), format!("PublicKey({hex_k})"));
    // A key file's line: surrounding whitespace is not part of the key.
    assert_eq!(PublicKey::from_hex(&format!(" {hex_k}\n")), Some(k));
    assert_eq!(PublicKey::from_hex(&hex_k[..62]), None);
}

#[test]
fn the_same_object_is_the_same_device_inode_and_birth() {
    let a = identity(10);
    assert!(a.same_object(&a));
    // Owner and mode are not the object: a chmod keeps it the same object.
    let chmod = Identity {
        mode: 0o100644,
        uid: 5,
        gid: 6,
        ..a
    };
    assert!(a.same_object(&chmod));
    let others = [
        Identity {
            dev: a.dev + 1,
            ..a
        },
        Identity {
            ino: a.ino + 1,
            ..a
        },
        Identity {
            birth: Some(Birth { sec: 1, nsec: 0 }),
            ..a
        },
        Identity { birth: None, ..a },
    ];
    for o in others {
        assert!(!a.same_object(&o), "{o}");
        assert!(!o.same_object(&a), "{o}");
    }
    let unknown = Identity { birth: None, ..a };
    assert!(unknown.same_object(&unknown));
}

#[test]
fn an_identity_prints_what_it_compares() {
    let a = identity(10);
    assert_eq!(a.object(), "ino 10 born 1700000010.123456789");
    assert_eq!(
        a.to_string(),
        "dev=2049 ino=10 uid=0 gid=0 mode=100600 born=1700000010.123456789"
    );
    let b = Identity {
        birth: Some(Birth { sec: 3, nsec: 5 }),
        ..a
    };
    assert_eq!(b.object(), "ino 10 born 3.000000005");
    let none = Identity { birth: None, ..a };
    assert_eq!(none.object(), "ino 10 born unknown");
    assert!(none.to_string().ends_with("born=unknown"));
}

#[test]
fn a_fact_holds_only_without_a_reason() {
    assert!(Fact::ok("fence", "/l", "held", "held").holds());
    assert!(!Fact::failed("fence", "/l", "held", "busy", Reason::FenceBusy).holds());
}

#[test]
fn the_evidence_digest_is_the_hash_of_the_facts_in_order() {
    let f = facts();
    let d = evidence_digest(&f);
    assert_eq!(
        d,
        Hash::of(&repoch_protocol::cbor::encode(
            &repoch_protocol::cbor::list(&f)
        ))
    );
    let reversed: Vec<Fact> = f.iter().rev().cloned().collect();
    assert_ne!(evidence_digest(&reversed), d);
}

#[test]
fn listeners_print_as_kind_and_address() {
    assert_eq!(
        Listener::Unix("/run/x.sock".into()).to_string(),
        "unix:/run/x.sock"
    );
    use repoch_protocol::manifest::Inet;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    assert_eq!(Listener::Tcp(Inet::any(7070)).to_string(), "tcp:*:7070");
    let lo4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let lo6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    assert_eq!(
        Listener::Udp(Inet::at(lo4, 53)).to_string(),
        "udp:127.0.0.1:53"
    );
    assert_eq!(Listener::Tcp(Inet::at(lo6, 80)).to_string(), "tcp:[::1]:80");
}

#[test]
fn a_listeners_address_has_one_encoding() {
    // `["tcp", port]` is every address (the form of a port enrolled alone); one address is
    // its 4 or 16 bytes after the port; an IPv4-mapped IPv6 address, another length, or
    // an address after a unix path does not decode.
    use ciborium::value::Value;
    use repoch_protocol::cbor::{encode, Canonical as _};
    use repoch_protocol::manifest::Inet;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let lo4 = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let lo6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
    for l in [
        Listener::Tcp(Inet::any(7070)),
        Listener::Udp(Inet::at(lo4, 53)),
        Listener::Tcp(Inet::at(lo6, 80)),
        Listener::Tcp(Inet::at(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 80)),
    ] {
        assert_eq!(Listener::from_bytes(&l.to_bytes()).unwrap(), l);
    }
    assert_eq!(
        Listener::Tcp(Inet::any(7070)).to_bytes(),
        encode(&Value::Array(vec![
            Value::Text("tcp".into()),
            Value::Integer(7070.into())
        ]))
    );
    let with = |kind: &str, last: Value| {
        encode(&Value::Array(vec![
            Value::Text(kind.into()),
            if kind == "unix" {
                Value::Text("/run/x".into())
            } else {
                Value::Integer(7070.into())
            },
            last,
        ]))
    };
    let mapped = Ipv4Addr::LOCALHOST.to_ipv6_mapped().octets().to_vec();
    for bad in [
        with("tcp", Value::Bytes(mapped)),
        with("udp", Value::Bytes(vec![127, 0, 0])),
        with("tcp", Value::Bytes(vec![0; 17])),
        with("tcp", Value::Text("127.0.0.1".into())),
        with("unix", Value::Bytes(vec![127, 0, 0, 1])),
    ] {
        assert!(Listener::from_bytes(&bad).is_err(), "{}", hex::encode(&bad));
    }
}

const ROLES: [Role; 6] = [
    Role::StateDir,
    Role::EpochLog,
    Role::IssuerLock,
    Role::Fence,
    Role::Store,
    Role::Journal,
];

#[test]
fn every_role_reads_back_as_itself() {
    for r in ROLES {
        assert_eq!(Role::parse(r.as_str()), Some(r));
    }
    assert_eq!(Role::parse("socket"), None);
}

#[test]
fn a_manifest_finds_its_entries_by_role() {
    let m = manifest();
    assert_eq!(m.entry(Role::Fence).unwrap().path, "/srv/billing/lock");
    assert_eq!(
        m.entry(Role::EpochLog).unwrap().path,
        "/var/lib/repoch/d/x/epoch.log"
    );
    assert!(m.entry(Role::Journal).is_none());
    let stores: Vec<&str> = m.entries(Role::Store).map(|e| e.path.as_str()).collect();
    assert_eq!(stores, ["/srv/billing/data"]);
}

#[test]
fn the_inventory_holds_the_four_fixed_objects_every_fence_and_every_store() {
    assert_eq!(INVENTORY_MAX, 4 + FENCES_MAX + STORES_MAX);
    let entry = |role: Role, n: usize| InventoryEntry {
        role,
        path: format!("/srv/{}/{n}", role.as_str()),
        identity: identity(n as u64),
    };
    let mut m = manifest();
    m.inventory = [
        Role::StateDir,
        Role::EpochLog,
        Role::IssuerLock,
        Role::Journal,
    ]
    .into_iter()
    .map(|r| entry(r, 0))
    .chain((0..FENCES_MAX).map(|n| entry(Role::Fence, n)))
    .chain((0..STORES_MAX).map(|n| entry(Role::Store, n)))
    .collect();
    let signed = SignedManifest::sign(m.clone(), &issuer());
    assert_eq!(
        SignedManifest::from_bytes(&signed.to_bytes()).unwrap(),
        signed
    );
    m.inventory.push(entry(Role::Store, STORES_MAX));
    let over = SignedManifest::sign(m, &issuer());
    assert_eq!(
        SignedManifest::from_bytes(&over.to_bytes()).unwrap_err(),
        DecodeError::schema(
            "manifest",
            format!("{} items > {INVENTORY_MAX}", INVENTORY_MAX + 1)
        )
    );
}

#[test]
fn a_manifest_verifies_only_under_the_issuer_key_and_unaltered() {
    let s = SignedManifest::sign(manifest(), &issuer());
    assert!(s.verify(&pk(&issuer())));
    assert!(!s.verify(&pk(&producer())));
    let mut altered = s.clone();
    altered.manifest.label.push('x');
    assert!(!altered.verify(&pk(&issuer())));
}

#[test]
fn an_absolute_path_is_canonical_text_within_its_bound() {
    use repoch_protocol::limits::PATH_BYTES_MAX;
    use repoch_protocol::types::check_abs_path;
    for ok in ["/", "/srv", "/srv/billing/lock", "/a.b/..c/.d"] {
        assert_eq!(check_abs_path(ok), Ok(()), "{ok}");
    }
    let longest = format!("/{}", "a".repeat(PATH_BYTES_MAX - 1));
    assert_eq!(check_abs_path(&longest), Ok(()));
    assert_eq!(
        check_abs_path(&format!("{longest}b")),
        Err(format!(
            "path is {} bytes, over the bound of {PATH_BYTES_MAX}",
            PATH_BYTES_MAX + 1
        )
        .into())
    );
    assert_eq!(check_abs_path("srv/x"), Err("path must be absolute".into()));
    assert_eq!(check_abs_path("/srv/\0"), Err("path contains NUL".into()));
    for bad in [
        "//srv", "/srv/", "/srv//x", "/srv/./x", "/srv/..", "/./srv", "/..",
    ] {
        let e = check_abs_path(bad).unwrap_err();
        assert!(e.starts_with("path must be canonical"), "{bad}: {e}");
    }
}

#[test]
fn a_text_is_within_its_bound_and_has_no_control_character() {
    use repoch_protocol::limits::TEXT_BYTES_MAX;
    use repoch_protocol::types::check_text;
    let longest = "é".repeat(TEXT_BYTES_MAX / 2);
    assert_eq!(check_text(&longest), Ok(()));
    assert_eq!(check_text(""), Ok(()));
    assert_eq!(
        check_text(&format!("{longest}x")),
        Err(format!(
            "text is {} bytes, over the bound of {TEXT_BYTES_MAX}",
            TEXT_BYTES_MAX + 1
        )
        .into())
    );
    for bad in ["a\nb", "\u{7f}", "tab\there"] {
        assert_eq!(
            check_text(bad),
            Err("text contains control characters".into())
        );
    }
}

/// The text rule's list (docs/PROTOCOL.md, "Text") is every control, format, line and
/// paragraph separator character of the Unicode tables, and nothing a person reads as a
/// letter, digit, mark or space.
#[test]
fn the_forging_characters_are_exactly_unicodes_controls_formats_and_separators() {
    use unicode_general_category::{get_general_category, GeneralCategory as G};
    for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
        let cat = get_general_category(c);
        let listed = matches!(
            cat,
            G::Control | G::Format | G::LineSeparator | G::ParagraphSeparator
        );
        let forges = repoch_protocol::text::forges(c);
        // U+2065 is unassigned inside the invisible operators' block; the rule keeps the
        // block whole.
        let unassigned_in_block = c == '\u{2065}' && cat == G::Unassigned;
        assert_eq!(
            forges,
            listed || unassigned_in_block,
            "U+{:04X} ({cat:?})",
            u32::from(c)
        );
    }
}

#[test]
fn socket_files_have_one_encoding_and_belong_to_a_unix_listener() {
    // A containment with socket files is six fields, the old-root uids before them (even
    // empty); they are sorted and distinct by path, each a unix listener's, a mode of
    // permission bits only. Anything else does not decode.
    use repoch_protocol::manifest::{Containment, SocketFile};
    let file = |path: &str, mode| SocketFile {
        path: path.into(),
        mode,
        uid: None,
        gid: Some(7),
    };
    let base = Containment {
        listeners: vec![
            Listener::Unix("/run/a.sock".into()),
            Listener::Unix("/run/b.sock".into()),
        ],
        ..Containment::default()
    };
    let good = Containment {
        socket_files: vec![file("/run/a.sock", 0o666), file("/run/b.sock", 0o600)],
        ..base.clone()
    };
    assert_eq!(Containment::from_bytes(&good.to_bytes()).unwrap(), good);
    let with_uids = Containment {
        old_root_uids: vec![5],
        ..good.clone()
    };
    assert_eq!(
        Containment::from_bytes(&with_uids.to_bytes()).unwrap(),
        with_uids
    );
    for bad in [
        vec![file("/run/b.sock", 0o600), file("/run/a.sock", 0o666)],
        vec![file("/run/a.sock", 0o666), file("/run/a.sock", 0o666)],
        vec![file("/run/c.sock", 0o666)],
        vec![file("/run/a.sock", 0o1777)],
    ] {
        let c = Containment {
            socket_files: bad.clone(),
            ..base.clone()
        };
        assert!(Containment::from_bytes(&c.to_bytes()).is_err(), "{bad:?}");
    }
    // The largest mode is 0o777; the file of a path is found by its path.
    let widest = Containment {
        socket_files: vec![file("/run/a.sock", 0o777)],
        ..base.clone()
    };
    assert_eq!(Containment::from_bytes(&widest.to_bytes()).unwrap(), widest);
    assert_eq!(good.socket_file("/run/b.sock").map(|f| f.mode), Some(0o600));
    assert_eq!(good.socket_file("/run/c.sock"), None);
    // Seven fields (one more after the socket files) is no containment.
    let mut v = with_uids.to_value();
    if let ciborium::value::Value::Array(items) = &mut v {
        items.push(ciborium::value::Value::Array(vec![]));
    }
    assert!(Containment::from_value(v).is_err());
    // Eight fields (two more after the socket files) is no containment either.
    let mut v = with_uids.to_value();
    if let ciborium::value::Value::Array(items) = &mut v {
        items.push(ciborium::value::Value::Array(vec![]));
        items.push(ciborium::value::Value::Array(vec![]));
    }
    assert!(Containment::from_value(v).is_err());
    // Six fields with no socket file is not the form of "none": that is four fields.
    let mut v = base.to_value();
    if let ciborium::value::Value::Array(items) = &mut v {
        items.push(ciborium::value::Value::Array(vec![]));
        items.push(ciborium::value::Value::Array(vec![]));
    }
    assert!(Containment::from_value(v).is_err());
}

#[test]
fn containers_have_one_encoding_and_name_a_known_engine() {
    // containerd's identifiers: runs of letters and digits joined by one separator, at most
    // 76 bytes; the longest is one.
    use repoch_protocol::manifest::{is_container_ref, is_containerd_identifier};
    assert!(
        is_containerd_identifier(&"a".repeat(76)) && !is_containerd_identifier(&"a".repeat(77))
    );
    assert!(is_containerd_identifier("a.b_c-d") && !is_containerd_identifier(""));
    assert!(is_container_ref("docker", "old-root") && !is_container_ref("docker", "ops/old-root"));
    assert!(
        is_container_ref("containerd", "ops/old-root")
            && !is_container_ref("containerd", "old-root")
    );
    // Two identifiers of 76 bytes each are 153 bytes: over a container name's 128.
    let (ns, id) = ("n".repeat(76), "i".repeat(76));
    assert!(!is_container_ref("containerd", &format!("{ns}/{id}")));
    assert!(is_container_ref(
        "containerd",
        &format!("{ns}/{}", "i".repeat(51))
    ));
    // A containment with containers is seven fields, the old-root uids and socket files
    // before them (even empty); they are sorted and distinct, each of docker or podman,
    // a container name (containerd's NAMESPACE/ID), an absolute socket path. Anything else
    // does not decode.
    use repoch_protocol::manifest::{ContainerRef, Containment};
    let c = |engine: &str, name: &str, socket: &str| ContainerRef {
        engine: engine.into(),
        name: name.into(),
        socket: socket.into(),
        pinned: None,
    };
    let pinned = |engine: &str, id: &str| ContainerRef {
        pinned: Some(id.into()),
        ..c(engine, "old-root", "/run/engine.sock")
    };
    let id = "0123456789abcdef".repeat(4);
    let good = Containment {
        containers: vec![
            c("containerd", "ops/old-root", "/run/containerd.sock"),
            c("docker", "old-root", "/run/docker.sock"),
            c("podman", "old-root", "/run/podman/podman.sock"),
        ],
        ..Containment::default()
    };
    assert_eq!(Containment::from_bytes(&good.to_bytes()).unwrap(), good);
    // Pinned to its full id at enrollment: a fourth field, kept.
    let with_pins = Containment {
        containers: vec![pinned("docker", &id), pinned("podman", &id)],
        ..Containment::default()
    };
    assert_eq!(
        Containment::from_bytes(&with_pins.to_bytes()).unwrap(),
        with_pins
    );
    assert_eq!(good.containers[2].spelled(), "podman:old-root");
    assert_eq!(good.containers[0].spelled(), "containerd:ops/old-root");
    for bad in [
        vec![good.containers[2].clone(), good.containers[1].clone()],
        vec![good.containers[1].clone(), good.containers[1].clone()],
        vec![c("containerd", "old-root", "/run/c.sock")],
        vec![c("containerd", "ops/", "/run/c.sock")],
        vec![c("containerd", "/old-root", "/run/c.sock")],
        vec![c("containerd", "ops/old/root", "/run/c.sock")],
        vec![c("containerd", "ops/old--root", "/run/c.sock")],
        vec![c("containerd", "ops/old-root-", "/run/c.sock")],
        vec![c(
            "containerd",
            &format!("ops/{}", "a".repeat(77)),
            "/run/c.sock",
        )],
        vec![c("crio", "old-root", "/run/c.sock")],
        vec![c("docker", "-old", "/run/docker.sock")],
        vec![c("docker", "a/b", "/run/docker.sock")],
        vec![c("docker", "old-root", "run/docker.sock")],
        // A pin is Docker's or podman's full id: 64 lowercase hex digits, never
        // containerd's (its id is its name).
        vec![pinned("docker", &id[..63])],
        vec![pinned("docker", &id.to_uppercase())],
        vec![pinned("podman", &format!("{}g", &id[..63]))],
        vec![pinned("containerd", &id)],
    ] {
        let v = Containment {
            containers: bad.clone(),
            ..Containment::default()
        };
        assert!(Containment::from_bytes(&v.to_bytes()).is_err(), "{bad:?}");
    }
    // Eight fields (one more after the containers) is no containment.
    let mut v = good.to_value();
    if let ciborium::value::Value::Array(items) = &mut v {
        items.push(ciborium::value::Value::Array(vec![]));
    }
    assert!(Containment::from_value(v).is_err());
    // Seven fields with no container is not the form of "none".
    let mut v = Containment::default().to_value();
    if let ciborium::value::Value::Array(items) = &mut v {
        items.extend((0..3).map(|_| ciborium::value::Value::Array(vec![])));
    }
    assert!(Containment::from_value(v).is_err());
}

#[test]
fn waivers_have_one_encoding_each_a_known_kind_with_a_reason() {
    // Waivers are the containment's eighth field, every field before them present (even
    // empty), sorted and distinct by what; each KIND:VALUE of a known kind with a reason,
    // plain text. Anything else does not decode.
    use repoch_protocol::manifest::{Containment, Waiver};
    let w = |what: &str, reason: &str| Waiver {
        what: what.into(),
        reason: reason.into(),
    };
    let good = Containment {
        waived: vec![
            w("lock:/srv/a/cache.lock", "a cache, not the exclusion"),
            w(
                "starter:4242 bash",
                "the operator's session, ended before recovering",
            ),
            w("unit:billing-root.timer", "masked with the service"),
        ],
        ..Containment::default()
    };
    let bytes = good.to_bytes();
    assert_eq!(Containment::from_bytes(&bytes).unwrap(), good);
    match good.to_value() {
        ciborium::value::Value::Array(items) => assert_eq!(items.len(), 8),
        v => panic!("{v:?}"),
    }
    for bad in [
        vec![good.waived[1].clone(), good.waived[0].clone()],
        vec![good.waived[0].clone(), good.waived[0].clone()],
        vec![w("port:80", "no such kind")],
        vec![w("unit:", "no value")],
        vec![w("unit:x.service", "")],
        vec![w("unit:x.service", "a reason \u{202e} reversed")],
        vec![w(&format!("unit:{}", "u".repeat(260)), "too long")],
    ] {
        let v = Containment {
            waived: bad.clone(),
            ..Containment::default()
        };
        assert!(Containment::from_bytes(&v.to_bytes()).is_err(), "{bad:?}");
    }
    // Nine fields is no containment.
    let mut v = good.to_value();
    if let ciborium::value::Value::Array(items) = &mut v {
        items.push(ciborium::value::Value::Array(vec![]));
    }
    assert!(Containment::from_value(v).is_err());
}

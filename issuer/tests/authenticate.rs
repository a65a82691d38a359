//! `Expected::authenticate` (docs/ARCHITECTURE.md, "Issuance", step 3): a peer that fails
//! exactly one check — uid, gid, executable identity, executable digest, cgroup, key — is
//! refused `consumer-rejected` naming that field, and only a peer passing every check is
//! accepted. Each case differs from the accepted peer in one field alone.

use repoch_issuer::issuance::Expected;
use repoch_protocol::grant::ConsumerPeer;
use repoch_protocol::{Birth, DeploymentId, Hash, Identity, PublicKey, Reason};

const KEY: PublicKey = PublicKey([3; 32]);

fn exe() -> Identity {
    Identity {
        dev: 2049,
        ino: 4242,
        uid: 0,
        gid: 0,
        mode: 0o100755,
        birth: Some(Birth {
            sec: 1_700_000_000,
            nsec: 5,
        }),
    }
}

fn expected() -> Expected {
    Expected {
        deployment: DeploymentId([0xd5; 16]),
        uid: 1000,
        gid: 1001,
        key: KEY,
        exe: Some((exe(), Hash([9; 32]))),
        cgroup: Some("/system.slice/billing-supervisor.service".into()),
    }
}

/// The peer `expected()` accepts.
fn peer() -> ConsumerPeer {
    ConsumerPeer {
        pid: 77,
        uid: 1000,
        gid: 1001,
        exe: exe(),
        exe_sha256: Hash([9; 32]),
        cgroup: "/system.slice/billing-supervisor.service".into(),
    }
}

/// Refused `consumer-rejected` about the peer, expected and observed naming `field`.
fn rejected(e: &Expected, p: &ConsumerPeer, key: &PublicKey, field: &str) -> (String, String) {
    let r = e
        .authenticate(p, key)
        .err()
        .unwrap_or_else(|| panic!("a peer failing {field} was accepted"));
    assert_eq!(r.reason, Reason::ConsumerRejected, "{r}");
    assert_eq!(r.subject, "grant socket peer pid 77", "{r}");
    assert!(r.expected.starts_with(field), "{field}: {r}");
    assert!(r.observed.starts_with(field), "{field}: {r}");
    (r.expected, r.observed)
}

#[test]
fn the_peer_passing_every_check_is_accepted() {
    expected().authenticate(&peer(), &KEY).unwrap();
    // A descendant of the enrolled cgroup is within it.
    let mut p = peer();
    p.cgroup = "/system.slice/billing-supervisor.service/worker".into();
    expected().authenticate(&p, &KEY).unwrap();
    // No cgroup enrolled: any cgroup.
    let mut e = expected();
    e.cgroup = None;
    p.cgroup = "/user.slice".into();
    e.authenticate(&p, &KEY).unwrap();
}

#[test]
fn another_uid_alone_is_refused() {
    let mut p = peer();
    p.uid = 1002;
    let (want, got) = rejected(&expected(), &p, &KEY, "uid/gid");
    assert_eq!(
        (want.as_str(), got.as_str()),
        ("uid/gid 1000/1001", "uid/gid 1002/1001")
    );
}

#[test]
fn another_gid_alone_is_refused() {
    let mut p = peer();
    p.gid = 0;
    let (want, got) = rejected(&expected(), &p, &KEY, "uid/gid");
    assert_eq!(
        (want.as_str(), got.as_str()),
        ("uid/gid 1000/1001", "uid/gid 1000/0")
    );
}

#[test]
fn another_executable_object_alone_is_refused() {
    // Same digest, another object: by inode, by device, and by birth (a reused inode).
    let changes: [fn(&mut Identity); 3] = [
        |i| i.ino += 1,
        |i| i.dev += 1,
        |i| {
            i.birth = Some(Birth {
                sec: 1_700_000_001,
                nsec: 5,
            })
        },
    ];
    for change in changes {
        let mut p = peer();
        change(&mut p.exe);
        rejected(&expected(), &p, &KEY, "executable");
    }
}

#[test]
fn another_executable_digest_alone_is_refused() {
    let mut p = peer();
    p.exe_sha256 = Hash([8; 32]);
    let (want, got) = rejected(&expected(), &p, &KEY, "executable");
    assert_eq!(
        want,
        format!("executable ino 4242 sha256 {}", Hash([9; 32]))
    );
    assert_eq!(got, format!("executable ino 4242 sha256 {}", Hash([8; 32])));
}

#[test]
fn no_executable_baseline_refuses_every_peer() {
    let mut e = expected();
    e.exe = None;
    let (want, got) = rejected(&e, &peer(), &KEY, "executable");
    assert_eq!(
        (want.as_str(), got.as_str()),
        ("executable observed", "executable no baseline")
    );
}

#[test]
fn a_cgroup_outside_the_enrolled_one_alone_is_refused() {
    // A sibling whose name extends the enrolled one's is outside it, as is its parent.
    for outside in [
        "/system.slice/billing-supervisor.service2",
        "/system.slice",
        "/user.slice/billing-supervisor.service",
    ] {
        let mut p = peer();
        p.cgroup = outside.into();
        let (want, got) = rejected(&expected(), &p, &KEY, "cgroup");
        assert_eq!(want, "cgroup /system.slice/billing-supervisor.service");
        assert_eq!(got, format!("cgroup {outside}"));
    }
}

#[test]
fn another_key_alone_is_refused() {
    let other = PublicKey([4; 32]);
    let (want, got) = rejected(&expected(), &peer(), &other, "key");
    assert_eq!(want, format!("key {}", KEY.to_hex()));
    assert_eq!(got, format!("key {}", other.to_hex()));
}

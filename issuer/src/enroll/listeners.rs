//! Listeners as the manifest spells them (`tcp:ADDRESS:PORT`, `udp:…`, `unix:PATH`): one
//! spelling each, no overlap, and the socket files systemd would create for them.

use super::*;
/// systemd's `SocketMode=` default: every user may connect.
pub const SOCKET_MODE_DEFAULT: u32 = 0o666;

/// How each unix listener's socket file is made: as `named` in the manifest; else with the
/// mode of the socket file at its path now (the old root's, which its clients reach), its
/// owner and group kept as repochd's; else systemd's default mode (0666). Every unix
/// listener gets one, sorted by path.
pub(super) fn socket_files(
    listeners: &[Listener],
    named: &std::collections::BTreeMap<String, SocketFileToml>,
) -> Result<Vec<SocketFile>, EnrollError> {
    let unix: Vec<&str> = listeners
        .iter()
        .filter_map(|l| match l {
            Listener::Unix(p) => Some(p.as_str()),
            _ => None,
        })
        .collect();
    for (path, f) in named {
        let name = format!("containment.socket_files.{path:?}");
        if !unix.contains(&path.as_str()) {
            return Err(field(
                name,
                "names no unix listener of containment.listeners",
            ));
        }
        // -1 is chown's "leave unchanged": an owner that would silently not be given.
        if f.uid == Some(u32::MAX) || f.gid == Some(u32::MAX) {
            return Err(field(
                name,
                "uid and gid 4294967295 (-1) name no user or group",
            ));
        }
        if f.mode > SOCKET_MODE_MAX {
            return Err(field(
                name,
                format!("mode 0o{:o}: permission bits only, at most 0o777", f.mode),
            ));
        }
    }
    let mut files: Vec<SocketFile> = unix
        .iter()
        .map(|p| match named.get(*p) {
            Some(f) => SocketFile {
                path: (*p).into(),
                mode: f.mode,
                uid: f.uid,
                gid: f.gid,
            },
            None => SocketFile {
                path: (*p).into(),
                mode: socket_mode_now(p).unwrap_or(SOCKET_MODE_DEFAULT),
                uid: None,
                gid: None,
            },
        })
        .collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files.dedup_by(|a, b| a.path == b.path);
    Ok(files)
}

/// The permission bits of the socket file at `path` now, if one is there (not followed
/// through a symlink).
pub(super) fn socket_mode_now(path: &str) -> Option<u32> {
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
    std::fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.file_type().is_socket())
        .map(|m| m.mode() & SOCKET_MODE_MAX)
}

/// Parses `unix:/PATH`, `tcp:ADDRESS:PORT`, `udp:ADDRESS:PORT` (ADDRESS: an IPv4 address,
/// an IPv6 address in brackets, or `*` for every address of both families).
pub fn parse_listener(s: &str) -> Result<Listener, Invalid> {
    const EXPECTED: &str = "expected unix:/PATH, tcp:ADDRESS:PORT or udp:ADDRESS:PORT";
    let (kind, rest) = s.split_once(':').ok_or(EXPECTED)?;
    match kind {
        "unix" => enrollable_path(rest).map(|_| Listener::Unix(rest.into())),
        "tcp" => parse_inet(kind, rest).map(Listener::Tcp),
        "udp" => parse_inet(kind, rest).map(Listener::Udp),
        _ => Err(format!("unknown listener kind {kind:?}; {EXPECTED}").into()),
    }
}

/// `ADDRESS:PORT` of a TCP or UDP listener: the address it is held on, never guessed (a
/// port alone would be held on every address, exposing a service its old root bound to
/// loopback only).
pub(super) fn parse_inet(kind: &str, rest: &str) -> Result<Inet, Invalid> {
    use std::net::{IpAddr, SocketAddr};
    // Port 0 names no port: a socket bound "to port 0" gets another, and asked about port
    // 0 the kernel lists every socket.
    let port = |p: &str| match p.parse::<u16>() {
        Ok(0) | Err(_) => Err(Invalid(format!("{p:?} is not a port (1..65535)"))),
        Ok(p) => Ok(p),
    };
    // One spelling: what is printed back is what was written (no leading zero or sign in
    // the port, no scope id, the IPv6 address in its canonical form).
    let canonical = |at: Inet| match at.to_string() == rest {
        true => Ok(at),
        false => Err(Invalid(format!("{rest:?} is written {at}: write it so"))),
    };
    if let Some(p) = rest.strip_prefix("*:") {
        return port(p).map(Inet::any).and_then(canonical);
    }
    if rest.parse::<u16>().is_ok() {
        return Err(format!(
            "{kind}:{rest} names no address: write {kind}:127.0.0.1:{rest} (or another address) to hold the port on that address only, or {kind}:*:{rest} to hold it on every address"
        ).into());
    }
    let (addr, p) = rest
        .rsplit_once(':')
        .ok_or_else(|| format!("{rest:?} is not ADDRESS:PORT"))?;
    let p = port(p)?;
    let a: SocketAddr = rest.parse().map_err(|_| {
        format!("{addr:?} is not an IPv4 address, an IPv6 address in brackets, or *")
    })?;
    let at = match a.ip() {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => {
            return Err(format!(
                "{addr} is an IPv4-mapped address: write the IPv4 address"
            ).into())
        }
        IpAddr::V6(v6) if v6.is_unicast_link_local() => {
            return Err(format!(
                "{addr} is link-local: it needs an interface, which a listener cannot name"
            ).into())
        }
        ip if ip.is_multicast() => {
            return Err(format!(
                "{addr} is a multicast address: a socket bound to it serves no one (hold the address the service answers on)"
            ).into())
        }
        IpAddr::V4(v4) if v4.is_broadcast() => {
            return Err(format!(
                "{addr} is the broadcast address: a socket bound to it serves no one (hold the address the service answers on)"
            ).into())
        }
        ip => Inet::at(ip, p),
    };
    canonical(at)
}

/// Two listeners of one kind on one port where one's address covers the other's (the same
/// address, or `*`), or one unix path twice: repochd could hold only the first, and every
/// recovery would find the second in use by repochd itself.
pub(super) fn overlapping(ls: &[Listener]) -> Option<(usize, usize)> {
    let covers = |a: &Inet, b: &Inet| {
        a.port == b.port && (a.addr.is_none() || b.addr.is_none() || a.addr == b.addr)
    };
    (0..ls.len()).find_map(|j| {
        (0..j)
            .find(|&i| match (&ls[i], &ls[j]) {
                (Listener::Tcp(a), Listener::Tcp(b)) | (Listener::Udp(a), Listener::Udp(b)) => {
                    covers(a, b)
                }
                (Listener::Unix(a), Listener::Unix(b)) => a == b,
                _ => false,
            })
            .map(|i| (i, j))
    })
}

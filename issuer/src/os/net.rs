//! Listeners: `/proc/net/unix`, `tcp`, `tcp6`, `udp`, `udp6` of the observer's network
//! namespace, and the process holding a socket inode.

use std::path::Path;

use super::procfs::{pids, read_small, PROC_FDS_MAX};

/// Bytes read from one `/proc/net` table.
pub const NET_TABLE_BYTES_MAX: u64 = 16 * 1024 * 1024;

/// A bound socket: its inode, and for unix sockets the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    pub inode: u64,
    pub what: String,
}

/// Unix sockets bound to `path`.
pub fn unix_bound(path: &str) -> Result<Vec<Bound>, String> {
    let s = read_small(Path::new("/proc/net/unix"), NET_TABLE_BYTES_MAX)
        .map_err(|e| format!("/proc/net/unix: {e}"))?;
    let mut lines = s.lines();
    let header = lines.next().unwrap_or_default();
    if !header.starts_with("Num") {
        return Err("/proc/net/unix: unknown format".into());
    }
    let mut out = Vec::new();
    for l in lines {
        // Num RefCount Protocol Flags Type St Inode Path
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 7 {
            continue;
        }
        if f.len() >= 8 && f[7] == path {
            let inode = f[6]
                .parse()
                .map_err(|_| format!("/proc/net/unix: bad inode {:?}", f[6]))?;
            out.push(Bound {
                inode,
                what: format!("unix:{path}"),
            });
        }
    }
    Ok(out)
}

/// TCP sockets listening on, or UDP sockets bound to, `port` (IPv4 and IPv6).
pub fn inet_bound(udp: bool, port: u16) -> Result<Vec<Bound>, String> {
    let mut out = Vec::new();
    let tables: [&str; 2] = if udp {
        ["/proc/net/udp", "/proc/net/udp6"]
    } else {
        ["/proc/net/tcp", "/proc/net/tcp6"]
    };
    for t in tables {
        let s = match read_small(Path::new(t), NET_TABLE_BYTES_MAX) {
            Ok(s) => s,
            // No IPv6 in this kernel: nothing can be bound there.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && t.ends_with('6') => continue,
            Err(e) => return Err(format!("{t}: {e}")),
        };
        let mut lines = s.lines();
        if !lines
            .next()
            .unwrap_or_default()
            .trim_start()
            .starts_with("sl")
        {
            return Err(format!("{t}: unknown format"));
        }
        for l in lines {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 10 {
                return Err(format!("{t}: short line"));
            }
            let lport = f[1]
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok())
                .ok_or_else(|| format!("{t}: bad address {:?}", f[1]))?;
            let state = u8::from_str_radix(f[3], 16).map_err(|_| format!("{t}: bad state"))?;
            // TCP: 0A is LISTEN. UDP: any socket with the local port is bound.
            if lport == port && (udp || state == 0x0a) {
                let inode = f[9].parse().map_err(|_| format!("{t}: bad inode"))?;
                out.push(Bound {
                    inode,
                    what: format!("{}:{port}", if udp { "udp" } else { "tcp" }),
                });
            }
        }
    }
    Ok(out)
}

/// Pids with an fd on `socket:[inode]`.
pub fn socket_holders(inode: u64) -> Vec<u32> {
    let want = format!("socket:[{inode}]");
    let mut out = Vec::new();
    for pid in pids().unwrap_or_default() {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        if fds
            .take(PROC_FDS_MAX)
            .flatten()
            .any(|e| std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == want.as_str()))
        {
            out.push(pid);
        }
    }
    out
}

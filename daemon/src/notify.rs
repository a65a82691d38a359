//! `sd_notify`: READY, STATUS and STOPPING datagrams to `$NOTIFY_SOCKET`, when set.

use std::os::unix::net::UnixDatagram;

/// Sends one notification; silently nothing when not run by systemd.
pub fn notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(sock) = UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    let r = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt as _;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|a| sock.send_to_addr(state.as_bytes(), &a))
    } else {
        sock.send_to(state.as_bytes(), &path)
    };
    if let Err(e) = r {
        tracing::warn!("sd_notify failed: {e}");
    }
}

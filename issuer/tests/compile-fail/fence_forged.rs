// (c) no HeldFence or Fences can be built from outside the issuer (privacy errors are
// reported in a pass of their own, after type checking: hence a file of their own).
use std::os::fd::OwnedFd;

use repoch_issuer::observe::{Fences, HeldFence};
use repoch_protocol::Identity;

fn forge_a_fence(fd: OwnedFd, id: Identity) -> HeldFence {
    HeldFence {
        path: "/srv/lock".into(),
        enrolled: id,
        identity: id,
        lock_dev: id.dev,
        fd,
    }
}

fn fill(fence: HeldFence) -> Fences {
    Fences {
        held: vec![fence],
        ..Fences::default()
    }
}

fn main() {}

// (c) the held fences are reachable only through Fences' methods: no field of Fences or
// HeldFence can be read from outside the issuer.
use std::os::fd::OwnedFd;

use repoch_issuer::observe::{Fences, HeldFence};

fn take(f: Fences) -> Vec<HeldFence> {
    f.held
}

fn peek(h: &HeldFence) -> &OwnedFd {
    &h.fd
}

fn main() {}

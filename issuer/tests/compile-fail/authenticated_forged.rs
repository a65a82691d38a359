// (b) an Authenticated is built only by Expected::authenticate, and an Expected only by
// connect (privacy errors are reported in a pass of their own, after type checking: hence
// a file of their own).
use repoch_issuer::issuance::{Authenticated, Expected};
use repoch_protocol::grant::ConsumerPeer;
use repoch_protocol::{DeploymentId, PublicKey};

fn forge_a_token<'id>(peer: ConsumerPeer) -> Authenticated<'id> {
    Authenticated {
        brand: std::marker::PhantomData,
        peer,
    }
}

fn forge_an_expectation<'id>(deployment: DeploymentId, key: PublicKey) -> Expected<'id> {
    Expected {
        brand: std::marker::PhantomData,
        deployment,
        uid: 0,
        gid: 0,
        key,
        exe: None,
        cgroup: None,
    }
}

fn main() {}

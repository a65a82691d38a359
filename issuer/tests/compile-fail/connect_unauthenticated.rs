// (b) connect takes only what Expected::authenticate returns, not a bare ConsumerPeer; and
// what an Expected requires cannot be read or loosened from outside.
use repoch_issuer::issuance::{ConsumerLink, Expected, Observed};
use repoch_protocol::grant::ConsumerPeer;

fn connect_a_bare_peer<C: ConsumerLink>(o: Observed, link: C, peer: ConsumerPeer) {
    let _ = o.connect(move |_, _| Ok((link, peer)));
}

fn loosen_the_expectation(e: &Expected) -> u32 {
    e.uid
}

fn main() {}

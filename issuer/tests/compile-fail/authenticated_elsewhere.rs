// (b) connect's closure gets an Expected branded for that call alone: a token made by any
// other Expected (another issuance's), or kept out of the call for later, does not
// type-check.
use repoch_issuer::issuance::{Authenticated, ConsumerLink, Observed};
use repoch_issuer::Refusal;
use repoch_protocol::grant::ConsumerPeer;
use repoch_protocol::{PublicKey, Reason};

fn serve_another_issuance<'other, C: ConsumerLink>(
    o: Observed,
    link: C,
    token: Authenticated<'other>,
) {
    let _ = o.connect(move |_, _| Ok((link, token)));
}

fn keep_a_token_for_later<C: ConsumerLink>(
    o: Observed,
    _link: C,
    peer: ConsumerPeer,
    key: PublicKey,
) {
    let mut kept = None;
    let _ = o.connect(|expected, _| {
        kept = Some(expected.authenticate(&peer, &key)?);
        let none: Result<(C, _), Refusal> =
            Err(Refusal::new(Reason::ConsumerAbsent, "", "", ""));
        none
    });
}

fn main() {}

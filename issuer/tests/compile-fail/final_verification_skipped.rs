// (a) consume needs the state that final verification #1 returns, dispatch the one that
// final verification #2 returns: neither exists on the state before, and verifying twice
// yields no proof to spend later (the old `(Self, FinalVerification)` trick).
use repoch_issuer::issuance::{ConsumerLink, Custodied, Ended, Receipted};

fn consume_unverified<C: ConsumerLink>(c: Custodied<C>) -> Result<(), Ended> {
    c.consume()?;
    Ok(())
}

fn dispatch_unverified<C: ConsumerLink>(r: Receipted<C>) -> Result<(), Ended> {
    r.dispatch()?;
    Ok(())
}

fn verify_again<C: ConsumerLink>(custodied: Custodied<C>) -> Result<(), Ended> {
    let once = custodied.verify()?;
    let _twice = once.verify()?;
    Ok(())
}

fn verify_twice<C: ConsumerLink>(custodied: Custodied<C>) -> Result<(), Ended> {
    let (c, p1) = custodied.verify()?;
    let (c, p2) = c.verify()?;
    c.consume(p1)?.receipt()?.dispatch(p2)?;
    Ok(())
}

fn main() {}

mod common;
fn main() {}

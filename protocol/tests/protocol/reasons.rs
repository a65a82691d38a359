//! Reason codes are stable kebab-case identifiers, each documented in docs/REASONS.md.

use repoch_protocol::Reason;

#[test]
fn reason_table_matches_docs() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/REASONS.md"))
        .unwrap();
    let documented: Vec<&str> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `")?.split('`').next())
        .collect();
    let coded: Vec<&str> = Reason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        documented, coded,
        "docs/REASONS.md and Reason::ALL disagree"
    );
}

#[test]
fn reason_codes_are_kebab_case_and_round_trip() {
    for r in Reason::ALL {
        let s = r.as_str();
        assert!(s.chars().all(|c| c.is_ascii_lowercase() || c == '-'), "{s}");
        assert_eq!(Reason::parse(s), Some(*r));
    }
    assert_eq!(Reason::parse("fence-Busy"), None);
}

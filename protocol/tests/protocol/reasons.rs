//! Reason codes are stable kebab-case identifiers, each documented in docs/REASONS.md; every
//! outcome and its exit code is documented in docs/EXIT-CODES.md.

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

/// docs/EXIT-CODES.md's first table, `| exit | outcome | rule |`, is [`Outcome::ALL`]:
/// every outcome's code and name documented, in order, and nothing else.
#[test]
fn exit_code_table_matches_docs() {
    use repoch_protocol::Outcome;
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/EXIT-CODES.md"
    ))
    .unwrap();
    let table = doc.split("## ").next().unwrap_or_default();
    let documented: Vec<(String, String)> = table
        .lines()
        .filter_map(|l| {
            let mut cells = l.strip_prefix('|')?.split('|').map(str::trim);
            let code = cells.next()?;
            let name = cells.next()?;
            code.parse::<u8>().ok()?;
            Some((code.to_owned(), name.to_owned()))
        })
        .collect();
    let coded: Vec<(String, String)> = Outcome::ALL
        .iter()
        .map(|o| (o.code().to_string(), o.name().to_owned()))
        .collect();
    assert_eq!(
        documented, coded,
        "docs/EXIT-CODES.md's exit table and Outcome::ALL disagree"
    );
}

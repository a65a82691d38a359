//! The one text rule (docs/PROTOCOL.md, "Text"): a character that changes how a line
//! reads (a control character: C0, DEL, C1, among them ESC, CR and LF; or a Unicode
//! format character: bidi embeddings, overrides and isolates, zero-width characters, line
//! and paragraph separators, the byte-order mark) never reaches a terminal, a log line or a
//! signed record as itself. Text from outside (process names, symlink targets, cgroup and
//! unit names, paths, peers' executables) is escaped where a fact or refusal is made;
//! signed texts from a producer (journal operation names) must not hold one at all.

use std::borrow::Cow;

/// Whether `c` changes how a line reads: a control character (general category Cc), a
/// format character (Cf: bidi marks, embeddings, overrides and isolates, zero-width
/// characters, the soft hyphen, the byte-order mark, prepended concatenation marks,
/// interlinear annotations, tag characters), or a line or paragraph separator (Zl, Zp).
/// The list is docs/PROTOCOL.md's, written out so that no reader depends on a Unicode
/// table's version; a test checks it against the Unicode 16 tables.
pub fn forges(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00AD}' | '\u{0600}'..='\u{0605}' | '\u{061C}' | '\u{06DD}' | '\u{070F}'
            | '\u{0890}'..='\u{0891}' | '\u{08E2}' | '\u{180E}' | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{206F}' | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}' | '\u{110BD}' | '\u{110CD}' | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}' | '\u{1D173}'..='\u{1D17A}' | '\u{E0001}'
            | '\u{E0020}'..='\u{E007F}')
}

/// Whether `c` is a blank filler: no control or format character, yet a letter or symbol
/// that shows as blank space (the Hangul fillers `U+115F`, `U+1160`, `U+3164`, `U+FFA0`;
/// the braille blank `U+2800`). A name holding one reads as the name without it.
pub fn blank_filler(c: char) -> bool {
    matches!(
        c,
        '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}' | '\u{2800}'
    )
}

/// A name a person tells things apart by (a deployment's label): the text rule
/// ([`check`]), no blank filler, and not blank (at least one character that is neither
/// white space nor a filler).
pub fn check_name(s: &str) -> Result<(), crate::Invalid> {
    check(s)?;
    if let Some(c) = s.chars().find(|c| blank_filler(*c)) {
        return Err(format!(
            "contains the blank filler U+{:04X}, which shows as nothing: the name reads as another",
            u32::from(c)
        )
        .into());
    }
    if s.chars().all(char::is_whitespace) {
        return Err("is blank: it names nothing a person can read".into());
    }
    Ok(())
}

/// `s` with each forging character written as `\u{XXXX}` and each backslash doubled (so
/// an escape cannot be forged either); `s` itself when it has neither.
pub fn escape(s: &str) -> Cow<'_, str> {
    if !s.chars().any(|c| forges(c) || c == '\\') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len().saturating_add(8));
    for c in s.chars() {
        if c == '\\' {
            out.push_str("\\\\");
        } else if forges(c) {
            out.push_str(&format!("\\u{{{:04x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The rule as a check: the first forging character, named.
pub fn check(s: &str) -> Result<(), crate::Invalid> {
    match s.chars().find(|c| forges(*c)) {
        Some(c) => Err(format!(
            "contains the {} character U+{:04X}, which changes how the text reads",
            if c.is_control() { "control" } else { "format" },
            u32::from(c)
        )
        .into()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forging_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(escape("plain /srv/a b"), "plain /srv/a b");
        assert!(matches!(escape("plain"), Cow::Borrowed(_)));
        assert_eq!(escape("\u{1b}[31mred\u{7}"), "\\u{001b}[31mred\\u{0007}");
        assert_eq!(escape("a\r\nb"), "a\\u{000d}\\u{000a}b");
        assert_eq!(
            escape("x\u{202e}y\u{200b}z\u{2028}"),
            "x\\u{202e}y\\u{200b}z\\u{2028}"
        );
        assert_eq!(escape("\u{85}\u{9b}"), "\\u{0085}\\u{009b}");
        // A backslash is doubled: the text `\u{001b}` cannot pass for an escaped ESC.
        assert_eq!(escape("\\u{001b}"), "\\\\u{001b}");
        assert_eq!(escape("café ✓"), "café ✓");
        assert!(check("café").is_ok());
        assert_eq!(
            check("a\u{1b}b").unwrap_err(),
            "contains the control character U+001B, which changes how the text reads".into()
        );
        assert!(check("\u{feff}").is_err());
    }
}

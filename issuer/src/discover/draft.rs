//! A [`Discovery`] as a draft manifest: TOML an operator reviews and completes, each entry
//! with a comment saying why it is there, and what was found but has no manifest line
//! (starters, scheduled jobs, unknowns) as comments after it.

use repoch_protocol::text::escape;

use super::{Discovery, Found};

/// The draft manifest for `d`. Its top level holds the fences only (the label, stores,
/// READY, journal and consumer are for the operator to add, before and after it), then
/// `[containment]`.
pub fn draft(d: &Discovery) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "# A draft manifest from `repoch discover` ({}).\n\
         # It lists where the old root runs now; review every line before enrolling.\n\
         # Add what no process shows: label, stores and ready above the fences, and the\n\
         # [journal] and [consumer] tables at the end (docs/OPERATOR.md, \"Discovering the\n\
         # old root\").\n\n",
        escape(&d.seeds.join(", "))
    ));
    s.push_str("# The files the old root holds locks on: keep those that are its exclusion.\n");
    array(&mut s, "fences", &d.locks);
    s.push_str("\n[containment]\n");
    let units: Vec<Found> = d.units.iter().chain(&d.unit_starters).cloned().collect();
    array(&mut s, "units", &units);
    array(&mut s, "cgroups", &d.cgroups);
    array(&mut s, "containers", &d.containers);
    array(&mut s, "listeners", &d.listeners);
    array(&mut s, "executables", &d.executables);
    notes(
        &mut s,
        "Executables the old root runs that others run too (not listed above)",
        &d.shared_executables,
    );
    notes(
        &mut s,
        "Executables run under another root directory: a container's paths, not the host's",
        &d.rooted_executables,
    );
    if !d.uids.is_empty() {
        s.push_str("old_root_uids = [\n");
        for u in &d.uids {
            s.push_str(&format!("  {},{}\n", u.value, comment(u)));
        }
        s.push_str("]\n");
    }
    notes(&mut s, "What started the old root's processes", &d.starters);
    notes(
        &mut s,
        "Cron and at entries that run its executables: remove them",
        &d.scheduled,
    );
    let unknown: Vec<Found> = d
        .unknown_starters
        .iter()
        .chain(&d.unknown)
        .cloned()
        .collect();
    notes(
        &mut s,
        "UNKNOWN: found, not classified or not read; resolve each before enrolling",
        &unknown,
    );
    s
}

/// `key = [...]`, one string per line with its comment; nothing when `found` is empty.
/// Each value is nameable, shown escaped (discovery's quarantine): escaping such a value
/// only doubled its backslashes, undone here so that the manifest names the value itself.
fn array(s: &mut String, key: &str, found: &[Found]) {
    if found.is_empty() {
        return;
    }
    s.push_str(&format!("{key} = [\n"));
    for f in found {
        let value = toml::Value::String(f.value.replace("\\\\", "\\"));
        s.push_str(&format!("  {value},{}\n", comment(f)));
    }
    s.push_str("]\n");
}

/// `  # WHY (pids ...)`: a found reason is shown escaped (discovery's quarantine), so it
/// cannot end the comment.
fn comment(f: &Found) -> String {
    let pids = match f.pids.as_slice() {
        [] => String::new(),
        p if p.len() <= 8 => format!(" (pids {})", join(p)),
        p => format!(" (pids {} and {} more)", join(&p[..8]), p.len() - 8),
    };
    format!("  # {}{pids}", f.why)
}

fn join(p: &[u32]) -> String {
    p.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

/// A commented list under `title`: each value and why.
fn notes(s: &mut String, title: &str, found: &[Found]) {
    if found.is_empty() {
        return;
    }
    s.push_str(&format!("\n# {title}:\n"));
    for f in found {
        s.push_str(&format!(
            "#   {}:{}\n",
            f.value,
            comment(f).trim_start_matches(' ').trim_start_matches('#')
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(value: &str, why: &str) -> Found {
        Found {
            value: value.into(),
            pids: vec![7],
            why: why.into(),
        }
    }

    #[test]
    fn the_draft_parses_as_toml_with_each_value_and_no_found_text_outside_a_comment() {
        let d = Discovery {
            seeds: vec!["pid 7".into()],
            locks: vec![found("/srv/a \"lock\"", "FLOCK WRITE")],
            units: vec![found("x.service", "runs\nlabel = \"forged\"")],
            listeners: vec![found("tcp:127.0.0.1:7070", "held")],
            uids: vec![found("990", "a uid")],
            cgroups: vec![found("/x\\y", "a cgroup")],
            starters: vec![found("pid 8 \nx", "odd")],
            unknown: vec![found("pid 9\n[consumer]", "odd")],
            ..Discovery::default()
        };
        let mut d = d;
        super::super::quarantine(&mut d);
        let text = draft(&d);
        let v: toml::Table = toml::from_str(&text).unwrap();
        assert_eq!(v["fences"][0].as_str(), Some("/srv/a \"lock\""));
        // A backslash is the value's own, once (it was doubled in the draft's TOML).
        assert_eq!(
            v["containment"]["cgroups"][0].as_str(),
            Some("/x\\y"),
            "{text}"
        );
        // Shown escaped once in a comment.
        assert!(text.contains("#   pid 8 \\u{000a}x:"), "{text}");
        assert_eq!(v["containment"]["units"][0].as_str(), Some("x.service"));
        assert_eq!(v["containment"]["old_root_uids"][0].as_integer(), Some(990));
        assert!(
            v.get("label").is_none() && v.get("consumer").is_none(),
            "{text}"
        );
    }
}

//! The man pages (docs/man/: one per command and subcommand, as `man repoch-recover`) and
//! shell completions (docs/completions/) of `repoch`, `repochd` and `repoch-consume` are
//! generated from their clap definitions, the ones the binaries parse with. This test
//! regenerates them in memory and fails if a committed file differs; `REPOCH_BLESS=1`
//! rewrites them instead. The Debian package installs them (daemon/Cargo.toml).

use std::path::{Path, PathBuf};

use clap::CommandFactory as _;
use clap_complete::Shell;

const BLESS: &str = "REPOCH_BLESS=1 cargo test --workspace --test generated";

/// Each binary's clap definition and the manual section its page belongs in.
fn commands() -> [(clap::Command, &'static str); 3] {
    [
        (repoch_cli::cmd::Args::command(), "1"),
        (repoch_daemon::repochd::Args::command(), "8"),
        (repoch_consumer::cli::Args::command(), "1"),
    ]
}

/// Every generated file: its path under the repository and its bytes.
fn generated() -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    for (cmd, section) in commands() {
        let name = cmd.get_name().to_owned();
        let mut built = cmd.clone().disable_help_subcommand(true);
        built.build();
        man_pages(built, section, &mut files);
        for (shell, file) in [
            (Shell::Bash, format!("{name}.bash")),
            (Shell::Zsh, format!("_{name}")),
            (Shell::Fish, format!("{name}.fish")),
        ] {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd.clone(), &name, &mut script);
            files.push((PathBuf::from(format!("docs/completions/{file}")), script));
        }
    }
    files
}

/// The page of `cmd` and, as `clap_mangen::generate_to` names them, of each visible
/// subcommand (`repoch-journal-append.1`).
fn man_pages(cmd: clap::Command, section: &str, files: &mut Vec<(PathBuf, Vec<u8>)>) {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        man_pages(sub.clone(), section, files);
    }
    let man = clap_mangen::Man::new(cmd.clone()).section(section);
    let mut page = Vec::new();
    man.render_title(&mut page).unwrap();
    man.render_name_section(&mut page).unwrap();
    man.render_synopsis_section(&mut page).unwrap();
    man.render_description_section(&mut page).unwrap();
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut page).unwrap();
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut page).unwrap();
    }
    // The EXIT CODES text of --help, laid out as there (clap_mangen would refill it under
    // "EXTRA", breaking its columns).
    if let Some(text) = cmd.get_after_long_help().or(cmd.get_after_help()) {
        let text = text.to_string();
        let body = text
            .strip_prefix("EXIT CODES")
            .unwrap_or(&text)
            .trim_start();
        page.extend_from_slice(b".SH \"EXIT CODES\"\n.nf\n");
        for line in body.lines() {
            page.extend_from_slice(roff_line(line).as_bytes());
            page.push(b'\n');
        }
        page.extend_from_slice(b".fi\n");
    }
    if cmd.get_version().is_some() {
        man.render_version_section(&mut page).unwrap();
    }
    files.push((
        PathBuf::from(format!("docs/man/{}", man.get_filename())),
        page,
    ));
}

/// One line of text as roff: backslashes and hyphen-minus escaped (so `--json` stays
/// ASCII), and a leading control character neutralized.
fn roff_line(line: &str) -> String {
    let escaped = line.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with('.') || escaped.starts_with('\'') {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

#[test]
fn the_committed_man_pages_and_completions_are_the_generated_ones() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let bless = std::env::var_os("REPOCH_BLESS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for (path, bytes) in generated() {
        let at = repo.join(&path);
        if bless {
            std::fs::create_dir_all(at.parent().unwrap()).unwrap();
            std::fs::write(&at, &bytes).unwrap();
        } else if std::fs::read(&at).ok().as_deref() != Some(&bytes[..]) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "generated from the clap definitions, these committed files differ or are missing: {}; \
         refresh them with `{BLESS}` and commit the result",
        stale.join(", ")
    );
}

//! The services systemd could start, read from `systemctl list-unit-files`,
//! `list-units` and `show`: each one's commands, every line of its block checked, and
//! the paths each command may name.

use super::*;

/// Bytes of the loaded services' commands read (`systemctl show '*.service'`).
pub const SERVICES_OUTPUT_BYTES_MAX: usize = 8 << 20;
/// Loaded services read.
pub const SERVICES_MAX: usize = 16_384;
/// The properties that hold a service's commands.
pub const EXEC_PROPERTIES: &str =
    "ExecCondition,ExecStartPre,ExecStart,ExecStartPost,ExecReload,ExecStop,ExecStopPost";

/// One command of a loaded service: the unit, the property that holds it
/// (`ExecStart`, ...) and each word it names (its `path=` and its `argv[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceCommand {
    pub unit: String,
    pub property: String,
    pub words: Vec<String>,
    /// Where its paths lead on the host.
    pub paths: ServicePaths,
}

/// Every command of every service systemd could start: each service unit file installed
/// and not masked (enabled, static, disabled: `systemctl start` needs no more), and every
/// service loaded now (transient ones, from `systemd-run`, included), in one
/// `systemctl list-unit-files` and one `systemctl show`. A template (`NAME@.service`) is
/// asked through the instances loaded now.
pub fn service_commands(cmd: &[String]) -> Result<Vec<ServiceCommand>, Error> {
    let names = service_names(cmd)?;
    let asked: Vec<&String> = names.iter().collect();
    let props = format!("Id,{EXEC_PROPERTIES},{FILE_SYSTEM_PROPERTIES}");
    let blocks = show(cmd, &props, &asked, SERVICES_OUTPUT_BYTES_MAX)?;
    // One block per service asked, in the order asked, each its own Id: systemctl prints a
    // command's arguments raw, and an argument holding an empty line would split a block in
    // two (found by attacking the release binaries: the second half named a unit the
    // manifest names, and the service that runs the old root was read without commands).
    if blocks.len() != names.len() {
        return Err(Error::Found(format!(
            "systemctl show answered {} blocks for {} services",
            blocks.len(),
            names.len()
        )));
    }
    let mut out = Vec::new();
    for (name, b) in names.iter().zip(&blocks) {
        let (unit, commands) = service_block(b)?;
        if unit != *name {
            return Err(Error::Found(format!(
                "systemctl show answered for {unit:?} where {name:?} was asked"
            )));
        }
        out.extend(commands);
    }
    Ok(out)
}

/// Every service systemd could start, by name, sorted and once each: each unit file
/// installed that is neither masked, nor a template, nor an alias (shown under the unit
/// it names), and every service loaded now.
fn service_names(cmd: &[String]) -> Result<Vec<String>, Error> {
    let listed = |words: &[&str], state_column: usize, keep: fn(&str) -> bool| {
        run(cmd, words, SERVICES_OUTPUT_BYTES_MAX).map(|out| {
            out.lines()
                .filter_map(|l| {
                    let w: Vec<&str> = l.split_whitespace().collect();
                    let (name, state) = (*w.first()?, *w.get(state_column)?);
                    (name.ends_with(".service") && !name.ends_with("@.service") && keep(state))
                        .then(|| name.to_owned())
                })
                .collect::<Vec<String>>()
        })
    };
    let plain = ["--type=service", "--no-legend", "--no-pager", "--plain"];
    let files = [&["list-unit-files"][..], &plain[..]].concat();
    let loaded = [&["list-units", "--all"][..], &plain[..]].concat();
    // A mask in /run (`masked-runtime`) is gone at the next boot, and a masked unit's
    // commands are not loaded (systemctl shows none): such a service cannot be searched,
    // and says so (found by attacking the release binaries: passed over, it ran the old
    // root after a boot).
    let runtime = listed(&files, 1, |s| s == "masked-runtime")?;
    if let Some(first) = runtime.first() {
        return Err(Error::Found(format!(
            "{first} is masked until the next boot only (masked-runtime): its commands are not loaded and cannot be searched; mask it for good (systemctl mask) or name it under containment.units"
        )));
    }
    let mut names = listed(&files, 1, |s| !s.starts_with("masked") && s != "alias")?;
    names.extend(listed(&loaded, 1, |s| s == "loaded")?);
    names.sort_unstable();
    names.dedup();
    if names.len() > SERVICES_MAX {
        return Err(Error::Found(format!(
            "over {SERVICES_MAX} services installed or loaded"
        )));
    }
    Ok(names)
}

/// Properties asked of each service besides its commands: where its paths are resolved.
pub const FILE_SYSTEM_PROPERTIES: &str = "RootDirectory,RootImage,BindPaths,BindReadOnlyPaths,\
     ExtensionDirectories,ExecSearchPath,WorkingDirectory,User,NeedDaemonReload";

/// One service's block of `systemctl show`: its commands. Every line must be one property
/// asked, `Id` once: systemctl prints a command's arguments raw, so an argument holding a
/// newline (a unit file's `\n`) could print a line of its own, such as another `Id=`.
fn service_block(b: &str) -> Result<(String, Vec<ServiceCommand>), Error> {
    let asked = |p: &str| {
        p == "Id"
            || EXEC_PROPERTIES.split(',').any(|e| e == p)
            || FILE_SYSTEM_PROPERTIES.split(',').any(|e| e == p)
    };
    let mut unit = None;
    let mut paths = ServicePaths::default();
    let mut commands = Vec::new();
    for line in b.lines() {
        let runs = |v: &str| {
            path_runs(v)
                .ok_or_else(|| Error::Found(format!("systemctl show: too many words in {line:?}")))
        };
        let (property, value) = line
            .split_once('=')
            .filter(|(p, _)| asked(p))
            .ok_or_else(|| format!("systemctl show: a line that is no property asked: {line:?}"))?;
        match property {
            "Id" if unit.is_some() => {
                return Err(Error::Found(format!(
                    "systemctl show: a block with two Ids ({value:?})"
                )))
            }
            "Id" => unit = Some(value.to_owned()),
            "RootDirectory" => paths.root = Some(value.to_owned()).filter(|v| !v.is_empty()),
            "RootImage" => paths.image = Some(value.to_owned()).filter(|v| !v.is_empty()),
            // Each directory printed quoted when it holds a space: every run of words
            // (quotes dropped) that may be one directory is searched.
            "ExecSearchPath" => paths.search.extend(runs(&value.replace('"', ""))?),
            "User" => paths.user = Some(value.to_owned()).filter(|v| !v.is_empty()),
            "NeedDaemonReload" if value == "yes" => {
                return Err(Error::Found(format!(
                    "systemctl show: {} has a changed unit file systemd has not reloaded (its commands as loaded are not what it would run): run systemctl daemon-reload",
                    unit.as_deref().unwrap_or("a service")
                )))
            }
            "NeedDaemonReload" => {}
            // `!` (systemctl's spelling of `-`) when a missing directory is no error; `~`
            // the home of the service's user (resolved with its `User=`).
            "WorkingDirectory" => {
                paths.workdir = Some(value.trim_start_matches(['!', '-']).to_owned())
                    .filter(|v| v.starts_with('/') || v == "~")
            }
            "BindPaths" | "BindReadOnlyPaths" => paths.binds.extend(binds(value)?),
            // Joined with spaces, as arguments are: each run that may be one directory.
            "ExtensionDirectories" => paths.extensions.extend(runs(value)?),
            _ => commands.push((property.to_owned(), command_words(value)?)),
        }
    }
    let unit: String = unit.ok_or("systemctl show: a block with no Id")?;
    let commands = commands
        .into_iter()
        .map(|(property, words)| ServiceCommand {
            unit: unit.clone(),
            property,
            words,
            paths: paths.clone(),
        })
        .collect();
    Ok((unit, commands))
}

/// `BindPaths=`'s value as systemctl shows it: `SRC:DST:rbind` or `SRC:DST` (`norbind`)
/// items, space-separated, `-` before an optional source. systemctl prints the paths raw,
/// so an item that is not so (a path holding a space or a colon, `\:` in the unit file) cannot
/// be read: an error, never a guess.
fn binds(value: &str) -> Result<Vec<(String, String)>, Error> {
    value
        .split_whitespace()
        .map(|item| {
            let parts: Vec<&str> = item.trim_start_matches('-').split(':').collect();
            match parts[..] {
                // `norbind` is printed as no third field.
                [src, dst] | [src, dst, "rbind" | "norbind"]
                    if src.starts_with('/') && dst.starts_with('/') =>
                {
                    Ok((src.to_owned(), dst.to_owned()))
                }
                _ => Err(Error::Found(format!(
                    "systemctl show: a bind mount that cannot be read: {value:?}"
                ))),
            }
        })
        .collect()
}

/// Words one path is looked for across at most (a path holding more than 15 spaces is
/// not found): the runs grow with the words, never with their square.
pub const RUN_WORDS_MAX: usize = 16;

/// Candidate paths read from one command's argument text at most (an argument holding
/// spaces is found among the runs of words joined back): more is an error.
pub const COMMAND_CANDIDATES_MAX: usize = 16_384;

/// The paths one command may name, from systemctl's line for it: `{ path=P ; argv[]=A ;
/// ignore_errors=… ; start_time=[…] ; stop_time=[…] ; pid=N ; code=… ; status=… }`. systemd
/// writes the fields after the arguments itself, so they are read from the end (their last
/// spelling); P and A are the unit's own text, printed raw: a command whose text holds
/// ` ; argv[]=` twice cannot be split into path and arguments, and is an error, never a
/// guess. systemctl joins the arguments with one space, so an argument holding spaces is
/// found among the runs of words joined back: P, and every run of A's words (split on
/// each space) that begins with `/`, up to `PATH_BYTES_MAX` bytes.
fn command_words(value: &str) -> Result<Vec<String>, Error> {
    let bad = |why: &str| {
        Error::Found(format!(
            "systemctl show: a command that cannot be read ({why}): {value:?}"
        ))
    };
    let any = |v: &str| !v.is_empty() && !v.contains(' ');
    let digits = |v: &str| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit());
    let bracketed = |v: &str| v.starts_with('[') && v.ends_with(']') && !v.contains(" ; ");
    let yes_no = |v: &str| v == "yes" || v == "no";
    type Valid<'a> = &'a dyn Fn(&str) -> bool;
    let tail: [(&str, Valid<'_>); 6] = [
        ("status", &any),
        ("code", &any),
        ("pid", &digits),
        ("stop_time", &bracketed),
        ("start_time", &bracketed),
        ("ignore_errors", &yes_no),
    ];
    let mut rest = value
        .strip_prefix("{ path=")
        .and_then(|v| v.strip_suffix(" }"))
        .ok_or_else(|| bad("not one command"))?;
    for (field, valid) in tail {
        let (head, _) = rest
            .rsplit_once(&format!(" ; {field}="))
            .filter(|(_, v)| valid(v))
            .ok_or_else(|| bad(field))?;
        rest = head;
    }
    let (path, argv) = rest
        .split_once(" ; argv[]=")
        .filter(|(_, a)| !a.contains(" ; argv[]="))
        .ok_or_else(|| bad("argv"))?;
    let mut words = vec![path.to_owned()];
    words.extend(path_runs(argv).ok_or_else(|| bad("too many words"))?);
    Ok(words)
}

/// Every run of `text`'s words (split on each space) that begins with `/`, joined back with
/// one space, up to `PATH_MAX` bytes: each path systemctl printed joined with spaces is
/// among them, whatever spaces it holds. `None` past [`COMMAND_CANDIDATES_MAX`].
fn path_runs(text: &str) -> Option<Vec<String>> {
    const PATH_BYTES_MAX: usize = 4096;
    let mut runs = Vec::new();
    let split: Vec<&str> = text.split(' ').collect();
    for (i, first) in split.iter().enumerate() {
        // A run begins at a path (`/…`; `-/…`, an optional one), at a relative path
        // holding a `/`, and at the first `/` inside a word (`--exe=/…`, `-S/…`).
        let mut starts: Vec<&str> = Vec::new();
        match first.strip_prefix('-').filter(|f| f.starts_with('/')) {
            Some(f) => starts.push(f),
            None if first.contains('/') => starts.push(first),
            None => {}
        }
        if let Some(at) = first.find('/').filter(|at| *at > 0) {
            starts.push(&first[at..]);
        }
        for start in starts {
            if runs.len() >= COMMAND_CANDIDATES_MAX {
                return None;
            }
            runs.push(start.to_owned());
            let mut run = start.to_owned();
            for w in split.iter().skip(i + 1).take(RUN_WORDS_MAX - 1) {
                run.push(' ');
                run.push_str(w);
                if run.len() > PATH_BYTES_MAX {
                    break;
                }
                if runs.len() >= COMMAND_CANDIDATES_MAX {
                    return None;
                }
                runs.push(run.clone());
            }
        }
    }
    Some(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// systemd's spelling of a command gives its path and every run of its arguments that
    /// begins with `/`: an argument holding spaces (`"/srv/old root"`, printed joined with
    /// one space) is among them, whatever the timestamps and status systemd wrote after it.
    #[test]
    fn a_commands_path_and_arguments_are_its_words() {
        let one = "{ path=/srv/old-root ; argv[]=/srv/old-root live-ms 5 ; ignore_errors=no ; \
                   start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }";
        assert_eq!(
            command_words(one).unwrap(),
            [
                "/srv/old-root",
                "/srv/old-root",
                "/srv/old-root live-ms",
                "/srv/old-root live-ms 5"
            ]
        );
        let spaced = "{ path=/bin/sh ; argv[]=sh /srv/old root  x ; ignore_errors=yes ; \
                      start_time=[Sun 2026-12-06 16:20:01 UTC] ; stop_time=[Sun 2026-12-06 16:20:01 UTC] ; \
                      pid=52 ; code=exited ; status=1/FAILURE }";
        let words = command_words(spaced).unwrap();
        assert!(words.contains(&"/srv/old root".to_owned()), "{words:?}");
        assert!(words.contains(&"/srv/old root  x".to_owned()), "{words:?}");
        assert_eq!(words[0], "/bin/sh");
    }

    /// The files a command may name: its bare path on the search path (the service's, else
    /// systemd's default), a path inside an option, a relative path from the working
    /// directory, an optional extension directory's, and the host's path beside the root
    /// directory's (found by attacking the release binaries, each missed before).
    #[test]
    fn a_command_names_every_file_systemd_could_run_for_it() {
        let tail = " ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }";
        let block = |exec: &str, more: &str| {
            let b = format!("ExecStart={{ path={exec}{tail}\n{more}Id=x.service");
            service_block(&b).unwrap().1.remove(0)
        };
        let paths = |c: &ServiceCommand| -> Vec<String> {
            c.candidates()
                .into_iter()
                .map(|h| match h {
                    OnHost::Path(p) => p,
                    OnHost::InRoot { root, path } => format!("{root}!{path}"),
                })
                .collect()
        };
        let bare = block("old-root ; argv[]=old-root 5", "");
        assert!(paths(&bare).contains(&"/usr/local/bin/old-root".to_owned()));
        let searched = block("old-root ; argv[]=old-root 5", "ExecSearchPath=/srv\n");
        assert_eq!(paths(&searched)[0], "/srv/old-root");
        let optioned = block("/usr/bin/env ; argv[]=env -S/srv/old-root 5", "");
        assert!(paths(&optioned).contains(&"/srv/old-root".to_owned()));
        let relative = block(
            "/usr/bin/env ; argv[]=env ./old-root",
            "WorkingDirectory=!/srv\n",
        );
        assert!(paths(&relative).contains(&"/srv/./old-root".to_owned()));
        let extended = block("/usr/bin/app ; argv[]=app", "ExtensionDirectories=-/ext\n");
        assert!(paths(&extended).contains(&"/ext/usr/bin/app".to_owned()));
        assert!(paths(&extended).contains(&"/ext!/usr/bin/app".to_owned()));
        let rooted = block("/srv/old-root ; argv[]=x", "RootDirectory=/jail\n");
        assert!(paths(&rooted).contains(&"/jail!/srv/old-root".to_owned()));
        assert!(paths(&rooted).contains(&"/srv/old-root".to_owned()));
        assert_eq!(
            binds("/usr/share:/opt/share").unwrap(),
            [("/usr/share".into(), "/opt/share".into())]
        );
        // Found by the second attack: a search directory holding a space (printed quoted),
        // a relative path with no working directory (systemd's is /), `~` (the user's
        // home), and a command's path through a link into a bind's destination.
        let quoted = block(
            "old-root ; argv[]=old-root",
            "ExecSearchPath=\"/srv/sp ace\" /usr/bin\n",
        );
        assert!(paths(&quoted).contains(&"/srv/sp ace/old-root".to_owned()));
        let from_root = block("/usr/bin/env ; argv[]=env srv/old-root", "");
        assert!(paths(&from_root).contains(&"/srv/old-root".to_owned()));
        let home = block(
            "/usr/bin/env ; argv[]=env ./old-root",
            "WorkingDirectory=~\nUser=root\n",
        );
        assert!(paths(&home).contains(&"/root/./old-root".to_owned()));
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("usr")).unwrap();
        std::os::unix::fs::symlink("usr", d.path().join("bin")).unwrap();
        let top = d.path().canonicalize().unwrap().display().to_string();
        let merged = block(
            &format!("{top}/bin/app ; argv[]=app"),
            &format!("BindReadOnlyPaths=/srv/old-root:{top}/usr/app:rbind\n"),
        );
        assert!(paths(&merged).contains(&"/srv/old-root".to_owned()));
    }

    /// A service whose unit file changed without a reload is not read as it would run: an
    /// error saying so (found by the second attack: its loaded commands were searched, and
    /// the new ones ran the old root after a reload).
    #[test]
    fn a_service_whose_file_changed_unreloaded_cannot_be_read() {
        let tail = " ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }";
        let b = format!("ExecStart={{ path=/bin/sleep ; argv[]=sleep 1{tail}\nNeedDaemonReload=yes\nId=x.service");
        let e = service_block(&b).unwrap_err().to_string();
        assert!(e.contains("not reloaded"), "{e}");
        let b = format!("ExecStart={{ path=/bin/sleep ; argv[]=sleep 1{tail}\nNeedDaemonReload=no\nId=x.service");
        assert!(service_block(&b).is_ok());
    }

    /// Runs grow with the words, never with their square: a command naming 1,000 paths is
    /// read (the second attack: 181 paths refused the whole host, too many words).
    #[test]
    fn a_command_of_many_paths_is_read() {
        let many: Vec<String> = (0..1000).map(|i| format!("/v/{i}")).collect();
        let runs = path_runs(&many.join(" ")).unwrap();
        assert!(runs.len() <= 1000 * RUN_WORDS_MAX, "{}", runs.len());
        assert!(runs.contains(&"/v/7 /v/8".to_owned()));
    }

    /// A command whose text cannot be split into its path and its arguments, or whose
    /// systemd-written fields are not systemd's, is an error: a path or an argument holding
    /// ` ; argv[]=` (found by attacking the release binaries: a path holding ` ; ` was read
    /// as another, and the service running the old root was not found), a line cut by a
    /// newline in an argument, two commands on one line.
    #[test]
    fn a_command_whose_text_cannot_be_split_is_an_error_never_a_guess() {
        let tail = " ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }";
        for raw in [
            format!("{{ path=/srv/old ; argv[]=x ; argv[]=/srv/old ; argv[]=x{tail}"),
            format!("{{ path=/bin/sh ; argv[]=sh -c echo a ; argv[]=b{tail}"),
            "{ path=/srv/old-root ; argv[]=/srv/old-root x".to_owned(),
            "{ path=/bin/sh ; argv[]=sh ; ignore_errors=maybe ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }".to_owned(),
            format!("{{ path=/bin/sh ; argv[]=sh{tail} {{ path=/bin/true ; argv[]=true{tail}"),
        ] {
            let e = command_words(&raw).unwrap_err();
            assert!(e.to_string().contains("cannot be read"), "{raw}: {e}");
        }
    }

    /// A block whose lines are not all properties asked is no answer: an argument holding a
    /// newline printed a line of its own (found by attacking the release binaries: a second
    /// `Id=` naming a unit the manifest names hid the one that runs the old root).
    #[test]
    fn a_forged_line_in_a_services_block_is_no_answer() {
        let tail = " ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }";
        let forged = format!(
            "ExecStart={{ path=/srv/old-root ; argv[]=/srv/old-root x\n\
             Id=named.service\ny{tail}\nId=evil.service"
        );
        let e = service_block(&forged).unwrap_err().to_string();
        assert!(
            e.contains("no property asked") || e.contains("cannot be read"),
            "{e}"
        );
        let two_ids = format!(
            "Id=named.service\nExecStart={{ path=/srv/old-root ; argv[]=x{tail}\nId=evil.service"
        );
        let e = service_block(&two_ids).unwrap_err();
        assert!(e.to_string().contains("two Ids"), "{e}");
        let fine = format!(
            "ExecStart={{ path=/srv/old-root ; argv[]=/srv/old-root{tail}\n\
             RootDirectory=/jail\nBindReadOnlyPaths=/srv/old-root:/usr/bin/billing:rbind\nId=ok.service"
        );
        let (unit, c) = service_block(&fine).unwrap();
        assert_eq!(unit, "ok.service");
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].unit, "ok.service");
        let in_jail = |path: &str| OnHost::InRoot {
            root: "/jail".into(),
            path: path.into(),
        };
        assert_eq!(
            c[0].paths.on_host("/usr/bin/billing"),
            [
                OnHost::Path("/srv/old-root".into()),
                in_jail("/usr/bin/billing"),
                OnHost::Path("/usr/bin/billing".into())
            ]
        );
        assert_eq!(
            c[0].paths.on_host("/old-root"),
            [in_jail("/old-root"), OnHost::Path("/old-root".into())]
        );
    }

    /// A bind mount whose source or destination holds a space or a colon is printed raw and
    /// cannot be read: an error (the search is unknown), never another pair of paths (found
    /// by attacking the release binaries: `BindReadOnlyPaths=/srv/old\\:root:/usr/bin/app`
    /// was read as a bind of `/srv/old\`, and the service running the old root was not
    /// found).
    #[test]
    fn a_bind_mount_that_cannot_be_read_is_an_error_never_a_guess() {
        assert_eq!(
            binds("/a:/b:rbind -/c:/d:norbind").unwrap(),
            [("/a".into(), "/b".into()), ("/c".into(), "/d".into())]
        );
        for raw in [
            "/srv/old:root:/usr/bin/app:rbind",
            "/srv/old root:/usr/bin/app:rbind",
            "/srv/old-root:/usr/bin/app root:rbind",
            "/a:/b:/c",
        ] {
            let e = binds(raw).unwrap_err();
            assert!(e.to_string().contains("cannot be read"), "{raw}: {e}");
        }
    }
}

//! Where a service's command paths lead on the host: through its bind mounts, its
//! extension directories, its root directory, its search path and its working directory.

use super::*;

/// Where a service's command paths lead on the host: its root directory (or image), its
/// bind mounts (inside path to host path) and its extension directories (each overlaid on
/// its `/usr` and `/opt`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServicePaths {
    pub root: Option<String>,
    pub image: Option<String>,
    pub binds: Vec<(String, String)>,
    pub extensions: Vec<String>,
    /// `ExecSearchPath=`: where a command named without a `/` is looked for.
    pub search: Vec<String>,
    /// `WorkingDirectory=`: where a relative path leads (`/` when unset; `~` the user's
    /// home).
    pub workdir: Option<String>,
    /// `User=`: whose home `~` is (root's when unset).
    pub user: Option<String>,
}

/// A file a service's command may name, as the host reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnHost {
    /// A host path.
    Path(String),
    /// A path as a process rooted at `root` sees it: its symbolic links resolve inside
    /// `root` ([`crate::fs::open_in_root`]).
    InRoot { root: String, path: String },
}

/// Where systemd looks for a command named without a `/` when the service names no
/// `ExecSearchPath=` (its default `PATH`, with the directories of a split `/usr`).
pub const DEFAULT_SEARCH_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

impl ServicePaths {
    /// Where `word` (a path as the service sees it) may lead: through a bind mount of it
    /// or of a directory above it, through an extension directory (under `/usr` or
    /// `/opt`; a link there resolved inside it too), inside its root directory and on the
    /// host (`RootDirectoryStartOnly=` runs all but `ExecStart=` outside the root), and a
    /// relative path from its working directory. More places than the service may use:
    /// the search is for what could run the old root.
    pub fn on_host(&self, word: &str) -> Vec<OnHost> {
        let mut out = Vec::new();
        if !word.starts_with('/') {
            let joined = format!("{}/{word}", self.working_directory().trim_end_matches('/'));
            out.extend(self.on_host(&joined));
            out.push(OnHost::Path(word.to_owned()));
            return out;
        }
        // Through a link on the way (`/bin` to `usr/bin` on a merged /usr) the path may
        // reach a bind mount's destination: its directory as the host resolves it too.
        let canonical = std::path::Path::new(word)
            .parent()
            .and_then(|d| std::fs::canonicalize(d).ok())
            .zip(std::path::Path::new(word).file_name())
            .map(|(d, n)| d.join(n).to_string_lossy().into_owned())
            .filter(|c| c != word);
        for path in canonical.iter().map(String::as_str).chain([word]) {
            for (host, inside) in &self.binds {
                if let Some(rest) = path.strip_prefix(inside.as_str()) {
                    if rest.is_empty() || rest.starts_with('/') {
                        out.push(OnHost::Path(format!("{host}{rest}")));
                    }
                }
            }
        }
        if ["/usr/", "/opt/"].iter().any(|p| word.starts_with(p)) {
            for ext in &self.extensions {
                out.push(OnHost::Path(format!("{}{word}", ext.trim_end_matches('/'))));
                out.push(OnHost::InRoot {
                    root: ext.clone(),
                    path: word.to_owned(),
                });
            }
        }
        if let Some(root) = &self.root {
            out.push(OnHost::InRoot {
                root: root.clone(),
                path: word.to_owned(),
            });
        }
        out.push(OnHost::Path(word.to_owned()));
        out
    }

    /// Where the service's relative paths start: its `WorkingDirectory=`, `~` its user's
    /// home (as this host's user database says), else `/` (systemd's default).
    fn working_directory(&self) -> String {
        match self.workdir.as_deref() {
            Some("~") => {
                let user = self.user.as_deref().unwrap_or("root");
                nix::unistd::User::from_name(user)
                    .ok()
                    .flatten()
                    .map(|u| u.dir.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "/".to_owned())
            }
            Some(wd) => wd.to_owned(),
            None => "/".to_owned(),
        }
    }

    /// Where a command's path `path` may lead: named without a `/`, each directory of its
    /// search path (`ExecSearchPath=`, else systemd's default) holding it; else as
    /// [`ServicePaths::on_host`] says.
    pub fn command(&self, path: &str) -> Vec<OnHost> {
        if path.contains('/') {
            return self.on_host(path);
        }
        let search: Vec<&str> = match self.search.is_empty() {
            true => DEFAULT_SEARCH_PATH.to_vec(),
            false => self.search.iter().map(String::as_str).collect(),
        };
        search
            .iter()
            .flat_map(|d| self.on_host(&format!("{}/{path}", d.trim_end_matches('/'))))
            .collect()
    }
}

impl ServiceCommand {
    /// Every file this command may run or name: its path (searched as systemd searches
    /// it), and each path among its arguments ([`ServicePaths::on_host`]).
    pub fn candidates(&self) -> Vec<OnHost> {
        let mut words = self.words.iter();
        let mut out = words
            .next()
            .map(|p| self.paths.command(p))
            .unwrap_or_default();
        for w in words {
            out.extend(self.paths.on_host(w));
        }
        out
    }
}

//! An engine's answers as they are read: the inspect answer (each judged field required),
//! an event line, and the restart policy a container reads as, its engine's labels
//! included.

use crate::*;
/// The Docker API's inspect answer: only what is judged, each field required.
#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct Inspect {
    pub(crate) id: String,
    pub(crate) created: String,
    pub(crate) name: String,
    pub(crate) state: State,
    pub(crate) host_config: HostConfig,
    pub(crate) config: Config,
    /// Required, null or a list: a missing field is no answer, never "no session".
    #[serde(rename = "ExecIDs")]
    pub(crate) exec_ids: serde_json::Value,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct State {
    pub(crate) status: String,
    pub(crate) running: bool,
    pub(crate) restarting: bool,
    pub(crate) paused: bool,
    pub(crate) pid: i64,
    pub(crate) started_at: String,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct HostConfig {
    pub(crate) restart_policy: RestartPolicy,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct RestartPolicy {
    pub(crate) name: String,
}

#[derive(Debug, serde::Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct Config {
    pub(crate) labels: Option<std::collections::BTreeMap<String, String>>,
}

/// The label Docker's swarm puts on a service's task containers: the swarm, not the
/// container's restart policy (`no`, as swarm sets it), starts the service's task again.
pub(crate) const SWARM_SERVICE_LABEL: &str = "com.docker.swarm.service.id";

/// An event line: Docker's and podman's compatible API both give these fields.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct EventLine {
    /// `container` or `volume` (the query asks for these two); a volume's event is judged
    /// only as repoch's own mark.
    #[serde(rename = "Type", default)]
    pub(crate) kind: String,
    #[serde(rename = "Action")]
    pub(crate) action: String,
    #[serde(rename = "Actor")]
    pub(crate) actor: Actor,
    pub(crate) time: i64,
}

#[derive(Debug, serde::Deserialize)]
pub(crate) struct Actor {
    #[serde(rename = "ID")]
    pub(crate) id: String,
    #[serde(rename = "Attributes", default)]
    pub(crate) attributes: std::collections::BTreeMap<String, String>,
}

impl TryFrom<Inspect> for Container {
    type Error = Error;
    fn try_from(i: Inspect) -> Result<Container, Error> {
        let exec_sessions = match &i.exec_ids {
            serde_json::Value::Null => 0,
            serde_json::Value::Array(ids) => ids.len(),
            other => return Err(Error::Answer(format!("ExecIDs: {other}, not a list"))),
        };
        let restart_policy = restart_policy(&i);
        Ok(Container {
            name: i.name.trim_start_matches('/').to_owned(),
            id: i.id,
            created: i.created,
            status: i.state.status,
            running: i.state.running,
            restarting: i.state.restarting,
            paused: i.state.paused,
            pid: i.state.pid,
            restart_policy,
            exec_sessions,
            cgroup: None,
            started_at: i.state.started_at,
        })
    }
}

/// What can start the container again: a swarm service's task container is its service's
/// (found by attacking the release binaries: a stopped task read as policy `no` and the
/// recovery granted while swarm ran the service's next task); else its restart policy.
pub(crate) fn restart_policy(i: &Inspect) -> String {
    let labels = i.config.labels.as_ref();
    let label = |k: &str| labels.and_then(|l| l.get(k));
    if let Some(service) = label(SWARM_SERVICE_LABEL) {
        let name = label("com.docker.swarm.service.name");
        return format!("swarm service {}", name.unwrap_or(service));
    }
    // The controllers the engine itself names on the container: a systemd unit that runs
    // it (what `podman generate systemd` and Quadlet write: `Restart=always`, `podman start
    // -a NAME`), a kubelet that recreates it through CRI, a Nomad allocation. (Docker
    // Compose's labels name no controller: `docker compose up` starts containers once, and
    // their restart policy is what starts them again.) Found by attacking the release
    // binaries: a container of policy `no` whose unit was enabled, named alone, granted.
    if let Some(unit) = label(PODMAN_SYSTEMD_UNIT_LABEL) {
        return format!("{SYSTEMD_UNIT_POLICY}{unit}");
    }
    if let Some(pod) = label("io.kubernetes.pod.name") {
        let ns = label("io.kubernetes.pod.namespace").map_or("?", String::as_str);
        return format!("kubernetes pod {ns}/{pod}");
    }
    // Nomad's docker driver marks its task containers; Nomad restarts and reschedules an
    // allocation's tasks whatever the container's own policy.
    if let Some(alloc) = label("com.hashicorp.nomad.alloc_id") {
        let job = label("com.hashicorp.nomad.job_name").map_or("?", String::as_str);
        return format!("nomad job {job} (allocation {alloc})");
    }
    i.host_config.restart_policy.name.clone()
}

/// The label podman puts on a container a systemd unit runs (its value: the unit).
pub(crate) const PODMAN_SYSTEMD_UNIT_LABEL: &str = "PODMAN_SYSTEMD_UNIT";

/// How [`Container::restart_policy`] begins for a container a systemd unit runs; the unit
/// follows.
pub const SYSTEMD_UNIT_POLICY: &str = "systemd unit ";

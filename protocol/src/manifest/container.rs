//! A container named to its engine (docs/OPERATOR.md, "Containers"), and the full id
//! enrollment pinned it to: a name is anyone's to take once its container is renamed away,
//! an id is the container's own.

use super::*;

/// A container, named to its engine (docs/OPERATOR.md, "Containers").
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ContainerRef {
    /// `docker` or `podman` (both asked through the Docker Engine API), or `containerd`
    /// (its own gRPC API).
    pub engine: String,
    /// The container's name or id, as the engine takes it; containerd's `NAMESPACE/ID`.
    pub name: String,
    /// The absolute path of the engine's unix socket.
    pub socket: String,
    /// Docker's and podman's full id of the container `name` named when it was enrolled
    /// (64 lowercase hex digits): the container judged whatever its name is since. `None`:
    /// no such container then, or containerd's (whose id is its name). Encoded only when
    /// set, as the fourth field.
    pub pinned: Option<String>,
}

/// The engines a container may be named to.
pub const CONTAINER_ENGINES: &[&str] = &["docker", "podman", "containerd"];

/// The length of Docker's and podman's full container id, in hex digits.
pub const CONTAINER_ID_HEX_DIGITS: usize = 64;

impl ContainerRef {
    /// `ENGINE:NAME`, as the manifest names it.
    pub fn spelled(&self) -> String {
        format!("{}:{}", self.engine, self.name)
    }
}

/// Whether `id` is a full container id as Docker and podman make one: 64 lowercase hex
/// digits.
pub fn is_container_id(id: &str) -> bool {
    id.len() == CONTAINER_ID_HEX_DIGITS
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `name` is a container name or id as Docker and podman take one: a letter or
/// digit, then letters, digits, `_`, `.` or `-`.
pub fn is_container_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= CONTAINER_NAME_BYTES_MAX
        && chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

/// Whether `name` names a container to `engine`: containerd's `NAMESPACE/ID`, each a
/// containerd identifier; for the others a container name or id ([`is_container_name`]).
pub fn is_container_ref(engine: &str, name: &str) -> bool {
    match engine {
        "containerd" => {
            name.len() <= CONTAINER_NAME_BYTES_MAX
                && name.split_once('/').is_some_and(|(ns, id)| {
                    is_containerd_identifier(ns) && is_containerd_identifier(id)
                })
        }
        _ => is_container_name(name),
    }
}

/// Whether `s` is an identifier as containerd takes a namespace or a container id: letters
/// and digits in runs joined by one `_`, `.` or `-`, at most 76 bytes.
pub fn is_containerd_identifier(s: &str) -> bool {
    s.len() <= 76
        && s.split(['_', '.', '-'])
            .all(|run| !run.is_empty() && run.chars().all(|c| c.is_ascii_alphanumeric()))
}

impl Canonical for ContainerRef {
    fn to_value(&self) -> Value {
        let mut fields = vec![
            cbor::text(&self.engine),
            cbor::text(&self.name),
            cbor::text(&self.socket),
        ];
        if let Some(id) = &self.pinned {
            fields.push(cbor::text(id));
        }
        cbor::array(fields)
    }
    fn from_value(v: Value) -> Result<Self, DecodeError> {
        let mut f = Fields::open_between(v, "container", 3, 4)?;
        let mut c = ContainerRef {
            engine: f.text(TEXT_BYTES_MAX)?,
            name: f.text(CONTAINER_NAME_BYTES_MAX)?,
            socket: f.path()?,
            pinned: None,
        };
        if f.more() {
            c.pinned = Some(f.text(CONTAINER_ID_HEX_DIGITS)?);
        }
        let pin_fits = match (&c.pinned, c.engine.as_str()) {
            (None, _) => true,
            (Some(_), "containerd") => false,
            (Some(id), _) => is_container_id(id),
        };
        if !CONTAINER_ENGINES.contains(&c.engine.as_str())
            || !is_container_ref(&c.engine, &c.name)
            || !c.socket.starts_with('/')
            || !pin_fits
        {
            return Err(DecodeError::schema(
                "container",
                "an engine of docker, podman or containerd, a container name, an absolute socket path, and for docker and podman only, optionally, a full id (64 lowercase hex digits)",
            ));
        }
        Ok(c)
    }
}

//! The plugin registry: ConfigMap `wasmop-plugins`, key `plugins.yaml` (format in DESIGN.md and
//! the README), turned into loaded plugins and swapped in atomically.
//!
//! - Builtins are always registered under their own names (`routing-istio`, …); entries in
//!   `plugins:` add plugins or replace a builtin of the same name.
//! - `defaults:` picks the plugin per hook; a missing default is the hook's builtin.
//! - A reload compiles only entries whose source, digest, settings, limits or grants changed,
//!   [`CONCURRENT_LOADS`] at a time, on tokio's blocking pool. An entry that fails keeps its
//!   last good version serving and its error is reported by [`Registry::status`] (for CR
//!   conditions) and in the reload report (for the ConfigMap's Event). The operator's reloads
//!   ([`Registry::apply_notifying`]) serve the other entries once [`LOAD_WAIT`] has passed,
//!   while a slow one (a hanging download) is `Loading`.
//! - An entry that failed at its source ([`LoadError::at_source`]) is loaded again by
//!   [`Registry::retry`], which the ConfigMap watch calls with a backoff.
//! - A routing entry may build on another (`after: ENTRY`): [`Registry::resolve_chain_for`]
//!   gives the entries a call goes through, the earliest first. An `after:` that names no
//!   routing entry, the entry itself, or closes a cycle fails the entry ([`after_errors`]),
//!   checked again on every reload since it depends on the other entries.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde::{Deserialize, Serialize};

use crate::builtin;
use crate::error::LoadError;
use crate::plugin::Plugin;
use crate::runtime::PluginRuntime;
use crate::spec::{Hook, PluginSpec};

/// Entries a reload or retry fetches and compiles at a time.
pub const CONCURRENT_LOADS: usize = 4;

/// How long the operator's reload waits for its entries before it serves those that loaded
/// and marks the rest `Loading` ([`Registry::apply_notifying`]).
pub const LOAD_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Name of the registry ConfigMap in the operator's namespace.
pub const CONFIGMAP_NAME: &str = "wasmop-plugins";
/// Key of the registry document in that ConfigMap.
pub const CONFIGMAP_KEY: &str = "plugins.yaml";

/// The parsed `plugins.yaml`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegistryConfig {
    /// Plugin entries, in addition to (or replacing) the builtins.
    #[serde(default)]
    pub plugins: Vec<PluginSpec>,
    /// The plugin used per hook when a CR names none.
    #[serde(default)]
    pub defaults: BTreeMap<Hook, String>,
}

impl RegistryConfig {
    /// Parses and checks a `plugins.yaml` document.
    ///
    /// # Errors
    /// YAML errors (with line and column, e.g. an unknown field or hook), an empty or duplicate
    /// name, a default naming an unknown plugin or one of another hook. What is wrong within one
    /// entry (its source, `sha256`, limits or grants) fails that entry when it loads, not the
    /// document: its last good version keeps serving.
    pub fn parse(yaml: &str) -> Result<Self, String> {
        let config: Self =
            serde_yaml::from_str(yaml).map_err(|e| format!("{CONFIGMAP_KEY}: {e}"))?;
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<(), String> {
        let mut seen = BTreeMap::new();
        for (i, p) in self.plugins.iter().enumerate() {
            if p.name.is_empty() {
                return Err(format!("{CONFIGMAP_KEY}: plugins[{i}]: name is empty"));
            }
            if seen.insert(p.name.clone(), p.hook).is_some() {
                return Err(format!(
                    "{CONFIGMAP_KEY}: plugins[{i}] ({}): duplicate name",
                    p.name
                ));
            }
        }
        for b in builtin::BUILTINS {
            seen.entry(b.name.to_owned()).or_insert(b.hook);
        }
        for (hook, name) in &self.defaults {
            if let Some(p) = self.plugins.iter().find(|p| &p.name == name)
                && p.allowed_namespaces.is_some()
            {
                return Err(format!(
                    "{CONFIGMAP_KEY}: defaults.{hook}: {name} sets allowedNamespaces, but a \
                     default serves resources of every namespace"
                ));
            }
            if let Some(base) = self.restricted_base(name) {
                return Err(format!(
                    "{CONFIGMAP_KEY}: defaults.{hook}: {name} builds on {base} (after), which \
                     sets allowedNamespaces, but a default serves resources of every namespace"
                ));
            }
            match seen.get(name) {
                None => {
                    return Err(format!(
                        "{CONFIGMAP_KEY}: defaults.{hook}: no plugin named {name:?}"
                    ));
                }
                Some(h) if h != hook => {
                    return Err(format!(
                        "{CONFIGMAP_KEY}: defaults.{hook}: {name} is a {h} plugin"
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The first entry that entry `name` builds on (`after:`, followed while it names an
    /// entry and closes no cycle) that sets `allowedNamespaces`, if any.
    fn restricted_base(&self, name: &str) -> Option<&str> {
        let mut seen = BTreeSet::from([name]);
        let mut next = self
            .plugins
            .iter()
            .find(|p| p.name == name)?
            .after
            .as_deref();
        while let Some(after) = next.filter(|a| seen.insert(*a)) {
            let base = self.plugins.iter().find(|p| p.name == after)?;
            if base.allowed_namespaces.is_some() {
                return Some(after);
            }
            next = base.after.as_deref();
        }
        None
    }

    /// Every entry including the builtins not replaced by an entry of the same name.
    pub(crate) fn effective_plugins(&self) -> Vec<PluginSpec> {
        let mut out = self.plugins.clone();
        for b in builtin::BUILTINS {
            if !out.iter().any(|p| p.name == b.name) {
                out.push(PluginSpec::new(
                    b.name,
                    b.hook,
                    &format!("builtin://{}", b.name),
                ));
            }
        }
        out
    }
}

/// The entries of `plugins` (every entry, the builtins included) whose `after:` cannot be
/// used, each with why, as one sentence: `after` on an entry of another hook than routing, an
/// `after` naming the entry itself, no entry, or an entry of another hook, and an `after` that
/// closes a cycle (`a → b → a`: each entry of the cycle gets the error). An entry whose
/// `after` leads into a cycle it is not part of, or to an entry that fails for another reason,
/// is not refused here: that entry has its own error, and the chain is resolved from the
/// versions serving ([`Registry::resolve_chain_for`]).
///
/// The registry fails these entries on every reload (their last good version keeps serving),
/// and `wasmop plugin check-registry` reports them.
pub fn after_errors(plugins: &[PluginSpec]) -> BTreeMap<String, String> {
    let by_name: BTreeMap<&str, &PluginSpec> =
        plugins.iter().map(|p| (p.name.as_str(), p)).collect();
    let mut errors = BTreeMap::new();
    for p in plugins {
        let Some(after) = p.after.as_deref() else {
            continue;
        };
        let error = if p.hook != Hook::Routing {
            Some(format!(
                "after applies to routing entries only, and {} is a {} entry: remove after",
                p.name, p.hook
            ))
        } else if after == p.name {
            Some(format!(
                "after: {after} is the entry itself; name the routing entry whose answer it \
                 refines, e.g. after: routing-istio"
            ))
        } else {
            match by_name.get(after) {
                None => Some(format!(
                    "after: no entry named {after:?} in {CONFIGMAP_KEY}, nor a builtin; name \
                     the routing entry whose answer it refines, e.g. after: routing-istio"
                )),
                Some(base) if base.hook != Hook::Routing => Some(format!(
                    "after: {after} is a {} plugin; a routing entry refines the answer of a \
                     routing entry",
                    base.hook
                )),
                Some(_) => cycle_through(p, &by_name).map(|cycle| {
                    format!(
                        "after: {} is a cycle: entries cannot build on each other; remove \
                         after from one of them",
                        cycle.join(" → ")
                    )
                }),
            }
        };
        if let Some(e) = error {
            errors.insert(p.name.clone(), e);
        }
    }
    errors
}

/// The names from `p` along `after:` back to `p` when they form a cycle through it.
fn cycle_through<'a>(
    p: &'a PluginSpec,
    by_name: &BTreeMap<&str, &'a PluginSpec>,
) -> Option<Vec<&'a str>> {
    let mut path = vec![p.name.as_str()];
    let mut current = p;
    while let Some(next) = current.after.as_deref() {
        if next == p.name {
            path.push(next);
            return Some(path);
        }
        if path.contains(&next) {
            // A cycle further on, which `p` is not part of.
            return None;
        }
        path.push(next);
        current = by_name.get(next)?;
    }
    None
}

/// Where a component's bytes come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// `builtin://NAME`: embedded in the binary.
    Builtin(String),
    /// `configmap://NAME/KEY`: `binaryData[KEY]` of ConfigMap NAME in the operator namespace.
    ConfigMap {
        /// ConfigMap name.
        name: String,
        /// Key in `binaryData`.
        key: String,
    },
    /// `file:///path`: a file on the operator's filesystem.
    File(String),
    /// `https://…`: downloaded over TLS.
    Https(String),
    /// `oci://…`: pulled from an OCI registry ([`crate::oci`]).
    Oci(OciSource),
}

/// An `oci://` source with the entry's registry options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciSource {
    /// The reference.
    pub reference: crate::oci::OciReference,
    /// Plain HTTP (`insecure: true`), for a registry on loopback only.
    pub insecure: bool,
    /// The entry's `pullSecret`: a `kubernetes.io/dockerconfigjson` Secret in the operator's
    /// namespace.
    pub pull_secret: Option<String>,
}

impl Source {
    /// Parses a `source:` value.
    ///
    /// # Errors
    /// An unknown scheme or a malformed `configmap://` reference.
    pub fn parse(s: &str) -> Result<Self, String> {
        if let Some(name) = s.strip_prefix("builtin://") {
            Ok(Self::Builtin(name.to_owned()))
        } else if let Some(rest) = s.strip_prefix("configmap://") {
            match rest.split_once('/') {
                Some((name, key)) if !name.is_empty() && !key.is_empty() && !key.contains('/') => {
                    Ok(Self::ConfigMap {
                        name: name.to_owned(),
                        key: key.to_owned(),
                    })
                }
                _ => Err(format!("source {s:?}: expected configmap://NAME/KEY")),
            }
        } else if let Some(path) = s.strip_prefix("file://") {
            if path.starts_with('/') {
                Ok(Self::File(path.to_owned()))
            } else {
                Err(format!("source {s:?}: expected file:///absolute/path"))
            }
        } else if s.starts_with("https://") {
            Ok(Self::Https(s.to_owned()))
        } else if s.starts_with("oci://") {
            Ok(Self::Oci(OciSource {
                reference: crate::oci::OciReference::parse(s)?,
                insecure: false,
                pull_secret: None,
            }))
        } else {
            Err(format!(
                "source {s:?}: expected builtin://, configmap://, file://, https:// or oci://"
            ))
        }
    }

    /// The source of registry entry `p`: its `source:` parsed, with its `insecure` and
    /// `pullSecret` for an `oci://` one.
    ///
    /// # Errors
    /// As [`Source::parse`]; `insecure` for a registry not on loopback; `insecure` or
    /// `pullSecret` on a source that is not `oci://`; an empty `pullSecret`.
    pub fn of_entry(p: &PluginSpec) -> Result<Self, String> {
        let mut source = Self::parse(&p.source)?;
        match &mut source {
            Self::Oci(oci) => {
                oci.reference.check_insecure(p.insecure)?;
                if p.pull_secret.as_deref() == Some("") {
                    return Err("pullSecret is empty: name a Secret of type \
                                kubernetes.io/dockerconfigjson, or leave it out for an \
                                anonymous pull"
                        .into());
                }
                oci.insecure = p.insecure;
                oci.pull_secret = p.pull_secret.clone();
            }
            _ if p.insecure => {
                return Err(format!(
                    "insecure applies to oci:// sources only, not {}",
                    p.source
                ));
            }
            _ if p.pull_secret.is_some() => {
                return Err(format!(
                    "pullSecret applies to oci:// sources only, not {}",
                    p.source
                ));
            }
            _ => {}
        }
        Ok(source)
    }
}

/// Fetches component bytes for non-builtin sources.
#[async_trait::async_trait]
pub trait Fetch: Send + Sync {
    /// The bytes of `source`.
    ///
    /// # Errors
    /// A message saying what could not be read and why.
    async fn fetch(&self, source: &Source) -> Result<Vec<u8>, String>;
}

/// Reads `file://`, `https://` and `oci://` sources (an `oci://` one with a `pullSecret` with
/// the credentials of [`LocalFetch::docker_config`]); `configmap://` needs a cluster (the
/// operator reads those, and the pull Secrets).
#[derive(Clone, Debug, Default)]
pub struct LocalFetch {
    /// PEM certificates trusted for `https://` and `oci://` sources in addition to the system's
    /// roots.
    pub extra_ca_pem: Option<Vec<u8>>,
    /// A Docker config (`~/.docker/config.json`) whose credentials stand in for the pull
    /// Secrets of `oci://` entries; `None` refuses an entry with a `pullSecret`.
    pub docker_config: Option<Vec<u8>>,
}

/// Pulls the component of `source` with `credentials` and `extra_ca_pem` as trusted roots
/// besides the system's.
///
/// # Errors
/// As [`crate::oci::pull`].
pub async fn oci_pull(
    source: &OciSource,
    credentials: crate::oci::Credentials,
    extra_ca_pem: Option<&[u8]>,
) -> Result<Vec<u8>, String> {
    let options = crate::oci::OciOptions {
        insecure: source.insecure,
        extra_ca_pem,
        credentials,
    };
    Ok(crate::oci::pull(&source.reference, &options).await?.bytes)
}

pub use crate::runtime::MAX_COMPONENT_BYTES;
/// The end of the message of a component over [`MAX_COMPONENT_BYTES`].
const OVER_THE_LIMIT: &str = "over the 256 MiB (268435456 bytes) a component may have";

/// Time allowed for downloading one component.
pub const DOWNLOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// Time allowed for the TCP connection of one `https://` request (the first, or one a redirect
/// leads to): a host that drops packets (a firewall) fails the entry with that cause instead
/// of the download timeout.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// The system's trusted roots, read once per process (as rustls-native-certs advises): a
/// retried download does not read them again.
static SYSTEM_ROOTS: std::sync::LazyLock<rustls::RootCertStore> = std::sync::LazyLock::new(|| {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    roots
});

/// Redirects an `https://` download follows, at most.
pub const MAX_REDIRECTS: usize = 5;

/// Downloads `url` over TLS, verifying the server against the system's roots (`SSL_CERT_FILE`
/// and `SSL_CERT_DIR` are honoured, as read at the first download) plus `extra_ca_pem`.
/// Follows up to [`MAX_REDIRECTS`] redirects (a release asset's URL usually redirects to its
/// storage), to `https://` URLs only; the entry's sha256 pins what arrives wherever it comes
/// from.
///
/// # Errors
/// A message naming the URL: TLS or connection failure, a status other than 200 (after
/// redirects), a redirect to a URL that is not `https://` or more than [`MAX_REDIRECTS`] of
/// them, a body over [`MAX_COMPONENT_BYTES`] (refused before it is read when its
/// `Content-Length` says so; a body is read frame by frame into one buffer), no connection
/// within [`CONNECT_TIMEOUT`], or a download past [`DOWNLOAD_TIMEOUT`].
pub async fn https_get(url: &str, extra_ca_pem: Option<&[u8]>) -> Result<Vec<u8>, String> {
    use http_body_util::Empty;
    let tls = super::http_pool::tls_config(SYSTEM_ROOTS.clone(), extra_ca_pem)?;
    let mut tcp = hyper_util::client::legacy::connect::HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_connect_timeout(Some(CONNECT_TIMEOUT));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .wrap_connector(tcp);
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, Empty<bytes::Bytes>>(connector);
    let download = async {
        let mut current = url.to_owned();
        for _ in 0..=MAX_REDIRECTS {
            let uri: http::Uri = current
                .parse()
                .map_err(|e| format!("{url}: not a valid URL {current}: {e}"))?;
            // The chain of causes, e.g. "client error (Connect): tcp connect error: Connection
            // refused (os error 111)", rather than the client's nested Debug dump.
            let response = client.get(uri).await.map_err(|e| {
                if timed_out(&e) {
                    format!(
                        "{}: no connection within {CONNECT_TIMEOUT:?}: the host does not answer \
                         (is it reachable from the operator's network?)",
                        via(url, &current)
                    )
                } else {
                    format!("{}: {:#}", via(url, &current), anyhow::Error::from(e))
                }
            })?;
            let status = response.status();
            if status.is_redirection()
                && let Some(location) = response.headers().get(http::header::LOCATION)
            {
                let next = location
                    .to_str()
                    .ok()
                    .and_then(|l| url::Url::parse(&current).ok()?.join(l).ok())
                    .ok_or_else(|| {
                        format!(
                            "{}: the server answered {status} with a Location that is not a URL",
                            via(url, &current)
                        )
                    })?;
                if next.scheme() != "https" {
                    return Err(format!(
                        "{}: the server redirects to {next}, which is not https://; refused",
                        via(url, &current)
                    ));
                }
                current = next.into();
                continue;
            }
            if status != http::StatusCode::OK {
                return Err(format!(
                    "{}: the server answered {status}",
                    via(url, &current)
                ));
            }
            return read_body(response.into_body(), &via(url, &current)).await;
        }
        Err(format!(
            "{url}: more than {MAX_REDIRECTS} redirects (last to {current})"
        ))
    };
    tokio::time::timeout(DOWNLOAD_TIMEOUT, download)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "{url}: no complete answer within {DOWNLOAD_TIMEOUT:?}"
            ))
        })
}

/// The body of a component download from `shown` (the URL, and where a redirect led), read
/// frame by frame into one buffer: a body that announces more than [`MAX_COMPONENT_BYTES`]
/// (`Content-Length`) is refused before any of it is read, and one that goes past it is
/// dropped there.
///
/// # Errors
/// Over [`MAX_COMPONENT_BYTES`], or the connection failed while reading.
async fn read_body(mut body: hyper::body::Incoming, shown: &str) -> Result<Vec<u8>, String> {
    use http_body_util::BodyExt as _;
    use hyper::body::Body as _;
    let too_large = |size: String| format!("{shown}: the component is {size}, {OVER_THE_LIMIT}");
    let announced = body.size_hint().exact();
    if let Some(n) = announced.filter(|&n| n > MAX_COMPONENT_BYTES as u64) {
        return Err(too_large(format!("{n} bytes (its Content-Length)")));
    }
    let mut bytes = Vec::with_capacity(announced.unwrap_or(0) as usize);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("{shown}: reading the body failed: {e}"))?;
        if let Ok(data) = frame.into_data() {
            if bytes.len() + data.len() > MAX_COMPONENT_BYTES {
                return Err(too_large("more than that".to_owned()));
            }
            bytes.extend_from_slice(&data);
        }
    }
    Ok(bytes)
}

/// Reads a `file://` source at `path`: a regular file (a symlink to one is followed) of at
/// most [`MAX_COMPONENT_BYTES`]. Its type and size are checked before it is opened and again
/// on what was opened (without blocking, so a FIFO swapped in meanwhile cannot hang the open),
/// and no more than the limit is ever read. Blocking file I/O.
///
/// # Errors
/// A message naming the path: it cannot be read, is not a regular file (a directory, a FIFO,
/// a device such as `/dev/zero`, a socket: named), or is over [`MAX_COMPONENT_BYTES`].
pub fn read_component_file(path: &str) -> Result<Vec<u8>, String> {
    use std::io::Read as _;
    let cannot = |e: std::io::Error| format!("cannot read {path}: {e}");
    let check = |meta: &std::fs::Metadata| {
        use std::os::unix::fs::FileTypeExt as _;
        let t = meta.file_type();
        let kind = if t.is_file() {
            None
        } else if t.is_dir() {
            Some("a directory")
        } else if t.is_fifo() {
            Some("a FIFO")
        } else if t.is_char_device() {
            Some("a character device")
        } else if t.is_block_device() {
            Some("a block device")
        } else if t.is_socket() {
            Some("a socket")
        } else {
            Some("not a file")
        };
        if let Some(kind) = kind {
            return Err(format!(
                "{path} is {kind}, not a regular file: a file:// source must be a regular file \
                 (a symlink to one is followed)"
            ));
        }
        if meta.len() > MAX_COMPONENT_BYTES as u64 {
            return Err(format!("{path} is {} bytes, {OVER_THE_LIMIT}", meta.len()));
        }
        Ok(())
    };
    check(&std::fs::metadata(path).map_err(cannot)?)?;
    let file = open_nonblocking(path).map_err(cannot)?;
    let meta = file.metadata().map_err(cannot)?;
    check(&meta)?;
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_COMPONENT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(cannot)?;
    if bytes.len() > MAX_COMPONENT_BYTES {
        return Err(format!("{path} grew while it was read, {OVER_THE_LIMIT}"));
    }
    Ok(bytes)
}

/// `path` opened for reading without blocking in `open` (a FIFO without a writer) and without
/// making a terminal the controlling one.
fn open_nonblocking(path: &str) -> std::io::Result<std::fs::File> {
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
        Ok(std::fs::File::from(rustix::fs::open(
            path,
            flags,
            Mode::empty(),
        )?))
    }
    #[cfg(not(target_os = "linux"))]
    {
        std::fs::File::open(path)
    }
}

/// Whether `e` is a connect that ran out of [`CONNECT_TIMEOUT`].
fn timed_out(e: &hyper_util::client::legacy::Error) -> bool {
    e.is_connect()
        && super::http_pool::causes(e).any(|c| {
            c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        })
}

/// `url`, and the URL a redirect led to when it is another.
fn via(url: &str, current: &str) -> String {
    if url == current {
        url.to_owned()
    } else {
        format!("{url} (redirected to {current})")
    }
}

#[async_trait::async_trait]
impl Fetch for LocalFetch {
    async fn fetch(&self, source: &Source) -> Result<Vec<u8>, String> {
        match source {
            Source::File(path) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || read_component_file(&path))
                    .await
                    .map_err(|e| format!("reading the file failed: {e}"))?
            }
            Source::Builtin(name) => builtin::find(name)
                .map(|b| b.wasm.to_vec())
                .ok_or_else(|| builtin::unknown(name)),
            Source::ConfigMap { name, key } => Err(format!(
                "configmap://{name}/{key} needs a cluster connection"
            )),
            Source::Https(url) => https_get(url, self.extra_ca_pem.as_deref()).await,
            Source::Oci(oci) => {
                let credentials = match (&oci.pull_secret, &self.docker_config) {
                    (None, _) => crate::oci::Credentials::Anonymous,
                    (Some(secret), None) => {
                        return Err(format!(
                            "pullSecret {secret} is read in the cluster; pass a Docker config \
                             with the credentials for {} to use here",
                            oci.reference.registry
                        ));
                    }
                    (Some(_), Some(config)) => {
                        crate::oci::docker_config_credentials(config, &oci.reference.registry)
                            .map_err(|e| format!("the Docker config: {e}"))?
                            .unwrap_or_default()
                    }
                };
                oci_pull(oci, credentials, self.extra_ca_pem.as_deref()).await
            }
        }
    }
}

/// Readiness of one registry entry, as reported in CR conditions (`PluginReady`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginStatus {
    /// The entry name.
    pub name: String,
    /// The hook.
    pub hook: Option<Hook>,
    /// True when the latest version of the entry is loaded and serving.
    pub ready: bool,
    /// `Loaded`, `LoadFailed` (last good still serving), `NotLoaded` (nothing to serve),
    /// `Loading` (a reload is still fetching or compiling it; last good, if any, serving),
    /// `NotFound`, or `WrongHook` (the entry implements another hook; [`Registry::status`]).
    pub reason: String,
    /// Human-readable detail.
    pub message: String,
    /// Digest of the version serving calls, if any.
    pub serving_digest: Option<String>,
}

/// One immutable view of the registry.
#[derive(Clone, Default)]
pub struct Snapshot {
    plugins: BTreeMap<String, Arc<Plugin>>,
    specs: BTreeMap<String, PluginSpec>,
    errors: BTreeMap<String, String>,
    defaults: BTreeMap<Hook, String>,
    config_error: Option<String>,
    /// Failed entries whose failure was at their source ([`LoadError::at_source`]).
    retry: BTreeSet<String>,
    /// Entries of the latest config still loading when an interim snapshot was swapped in
    /// ([`Registry::apply_notifying`]).
    loading: BTreeSet<String>,
    /// Entries failed for their `after:` ([`after_errors`]): checked again on every reload,
    /// since the entries they name may have changed.
    after_failed: BTreeSet<String>,
}

impl Snapshot {
    /// Records the load of changed entry `spec`: its plugin, or its error with the last good
    /// version of `old` kept serving.
    fn settle(
        &mut self,
        old: &Snapshot,
        spec: &PluginSpec,
        result: Result<Arc<Plugin>, LoadError>,
        report: &mut ReloadReport,
    ) {
        let name = &spec.name;
        match result {
            Ok(plugin) => {
                self.plugins.insert(name.clone(), plugin);
                report.loaded.push(name.clone());
            }
            Err(e) => {
                self.keep_serving(old, spec);
                if e.at_source {
                    self.retry.insert(name.clone());
                }
                self.errors.insert(name.clone(), e.message.clone());
                report.failed.push((name.clone(), e.message));
            }
        }
    }

    /// Keeps `old`'s version of `spec` serving, if it is for the same hook.
    fn keep_serving(&mut self, old: &Snapshot, spec: &PluginSpec) {
        if let Some(p) = old
            .plugins
            .get(&spec.name)
            .filter(|p| p.spec().hook == spec.hook)
        {
            self.plugins.insert(spec.name.clone(), p.clone());
        }
    }

    /// The entry a resource of `hook` uses: `name` (its `spec.plugin`) if given, else the
    /// hook's default, else the hook's builtin.
    fn entry_name(&self, hook: Hook, name: Option<&str>) -> String {
        name.map(str::to_owned)
            .or_else(|| self.defaults.get(&hook).cloned())
            .unwrap_or_else(|| builtin::for_hook(hook).name.to_owned())
    }
}

/// Where a resource asking for a plugin is, for messages.
fn place(namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("in namespace {ns}"),
        None => "by a cluster-scoped resource".into(),
    }
}

/// What a reload did, for logs and the ConfigMap's Events.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReloadReport {
    /// Entries (re)loaded successfully.
    pub loaded: Vec<String>,
    /// Entries that failed to load, with the error (their last good version, if any, keeps serving).
    pub failed: Vec<(String, String)>,
    /// Entries removed from the registry.
    pub removed: Vec<String>,
}

/// Why no plugin could be resolved for a call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// No entry with that name.
    #[error("no plugin named {0:?} in {CONFIGMAP_NAME}")]
    NotFound(String),
    /// The entry's `allowedNamespaces` does not include the resource's namespace.
    #[error("plugin {name:?} may not be used {place}: its allowedNamespaces does not include it")]
    NotAllowed {
        /// Entry name.
        name: String,
        /// Where the resource is, e.g. `in namespace a` or `by a cluster-scoped resource`.
        place: String,
    },
    /// The entry exists but implements another hook.
    #[error("plugin {name:?} is a {found} plugin; this resource needs a {want} plugin")]
    WrongHook {
        /// Entry name.
        name: String,
        /// Its hook.
        found: Hook,
        /// The hook asked for.
        want: Hook,
    },
    /// The entry never loaded successfully.
    #[error("plugin {name:?} is not loaded: {error}")]
    NotLoaded {
        /// Entry name.
        name: String,
        /// Its load error.
        error: String,
    },
    /// The entry builds on another (`after:`) that cannot be used.
    #[error("plugin {name:?} builds on {after:?} (after), which cannot be used: {error}")]
    After {
        /// Entry name.
        name: String,
        /// The entry it builds on.
        after: String,
        /// Why that one cannot be used.
        error: Box<ResolveError>,
    },
    /// The versions serving build on each other in a cycle (a newer version of one of them,
    /// which would break it, failed to load). Each name is the next one's `after`.
    #[error(
        "plugins {} build on each other in a cycle (after), as the versions serving are; one \
         of them has a newer version that failed to load: see its PluginReady and fix it",
        .0.join(" → ")
    )]
    Cycle(Vec<String>),
}

/// The live registry: loaded plugins behind an atomically swapped snapshot.
pub struct Registry {
    runtime: Arc<PluginRuntime>,
    current: ArcSwap<Snapshot>,
    reload: tokio::sync::Mutex<()>,
    /// Set by the first [`Registry::reloaded`].
    loaded: std::sync::atomic::AtomicBool,
    /// Counts [`Registry::reloaded`] calls, for [`Registry::reloads`].
    reloads: tokio::sync::watch::Sender<u64>,
}

impl Registry {
    /// An empty registry; call [`Registry::apply`] to load.
    pub fn new(runtime: Arc<PluginRuntime>) -> Arc<Self> {
        Arc::new(Self {
            runtime,
            current: ArcSwap::from_pointee(Snapshot::default()),
            reload: tokio::sync::Mutex::new(()),
            loaded: std::sync::atomic::AtomicBool::new(false),
            reloads: tokio::sync::watch::Sender::new(0),
        })
    }

    /// Tells the users of the registry that a reload (or retry) changed what it serves: marks
    /// it loaded, sets the registry gauges (`wasmop_plugin_ready`,
    /// `wasmop_plugins_config_last_reload_successful`) and ticks every [`Registry::reloads`]
    /// receiver. The operator calls it after each reload.
    pub fn reloaded(&self) {
        let (statuses, config_error) = self.statuses();
        self.runtime.metrics().registry_state(
            statuses.iter().map(|s| (s.name.as_str(), s.hook, s.ready)),
            config_error.is_none(),
        );
        self.loaded
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.reloads.send_modify(|n| *n += 1);
    }

    /// Whether [`Registry::reloaded`] was called once (the operator's readiness).
    pub fn loaded(&self) -> bool {
        self.loaded.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A receiver that changes after every [`Registry::reloaded`] (for `PluginReady` and for
    /// reconciling again the resources whose plugin changed).
    pub fn reloads(&self) -> tokio::sync::watch::Receiver<u64> {
        self.reloads.subscribe()
    }

    /// The plugin runtime.
    pub fn runtime(&self) -> &Arc<PluginRuntime> {
        &self.runtime
    }

    /// The plugin for `hook`: `name` if given (a CR's `spec.plugin`), else the hook's default.
    /// A name whose latest version failed to load resolves to its last good version.
    ///
    /// # Errors
    /// [`ResolveError`] when the name is unknown, of another hook, or never loaded.
    pub fn resolve(&self, hook: Hook, name: Option<&str>) -> Result<Arc<Plugin>, ResolveError> {
        self.resolve_with(hook, name, None)
    }

    /// [`Registry::resolve`] for a resource in `namespace` (`None`: a cluster-scoped one):
    /// also [`ResolveError::NotAllowed`] when the entry's `allowedNamespaces` leaves it out.
    ///
    /// # Errors
    /// [`ResolveError`].
    pub fn resolve_for(
        &self,
        hook: Hook,
        name: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<Arc<Plugin>, ResolveError> {
        self.resolve_with(hook, name, Some(namespace))
    }

    /// `requester`: `None` for the operator itself, `Some(namespace)` for a resource.
    fn resolve_with(
        &self,
        hook: Hook,
        name: Option<&str>,
        requester: Option<Option<&str>>,
    ) -> Result<Arc<Plugin>, ResolveError> {
        resolve_in(&self.current.load(), hook, name, requester)
    }

    /// The plugins a call of `hook` for entry `name` (or the hook's default) goes through, the
    /// earliest first: the entries it builds on (`after:` of each version serving, followed
    /// back), then the entry itself. Without `after:`, just the entry.
    ///
    /// # Errors
    /// As [`Registry::resolve`] for the entry, [`ResolveError::After`] when an entry it builds
    /// on cannot be resolved, [`ResolveError::Cycle`] when the versions serving form a cycle.
    pub fn resolve_chain(
        &self,
        hook: Hook,
        name: Option<&str>,
    ) -> Result<Vec<Arc<Plugin>>, ResolveError> {
        self.chain_with(hook, name, None)
    }

    /// [`Registry::resolve_chain`] for a resource in `namespace` (`None`: a cluster-scoped
    /// one): every entry of the chain must allow it (`allowedNamespaces`).
    ///
    /// # Errors
    /// As [`Registry::resolve_chain`], and [`ResolveError::NotAllowed`] (of the entry, or
    /// within [`ResolveError::After`] for one it builds on).
    pub fn resolve_chain_for(
        &self,
        hook: Hook,
        name: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<Vec<Arc<Plugin>>, ResolveError> {
        self.chain_with(hook, name, Some(namespace))
    }

    fn chain_with(
        &self,
        hook: Hook,
        name: Option<&str>,
        requester: Option<Option<&str>>,
    ) -> Result<Vec<Arc<Plugin>>, ResolveError> {
        let snap = self.current.load();
        let mut chain = vec![resolve_in(&snap, hook, name, requester)?];
        while let Some(last) = chain.last().map(|p| p.spec().clone())
            && let Some(after) = last.after
        {
            if chain.iter().any(|p| p.spec().name == after) {
                let mut names: Vec<String> = chain.iter().map(|p| p.spec().name.clone()).collect();
                names.push(after);
                return Err(ResolveError::Cycle(names));
            }
            let base = resolve_in(&snap, hook, Some(&after), requester).map_err(|e| {
                ResolveError::After {
                    name: last.name.clone(),
                    after: after.clone(),
                    error: Box::new(e),
                }
            })?;
            chain.push(base);
        }
        chain.reverse();
        Ok(chain)
    }
}

/// [`Registry::resolve_with`] on the snapshot `snap`.
fn resolve_in(
    snap: &Snapshot,
    hook: Hook,
    name: Option<&str>,
    requester: Option<Option<&str>>,
) -> Result<Arc<Plugin>, ResolveError> {
    let name = snap.entry_name(hook, name);
    let Some(spec) = snap.specs.get(&name) else {
        return Err(ResolveError::NotFound(name));
    };
    if let Some(namespace) = requester
        && !spec.allows(namespace)
    {
        return Err(ResolveError::NotAllowed {
            name,
            place: place(namespace),
        });
    }
    if spec.hook != hook {
        return Err(ResolveError::WrongHook {
            name,
            found: spec.hook,
            want: hook,
        });
    }
    match snap.plugins.get(&name) {
        Some(p) => Ok(p.clone()),
        None => Err(ResolveError::NotLoaded {
            error: if snap.loading.contains(&name) {
                LOADING.to_owned()
            } else {
                snap.errors
                    .get(&name)
                    .cloned()
                    .unwrap_or_else(|| "not loaded yet".into())
            },
            name,
        }),
    }
}

/// The status of entry `name` (or the hook's default) for a CR of `hook`: its own
/// ([`status_of`]), `WrongHook` when it implements another hook, and for a resource
/// (`requester` `Some(namespace)`) `NotAllowed` when its `allowedNamespaces` leaves it out.
fn entry_status(
    snap: &Snapshot,
    hook: Hook,
    name: Option<&str>,
    requester: Option<Option<&str>>,
) -> PluginStatus {
    let name = snap.entry_name(hook, name);
    let mut status = status_of(snap, &name);
    if let Some(found) = status.hook.filter(|&h| h != hook) {
        status.ready = false;
        status.reason = "WrongHook".into();
        status.message = format!("it is a {found} plugin; this resource needs a {hook} plugin");
    }
    if let Some(namespace) = requester
        && let Some(spec) = snap.specs.get(&status.name)
        && !spec.allows(namespace)
    {
        status.ready = false;
        status.reason = "NotAllowed".into();
        status.message = format!(
            "it may not be used {}: its allowedNamespaces does not include it",
            place(namespace)
        );
    }
    status
}

/// [`entry_status`], not ready when an entry it builds on (`after:` of the versions serving)
/// is not, with that entry's reason; when ready, its message names them.
fn chain_status(
    snap: &Snapshot,
    hook: Hook,
    name: Option<&str>,
    requester: Option<Option<&str>>,
) -> PluginStatus {
    let mut status = entry_status(snap, hook, name, requester);
    if !status.ready {
        return status;
    }
    let after_of = |name: &str| snap.plugins.get(name).and_then(|p| p.spec().after.clone());
    let mut chain = vec![status.name.clone()];
    let mut next = after_of(&status.name);
    while let Some(after) = next {
        if chain.contains(&after) {
            chain.push(after);
            status.ready = false;
            status.reason = "NotLoaded".into();
            status.message = ResolveError::Cycle(chain).to_string();
            return status;
        }
        let base = entry_status(snap, hook, Some(&after), requester);
        if !base.ready {
            status.ready = false;
            status.reason = base.reason;
            status.message = format!(
                "it builds on {after} (after), which is not ready: {}",
                base.message
            );
            return status;
        }
        next = after_of(&after);
        chain.push(after);
    }
    if chain.len() > 1 {
        status.message = format!(
            "{}; builds on {}",
            status.message,
            chain[1..].join(", which builds on ")
        );
    }
    status
}

impl Registry {
    /// The readiness of the plugin a CR of `hook` naming `name` (or none) uses: the entry's
    /// own status, or `WrongHook` (not ready) when the entry implements another hook, as
    /// [`Registry::resolve`] refuses it. An entry that builds on others (`after:`) is ready
    /// only when they are too: otherwise it takes the reason of the first that is not, and
    /// says so; a ready one's message names them.
    pub fn status(&self, hook: Hook, name: Option<&str>) -> PluginStatus {
        chain_status(&self.current.load(), hook, name, None)
    }

    /// [`Registry::status`] for a resource in `namespace` (`None`: a cluster-scoped one):
    /// `NotAllowed` (not ready) when the `allowedNamespaces` of the entry, or of an entry it
    /// builds on, leaves it out.
    pub fn status_for(
        &self,
        hook: Hook,
        name: Option<&str>,
        namespace: Option<&str>,
    ) -> PluginStatus {
        chain_status(&self.current.load(), hook, name, Some(namespace))
    }

    /// The sha256 digests of the components serving calls: each entry's latest version, or
    /// its last good one.
    pub fn serving_digests(&self) -> BTreeSet<String> {
        let snap = self.current.load();
        snap.plugins
            .values()
            .map(|p| p.digest().to_owned())
            .collect()
    }

    /// The readiness of every entry, and the config error if the ConfigMap was rejected.
    pub fn statuses(&self) -> (Vec<PluginStatus>, Option<String>) {
        let snap = self.current.load();
        (
            snap.specs.keys().map(|n| status_of(&snap, n)).collect(),
            snap.config_error.clone(),
        )
    }

    /// Why the registry serves the builtin defaults instead of its ConfigMap (missing,
    /// deleted or invalid), or `None` while the ConfigMap is in use.
    pub fn fallback_reason(&self) -> Option<String> {
        self.current.load().config_error.clone()
    }

    /// Records that the ConfigMap could not be used (missing or malformed) and falls back to the
    /// builtin defaults, keeping every loaded builtin.
    pub async fn apply_fallback(&self, reason: String, fetch: &dyn Fetch) -> ReloadReport {
        let report = self.apply(RegistryConfig::default(), fetch).await;
        let mut snap = Snapshot::clone(&self.current.load());
        snap.config_error = Some(reason);
        self.current.store(Arc::new(snap));
        report
    }

    /// Loads `config`: unchanged entries keep their loaded plugin, changed ones are fetched,
    /// verified and compiled off the executor (several at a time), then the new snapshot is
    /// swapped in at once. The report lists what loaded and what failed, with why; the caller
    /// logs it. Waits for every entry: see [`Registry::apply_notifying`] for a reload that
    /// serves what loaded while a slow entry is still loading.
    pub async fn apply(&self, config: RegistryConfig, fetch: &dyn Fetch) -> ReloadReport {
        self.apply_notifying(config, fetch, None, &|_| {}).await
    }

    /// As [`Registry::apply`]; when entries are still loading after `wait` (a download that
    /// hangs until its 60 s timeout, a large component compiling), swaps in a snapshot with
    /// everything else of `config` and calls `swapped` with their names (sorted). Those entries
    /// are then `Loading` ([`PluginStatus::reason`]) with their last good version, if any,
    /// serving, until the final snapshot. Dropping the future before it ends (a newer
    /// ConfigMap) leaves that interim snapshot, whose loading entries the next apply loads
    /// again.
    pub async fn apply_notifying(
        &self,
        config: RegistryConfig,
        fetch: &dyn Fetch,
        wait: Option<std::time::Duration>,
        swapped: &(dyn Fn(&[String]) + Send + Sync),
    ) -> ReloadReport {
        use futures::StreamExt as _;
        let _guard = self.reload.lock().await;
        let old = self.current.load_full();
        let mut next = Snapshot {
            defaults: config.defaults.clone(),
            ..Snapshot::default()
        };
        let mut changed = Vec::new();
        let mut report = ReloadReport::default();
        let specs = config.effective_plugins();
        let after_errors = after_errors(&specs);
        for spec in specs {
            let name = spec.name.clone();
            if let Some(e) = after_errors.get(&name) {
                let message = format!("invalid {CONFIGMAP_KEY} entry: {e}");
                next.keep_serving(&old, &spec);
                // Reported once while it stays the same, as a failed load is.
                let known = old.after_failed.contains(&name)
                    && old.errors.get(&name) == Some(&message)
                    && old.specs.get(&name) == Some(&spec);
                if !known {
                    report.failed.push((name.clone(), message.clone()));
                }
                next.errors.insert(name.clone(), message);
                next.after_failed.insert(name.clone());
                next.specs.insert(name, spec);
                continue;
            }
            let unchanged = old.specs.get(&name) == Some(&spec)
                && !old.loading.contains(&name)
                && !old.after_failed.contains(&name);
            if unchanged {
                if let Some(p) = old.plugins.get(&name) {
                    next.plugins.insert(name.clone(), p.clone());
                }
                if let Some(e) = old.errors.get(&name) {
                    next.errors.insert(name.clone(), e.clone());
                }
                if old.retry.contains(&name) {
                    next.retry.insert(name.clone());
                }
            } else {
                changed.push(spec.clone());
            }
            next.specs.insert(name, spec);
        }
        // Builtins first: they compile in a fraction of a second and serve the defaults, where
        // a custom component may take seconds (compiles run one at a time).
        changed.sort_by_key(|spec| !spec.source.starts_with("builtin://"));
        let mut loads = Vec::with_capacity(changed.len());
        for spec in &changed {
            loads.push(self.load_labelled(spec, fetch));
        }
        let mut loads = futures::stream::iter(loads).buffer_unordered(CONCURRENT_LOADS);
        if let Some(wait) = wait {
            let deadline = tokio::time::sleep(wait);
            tokio::pin!(deadline);
            loop {
                tokio::select! {
                    loaded = loads.next() => match loaded {
                        Some((spec, result)) => next.settle(&old, spec, result, &mut report),
                        None => break,
                    },
                    () = &mut deadline => {
                        let settled: BTreeSet<&String> = report
                            .loaded
                            .iter()
                            .chain(report.failed.iter().map(|(name, _)| name))
                            .collect();
                        let mut interim = next.clone();
                        for spec in changed.iter().filter(|s| !settled.contains(&s.name)) {
                            interim.keep_serving(&old, spec);
                            interim.loading.insert(spec.name.clone());
                        }
                        let loading: Vec<String> = interim.loading.iter().cloned().collect();
                        self.current.store(Arc::new(interim));
                        swapped(&loading);
                        break;
                    }
                }
            }
        }
        while let Some((spec, result)) = loads.next().await {
            next.settle(&old, spec, result, &mut report);
        }
        // Loads end in any order; reports list entries by name.
        report.loaded.sort();
        report.failed.sort();
        report.removed = old
            .specs
            .keys()
            .filter(|n| !next.specs.contains_key(*n))
            .cloned()
            .collect();
        self.current.store(Arc::new(next));
        report
    }

    /// Whether entry `name` failed at its source and is retried (see [`Registry::retry`]).
    pub fn retrying(&self, name: &str) -> bool {
        self.current.load().retry.contains(name)
    }

    /// Whether an entry failed at its source (unreachable, or bytes that do not match its
    /// sha256), so that [`Registry::retry`] may load it without a change to the registry.
    pub fn has_retryable(&self) -> bool {
        !self.current.load().retry.is_empty()
    }

    /// Loads again every entry that failed at its source (several at a time), keeping
    /// everything else as it is. The report lists the entries that loaded now, and those that
    /// failed with a new error; one that fails as before is left out (logged at debug), so a
    /// retry adds no noise. Dropping the future before it ends changes nothing.
    pub async fn retry(&self, fetch: &dyn Fetch) -> ReloadReport {
        use futures::StreamExt as _;
        let _guard = self.reload.lock().await;
        let old = self.current.load_full();
        let mut next = Snapshot::clone(&old);
        let mut report = ReloadReport::default();
        next.retry.retain(|name| old.specs.contains_key(name));
        let mut loads = Vec::with_capacity(next.retry.len());
        for name in &next.retry {
            loads.push(self.load_labelled(&old.specs[name], fetch));
        }
        let results: Vec<_> = futures::stream::iter(loads)
            .buffer_unordered(CONCURRENT_LOADS)
            .collect()
            .await;
        for (spec, result) in results {
            let name = spec.name.clone();
            match result {
                Ok(plugin) => {
                    next.plugins.insert(name.clone(), plugin);
                    next.errors.remove(&name);
                    next.retry.remove(&name);
                    report.loaded.push(name);
                }
                Err(e) => {
                    if !e.at_source {
                        next.retry.remove(&name);
                    }
                    if old.errors.get(&name) == Some(&e.message) {
                        tracing::debug!(plugin = %name, "retried; fails as before: {}", e.message);
                        continue;
                    }
                    next.errors.insert(name.clone(), e.message.clone());
                    report.failed.push((name, e.message));
                }
            }
        }
        // Loads end in any order; reports list entries by name.
        report.loaded.sort();
        report.failed.sort();
        self.current.store(Arc::new(next));
        report
    }

    /// [`Registry::load_spec`], with the spec it loaded.
    async fn load_labelled<'s>(
        &self,
        spec: &'s PluginSpec,
        fetch: &dyn Fetch,
    ) -> (&'s PluginSpec, Result<Arc<Plugin>, LoadError>) {
        (spec, self.load_spec(spec, fetch).await)
    }

    async fn load_spec(
        &self,
        spec: &PluginSpec,
        fetch: &dyn Fetch,
    ) -> Result<Arc<Plugin>, LoadError> {
        let invalid = |message: String| {
            LoadError::new(
                &spec.name,
                format!("invalid {CONFIGMAP_KEY} entry: {message}"),
            )
        };
        let bytes: std::borrow::Cow<'static, [u8]> = match check_entry(spec).map_err(invalid)? {
            Checked::Builtin(b) => std::borrow::Cow::Borrowed(b.wasm),
            Checked::Fetched(source) => {
                std::borrow::Cow::Owned(fetch.fetch(&source).await.map_err(|message| {
                    LoadError {
                        at_source: true,
                        ..LoadError::new(&spec.name, message)
                    }
                })?)
            }
        };
        self.runtime.load(spec, &bytes).await
    }
}

/// Checks one entry of `plugins.yaml` before it is fetched: its source (a known scheme; a
/// builtin of its hook; `sha256` for every source but a builtin), positive limits and grants
/// the sandbox can enforce. An entry that fails this fails alone, as a load does (its last good
/// version keeps serving); only a document that does not parse, or whose names or defaults
/// do not hold together, is replaced by the builtins.
///
/// Returns where the entry's bytes come from.
///
/// # Errors
/// What is wrong with the entry and how to write it.
fn check_entry(p: &PluginSpec) -> Result<Checked, String> {
    let checked = match Source::of_entry(p)? {
        Source::Builtin(name) => {
            let b = builtin::find(&name).ok_or_else(|| builtin::unknown(&name))?;
            if b.hook != p.hook {
                return Err(format!(
                    "builtin {name} is a {} plugin, not {}",
                    b.hook, p.hook
                ));
            }
            Checked::Builtin(b)
        }
        // A reference by digest pins the manifest, whose layer digest pins the component.
        Source::Oci(oci) if oci.reference.digest.is_some() => Checked::Fetched(Source::Oci(oci)),
        Source::Oci(_) if p.sha256.as_deref().is_none_or(str::is_empty) => {
            return Err(format!(
                "sha256 is required for source {}: pin the tag with the component's sha256 \
                 (`wasmop plugin push` prints it), or reference the manifest by digest \
                 (oci://REGISTRY/REPOSITORY@sha256:…)",
                p.source
            ));
        }
        _ if p.sha256.as_deref().is_none_or(str::is_empty) => {
            return Err(format!("sha256 is required for source {}", p.source));
        }
        source => Checked::Fetched(source),
    };
    if p.limits.timeout_ms == 0 || p.limits.memory_mib == 0 || p.limits.max_output_kib == 0 {
        return Err("limits must be positive".to_owned());
    }
    for (j, host) in p.grants.allowed_hosts.iter().enumerate() {
        super::sandbox::check_allowed_host(host)
            .map_err(|e| format!("grants.allowedHosts[{j}]: {e}"))?;
    }
    if let Some(dir) = p.grants.read_only_dir.as_deref()
        && !dir.is_empty()
        && !dir.starts_with('/')
    {
        return Err(format!(
            "grants.readOnlyDir {dir:?} must be an absolute path in the operator's container"
        ));
    }
    Ok(checked)
}

/// The source of an entry that passed [`check_entry`].
#[derive(Debug)]
enum Checked {
    /// Embedded in the binary.
    Builtin(&'static builtin::Builtin),
    /// To fetch, then verify against the entry's sha256.
    Fetched(Source),
}

fn status_of(snap: &Snapshot, name: &str) -> PluginStatus {
    let spec = snap.specs.get(name);
    let serving = snap.plugins.get(name);
    let error = snap.errors.get(name).map(|e| {
        if snap.retry.contains(name) {
            format!("{e} (retried with backoff)")
        } else {
            e.clone()
        }
    });
    let (ready, reason, message) = match (spec, error, serving) {
        (None, _, _) => (
            false,
            "NotFound",
            format!("no entry of that name in ConfigMap {CONFIGMAP_NAME}, nor a builtin"),
        ),
        (Some(_), _, serving) if snap.loading.contains(name) => (
            false,
            "Loading",
            match serving {
                Some(p) => format!(
                    "{LOADING}; the previous version ({}) keeps serving",
                    short(p.digest())
                ),
                None => format!("{LOADING}; nothing serves it until it loads"),
            },
        ),
        (Some(_), Some(e), Some(p)) => (
            false,
            "LoadFailed",
            format!(
                "{e}; the previous version ({}) keeps serving",
                short(p.digest())
            ),
        ),
        (Some(_), Some(e), None) => (false, "NotLoaded", e),
        (Some(_), None, Some(p)) => (
            true,
            "Loaded",
            format!("{} {} ({})", p.info().0, p.info().1, short(p.digest())),
        ),
        (Some(_), None, None) => (false, "NotLoaded", "not loaded yet".to_owned()),
    };
    PluginStatus {
        name: name.to_owned(),
        hook: spec.map(|s| s.hook),
        ready,
        reason: reason.to_owned(),
        message,
        serving_digest: serving.map(|p| p.digest().to_owned()),
    }
}

/// What a `Loading` entry is doing.
const LOADING: &str = "still loading (fetching, verifying and compiling it)";

fn short(digest: &str) -> String {
    format!("sha256:{}", &digest[..digest.len().min(12)])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reload whose entries need no compile (a settings change of a builtin: its component
    /// is shared with the version serving) serves them within [`LOAD_WAIT`] while another
    /// entry's compile holds the one compile permit (a large component compiling); that entry
    /// is `Loading` meanwhile and loads once the permit is free.
    #[tokio::test]
    async fn a_settings_change_serves_while_another_entry_compiles() {
        use crate::runtime::RuntimeOptions;
        let runtime = PluginRuntime::new(RuntimeOptions {
            cache_dir: None,
            max_concurrent_calls: 1,
            pooling: false,
            extra_ca_pem: None,
        })
        .unwrap();
        let registry = Registry::new(runtime.clone());
        let fixture = wasmop_tests::components_dir().join("wasmop_hostile_fixture.wasm");
        let digest = crate::sha256_hex(&std::fs::read(&fixture).unwrap());
        let doc = |colour: &str, custom: bool| {
            let mut yaml = format!(
                "plugins:\n- {{name: quick, hook: routing, source: 'builtin://routing-istio', \
                 settings: {{responseHeader: x-{colour}}}}}\n"
            );
            if custom {
                yaml.push_str(&format!(
                    "- {{name: big, hook: routing, source: 'file://{}', sha256: {digest}}}\n",
                    fixture.display()
                ));
            }
            RegistryConfig::parse(&yaml).unwrap()
        };
        let fetch = LocalFetch::default();
        let report = registry.apply(doc("first", false), &fetch).await;
        assert!(report.failed.is_empty(), "{report:?}");

        // A compile in progress: the permit is taken.
        let compiling = runtime.compiles.clone().acquire_owned().await.unwrap();
        let swaps = std::sync::Mutex::new(Vec::new());
        let swapped = tokio::sync::Notify::new();
        let on_swap = |loading: &[String]| {
            swaps.lock().unwrap().push(loading.to_vec());
            swapped.notify_one();
        };
        let started = tokio::time::Instant::now();
        let (report, ()) = tokio::join!(
            registry.apply_notifying(doc("second", true), &fetch, Some(LOAD_WAIT), &on_swap),
            async {
                tokio::time::timeout(LOAD_WAIT * 2, swapped.notified())
                    .await
                    .expect("an interim snapshot while an entry compiles");
                let quick = registry.status(Hook::Routing, Some("quick"));
                assert!(quick.ready, "served within the load wait: {quick:?}");
                let serving = registry.resolve(Hook::Routing, Some("quick")).unwrap();
                assert_eq!(
                    serving.spec().settings,
                    Some(serde_json::json!({"responseHeader": "x-second"}))
                );
                assert_eq!(
                    registry.status(Hook::Routing, Some("big")).reason,
                    "Loading"
                );
                drop(compiling);
            },
        );
        assert!(started.elapsed() >= LOAD_WAIT);
        assert_eq!(*swaps.lock().unwrap(), [["big"]]);
        assert_eq!(report.loaded, ["big", "quick"], "{report:?}");
        assert!(registry.status(Hook::Routing, Some("big")).ready);
    }

    #[test]
    fn the_size_limit_is_said_as_it_is() {
        assert_eq!(MAX_COMPONENT_BYTES, 256 << 20);
        assert!(OVER_THE_LIMIT.contains(&format!("256 MiB ({MAX_COMPONENT_BYTES} bytes)")));
    }

    #[test]
    fn parses_the_documented_format() {
        let c = RegistryConfig::parse(
            r#"
plugins:
  - name: istio-routing
    hook: routing
    source: builtin://routing-istio
    settings: {responseHeader: x-env}
    limits: { memoryMiB: 32, timeoutMs: 100, maxOutputKiB: 512 }
    grants: { allowedHosts: [], readOnlyDir: "" }
    failurePolicy: Ignore
  - name: custom
    hook: scaling
    source: configmap://my-plugins/scaler.wasm
    sha256: "00"
defaults: { routing: istio-routing, scaling: custom }
"#,
        )
        .unwrap();
        assert_eq!(c.plugins[0].limits.memory_mib, 32);
        assert_eq!(
            c.plugins[0].failure_policy,
            crate::spec::FailurePolicy::Ignore
        );
        assert_eq!(c.defaults[&Hook::Scaling], "custom");
        let names: Vec<_> = c.effective_plugins().into_iter().map(|p| p.name).collect();
        assert!(
            names.contains(&"dr-lease".to_owned()) && names.contains(&"istio-routing".to_owned())
        );
    }

    #[test]
    fn rejects_a_document_that_does_not_hold_together() {
        let err = |y: &str| RegistryConfig::parse(y).unwrap_err();
        assert!(err("defaults: {routing: nope}").contains("no plugin named \"nope\""));
        assert!(err("defaults: {routing: dr-lease}").contains("is a dr plugin"));
        assert!(err("plugins: [{name: a, hook: routing, source: 'builtin://routing-istio', colour: red}]").contains("unknown field"));
        assert!(
            err("plugins: [{name: a, hook: nope, source: 'builtin://routing-istio'}]")
                .contains("unknown variant")
        );
        assert!(
            err("plugins: [{name: '', hook: routing, source: 'builtin://routing-istio'}]")
                .contains("name is empty")
        );
        assert!(
            err(
                "plugins: [{name: a, hook: routing, source: 'builtin://routing-istio'}, \
                 {name: a, hook: routing, source: 'builtin://routing-istio'}]"
            )
            .contains("plugins[1] (a): duplicate name")
        );
    }

    /// An entry with `allowedNamespaces` serves resources of those namespaces only; a
    /// resource elsewhere, or a cluster-scoped one, gets `NotAllowed` and no plugin to call.
    /// The operator's own uses (DR, the CLI) are not resources and are not restricted, and a
    /// restricted entry cannot be a default.
    #[tokio::test]
    async fn allowed_namespaces_limit_who_may_name_an_entry() {
        let doc = "plugins:\n  - {name: team-a, hook: routing, source: 'builtin://routing-istio', allowedNamespaces: [a, a2]}\n";
        let config = RegistryConfig::parse(doc).unwrap();
        assert_eq!(
            config.plugins[0].allowed_namespaces.as_deref(),
            Some(&["a".to_owned(), "a2".to_owned()][..])
        );
        let runtime = PluginRuntime::new(crate::runtime::RuntimeOptions {
            cache_dir: None,
            max_concurrent_calls: 1,
            pooling: false,
            extra_ca_pem: None,
        })
        .unwrap();
        let registry = Registry::new(runtime);
        let report = registry.apply(config, &LocalFetch::default()).await;
        assert!(report.failed.is_empty(), "{report:?}");

        let name = Some("team-a");
        assert!(
            registry
                .resolve_for(Hook::Routing, name, Some("a2"))
                .is_ok()
        );
        for (namespace, place) in [
            (Some("b"), "in namespace b"),
            (None, "by a cluster-scoped resource"),
        ] {
            let e = registry
                .resolve_for(Hook::Routing, name, namespace)
                .unwrap_err();
            assert!(matches!(e, ResolveError::NotAllowed { .. }), "{e}");
            assert!(e.to_string().contains(place), "{e}");
            let status = registry.status_for(Hook::Routing, name, namespace);
            assert!(!status.ready);
            assert_eq!(status.reason, "NotAllowed");
            assert!(status.message.contains(place), "{}", status.message);
        }
        assert!(registry.status_for(Hook::Routing, name, Some("a")).ready);
        // Entries without the field serve everyone.
        assert!(registry.resolve_for(Hook::Routing, None, Some("b")).is_ok());
        assert!(registry.resolve(Hook::Routing, name).is_ok());

        let e =
            RegistryConfig::parse(&format!("{doc}defaults: {{routing: team-a}}\n")).unwrap_err();
        assert!(
            e.contains("defaults.routing: team-a sets allowedNamespaces"),
            "{e}"
        );
    }

    /// A runtime for tests of the registry.
    fn test_runtime() -> Arc<PluginRuntime> {
        PluginRuntime::new(crate::runtime::RuntimeOptions {
            cache_dir: None,
            max_concurrent_calls: 1,
            pooling: false,
            extra_ca_pem: None,
        })
        .unwrap()
    }

    /// A routing entry serving the builtin `routing-istio`, with `extra` fields (YAML flow).
    fn routing_entry(name: &str, extra: &str) -> String {
        format!("  - {{name: {name}, hook: routing, source: 'builtin://routing-istio'{extra}}}\n")
    }

    #[test]
    fn an_after_that_names_no_routing_entry_or_closes_a_cycle_is_refused() {
        let errors = |entries: &[String]| {
            let doc = format!("plugins:\n{}", entries.concat());
            let config = RegistryConfig::parse(&doc).expect("after is the entry's own mistake");
            after_errors(&config.effective_plugins())
        };
        let e = errors(&[routing_entry("a", ", after: a")]);
        assert!(e["a"].contains("after: a is the entry itself"), "{e:?}");
        let e = errors(&[routing_entry("a", ", after: nope")]);
        assert!(
            e["a"].contains("after: no entry named \"nope\" in plugins.yaml, nor a builtin"),
            "{e:?}"
        );
        let e = errors(&[routing_entry("a", ", after: dr-lease")]);
        assert!(e["a"].contains("after: dr-lease is a dr plugin"), "{e:?}");
        let e = errors(&["  - {name: s, hook: scaling, source: 'builtin://scaling-prometheus', after: routing-istio}\n".to_owned()]);
        assert!(
            e["s"].contains("after applies to routing entries only, and s is a scaling entry"),
            "{e:?}"
        );
        // A cycle fails each of its entries, naming it from there; an entry that builds on
        // the cycle without being part of it, and one building on a builtin, are fine.
        let e = errors(&[
            routing_entry("a", ", after: b"),
            routing_entry("b", ", after: c"),
            routing_entry("c", ", after: a"),
            routing_entry("d", ", after: a"),
            routing_entry("e", ", after: routing-istio"),
        ]);
        assert_eq!(e.len(), 3, "{e:?}");
        assert!(e["a"].contains("after: a → b → c → a is a cycle"), "{e:?}");
        assert!(e["b"].contains("after: b → c → a → b is a cycle"), "{e:?}");
        assert!(e["c"].contains("remove after from one of them"), "{e:?}");
    }

    /// An entry whose `after` is refused fails alone, its last good version serving; it is
    /// checked again on every reload, so it loads once the entry it names is fixed even though
    /// its own spec did not change.
    #[tokio::test]
    async fn a_refused_after_fails_its_entry_until_the_other_entry_is_fixed() {
        let registry = Registry::new(test_runtime());
        let fetch = LocalFetch::default();
        let apply = async |entries: &[String]| {
            let doc = format!("plugins:\n{}", entries.concat());
            registry
                .apply(RegistryConfig::parse(&doc).unwrap(), &fetch)
                .await
        };
        let report = apply(&[
            routing_entry("base", ""),
            routing_entry("refine", ", after: base"),
        ])
        .await;
        assert!(report.failed.is_empty(), "{report:?}");
        let chain: Vec<String> = registry
            .resolve_chain(Hook::Routing, Some("refine"))
            .unwrap()
            .iter()
            .map(|p| p.spec().name.clone())
            .collect();
        assert_eq!(chain, ["base", "refine"]);
        let status = registry.status(Hook::Routing, Some("refine"));
        assert!(status.ready, "{status:?}");
        assert!(status.message.ends_with("; builds on base"), "{status:?}");

        // `base` now builds on `refine`: both are refused, and keep serving as they were.
        let report = apply(&[
            routing_entry("base", ", after: refine"),
            routing_entry("refine", ", after: base"),
        ])
        .await;
        let failed: Vec<&str> = report.failed.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(failed, ["base", "refine"], "{report:?}");
        assert!(
            report.failed[0]
                .1
                .starts_with("invalid plugins.yaml entry: after: base → refine → base is a cycle"),
            "{report:?}"
        );
        let status = registry.status(Hook::Routing, Some("refine"));
        assert_eq!(status.reason, "LoadFailed", "{status:?}");
        assert!(status.message.contains("is a cycle"), "{status:?}");
        assert!(
            status.message.contains("the previous version"),
            "{status:?}"
        );
        assert_eq!(
            registry
                .resolve_chain(Hook::Routing, Some("refine"))
                .unwrap()
                .len(),
            2,
            "the last good versions serve"
        );
        // The same mistake on the next reload is not reported again.
        let again = apply(&[
            routing_entry("base", ", after: refine"),
            routing_entry("refine", ", after: base"),
        ])
        .await;
        assert_eq!(again, ReloadReport::default());
        assert_eq!(
            registry.status(Hook::Routing, Some("refine")).reason,
            "LoadFailed"
        );

        // Fixed by changing `base` alone: `refine`, unchanged, loads again.
        let report = apply(&[
            routing_entry("base", ""),
            routing_entry("refine", ", after: base"),
        ])
        .await;
        assert!(report.failed.is_empty(), "{report:?}");
        assert_eq!(report.loaded, ["base", "refine"], "{report:?}");
        assert!(registry.status(Hook::Routing, Some("refine")).ready);

        // A new entry naming one that fails to load has nothing to serve: it resolves with
        // the error of the one it builds on, and its status says which.
        let report = apply(&[
            "  - {name: broken, hook: routing, source: 'file:///nowhere.wasm'}\n".to_owned(),
            routing_entry("fresh", ", after: broken"),
        ])
        .await;
        let failed: Vec<&str> = report.failed.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(failed, ["broken"], "{report:?}");
        let e = registry
            .resolve_chain(Hook::Routing, Some("fresh"))
            .unwrap_err();
        assert!(matches!(e, ResolveError::After { .. }), "{e}");
        assert!(
            e.to_string().starts_with(
                "plugin \"fresh\" builds on \"broken\" (after), which cannot be used: plugin \"broken\" is not loaded: invalid plugins.yaml entry: sha256 is required"
            ),
            "{e}"
        );
        let status = registry.status(Hook::Routing, Some("fresh"));
        assert!(!status.ready);
        assert_eq!(status.reason, "NotLoaded");
        assert!(
            status.message.starts_with(
                "it builds on broken (after), which is not ready: invalid plugins.yaml entry"
            ),
            "{status:?}"
        );
    }

    /// Every entry of a chain must allow the resource's namespace; a default cannot build on
    /// an entry with `allowedNamespaces`.
    #[tokio::test]
    async fn every_entry_of_a_chain_must_allow_the_namespace() {
        let doc = format!(
            "plugins:\n{}{}",
            routing_entry("team-a", ", allowedNamespaces: [a]"),
            routing_entry("refine", ", after: team-a")
        );
        let registry = Registry::new(test_runtime());
        let report = registry
            .apply(RegistryConfig::parse(&doc).unwrap(), &LocalFetch::default())
            .await;
        assert!(report.failed.is_empty(), "{report:?}");
        assert!(
            registry
                .resolve_chain_for(Hook::Routing, Some("refine"), Some("a"))
                .is_ok()
        );
        let e = registry
            .resolve_chain_for(Hook::Routing, Some("refine"), Some("b"))
            .unwrap_err();
        assert!(
            e.to_string().contains("builds on \"team-a\" (after), which cannot be used: plugin \"team-a\" may not be used in namespace b"),
            "{e}"
        );
        let status = registry.status_for(Hook::Routing, Some("refine"), Some("b"));
        assert_eq!(status.reason, "NotAllowed", "{status:?}");
        assert!(
            registry
                .status_for(Hook::Routing, Some("refine"), Some("a"))
                .ready
        );

        let e =
            RegistryConfig::parse(&format!("{doc}defaults: {{routing: refine}}\n")).unwrap_err();
        assert!(
            e.contains(
                "defaults.routing: refine builds on team-a (after), which sets allowedNamespaces"
            ),
            "{e}"
        );
    }

    #[test]
    fn rejects_an_entry_it_cannot_load() {
        let err = |entry: &str| {
            let doc = format!("plugins: [{entry}]");
            let config = RegistryConfig::parse(&doc).expect("an entry's mistakes are its own");
            check_entry(&config.plugins[0]).unwrap_err()
        };
        assert!(
            err("{name: a, hook: routing, source: 'file:///a.wasm'}")
                .contains("sha256 is required")
        );
        assert!(err("{name: a, hook: routing, source: 'ftp://x'}").contains("expected builtin://"));
        assert!(
            err("{name: a, hook: routing, source: 'oci://r.example/router:v1'}")
                .contains("sha256 is required for source oci://r.example/router:v1: pin the tag")
        );
        assert!(
            err("{name: a, hook: routing, source: 'oci://r.example/router:v1', sha256: '00', insecure: true}")
                .contains("allowed only for a registry on loopback")
        );
        assert!(
            err("{name: a, hook: routing, source: 'https://r.example/a.wasm', sha256: '00', pullSecret: s}")
                .contains("pullSecret applies to oci:// sources only")
        );
        assert!(
            err("{name: a, hook: routing, source: 'file:///a.wasm', sha256: '00', insecure: true}")
                .contains("insecure applies to oci:// sources only")
        );
        assert!(
            err("{name: a, hook: routing, source: 'oci://r.example/router:v1', sha256: '00', pullSecret: ''}")
                .contains("pullSecret is empty")
        );
        let digest = format!("oci://127.0.0.1:5000/router@sha256:{}", "a".repeat(64));
        let doc = format!(
            "plugins: [{{name: a, hook: routing, source: '{digest}', insecure: true, pullSecret: creds}}]"
        );
        let config = RegistryConfig::parse(&doc).unwrap();
        match check_entry(&config.plugins[0]) {
            Ok(Checked::Fetched(Source::Oci(oci))) => {
                assert!(oci.insecure);
                assert_eq!(oci.pull_secret.as_deref(), Some("creds"));
            }
            other => panic!("a digest reference is its own pin: {other:?}"),
        }
        assert!(
            err("{name: a, hook: scaling, source: 'builtin://routing-istio'}")
                .contains("is a routing plugin")
        );
        assert!(
            err("{name: a, hook: routing, source: 'configmap://x'}")
                .contains("configmap://NAME/KEY")
        );
        assert!(
            err("{name: a, hook: routing, source: 'builtin://routing-istio', limits: {timeoutMs: 0}}")
                .contains("limits must be positive")
        );
        let grant = |host: &str| {
            err(&format!(
                "{{name: a, hook: routing, source: 'builtin://routing-istio', \
                 grants: {{allowedHosts: [ok.example, '{host}']}}}}"
            ))
        };
        assert_eq!(
            grant("http://prometheus:9090"),
            "grants.allowedHosts[1]: \"http://prometheus:9090\" is a URL; write host or \
             host:port, e.g. prometheus.monitoring:9090"
        );
        assert!(grant("*.svc").contains("wildcards are not supported"));
        assert!(grant("prometheus:99999").contains("the port must be a number up to 65535"));
        assert!(grant("user@prometheus").contains("is not a host"));
        assert!(grant("").contains("is not a host"));
        assert!(
            err("{name: a, hook: routing, source: 'builtin://routing-istio', grants: {readOnlyDir: data}}")
                .contains("grants.readOnlyDir \"data\" must be an absolute path")
        );
        for fine in [
            "prometheus",
            "prometheus.monitoring:9090",
            "127.0.0.1:80",
            "[::1]:8080",
            "[::1]",
        ] {
            let doc = format!(
                "plugins: [{{name: a, hook: routing, source: 'builtin://routing-istio', \
                 grants: {{allowedHosts: ['{fine}']}}}}]"
            );
            let config = RegistryConfig::parse(&doc).unwrap();
            assert!(check_entry(&config.plugins[0]).is_ok(), "{fine}");
        }
    }
}

//! `oci://` plugin sources: components stored in an OCI registry as WebAssembly OCI artifacts,
//! the layout of the Bytecode Alliance's `oci-wasm` (docs/plugins.md, "OCI registries"): an
//! image manifest (`application/vnd.oci.image.manifest.v1+json`) with one layer of media type
//! `application/wasm` holding the component, and a config of media type
//! `application/vnd.wasm.config.v0+json`.
//!
//! Pulls and pushes go through `oci-client` (reqwest on the rustls and ring the rest of the host
//! uses). TLS is verified against the system's roots plus `--extra-ca-file`; plain HTTP is only
//! for a registry on loopback, and only when asked (`insecure: true`).

use std::fmt;
use std::net::IpAddr;

use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::manifest::{OciDescriptor, OciImageManifest};
use oci_client::secrets::RegistryAuth;
use serde::{Deserialize, Serialize};

use crate::registry::{CONNECT_TIMEOUT, DOWNLOAD_TIMEOUT, MAX_COMPONENT_BYTES};

/// Media type of the manifest of a WebAssembly OCI artifact.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// Media type of its config blob.
pub const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// Media type of its one layer, the component.
pub const LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The layer media type of the older CNCF `wasm-to-oci` layout (Kubewarden policies, Krustlet):
/// accepted on pull, never written.
pub const LEGACY_LAYER_MEDIA_TYPE: &str = "application/vnd.wasm.content.layer.v1+wasm";

/// A parsed `oci://REGISTRY/REPOSITORY:TAG` or `oci://REGISTRY/REPOSITORY@sha256:HEX` (both a
/// tag and a digest may be given; the digest is what is pulled).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OciReference {
    /// `host`, `host:port` or `[v6]:port`, as written.
    pub registry: String,
    /// The repository path, e.g. `team/router`.
    pub repository: String,
    /// The tag, if any.
    pub tag: Option<String>,
    /// The manifest digest `sha256:<64 lowercase hex>`, if any.
    pub digest: Option<String>,
}

impl OciReference {
    /// Parses an `oci://` source.
    ///
    /// # Errors
    /// Not `oci://`, no registry or repository, a repository that is not lowercase
    /// `[a-z0-9._-]` components separated by `/`, a malformed tag, a digest that is not
    /// `sha256:` and 64 lowercase hex digits, or neither a tag nor a digest. Each message shows
    /// the expected form.
    pub fn parse(source: &str) -> Result<Self, String> {
        const FORM: &str = "expected oci://REGISTRY/REPOSITORY:TAG or \
                            oci://REGISTRY/REPOSITORY@sha256:DIGEST";
        let bad = |why: &str| format!("source {source:?}: {why}; {FORM}");
        let rest = source
            .strip_prefix("oci://")
            .ok_or_else(|| bad("not oci://"))?;
        let (registry, path) = rest
            .split_once('/')
            .ok_or_else(|| bad("no repository after the registry"))?;
        if registry.is_empty() || registry.contains(['@', '?', '#']) {
            return Err(bad("no registry host"));
        }
        let (named, digest) = match path.split_once('@') {
            Some((named, digest)) => (named, Some(digest)),
            None => (path, None),
        };
        if let Some(d) = digest {
            let hex = d
                .strip_prefix("sha256:")
                .ok_or_else(|| bad("the digest must be sha256:"))?;
            if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                return Err(bad(
                    "the digest must be sha256: and 64 lowercase hex digits",
                ));
            }
        }
        // A tag follows the last ':' after the last '/'.
        let last_slash = named.rfind('/').map_or(0, |i| i + 1);
        let (repository, tag) = match named[last_slash..].rfind(':') {
            Some(i) => (&named[..last_slash + i], Some(&named[last_slash + i + 1..])),
            None => (named, None),
        };
        let component_ok = |c: &str| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-'))
                && c.as_bytes()[0].is_ascii_alphanumeric()
        };
        if repository.is_empty() || !repository.split('/').all(component_ok) {
            return Err(bad(&format!(
                "repository {repository:?} must be lowercase letters, digits, '.', '_' or '-' in \
                 components separated by '/'"
            )));
        }
        if let Some(t) = tag {
            let ok = (1..=128).contains(&t.len())
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
                && !t.starts_with(['.', '-']);
            if !ok {
                return Err(bad(&format!(
                    "tag {t:?} must be 1 to 128 letters, digits, '.', '_' or '-', not starting \
                     with '.' or '-'"
                )));
            }
        }
        if tag.is_none() && digest.is_none() {
            return Err(bad("no tag nor digest"));
        }
        Ok(Self {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag: tag.map(str::to_owned),
            digest: digest.map(str::to_owned),
        })
    }

    /// The registry's host without its port (`[::1]:5000` → `::1`).
    pub fn host(&self) -> &str {
        let r = self.registry.as_str();
        if let Some(v6) = r.strip_prefix('[') {
            return v6.split_once(']').map_or(v6, |(h, _)| h);
        }
        r.rsplit_once(':').map_or(r, |(h, _)| h)
    }

    /// Whether the registry is on this machine: `localhost`, 127.0.0.0/8 or `::1`, the only
    /// registries plain HTTP (`insecure: true`) is allowed for.
    pub fn is_loopback(&self) -> bool {
        let host = self.host();
        host.eq_ignore_ascii_case("localhost")
            || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    /// Checks that plain HTTP may be used with this registry.
    ///
    /// # Errors
    /// `insecure` is set for a registry that is not on loopback.
    pub fn check_insecure(&self, insecure: bool) -> Result<(), String> {
        if insecure && !self.is_loopback() {
            return Err(format!(
                "insecure: true (plain HTTP) is allowed only for a registry on loopback \
                 (localhost, 127.0.0.0/8, [::1]), not {}; serve the registry over HTTPS (a \
                 private CA goes in --extra-ca-file)",
                self.registry
            ));
        }
        Ok(())
    }

    fn client_reference(&self) -> oci_client::Reference {
        let (r, repo) = (self.registry.clone(), self.repository.clone());
        match (&self.tag, &self.digest) {
            (Some(t), Some(d)) => {
                oci_client::Reference::with_tag_and_digest(r, repo, t.clone(), d.clone())
            }
            (None, Some(d)) => oci_client::Reference::with_digest(r, repo, d.clone()),
            (Some(t), None) => oci_client::Reference::with_tag(r, repo, t.clone()),
            (None, None) => oci_client::Reference::with_tag(r, repo, "latest".into()),
        }
    }

    /// The same repository at `digest` (`sha256:…`), without a tag.
    pub fn at_digest(&self, digest: &str) -> Self {
        Self {
            tag: None,
            digest: Some(digest.to_owned()),
            ..self.clone()
        }
    }
}

impl fmt::Display for OciReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oci://{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// Registry credentials.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum Credentials {
    /// No credentials: an anonymous pull (or a bearer token the registry hands anyone).
    #[default]
    Anonymous,
    /// A user name and password (or token), sent as HTTP Basic or traded for a bearer token as
    /// the registry asks.
    Basic {
        /// User name.
        username: String,
        /// Password or token.
        password: String,
    },
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Anonymous => f.write_str("Anonymous"),
            Self::Basic { username, .. } => write!(f, "Basic({username}, <redacted>)"),
        }
    }
}

impl Credentials {
    fn auth(&self) -> RegistryAuth {
        match self {
            Self::Anonymous => RegistryAuth::Anonymous,
            Self::Basic { username, password } => {
                RegistryAuth::Basic(username.clone(), password.clone())
            }
        }
    }
}

/// The credentials for `registry` in a Docker config (`~/.docker/config.json`, or the
/// `.dockerconfigjson` of a Secret of type `kubernetes.io/dockerconfigjson`): the entry of
/// `auths` whose key is the registry (`host[:port]`, optionally with a scheme and a path, as
/// `docker login` writes them; `docker.io`, `index.docker.io` and `registry-1.docker.io` are one
/// registry), with `auth` (base64 of `user:password`) or `username` and `password`. `None`
/// when no entry is for that registry.
///
/// # Errors
/// The JSON does not parse, or the entry has neither a usable `auth` nor a user name and
/// password. Messages never contain a password.
pub fn docker_config_credentials(
    json: &[u8],
    registry: &str,
) -> Result<Option<Credentials>, String> {
    use base64::Engine as _;
    #[derive(Deserialize)]
    struct DockerConfig {
        #[serde(default)]
        auths: std::collections::BTreeMap<String, Entry>,
    }
    #[derive(Deserialize)]
    struct Entry {
        auth: Option<String>,
        username: Option<String>,
        password: Option<String>,
    }
    let config: DockerConfig = serde_json::from_slice(json)
        .map_err(|e| format!("not a Docker config (expected {{\"auths\": {{…}}}}): {e}"))?;
    let canonical = |r: &str| -> String {
        let r = r
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        let host = r.split('/').next().unwrap_or(r).to_ascii_lowercase();
        match host.as_str() {
            "index.docker.io" | "registry-1.docker.io" => "docker.io".to_owned(),
            _ => host,
        }
    };
    let want = canonical(registry);
    let Some((key, entry)) = config.auths.iter().find(|(k, _)| canonical(k) == want) else {
        return Ok(None);
    };
    if let (Some(username), Some(password)) = (&entry.username, &entry.password) {
        return Ok(Some(Credentials::Basic {
            username: username.clone(),
            password: password.clone(),
        }));
    }
    let auth = entry
        .auth
        .as_deref()
        .ok_or_else(|| format!("auths[{key:?}] has neither auth nor username and password"))?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(auth.trim())
        .ok()
        .and_then(|d| String::from_utf8(d).ok())
        .ok_or_else(|| format!("auths[{key:?}].auth is not base64 of user:password"))?;
    let (username, password) = decoded
        .split_once(':')
        .ok_or_else(|| format!("auths[{key:?}].auth is not base64 of user:password"))?;
    Ok(Some(Credentials::Basic {
        username: username.to_owned(),
        password: password.to_owned(),
    }))
}

/// How to reach a registry.
#[derive(Clone, Debug, Default)]
pub struct OciOptions<'a> {
    /// Plain HTTP instead of HTTPS; refused unless the registry is on loopback.
    pub insecure: bool,
    /// PEM certificates trusted besides the system's roots (`--extra-ca-file`).
    pub extra_ca_pem: Option<&'a [u8]>,
    /// Who to pull or push as.
    pub credentials: Credentials,
}

/// A component pulled from a registry.
#[derive(Clone, Debug)]
pub struct Pulled {
    /// The component's bytes.
    pub bytes: Vec<u8>,
    /// The digest (`sha256:…`) of the manifest pulled: what `@sha256:` pins.
    pub manifest_digest: String,
}

/// What a push wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pushed {
    /// The digest (`sha256:…`) of the manifest, for an `oci://…@sha256:…` reference.
    pub manifest_digest: String,
    /// The lowercase hex sha256 of the component, for an entry's `sha256:`.
    pub component_sha256: String,
}

/// An OCI client for `reference` with `options`.
fn client(
    reference: &OciReference,
    options: &OciOptions<'_>,
) -> Result<oci_client::Client, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    reference.check_insecure(options.insecure)?;
    // reqwest is built without a provider of its own: the ring one the host's other TLS uses.
    // Installing it fails when a provider is installed already, which is as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut extra = Vec::new();
    if let Some(pem) = options.extra_ca_pem {
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| format!("extra CA certificates (--extra-ca-file): {e}"))?;
            extra.push(Certificate {
                encoding: CertificateEncoding::Der,
                data: cert.to_vec(),
            });
        }
        if extra.is_empty() {
            return Err(
                "extra CA certificates (--extra-ca-file): no PEM certificate found \
                        (expected -----BEGIN CERTIFICATE----- blocks)"
                    .into(),
            );
        }
    }
    let config = ClientConfig {
        protocol: if options.insecure {
            ClientProtocol::Http
        } else {
            ClientProtocol::Https
        },
        extra_root_certificates: extra,
        // A digest of an image index is refused with a clear error instead of a platform guess.
        platform_resolver: None,
        connect_timeout: Some(CONNECT_TIMEOUT),
        read_timeout: Some(CONNECT_TIMEOUT),
        user_agent: concat!("wasmop/", env!("CARGO_PKG_VERSION")),
        max_concurrent_download: 1,
        max_concurrent_upload: 1,
        ..ClientConfig::default()
    };
    oci_client::Client::try_from(config).map_err(|e| format!("{reference}: {}", chain(&e)))
}

/// The message of a failed registry call on `reference`: the error and its causes, and for a
/// refusal of access whether credentials were sent.
fn failure(
    reference: &OciReference,
    credentials: &Credentials,
    e: &oci_client::errors::OciDistributionError,
) -> String {
    use oci_client::errors::OciDistributionError as E;
    let refused = matches!(
        e,
        E::UnauthorizedError { .. }
            | E::AuthenticationFailure(_)
            | E::ServerError { code: 401, .. }
    );
    let hint = match credentials {
        _ if !refused => "",
        Credentials::Anonymous => {
            " (no credentials were sent: the repository is private, so name a pull Secret)"
        }
        Credentials::Basic { .. } => " (the registry refused the credentials sent)",
    };
    format!("{reference}: {}{hint}", chain(e))
}

/// `e` and its causes, `: `-separated.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !out.contains(&s_text) {
            out.push_str(": ");
            out.push_str(&s_text);
        }
        source = s.source();
    }
    out
}

/// The one component layer of an artifact's manifest.
///
/// # Errors
/// No layer of media type [`LAYER_MEDIA_TYPE`] (or [`LEGACY_LAYER_MEDIA_TYPE`]), more than
/// one, or one whose declared size is over [`MAX_COMPONENT_BYTES`].
fn component_layer<'m>(
    reference: &OciReference,
    manifest: &'m OciImageManifest,
) -> Result<&'m OciDescriptor, String> {
    let wasm: Vec<&OciDescriptor> = manifest
        .layers
        .iter()
        .filter(|l| l.media_type == LAYER_MEDIA_TYPE || l.media_type == LEGACY_LAYER_MEDIA_TYPE)
        .collect();
    let layer = match wasm[..] {
        [one] if manifest.layers.len() == 1 => one,
        _ => {
            let types: Vec<&str> = manifest
                .layers
                .iter()
                .map(|l| l.media_type.as_str())
                .collect();
            return Err(format!(
                "{reference}: not a WebAssembly OCI artifact: expected one layer of media type \
                 {LAYER_MEDIA_TYPE}, found {types:?} (push it with `wasmop plugin push`)"
            ));
        }
    };
    if layer.size < 0 || layer.size as u64 > MAX_COMPONENT_BYTES as u64 {
        return Err(format!(
            "{reference}: the component is {} bytes (its manifest says), over the 256 MiB \
             ({MAX_COMPONENT_BYTES} bytes) a component may have",
            layer.size
        ));
    }
    Ok(layer)
}

/// A writer that keeps at most `limit` bytes and fails past them.
struct Bounded {
    bytes: Vec<u8>,
    limit: usize,
}

impl tokio::io::AsyncWrite for Bounded {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.bytes.len() + buf.len() > self.limit {
            return std::task::Poll::Ready(Err(std::io::Error::other(format!(
                "the layer is longer than its manifest says ({} bytes)",
                self.limit
            ))));
        }
        self.bytes.extend_from_slice(buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// Pulls the component of `reference`: its manifest (verified against the reference's digest
/// when it has one), then its one `application/wasm` layer, refused before download when the
/// manifest says it is over [`MAX_COMPONENT_BYTES`], read into one buffer no larger than the
/// size the manifest gives, and verified against the layer's digest. The whole pull is bounded
/// by [`DOWNLOAD_TIMEOUT`], each connection by [`CONNECT_TIMEOUT`].
///
/// # Errors
/// A message starting with the reference: plain HTTP refused for a registry not on loopback,
/// the registry unreachable or refusing the credentials, no such manifest, not a WebAssembly
/// artifact, too large, a digest that does not match, or the timeout.
pub async fn pull(reference: &OciReference, options: &OciOptions<'_>) -> Result<Pulled, String> {
    let client = client(reference, options)?;
    let image = reference.client_reference();
    let auth = options.credentials.auth();
    let fail =
        |e: oci_client::errors::OciDistributionError| failure(reference, &options.credentials, &e);
    let download = async {
        let (manifest, manifest_digest) = client
            .pull_image_manifest(&image, &auth)
            .await
            .map_err(fail)?;
        let layer = component_layer(reference, &manifest)?;
        let mut out = Bounded {
            bytes: Vec::with_capacity(layer.size as usize),
            limit: layer.size as usize,
        };
        client
            .pull_blob(&image, layer, &mut out)
            .await
            .map_err(fail)?;
        Ok(Pulled {
            bytes: out.bytes,
            manifest_digest,
        })
    };
    tokio::time::timeout(DOWNLOAD_TIMEOUT, download)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "{reference}: no complete answer within {DOWNLOAD_TIMEOUT:?}"
            ))
        })
}

/// The config blob of a WebAssembly OCI artifact (`application/vnd.wasm.config.v0+json`), as
/// `oci-wasm` writes it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WasmConfig {
    /// RFC 3339 time of the push.
    created: String,
    author: Option<String>,
    /// Always `wasm`.
    architecture: String,
    /// `wasip2` for a component.
    os: String,
    /// The layers' digests, in manifest order.
    layer_digests: Vec<String>,
    component: Option<ComponentInfo>,
}

/// The imports and exports of a component, by name (e.g. `wasmop:plugin/router@0.1.0`).
#[derive(Debug, Serialize, Deserialize)]
struct ComponentInfo {
    exports: Vec<String>,
    imports: Vec<String>,
    target: Option<String>,
}

/// The top-level import and export names of the component `bytes`.
///
/// # Errors
/// `bytes` is not a WebAssembly component.
fn component_info(bytes: &[u8]) -> Result<ComponentInfo, String> {
    use wasmparser::{Parser, Payload};
    if !Parser::is_component(bytes) {
        return Err(if Parser::is_core_wasm(bytes) {
            "a core WebAssembly module, not a component: build the plugin for wasm32-wasip2"
                .to_owned()
        } else {
            "not a WebAssembly component (it does not start with the \\0asm header of one)"
                .to_owned()
        });
    }
    let (mut imports, mut exports) = (Vec::new(), Vec::new());
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(|e| format!("not a valid component: {e}"))? {
            Payload::Version { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(s) if depth == 1 => {
                for import in s {
                    let import = import.map_err(|e| format!("not a valid component: {e}"))?;
                    imports.push(import.name.name.to_owned());
                }
            }
            Payload::ComponentExportSection(s) if depth == 1 => {
                for export in s {
                    let export = export.map_err(|e| format!("not a valid component: {e}"))?;
                    exports.push(export.name.name.to_owned());
                }
            }
            _ => {}
        }
    }
    Ok(ComponentInfo {
        exports,
        imports,
        target: None,
    })
}

/// Pushes the component `bytes` to `reference` as a WebAssembly OCI artifact: the layer, the
/// config, then the manifest under the reference's tag (or by digest when it has none).
///
/// # Errors
/// `bytes` is not a component or is over [`MAX_COMPONENT_BYTES`]; a reference whose digest
/// is not the manifest's; plain HTTP refused; the registry unreachable or refusing the
/// credentials or the push.
pub async fn push(
    reference: &OciReference,
    bytes: Vec<u8>,
    options: &OciOptions<'_>,
) -> Result<Pushed, String> {
    use oci_client::client::{Config, ImageLayer};
    if bytes.len() > MAX_COMPONENT_BYTES {
        return Err(format!(
            "the component is {} bytes, over the 256 MiB ({MAX_COMPONENT_BYTES} bytes) a \
             component may have",
            bytes.len()
        ));
    }
    let component = component_info(&bytes)?;
    let component_sha256 = crate::sha256_hex(&bytes);
    let layer_digest = format!("sha256:{component_sha256}");
    let config = WasmConfig {
        created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        author: None,
        architecture: "wasm".into(),
        os: "wasip2".into(),
        layer_digests: vec![layer_digest.clone()],
        component: Some(component),
    };
    let config = Config {
        data: serde_json::to_vec(&config)
            .map_err(|e| format!("the artifact's config: {e}"))?
            .into(),
        media_type: CONFIG_MEDIA_TYPE.into(),
        annotations: None,
    };
    let layer = ImageLayer {
        data: bytes.into(),
        media_type: LAYER_MEDIA_TYPE.into(),
        annotations: None,
    };
    let mut manifest = OciImageManifest::build(std::slice::from_ref(&layer), &config, None);
    manifest.media_type = Some(MANIFEST_MEDIA_TYPE.into());
    let body = serde_json::to_vec(&manifest).map_err(|e| format!("the manifest: {e}"))?;
    let manifest_digest = format!("sha256:{}", crate::sha256_hex(&body));
    if let Some(d) = &reference.digest
        && *d != manifest_digest
    {
        return Err(format!(
            "{reference}: pushing by digest needs the manifest's own digest ({manifest_digest}); \
             push by tag instead"
        ));
    }
    let client = client(reference, options)?;
    let image = reference.client_reference();
    client
        .store_auth_if_needed(image.resolve_registry(), &options.credentials.auth())
        .await;
    let fail =
        |e: oci_client::errors::OciDistributionError| failure(reference, &options.credentials, &e);
    client
        .push_blob(&image, layer.data, &layer_digest)
        .await
        .map_err(fail)?;
    client
        .push_blob(&image, config.data, &manifest.config.digest)
        .await
        .map_err(fail)?;
    // Under the tag, or by its own digest when the reference has none.
    let target = match &reference.tag {
        Some(tag) => oci_client::Reference::with_tag(
            reference.registry.clone(),
            reference.repository.clone(),
            tag.clone(),
        ),
        None => reference.at_digest(&manifest_digest).client_reference(),
    };
    client
        .push_manifest_raw(
            &target,
            body,
            http::HeaderValue::from_static(MANIFEST_MEDIA_TYPE),
        )
        .await
        .map_err(fail)?;
    Ok(Pushed {
        manifest_digest,
        component_sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tags_and_digests() {
        let d = format!("sha256:{}", "a".repeat(64));
        let r = OciReference::parse("oci://127.0.0.1:5000/team/router:v1").unwrap();
        assert_eq!(
            (
                r.registry.as_str(),
                r.repository.as_str(),
                r.tag.as_deref(),
                r.digest.as_deref()
            ),
            ("127.0.0.1:5000", "team/router", Some("v1"), None)
        );
        assert!(r.is_loopback());
        assert_eq!(r.to_string(), "oci://127.0.0.1:5000/team/router:v1");
        let r = OciReference::parse(&format!("oci://ghcr.io/org/router@{d}")).unwrap();
        assert_eq!(
            (r.tag.as_deref(), r.digest.as_deref()),
            (None, Some(d.as_str()))
        );
        assert!(!r.is_loopback());
        let r = OciReference::parse(&format!("oci://[::1]:5000/router:v2@{d}")).unwrap();
        assert_eq!((r.host(), r.tag.as_deref()), ("::1", Some("v2")));
        assert!(r.is_loopback());
        assert!(
            OciReference::parse("oci://localhost/r:1")
                .unwrap()
                .is_loopback()
        );
        assert!(
            !OciReference::parse("oci://127.example/r:1")
                .unwrap()
                .is_loopback()
        );
    }

    #[test]
    fn refuses_malformed_references_saying_the_form() {
        let err = |s: &str| OciReference::parse(s).unwrap_err();
        assert!(err("oci://registry.example/router").contains("no tag nor digest"));
        assert!(err("oci://registry.example").contains("no repository"));
        assert!(err("oci:///router:v1").contains("no registry host"));
        assert!(
            err("oci://r.example/Router:v1").contains("repository \"Router\" must be lowercase")
        );
        assert!(err("oci://r.example/router:-v1").contains("tag \"-v1\""));
        assert!(err("oci://r.example/router@md5:00").contains("must be sha256:"));
        assert!(err("oci://r.example/router@sha256:ABC").contains("64 lowercase hex"));
        assert!(err("oci://r.example/router").ends_with(
            "expected oci://REGISTRY/REPOSITORY:TAG or oci://REGISTRY/REPOSITORY@sha256:DIGEST"
        ));
    }

    #[test]
    fn plain_http_only_on_loopback() {
        let remote = OciReference::parse("oci://registry.example:5000/router:v1").unwrap();
        let e = remote.check_insecure(true).unwrap_err();
        assert!(
            e.starts_with("insecure: true (plain HTTP) is allowed only for a registry on loopback"),
            "{e}"
        );
        assert!(e.contains("not registry.example:5000"), "{e}");
        assert!(remote.check_insecure(false).is_ok());
        let local = OciReference::parse("oci://127.0.0.2:5000/router:v1").unwrap();
        assert!(local.check_insecure(true).is_ok());
    }

    #[test]
    fn reads_docker_config_credentials() {
        use base64::Engine as _;
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cret");
        let json = format!(
            r#"{{"auths": {{"https://127.0.0.1:5000/v2/": {{"auth": "{auth}"}},
                "ghcr.io": {{"username": "bob", "password": "tok"}},
                "index.docker.io": {{"auth": "bm90LWEtcGFpcg=="}},
                "quay.io": {{}}}}}}"#
        );
        let creds = |r: &str| docker_config_credentials(json.as_bytes(), r);
        assert_eq!(
            creds("127.0.0.1:5000").unwrap(),
            Some(Credentials::Basic {
                username: "alice".into(),
                password: "s3cret".into()
            })
        );
        assert_eq!(
            creds("ghcr.io").unwrap(),
            Some(Credentials::Basic {
                username: "bob".into(),
                password: "tok".into()
            })
        );
        assert_eq!(creds("127.0.0.1:5001").unwrap(), None, "another port");
        let e = creds("docker.io").unwrap_err();
        assert!(e.contains("is not base64 of user:password"), "{e}");
        assert!(
            creds("quay.io")
                .unwrap_err()
                .contains("neither auth nor username")
        );
        assert!(
            docker_config_credentials(b"not json", "x")
                .unwrap_err()
                .contains("not a Docker config")
        );
        let shown = format!("{:?}", creds("ghcr.io").unwrap().unwrap());
        assert!(!shown.contains("tok"), "{shown}");
    }

    #[test]
    fn takes_the_one_wasm_layer_of_a_manifest_within_the_size_limit() {
        let r = OciReference::parse("oci://127.0.0.1:5000/router:v1").unwrap();
        let layer = |media_type: &str, size: i64| OciDescriptor {
            media_type: media_type.into(),
            digest: format!("sha256:{}", "a".repeat(64)),
            size,
            ..OciDescriptor::default()
        };
        let manifest = |layers: Vec<OciDescriptor>| OciImageManifest {
            layers,
            ..OciImageManifest::default()
        };
        let one = manifest(vec![layer(LAYER_MEDIA_TYPE, 10)]);
        assert_eq!(component_layer(&r, &one).unwrap().size, 10);
        let legacy = manifest(vec![layer(LEGACY_LAYER_MEDIA_TYPE, 10)]);
        assert!(
            component_layer(&r, &legacy).is_ok(),
            "the wasm-to-oci layout pulls too"
        );
        let image = manifest(vec![layer(
            "application/vnd.oci.image.layer.v1.tar+gzip",
            10,
        )]);
        let e = component_layer(&r, &image).unwrap_err();
        assert!(
            e.contains("not a WebAssembly OCI artifact")
                && e.contains("[\"application/vnd.oci.image.layer.v1.tar+gzip\"]"),
            "{e}"
        );
        let two = manifest(vec![
            layer(LAYER_MEDIA_TYPE, 10),
            layer(LAYER_MEDIA_TYPE, 10),
        ]);
        assert!(component_layer(&r, &two).is_err(), "one layer, not two");
        let large = manifest(vec![layer(
            LAYER_MEDIA_TYPE,
            MAX_COMPONENT_BYTES as i64 + 1,
        )]);
        let e = component_layer(&r, &large).unwrap_err();
        assert!(e.contains("over the 256 MiB"), "{e}");
    }

    #[test]
    fn describes_a_component_by_its_imports_and_exports() {
        let wasm = crate::builtin::find("routing-istio").unwrap().wasm;
        let info = component_info(wasm).unwrap();
        assert!(
            ["info", "validate-settings", "route"]
                .iter()
                .all(|f| info.exports.iter().any(|e| e == f)),
            "{info:?}"
        );
        assert!(
            info.imports.iter().any(|i| i.starts_with("wasmop:plugin/")),
            "{info:?}"
        );
        assert!(
            component_info(b"\0asm\x01\0\0\0")
                .unwrap_err()
                .contains("core WebAssembly module")
        );
        assert!(
            component_info(b"hello")
                .unwrap_err()
                .contains("not a WebAssembly component")
        );
    }
}

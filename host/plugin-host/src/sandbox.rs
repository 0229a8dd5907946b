//! The per-call store state: WASI with nothing granted but what the registry lists, a memory
//! limiter that records why it refused and how far linear memory grew, an outbound-HTTP
//! allowlist and the `log` import.

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::bindings::http::types::ErrorCode;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use super::bindings::LogLevel;
use super::bindings::router::wasmop::plugin::log;
use super::http_pool::HttpPool;
use crate::spec::{Grants, Limits};

/// Longest log line kept from a plugin, in bytes.
pub(crate) const MAX_LOG_LINE: usize = 4 * 1024;
/// Most log bytes kept from one call.
pub(crate) const MAX_LOG_PER_CALL: usize = 64 * 1024;
/// Bytes of a plugin's stderr kept from one call: its last ones, which a failure quotes.
pub const STDERR_TAIL: usize = 2 * 1024;
/// Where `grants.readOnlyDir` appears inside the guest.
pub(crate) const READ_ONLY_DIR_GUEST_PATH: &str = "/data";

/// State of one `Store`: one call, or one batch of calls.
pub(crate) struct Sandbox {
    plugin: String,
    wasi: WasiCtx,
    http: WasiHttpCtx,
    hooks: HttpAllowlist,
    table: ResourceTable,
    limiter: Limiter,
    log_budget: usize,
    stderr: StderrTail,
}

impl Sandbox {
    /// A sandbox for `plugin` with the given limits and grants; its granted `http://` and
    /// `https://` requests go through `pool`.
    ///
    /// # Errors
    /// `grants.readOnlyDir` cannot be opened.
    pub fn new(
        plugin: &str,
        limits: &Limits,
        grants: &Grants,
        pool: &HttpPool,
    ) -> anyhow::Result<Self> {
        let mut wasi = WasiCtxBuilder::new();
        let stderr = StderrTail::default();
        // Deny-all: no env, args, stdin, stdout, sockets or preopens unless granted below;
        // stderr is kept (its tail) for the messages of failures.
        wasi.stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        if let Some(dir) = grants.read_only_dir.as_deref().filter(|d| !d.is_empty()) {
            // The real path the load resolved under the plugin data root, opened again without
            // following a symlink (one planted since leads nowhere).
            let opened = crate::data_root::open_real_dir(std::path::Path::new(dir))
                .map_err(|e| anyhow::anyhow!("grants.readOnlyDir {dir:?} cannot be opened: {e}"))?;
            wasi.preopened_dir(opened.path(), READ_ONLY_DIR_GUEST_PATH, FsPerms::ReadOnly)
                .map_err(|e| anyhow::anyhow!("grants.readOnlyDir {dir:?} cannot be opened: {e}"))?;
        }
        Ok(Self {
            plugin: plugin.to_owned(),
            wasi: wasi.build(),
            http: WasiHttpCtx::new(),
            hooks: HttpAllowlist {
                allowed: grants.allowed_hosts.clone(),
                denied: Vec::new(),
                pool: (!grants.allowed_hosts.is_empty()).then(|| pool.clone()),
            },
            table: ResourceTable::new(),
            limiter: Limiter {
                inner: StoreLimitsBuilder::new()
                    .memory_size(limits.memory_bytes())
                    .instances(64)
                    .tables(64)
                    .memories(16)
                    .build(),
                memory_limit: limits.memory_bytes(),
                exceeded: None,
                memory: MemoryUse::default(),
            },
            log_budget: MAX_LOG_PER_CALL,
            stderr,
        })
    }

    /// The plugin's registry name.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// Whether the plugin wrote to stderr.
    pub(crate) fn wrote_stderr(&self) -> bool {
        !self.stderr.is_empty()
    }

    /// The last [`STDERR_TAIL`] bytes the plugin wrote to stderr (a panic message, an
    /// interpreter's traceback), as one line: lines joined with `; `, empty when it wrote none.
    pub(crate) fn stderr_tail(&self) -> String {
        self.stderr.one_line()
    }

    /// The resource limiter to install with `Store::limiter`.
    pub(crate) fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        &mut self.limiter
    }

    /// The size a refused memory growth asked for, if one was refused.
    pub(crate) fn memory_exceeded(&self) -> Option<usize> {
        self.limiter.exceeded
    }

    /// How much linear memory the instances of this store were created with and grew to.
    pub(crate) fn memory_use(&self) -> MemoryUse {
        self.limiter.memory
    }

    /// Outbound authorities this call tried to reach and was denied.
    pub(crate) fn denied_hosts(&self) -> &[String] {
        &self.hooks.denied
    }
}

/// Linear memory of one store, in bytes, summed over its memories (a Rust or C component has
/// one): as created (each module's declared minimum) and at its largest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MemoryUse {
    /// Bytes at instantiation.
    pub initial: usize,
    /// Bytes at the end of the largest growth allowed (`initial` when none).
    pub peak: usize,
}

impl MemoryUse {
    /// Whether a `memory.grow` went past the initial size. In a pooled slot the next
    /// instantiation then shrinks the accessible region again with `mprotect` (a TLB shootdown
    /// on every CPU the process runs on), see docs/plugins.md, "Linear memory".
    pub fn grew(&self) -> bool {
        self.peak > self.initial
    }
}

/// `StoreLimits` plus a record of the growth it refused, so a failure can say "out of memory",
/// and of the growth it allowed ([`MemoryUse`]).
struct Limiter {
    inner: StoreLimits,
    memory_limit: usize,
    exceeded: Option<usize>,
    memory: MemoryUse,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.memory_limit {
            self.exceeded = Some(desired);
            wasmtime::bail!(
                "memory limit of {} MiB exceeded (asked for {} MiB)",
                self.memory_limit >> 20,
                desired >> 20
            );
        }
        let allowed = self.inner.memory_growing(current, desired, maximum)?;
        if allowed {
            // A memory being created asks to grow from 0 to its minimum.
            if current == 0 {
                self.memory.initial += desired;
            }
            self.memory.peak += desired - current;
        }
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.inner.table_growing(current, desired, maximum)
    }

    fn instances(&self) -> usize {
        self.inner.instances()
    }

    fn tables(&self) -> usize {
        self.inner.tables()
    }

    fn memories(&self) -> usize {
        self.inner.memories()
    }
}

/// A plugin's stderr: writes always succeed (a chatty plugin must not fail for it), and only
/// the last [`STDERR_TAIL`] bytes are kept.
#[derive(Clone, Default)]
struct StderrTail(std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<u8>>>);

impl StderrTail {
    fn is_empty(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
    }

    fn push(&self, bytes: &[u8]) {
        let mut tail = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let bytes = &bytes[bytes.len().saturating_sub(STDERR_TAIL)..];
        let excess = (tail.len() + bytes.len()).saturating_sub(STDERR_TAIL);
        tail.drain(..excess);
        tail.extend(bytes);
    }

    fn one_line(&self) -> String {
        let tail = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let (front, back) = tail.as_slices();
        let text = String::from_utf8_lossy(&[front, back].concat()).into_owned();
        let mut line = String::new();
        for l in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            if !line.is_empty() {
                // "panicked at src/lib.rs:48:23:" runs on into its message.
                line.push_str(if line.ends_with(':') { " " } else { "; " });
            }
            line.push_str(l);
        }
        line
    }
}

impl wasmtime_wasi::cli::IsTerminal for StderrTail {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for StderrTail {
    fn p2_stream(&self) -> Box<dyn wasmtime_wasi::p2::OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl wasmtime_wasi::p2::OutputStream for StderrTail {
    fn write(&mut self, bytes: bytes::Bytes) -> wasmtime_wasi::p2::StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> wasmtime_wasi::p2::StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> wasmtime_wasi::p2::StreamResult<usize> {
        Ok(64 * 1024)
    }
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for StderrTail {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for StderrTail {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.push(buf);
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

/// `wasi:http` hooks that let a request through only when its parsed authority (`host:port`,
/// port defaulted from the scheme) is listed in `grants.allowedHosts`. The Host header plays
/// no part (the lesson of Spin's CVE-2024-32980). Granted requests go through the runtime's
/// keep-alive pool (wasmtime-wasi-http hands this hook only `http://` and `https://` requests).
struct HttpAllowlist {
    allowed: Vec<String>,
    denied: Vec<String>,
    /// `None` when nothing is granted.
    pool: Option<HttpPool>,
}

/// Checks one `grants.allowedHosts` entry: `host` or `host:port` (an IPv6 address in
/// brackets), as [`host_allowed`] matches it.
///
/// # Errors
/// A message saying what to write instead: for a URL (scheme or path), user info, a wildcard
/// (not supported: each host is listed), or a port that is not a number up to 65535.
pub fn check_allowed_host(entry: &str) -> Result<(), String> {
    let hint = "write host or host:port, e.g. prometheus.monitoring:9090";
    if entry.contains("://") || entry.contains('/') {
        return Err(format!("{entry:?} is a URL; {hint}"));
    }
    if entry.contains('*') {
        return Err(format!(
            "{entry:?}: wildcards are not supported, list each host; {hint}"
        ));
    }
    let authority: http::uri::Authority = entry
        .parse()
        .map_err(|e| format!("{entry:?} is not a host: {e}; {hint}"))?;
    if entry.contains('@') || authority.host().is_empty() {
        return Err(format!("{entry:?} is not a host; {hint}"));
    }
    let has_port = entry
        .rsplit_once(':')
        .is_some_and(|(h, _)| !h.starts_with('[') || h.ends_with(']'));
    if has_port && authority.port_u16().is_none() {
        return Err(format!(
            "{entry:?}: the port must be a number up to 65535; {hint}"
        ));
    }
    Ok(())
}

/// Whether `authority` (as in a URI, `host[:port]`) is covered by `allowed`, whose entries are
/// `host:port` or `host` (any port). Hosts compare case-insensitively.
pub fn host_allowed(allowed: &[String], authority: &str, default_port: u16) -> bool {
    let authority = authority.to_ascii_lowercase();
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => match p.parse::<u16>() {
            Ok(p) => (h.to_owned(), p),
            Err(_) => (authority.clone(), default_port),
        },
        _ => (authority.clone(), default_port),
    };
    allowed.iter().any(|entry| {
        let entry = entry.to_ascii_lowercase();
        match entry
            .rsplit_once(':')
            .and_then(|(h, p)| p.parse::<u16>().ok().map(|p| (h.to_owned(), p)))
        {
            Some((h, p)) => h == host && p == port,
            None => entry == host,
        }
    })
}

impl WasiHttpHooks for HttpAllowlist {
    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<
        dyn Future<
                Output = Result<
                    (
                        http::Response<wasmtime_wasi_http::WasiBody>,
                        Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
                    ),
                    wasmtime_wasi_http::Error,
                >,
            > + Send,
    > {
        let uri = request.uri();
        let default_port = if uri.scheme() == Some(&http::uri::Scheme::HTTPS) {
            443
        } else {
            80
        };
        let authority = uri
            .authority()
            .map(|a| a.as_str().to_owned())
            .unwrap_or_default();
        let pool = match &self.pool {
            Some(pool)
                if !authority.is_empty()
                    && host_allowed(&self.allowed, &authority, default_port) =>
            {
                pool.clone()
            }
            _ => {
                self.denied.push(authority);
                return Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) });
            }
        };
        _ = fut;
        Box::new(async move {
            let response = pool.send(request, options).await?;
            Ok((
                response,
                Box::new(async { Ok(()) }) as Box<dyn Future<Output = _> + Send>,
            ))
        })
    }

    /// wasmtime's own code for a failed connect (after it has told DNS failures apart), without
    /// the default hook's warning, which names no plugin; the call's error names it.
    /// (The pool has logged the failure at debug level.)
    fn p2_error_from_connect(&mut self, _err: &std::io::Error) -> ErrorCode {
        ErrorCode::ConnectionRefused
    }

    /// As [`Self::p2_error_from_connect`], for a failed read of a response body.
    fn p2_error_from_hyper(&mut self, err: &hyper::Error) -> ErrorCode {
        tracing::debug!("plugin HTTP response failed: {err}");
        ErrorCode::HttpProtocolError
    }
}

impl WasiView for Sandbox {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for Sandbox {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.hooks,
        }
    }
}

impl log::Host for Sandbox {
    fn log(&mut self, level: LogLevel, message: String) {
        if self.log_budget == 0 {
            return;
        }
        let mut end = message.len().min(MAX_LOG_LINE).min(self.log_budget);
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        self.log_budget -= end;
        let line = &message[..end];
        let plugin = self.plugin.as_str();
        match level {
            LogLevel::Trace => tracing::trace!(plugin, "{line}"),
            LogLevel::Debug => tracing::debug!(plugin, "{line}"),
            LogLevel::Info => tracing::info!(plugin, "{line}"),
            LogLevel::Warn => tracing::warn!(plugin, "{line}"),
            LogLevel::Error => tracing::error!(plugin, "{line}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ErrorCode, HttpAllowlist, WasiHttpHooks, host_allowed};

    #[test]
    fn failed_connects_keep_wasmtime_codes() {
        use std::io::{Error, ErrorKind};
        let mut hooks = HttpAllowlist {
            allowed: Vec::new(),
            denied: Vec::new(),
            pool: None,
        };
        for kind in [ErrorKind::ConnectionRefused, ErrorKind::NetworkUnreachable] {
            assert!(matches!(
                hooks.p2_error_from_connect(&Error::new(kind, "failed")),
                ErrorCode::ConnectionRefused
            ));
        }
    }

    #[test]
    fn allowlist_matches_parsed_authority() {
        let allowed = vec![
            "127.0.0.1:9090".to_owned(),
            "prometheus.monitoring".to_owned(),
        ];
        assert!(host_allowed(&allowed, "127.0.0.1:9090", 80));
        assert!(!host_allowed(&allowed, "127.0.0.1:9091", 80));
        assert!(
            !host_allowed(&allowed, "127.0.0.1", 80),
            "port defaults to the scheme's"
        );
        assert!(
            host_allowed(&allowed, "PROMETHEUS.monitoring:8080", 80),
            "a bare host allows any port"
        );
        assert!(!host_allowed(&allowed, "prometheus.monitoring.evil:80", 80));
        assert!(
            !host_allowed(&[], "127.0.0.1:9090", 80),
            "nothing is granted by default"
        );
    }
}

//! The per-call store state: WASI with nothing granted but what the registry lists, a memory
//! limiter that records why it refused and how far memories and tables grew, an outbound-HTTP
//! allowlist and the `log` import.
//!
//! Every resource limit of wasmtime, WASI and `wasi:http` that bounds what one call can make
//! the host hold is set here, from the constants below, rather than left to wasmtime's
//! defaults, so that a wasmtime upgrade cannot widen one (`Sandbox::new`, `Sandbox::into_store`
//! and `HttpAllowlist`; each is tested with a plugin that asks for more,
//! `host/plugin-host/tests/plugins.rs`).

use wasmtime::component::ResourceTable;
use wasmtime::{Engine, ResourceLimiter, Store, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::p2::bindings::http::types::ErrorCode;
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use super::bindings::LogLevel;
use super::bindings::router::wasmop::plugin::log;
use super::http_pool::HttpPool;
use crate::spec::{Grants, Limits};

/// Longest log line kept from a plugin, in bytes, after its control characters are escaped.
pub const MAX_LOG_LINE: usize = 4 * 1024;
/// Most log bytes kept from one call.
pub const MAX_LOG_PER_CALL: usize = 64 * 1024;
/// Most log lines kept from one call (an empty line counts too).
pub const MAX_LOG_LINES_PER_CALL: usize = 256;
/// Bytes of a plugin's stderr kept from one call: its last ones, which a failure quotes.
pub const STDERR_TAIL: usize = 2 * 1024;
/// Where `grants.readOnlyDir` appears inside the guest.
pub(crate) const READ_ONLY_DIR_GUEST_PATH: &str = "/data";

/// Bytes one table element counts for against `limits.memoryMiB`: wasmtime keeps a `funcref`
/// or `externref` slot in one pointer-sized word, 8 bytes on the 64-bit hosts wasmop runs on.
pub const TABLE_ELEMENT_BYTES: usize = 8;
/// Core instances one call may create (a Rust component has about five, a Python one 14).
pub const MAX_INSTANCES: usize = 64;
/// Tables one call may create.
pub const MAX_TABLES: usize = 64;
/// Linear memories one call may create.
pub const MAX_MEMORIES: usize = 16;
/// wasmtime's "hostcall fuel" beyond `limits.maxOutputKiB`: what a plugin may copy to the host
/// in one host call (a log line, a stderr write, an HTTP body chunk) or in its answer is at
/// most `maxOutputKiB` plus this, 1 MiB (wasmtime's default: 128 MiB). More fails the call as
/// [`Failure::TransferTooLarge`](crate::Failure::TransferTooLarge) while it is copied, before
/// the host holds it.
pub const HOSTCALL_FUEL_MARGIN: usize = 1 << 20;
/// Largest `wasi:random` request, in bytes (`get-random-bytes` and `get-insecure-random-bytes`):
/// 1 MiB, where language runtimes ask for a few KiB to seed themselves (wasmtime's default:
/// 64 MiB). More traps.
pub const MAX_RANDOM_BYTES: u64 = 1 << 20;
/// Resources one call may hold at once, in the host's resource table (streams, pollables,
/// HTTP requests, fields, descriptors) and in the component model's handle table: 10,000
/// (wasmtime's defaults: 1,000,000 and 100,000). More fails the call.
pub const MAX_RESOURCES: usize = 10_000;
/// Bytes a `wasi:http` fields resource (the headers of one request) may hold, counted as
/// wasmtime does (names and values plus its bookkeeping): 64 KiB (wasmtime's default:
/// 128 KiB). An append or set past it fails the call.
pub const MAX_HTTP_FIELDS_BYTES: usize = 64 << 10;
/// Bytes one write to an outgoing `wasi:http` body may carry: 64 KiB (wasmtime's default:
/// 1 MiB). `check-write` says so; a larger write traps.
pub const HTTP_BODY_CHUNK_BYTES: usize = 64 << 10;
/// Writes an outgoing `wasi:http` body buffers before the guest must wait for the network: 1
/// (wasmtime's default).
pub const HTTP_BODY_BUFFER_CHUNKS: usize = 1;
/// Outbound authorities a call was denied that its failure names (the first ones, each cut to
/// [`MAX_DENIED_HOST_BYTES`]); further denied requests are only counted.
pub const MAX_DENIED_HOSTS: usize = 8;
/// Longest denied authority a failure quotes, in bytes.
pub const MAX_DENIED_HOST_BYTES: usize = 256;

/// State of one `Store`: one call, or one batch of calls.
pub(crate) struct Sandbox {
    plugin: String,
    wasi: WasiCtx,
    http: WasiHttpCtx,
    hooks: HttpAllowlist,
    table: ResourceTable,
    limiter: Limiter,
    log_budget: usize,
    log_lines: usize,
    /// Whether a log line was dropped for the caps (and the warning said so).
    log_capped: bool,
    stderr: StderrTail,
    /// [`HOSTCALL_FUEL_MARGIN`] plus `limits.maxOutputKiB`.
    hostcall_fuel: usize,
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
            .max_random_size(MAX_RANDOM_BYTES)
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
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit(MAX_HTTP_FIELDS_BYTES);
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_RESOURCES);
        Ok(Self {
            plugin: plugin.to_owned(),
            wasi: wasi.build(),
            http,
            hooks: HttpAllowlist {
                allowed: grants.allowed_hosts.clone(),
                denied: Vec::new(),
                denied_more: 0,
                pool: (!grants.allowed_hosts.is_empty()).then(|| pool.clone()),
            },
            table,
            limiter: Limiter::new(limits.memory_bytes()),
            log_budget: MAX_LOG_PER_CALL,
            log_lines: MAX_LOG_LINES_PER_CALL,
            log_capped: false,
            stderr,
            hostcall_fuel: limits.max_output_bytes() + HOSTCALL_FUEL_MARGIN,
        })
    }

    /// A store of `engine` holding this sandbox, with its limiter installed and the store's
    /// own limits set: [`HOSTCALL_FUEL_MARGIN`] plus `limits.maxOutputKiB` of hostcall fuel and
    /// [`MAX_RESOURCES`] component handles.
    pub(crate) fn into_store(self, engine: &Engine) -> Store<Self> {
        let fuel = self.hostcall_fuel;
        let mut store = Store::new(engine, self);
        store.limiter(|s| &mut s.limiter);
        store.set_hostcall_fuel(fuel);
        store.set_max_component_handles(MAX_RESOURCES);
        store
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

    /// The bytes of memories and tables a refused growth asked for, if one was refused.
    pub(crate) fn memory_exceeded(&self) -> Option<usize> {
        self.limiter.exceeded
    }

    /// How much memory (linear memories and tables) the instances of this store were created
    /// with and grew to.
    pub(crate) fn memory_use(&self) -> MemoryUse {
        self.limiter.memory
    }

    /// The first [`MAX_DENIED_HOSTS`] distinct outbound authorities this call was denied, and
    /// how many other denied requests it made.
    pub(crate) fn denied_hosts(&self) -> (&[String], usize) {
        (&self.hooks.denied, self.hooks.denied_more)
    }

    /// Hostcall fuel of this sandbox's store, in bytes ([`Sandbox::into_store`]).
    pub(crate) fn hostcall_fuel(&self) -> usize {
        self.hostcall_fuel
    }
}

/// Memory of one store, in bytes, as it counts against `limits.memoryMiB`: its linear memories
/// and its tables ([`TABLE_ELEMENT_BYTES`] per element), summed (a Rust or C component has one
/// memory and a few small tables): as created (each module's declared minimums) and at its
/// largest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MemoryUse {
    /// Bytes at instantiation.
    pub initial: usize,
    /// Bytes at the end of the largest growth allowed (`initial` when none).
    pub peak: usize,
}

impl MemoryUse {
    /// Whether a `memory.grow` (or `table.grow`) went past the initial size. In a pooled slot
    /// the next instantiation then shrinks the accessible region again with `mprotect` (a TLB
    /// shootdown on every CPU the process runs on), see docs/plugins.md, "Linear memory".
    pub fn grew(&self) -> bool {
        self.peak > self.initial
    }
}

/// The resource limiter of a call: every linear memory and table of the store together within
/// `limits.memoryMiB` (a component has several core instances, some several memories; each
/// was checked alone before, so 16 memories could take 16 times the limit), the counts of
/// [`MAX_INSTANCES`], [`MAX_TABLES`] and [`MAX_MEMORIES`], a record of the growth it refused
/// (so a failure can say "out of memory"), and of the growth it allowed ([`MemoryUse`]).
struct Limiter {
    /// The counts of instances, tables and memories.
    counts: StoreLimits,
    /// `limits.memoryMiB` in bytes.
    limit: usize,
    /// Bytes of every linear memory of the store.
    memories: usize,
    /// Elements of every table of the store.
    table_elements: usize,
    exceeded: Option<usize>,
    memory: MemoryUse,
}

impl Limiter {
    fn new(limit: usize) -> Self {
        Self {
            counts: StoreLimitsBuilder::new()
                .instances(MAX_INSTANCES)
                .tables(MAX_TABLES)
                .memories(MAX_MEMORIES)
                .build(),
            limit,
            memories: 0,
            table_elements: 0,
            exceeded: None,
            memory: MemoryUse::default(),
        }
    }

    /// Bytes in use, memories and tables.
    fn in_use(&self) -> usize {
        self.memories
            .saturating_add(self.table_elements.saturating_mul(TABLE_ELEMENT_BYTES))
    }

    /// Refuses (as an error, which traps the call) a growth of `what` from `current` to
    /// `desired` bytes that takes the store past the limit.
    fn admit(&mut self, what: &str, current: usize, desired: usize) -> wasmtime::Result<()> {
        let total = (self.in_use() - current).saturating_add(desired);
        if total > self.limit {
            self.exceeded = Some(total);
            wasmtime::bail!(
                "{what} to {desired} bytes would take the call's memories and tables to {total} \
                 bytes, over limits.memoryMiB ({} MiB)",
                self.limit >> 20
            );
        }
        Ok(())
    }

    /// Records an allowed growth of `current` to `desired` bytes.
    fn grown(&mut self, current: usize, desired: usize) {
        // A memory or table being created asks to grow from 0 to its minimum.
        if current == 0 {
            self.memory.initial += desired;
        }
        self.memory.peak = self.memory.peak.max(self.in_use());
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.admit("growing a linear memory", current, desired)?;
        let allowed = self.counts.memory_growing(current, desired, maximum)?;
        if allowed {
            self.memories = self.memories - current + desired;
            self.grown(current, desired);
        }
        Ok(allowed)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let bytes = |elements: usize| elements.saturating_mul(TABLE_ELEMENT_BYTES);
        self.admit("growing a table", bytes(current), bytes(desired))?;
        let allowed = self.counts.table_growing(current, desired, maximum)?;
        if allowed {
            self.table_elements = self.table_elements - current + desired;
            self.grown(bytes(current), bytes(desired));
        }
        Ok(allowed)
    }

    fn instances(&self) -> usize {
        self.counts.instances()
    }

    fn tables(&self) -> usize {
        self.counts.tables()
    }

    fn memories(&self) -> usize {
        self.counts.memories()
    }
}

/// `text` as one line of at most `max` bytes: control characters (a newline that would start
/// a forged log line, a carriage return, terminal escapes) escaped as Rust does (`\n`,
/// `\u{1b}`), cut at a character boundary.
pub(crate) fn one_line(text: &str, max: usize) -> String {
    let mut line = String::with_capacity(text.len().min(max));
    for c in text.chars() {
        let before = line.len();
        if c.is_control() {
            line.extend(c.escape_default());
        } else {
            line.push(c);
        }
        if line.len() > max {
            line.truncate(before);
            break;
        }
    }
    line
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
            line.push_str(&one_line(l, STDERR_TAIL * 4));
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
    /// The first [`MAX_DENIED_HOSTS`] distinct authorities denied, each cut to
    /// [`MAX_DENIED_HOST_BYTES`].
    denied: Vec<String>,
    /// Denied requests past those.
    denied_more: usize,
    /// `None` when nothing is granted.
    pool: Option<HttpPool>,
}

impl HttpAllowlist {
    /// Records a denied request to `authority`, within [`MAX_DENIED_HOSTS`].
    fn deny(&mut self, authority: &str) {
        let shown = crate::error::cut(authority, MAX_DENIED_HOST_BYTES);
        if self.denied.contains(&shown) {
            return;
        }
        if self.denied.len() < MAX_DENIED_HOSTS {
            self.denied.push(shown);
        } else {
            self.denied_more += 1;
        }
    }
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
                self.deny(&authority);
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

    /// [`HTTP_BODY_BUFFER_CHUNKS`], set here rather than left to wasmtime's default.
    fn p2_outgoing_body_buffer_chunks(&mut self) -> usize {
        HTTP_BODY_BUFFER_CHUNKS
    }

    /// [`HTTP_BODY_CHUNK_BYTES`].
    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        HTTP_BODY_CHUNK_BYTES
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
    /// Writes `message` to the operator's log as one line ([`one_line`]: a plugin cannot
    /// forge a second line), within [`MAX_LOG_LINE`] bytes a line and [`MAX_LOG_PER_CALL`]
    /// bytes and [`MAX_LOG_LINES_PER_CALL`] lines a call. The first line past a cap is replaced
    /// by one warning saying so; the others are dropped.
    fn log(&mut self, level: LogLevel, message: String) {
        let plugin = self.plugin.as_str();
        if self.log_lines == 0 || self.log_budget == 0 {
            if !self.log_capped {
                self.log_capped = true;
                tracing::warn!(
                    plugin,
                    "further log lines of this call dropped (at most {MAX_LOG_LINES_PER_CALL} \
                     lines and {MAX_LOG_PER_CALL} bytes a call)"
                );
            }
            return;
        }
        let line = one_line(&message, MAX_LOG_LINE.min(self.log_budget));
        self.log_budget -= line.len();
        self.log_lines -= 1;
        let line = line.as_str();
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
            denied_more: 0,
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

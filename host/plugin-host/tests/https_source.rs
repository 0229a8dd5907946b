//! `https://` plugin sources: downloaded over TLS from a loopback server whose certificate is
//! signed by a test CA (trusted as an extra CA, as `wasmop run --extra-ca-file` does), verified
//! by sha256, and refused when the server's certificate is not trusted. Redirects are followed
//! to `https://` URLs only. Both `https://` and `file://` sources are held to the size limit
//! without reading more than it, and `file://` ones to regular files.

use wasmop_plugin_host::registry::{
    CONNECT_TIMEOUT, DOWNLOAD_TIMEOUT, Fetch as _, LocalFetch, MAX_COMPONENT_BYTES, Registry,
    RegistryConfig, Source,
};
use wasmop_plugin_host::{Hook, PluginRuntime, RuntimeOptions, builtin, sha256_hex};
use wasmop_tests::tls::{self, TestCa};

/// The error of downloading `https://localhost:{port}/dr.wasm` as `fetch` does.
async fn refused_download(port: u16, fetch: &LocalFetch) -> String {
    let url = format!("https://localhost:{port}/dr.wasm");
    wasmop_plugin_host::registry::https_get(&url, fetch.extra_ca_pem.as_deref())
        .await
        .expect_err("the download is refused")
}

#[tokio::test]
async fn https_sources_are_downloaded_verified_and_loaded() {
    let ca = TestCa::new("wasmop test CA");
    let dir = std::env::temp_dir().join(format!("wasmop-https-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fetch = LocalFetch {
        extra_ca_pem: Some(ca.pem().as_bytes().to_vec()),
        docker_config: None,
    };
    let server = ca.server_config(&["localhost"]);
    let wasm = builtin::find("dr-lease").unwrap().wasm.to_vec();
    let (port, _) = tls::serve(server, wasm.clone()).await;
    let runtime = PluginRuntime::new(RuntimeOptions {
        cache_dir: Some(dir.join("cache")),
        max_concurrent_calls: 1,
        pooling: false,
        extra_ca_pem: None,
    })
    .unwrap();
    let registry = Registry::new(runtime);

    let good = format!(
        "plugins:\n  - {{name: remote, hook: dr, source: 'https://localhost:{port}/dr.wasm', sha256: '{}'}}\n",
        sha256_hex(&wasm)
    );
    let report = registry
        .apply(RegistryConfig::parse(&good).unwrap(), &fetch)
        .await;
    assert_eq!(report.failed, vec![], "{report:?}");
    assert!(registry.resolve(Hook::Dr, Some("remote")).is_ok());

    // The same bytes under a wrong digest are refused before compiling.
    let bad = good.replace(&sha256_hex(&wasm), &"1".repeat(64));
    let report = registry
        .apply(RegistryConfig::parse(&bad).unwrap(), &fetch)
        .await;
    assert!(report.failed[0].1.contains("sha256 mismatch"), "{report:?}");

    // A server the CA did not sign is refused.
    let rogue_server = TestCa::new("rogue CA").server_config(&["localhost"]);
    let (rogue_port, _) = tls::serve(rogue_server, wasm.clone()).await;
    let err = refused_download(rogue_port, &fetch).await;
    assert!(err.contains("localhost"), "{err}");
    assert!(
        err.contains("invalid peer certificate: UnknownIssuer"),
        "an untrusted certificate is refused, in words: {err}"
    );

    // Redirects are followed (a release asset's URL points at its storage), to https only.
    let moved = tls::redirect(
        ca.server_config(&["localhost"]),
        &format!("https://localhost:{port}/dr.wasm"),
    )
    .await;
    let via_redirect = good.replace(&format!("localhost:{port}"), &format!("localhost:{moved}"));
    let renamed = via_redirect.replace("name: remote", "name: moved");
    let report = registry
        .apply(RegistryConfig::parse(&renamed).unwrap(), &fetch)
        .await;
    assert_eq!(report.failed, vec![], "{report:?}");
    assert!(registry.resolve(Hook::Dr, Some("moved")).is_ok());
    let plain = tls::redirect(
        ca.server_config(&["localhost"]),
        "http://localhost:1/dr.wasm",
    )
    .await;
    let err = refused_download(plain, &fetch).await;
    assert!(
        err.ends_with("redirects to http://localhost:1/dr.wasm, which is not https://; refused"),
        "{err}"
    );
    let looping = tls::redirect(ca.server_config(&["localhost"]), "/again").await;
    let err = refused_download(looping, &fetch).await;
    assert_eq!(
        err,
        format!(
            "https://localhost:{looping}/dr.wasm: more than 5 redirects (last to \
             https://localhost:{looping}/again)"
        )
    );

    // A server that is not there: the causes in words, as Events and conditions show them.
    let refused = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let refused_url = format!("https://{}/dr.wasm", refused.local_addr().unwrap());
    drop(refused);
    let err = wasmop_plugin_host::registry::https_get(&refused_url, None)
        .await
        .unwrap_err();
    assert!(
        err.starts_with(&refused_url) && err.ends_with("Connection refused (os error 111)"),
        "{err}"
    );
    assert!(!err.contains("Error("), "no Debug dump: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A host that drops the connection attempt (a firewall, a wrong address): the download fails
/// after [`CONNECT_TIMEOUT`] with that cause, not after the whole download's timeout. The clock
/// is paused and advances when the runtime has nothing to do; the connect really hangs: the
/// listener's accept queue (backlog 0) is full, so the kernel drops the SYNs.
#[tokio::test(start_paused = true)]
async fn a_host_that_does_not_answer_fails_at_the_connect_timeout() {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let _queued = tokio::net::TcpStream::connect(addr).await.unwrap();

    let url = format!("https://{addr}/dr.wasm");
    let started = tokio::time::Instant::now();
    let err = wasmop_plugin_host::registry::https_get(&url, None)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        format!(
            "{url}: no connection within 10s: the host does not answer (is it reachable from \
             the operator's network?)"
        )
    );
    let waited = started.elapsed();
    assert!(
        waited >= CONNECT_TIMEOUT && waited < DOWNLOAD_TIMEOUT,
        "{waited:?}"
    );
    drop(listener);
}

/// A server that announces a body over [`MAX_COMPONENT_BYTES`] (its `Content-Length`) is
/// refused at once, before anything of the body is read or buffered, not after the download's
/// timeout.
#[tokio::test]
async fn a_body_announced_over_the_size_limit_is_refused_before_it_is_read() {
    let ca = TestCa::new("wasmop test CA");
    let too_big = MAX_COMPONENT_BYTES as u64 + 1;
    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {too_big}\r\n\r\n");
    let port = tls::serve_head(ca.server_config(&["localhost"]), &head).await;
    let url = format!("https://localhost:{port}/huge.wasm");
    let pem = ca.pem().as_bytes().to_vec();
    let err = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        wasmop_plugin_host::registry::https_get(&url, Some(&pem)),
    )
    .await
    .expect("refused at once, not after the download timeout")
    .expect_err("over the limit");
    assert_eq!(
        err,
        format!(
            "{url}: the component is {too_big} bytes (its Content-Length), over the 256 MiB \
             (268435456 bytes) a component may have"
        )
    );
}

/// `file://` sources are regular files (a symlink to one is followed) of at most
/// [`MAX_COMPONENT_BYTES`]: a FIFO, `/dev/zero`, a symlink to it, a directory and a larger file
/// are refused at once, each named, without reading them (a FIFO without a writer would hang
/// the read, `/dev/zero` never ends).
#[tokio::test]
async fn file_sources_are_regular_files_within_the_size_limit() {
    let dir = std::env::temp_dir().join(format!("wasmop-file-source-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let wasm = builtin::find("none").unwrap().wasm;
    std::fs::write(dir.join("plugin.wasm"), wasm).unwrap();
    std::os::unix::fs::symlink(dir.join("plugin.wasm"), dir.join("linked.wasm")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", dir.join("zero.wasm")).unwrap();
    let fifo = dir.join("fifo.wasm");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let huge = std::fs::File::create(dir.join("huge.wasm")).unwrap();
    huge.set_len(MAX_COMPONENT_BYTES as u64 + 1).unwrap();

    let fetch = |path: std::path::PathBuf| async move {
        let source = Source::File(path.display().to_string());
        tokio::time::timeout(
            std::time::Duration::from_secs(10),
            LocalFetch::default().fetch(&source),
        )
        .await
        .unwrap_or_else(|_| panic!("{}: the read hangs", path.display()))
    };
    for ok in ["plugin.wasm", "linked.wasm"] {
        assert_eq!(fetch(dir.join(ok)).await.unwrap(), wasm, "{ok}");
    }
    let refused = async |path: std::path::PathBuf, kind: &str| {
        let err = fetch(path.clone()).await.expect_err(kind);
        assert_eq!(
            err,
            format!(
                "{} is {kind}, not a regular file: a file:// source must be a regular file (a \
                 symlink to one is followed)",
                path.display()
            )
        );
    };
    refused(fifo, "a FIFO").await;
    refused("/dev/zero".into(), "a character device").await;
    refused(dir.join("zero.wasm"), "a character device").await;
    refused(dir.clone(), "a directory").await;
    let err = fetch(dir.join("huge.wasm")).await.expect_err("too large");
    assert_eq!(
        err,
        format!(
            "{} is 268435457 bytes, over the 256 MiB (268435456 bytes) a component may have",
            dir.join("huge.wasm").display()
        )
    );
    let _ = std::fs::remove_dir_all(&dir);
}

//! A real OCI registry on loopback for the `oci://` plugin source tests: the CNCF distribution
//! registry, built by `scripts/setup.d/78-oci-registry.sh` (its path from
//! `scripts/oci-registry-version.sh`), serving plain HTTP on `127.0.0.1` from a directory of
//! its own, anonymous or behind htpasswd (user [`USER`], password [`PASSWORD`]).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::{Process, dump_dir, eventually, free_port, http_get, repo_root};

/// The user of a registry started with auth.
pub const USER: &str = "wasmop-e2e";
/// Its password.
pub const PASSWORD: &str = "wasmop-e2e-password";
/// bcrypt of [`PASSWORD`] (cost 4), the htpasswd line's hash.
const PASSWORD_BCRYPT: &str = "$2a$04$1ASgFDxwV2CaGp6klstoO.8Pf.MzvNLuEXSyqsiEsWiAV4lp47H3K";

/// The path of the registry binary (`$OCI_REGISTRY` of scripts/oci-registry-version.sh).
///
/// # Panics
/// When the version script cannot run, or the binary is not built (the message says how).
pub fn registry_binary() -> PathBuf {
    let out = Command::new("bash")
        .arg("-c")
        .arg(r#". "$0/scripts/oci-registry-version.sh" && printf %s "$OCI_REGISTRY""#)
        .arg(repo_root())
        .output()
        .expect("run scripts/oci-registry-version.sh");
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).into_owned());
    assert!(
        path.is_file(),
        "the OCI registry is not built at {}: run scripts/setup.sh (scripts/setup.d/78-oci-registry.sh)",
        path.display()
    );
    path
}

/// A distribution registry on `127.0.0.1`, stopped on drop. Its storage outlives a
/// [`OciRegistry::stop`], so a restart on the same port serves what was pushed before.
pub struct OciRegistry {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    dir: PathBuf,
    name: String,
    process: Option<Process>,
    starts: usize,
    tls: bool,
}

impl OciRegistry {
    /// Starts a registry named `name` (its directory and log under the dump directory), with
    /// htpasswd auth when `auth`, and waits until it answers.
    ///
    /// # Panics
    /// When the binary is missing or the registry does not answer within 30 s.
    pub async fn start(name: &str, auth: bool) -> Self {
        Self::launch(name, auth, None).await
    }

    /// As [`OciRegistry::start`] (anonymous), serving HTTPS with a certificate for
    /// `127.0.0.1` and `localhost` signed by `ca`.
    ///
    /// # Panics
    /// As [`OciRegistry::start`].
    pub async fn start_tls(name: &str, ca: &crate::tls::TestCa) -> Self {
        Self::launch(
            name,
            false,
            Some(ca.server_pem(&["127.0.0.1", "localhost"])),
        )
        .await
    }

    async fn launch(name: &str, auth: bool, tls: Option<(String, String)>) -> Self {
        let dir = dump_dir().join(format!("oci-registry-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("storage")).expect("create the registry directory");
        let addr = format!("127.0.0.1:{}", free_port());
        let tls_config = match &tls {
            Some((cert, key)) => {
                std::fs::write(dir.join("cert.pem"), cert).expect("write the certificate");
                std::fs::write(dir.join("key.pem"), key).expect("write the key");
                format!(
                    ", tls: {{certificate: {}, key: {}}}",
                    dir.join("cert.pem").display(),
                    dir.join("key.pem").display()
                )
            }
            None => String::new(),
        };
        let mut config = format!(
            "version: 0.1\nlog: {{level: warn, accesslog: {{disabled: true}}}}\n\
             storage: {{filesystem: {{rootdirectory: {}}}, delete: {{enabled: true}}}}\n\
             http: {{addr: '{addr}', secret: wasmop-e2e-not-secret{tls_config}}}\n",
            dir.join("storage").display()
        );
        if auth {
            let htpasswd = dir.join("htpasswd");
            std::fs::write(&htpasswd, format!("{USER}:{PASSWORD_BCRYPT}\n"))
                .expect("write htpasswd");
            config.push_str(&format!(
                "auth: {{htpasswd: {{realm: wasmop-e2e, path: {}}}}}\n",
                htpasswd.display()
            ));
        }
        std::fs::write(dir.join("config.yml"), config).expect("write the registry config");
        let mut registry = Self {
            addr,
            dir,
            name: name.to_owned(),
            process: None,
            starts: 0,
            tls: tls.is_some(),
        };
        registry.restart().await;
        registry
    }

    /// Stops the registry (its port then refuses connections); its storage stays.
    pub fn stop(&mut self) {
        self.process = None;
    }

    /// Starts the registry again on the same port with the same storage, and waits until it
    /// answers `GET /v2/` (200, or 401 with auth; over TLS, the 400 a plain request gets).
    ///
    /// # Panics
    /// As [`OciRegistry::start`].
    pub async fn restart(&mut self) {
        self.stop();
        self.starts += 1;
        let mut cmd = Command::new(registry_binary());
        cmd.arg("serve").arg(self.dir.join("config.yml"));
        let log = dump_dir().join(format!(
            "oci-registry-{}-{}-{}.log",
            self.name,
            std::process::id(),
            self.starts
        ));
        let mut process = Process::spawn(cmd, log);
        let addr = self.addr.clone();
        let answered: &[u16] = if self.tls { &[400] } else { &[200, 401] };
        eventually(
            "the OCI registry answers /v2/",
            Duration::from_secs(30),
            async || {
                assert!(process.alive(), "the registry exited:\n{}", process.log());
                http_get(&addr, "/v2/").filter(|(status, _)| answered.contains(status))
            },
        )
        .await;
        self.process = Some(process);
    }

    /// A Docker config (`.dockerconfigjson`) with the credentials `user` and `password` for
    /// this registry.
    pub fn docker_config(&self, user: &str, password: &str) -> String {
        use base64::Engine as _;
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!(r#"{{"auths":{{"{}":{{"auth":"{auth}"}}}}}}"#, self.addr)
    }
}

/// What `wasmop plugin push` printed (`printed`: its stdout and stderr): the component's
/// sha256 and the `source:` by manifest digest.
///
/// # Panics
/// When either line is missing.
pub fn pushed(printed: &str) -> (String, String) {
    let sha = printed
        .lines()
        .find_map(|l| l.trim().strip_prefix("sha256: \""))
        .and_then(|l| l.strip_suffix('"'))
        .unwrap_or_else(|| panic!("no sha256 line in:\n{printed}"))
        .to_owned();
    let by_digest = printed
        .lines()
        .filter_map(|l| l.trim().strip_prefix("source: "))
        .find(|s| s.contains("@sha256:"))
        .unwrap_or_else(|| panic!("no source by digest in:\n{printed}"))
        .to_owned();
    (sha, by_digest)
}

//! `wasmop plugin new|check|check-registry|run|test|scaffold|push|pull` (and `wasmop-plugin …`):
//! the tools of plugin authors, which write a plugin to start from ([`crate::plugin_new`]), load
//! a component as the operator would, without a cluster, run the hook's conformance suite on it
//! (src/conformance.rs), and move it to and from an OCI registry.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Subcommand;

use wasmop_plugin_host::registry::{
    CONFIGMAP_KEY, CONFIGMAP_NAME, Fetch, LocalFetch, Registry, RegistryConfig, Source,
};
use wasmop_plugin_host::{
    CallError, DEFAULT_PLUGIN_DATA_ROOT, DataRoot, Failure, Grants, Hook, Limits, Plugin,
    PluginRuntime, PluginSpec, RuntimeOptions,
};

/// `wasmop plugin …`
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Write a plugin to start from into DIR: for the hook, in the language, with a build
    /// script and a README of the commands to build, check and register it; it passes `plugin
    /// check` and `plugin test` as written (docs/plugins.md, "The author's path").
    New(crate::plugin_new::NewOptions),
    /// Load a component, check its world and version, call `info` and `validate-settings`.
    Check {
        /// The component file (`.wasm`) or `builtin://NAME`.
        plugin: String,
        /// The hook it is for; tried against every hook when omitted.
        #[arg(long)]
        hook: Option<Hook>,
        /// Settings JSON passed to `validate-settings`.
        #[arg(long, default_value = "{}")]
        settings: String,
        /// Limits and grants `validate-settings` runs under, as a registry entry's.
        #[command(flatten)]
        entry: EntryOptions,
        /// `text`: one line (`ok: …` or `FAIL: …`); `json`: one object, `{"ok": bool,
        /// "plugin", "hook", "name", "version", "world", "sha256"}` when it passes, `{"ok":
        /// false, "plugin", "failures": [{"hook", "message"}]}` when it fails.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Report::Text)]
        output: Report,
    },
    /// Check a registry offline: parse its `plugins.yaml` as the operator does and load each
    /// entry with its settings, limits and grants.
    CheckRegistry {
        /// A `plugins.yaml` document, or YAML holding ConfigMap `wasmop-plugins` and the
        /// ConfigMaps its `configmap://` sources name (e.g. what you `kubectl apply`).
        file: PathBuf,
        /// PEM CA certificates trusted for `https://` sources besides the system's roots, as
        /// `wasmop run --extra-ca-file`.
        #[arg(long, value_name = "FILE")]
        extra_ca_file: Option<PathBuf>,
        /// The directory every `grants.readOnlyDir` must be under, as `wasmop run
        /// --plugin-data-root`.
        #[arg(long, env = "WASMOP_PLUGIN_DATA_ROOT", value_name = "DIR",
              default_value = DEFAULT_PLUGIN_DATA_ROOT, value_parser = parse_data_root)]
        plugin_data_root: DataRoot,
        /// A Docker config whose credentials stand in for the `pullSecret`s of `oci://`
        /// entries (which the operator reads in the cluster) [default: `$DOCKER_CONFIG/config.json`,
        /// else `~/.docker/config.json`, if there is one].
        #[arg(long, value_name = "FILE")]
        docker_config: Option<PathBuf>,
        /// `text`: one line per entry, then the defaults; `json`: one object, `{"ok": bool,
        /// "error": null or why the document is invalid, "entries": [{"name", "hook",
        /// "source", "status": "ok"|"fail"|"skip", "message"}], "defaults": {HOOK: NAME}}`.
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Report::Text)]
        output: Report,
    },
    /// Run the hook's conformance suite on a component: built-in requests with the properties
    /// every plugin of the hook must have, then your own fixtures; one line per property, exit
    /// 1 when any fails (docs/plugins.md, "Testing a plugin").
    Test {
        /// The component file (`.wasm`) or `builtin://NAME`.
        plugin: String,
        /// The hook it is for.
        #[arg(long)]
        hook: Hook,
        /// A directory of fixtures, `NAME.json` each: `{"request": …, "expect": ANSWER}` or
        /// `{"request": …, "expect-error": {"field": …, "message": …}}`, optionally with
        /// `"settings"` (the Rust SDK's fixture format).
        #[arg(long, value_name = "DIR")]
        fixtures: Option<PathBuf>,
        /// Settings JSON to load it with (a fixture may give its own).
        #[arg(long, default_value = "{}")]
        settings: String,
        /// Limits and grants, as a registry entry's.
        #[command(flatten)]
        entry: EntryOptions,
    },
    /// Write starting points for plugin authors.
    #[command(subcommand)]
    Scaffold(ScaffoldCommand),
    /// Push a component to an OCI registry as a WebAssembly OCI artifact (one `application/wasm`
    /// layer) and print the `source:` and `sha256:` to paste into `plugins.yaml`.
    Push {
        /// The component file (`.wasm`).
        file: PathBuf,
        /// Where to: `oci://REGISTRY/REPOSITORY:TAG`.
        reference: String,
        /// How to reach the registry.
        #[command(flatten)]
        registry: RegistryOptions,
    },
    /// Pull a component from an OCI registry into a file, and print its digests.
    Pull {
        /// `oci://REGISTRY/REPOSITORY:TAG` or `oci://REGISTRY/REPOSITORY@sha256:DIGEST`.
        reference: String,
        /// The file to write the component to.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: PathBuf,
        /// How to reach the registry.
        #[command(flatten)]
        registry: RegistryOptions,
    },
    /// Make one call under production limits and print the result as JSON.
    Run {
        /// The hook to call.
        #[arg(long)]
        hook: Hook,
        /// A component file or `builtin://NAME`.
        #[arg(long)]
        plugin: String,
        /// A file holding the request as JSON, `-` for stdin: the hook's WIT request record
        /// with its WIT names (`dynamic-env`, `{"exact": "…"}`); `wasmop plugin scaffold
        /// request --hook H` prints one to start from.
        #[arg(long, value_name = "FILE")]
        input: PathBuf,
        /// Settings JSON.
        #[arg(long, default_value = "{}")]
        settings: String,
        /// Make the call N times, each in a fresh instance as the operator does, and print the
        /// p50 and p99 call time and the peak linear memory on stderr (the answer of the
        /// first call on stdout).
        #[arg(long, value_name = "N", default_value_t = 1,
              value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
        repeat: u32,
        /// Limits and grants, as a registry entry's.
        #[command(flatten)]
        entry: EntryOptions,
    },
}

/// `wasmop plugin scaffold …`
#[derive(Debug, Subcommand)]
pub enum ScaffoldCommand {
    /// Print a realistic request of the hook as `plugin run --input` and fixtures take it (the
    /// WIT JSON form), to edit into your own.
    Request {
        /// The hook.
        #[arg(long)]
        hook: Hook,
    },
}

/// The output of `plugin check` and `check-registry` (`-o`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Report {
    /// Lines for people.
    Text,
    /// One JSON object, for scripts.
    Json,
}

/// How `plugin push` and `plugin pull` reach a registry.
#[derive(Debug, clap::Args)]
pub struct RegistryOptions {
    /// Plain HTTP instead of HTTPS, as an entry's `insecure: true`: for a registry on loopback
    /// (`localhost`, 127.0.0.0/8, `[::1]`) only.
    #[arg(long)]
    pub insecure: bool,
    /// PEM CA certificates trusted besides the system's roots, as `wasmop run --extra-ca-file`.
    #[arg(long, value_name = "FILE")]
    pub extra_ca_file: Option<PathBuf>,
    /// A Docker config with the registry's credentials (`auths`, as `docker login` writes it
    /// and as a `kubernetes.io/dockerconfigjson` Secret holds it) [default:
    /// `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`, if there is one; anonymous
    /// without an entry for the registry].
    #[arg(long, value_name = "FILE")]
    pub docker_config: Option<PathBuf>,
}

/// The Docker config of `--docker-config`, else of `$DOCKER_CONFIG/config.json` or
/// `~/.docker/config.json` when there is one.
///
/// # Errors
/// `--docker-config` (or a default file that exists) cannot be read.
fn read_docker_config(given: Option<&Path>) -> anyhow::Result<Option<Vec<u8>>> {
    let path = match given {
        Some(p) => p.to_path_buf(),
        None => {
            let dir = std::env::var_os("DOCKER_CONFIG")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".docker")));
            match dir.map(|d| d.join("config.json")).filter(|p| p.is_file()) {
                Some(p) => p,
                None => return Ok(None),
            }
        }
    };
    std::fs::read(&path)
        .map(Some)
        .with_context(|| format!("cannot read the Docker config {}", path.display()))
}

impl RegistryOptions {
    /// The extra CA certificates and credentials for `reference`'s registry.
    ///
    /// # Errors
    /// A file that cannot be read, or a Docker config that does not parse.
    fn resolve(
        &self,
        reference: &wasmop_plugin_host::oci::OciReference,
    ) -> anyhow::Result<(Option<Vec<u8>>, wasmop_plugin_host::oci::Credentials)> {
        let extra_ca_pem = wasmop_plugin_host::read_extra_ca_file(self.extra_ca_file.as_deref())?;
        let credentials = match read_docker_config(self.docker_config.as_deref())? {
            Some(json) => {
                wasmop_plugin_host::oci::docker_config_credentials(&json, &reference.registry)
                    .map_err(|e| anyhow::anyhow!("the Docker config: {e}"))?
                    .unwrap_or_default()
            }
            None => wasmop_plugin_host::oci::Credentials::Anonymous,
        };
        Ok((extra_ca_pem, credentials))
    }
}

/// `plugin push FILE REFERENCE`: the component pushed, and the lines to paste.
///
/// # Errors
/// The file cannot be read, the reference does not parse, or the push fails.
async fn plugin_push(
    file: &Path,
    reference: &str,
    registry: &RegistryOptions,
) -> anyhow::Result<()> {
    use wasmop_plugin_host::oci;
    let reference = oci::OciReference::parse(reference).map_err(anyhow::Error::msg)?;
    if reference.tag.is_none() {
        anyhow::bail!(
            "{reference}: push to a tag (oci://REGISTRY/REPOSITORY:TAG); the digest of what is \
             pushed is printed"
        );
    }
    let bytes = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let (extra_ca_pem, credentials) = registry.resolve(&reference)?;
    let options = oci::OciOptions {
        insecure: registry.insecure,
        extra_ca_pem: extra_ca_pem.as_deref(),
        credentials,
    };
    let pushed = oci::push(&reference, bytes, &options)
        .await
        .map_err(anyhow::Error::msg)?;
    let insecure = if registry.insecure {
        "\n    insecure: true"
    } else {
        ""
    };
    println!(
        "pushed {} to {reference} (manifest {})\n\
         # plugins.yaml, by tag pinned by the component's sha256:\n    \
         source: {reference}\n    sha256: \"{}\"{insecure}\n\
         # or by manifest digest (its own pin):\n    \
         source: {}{insecure}",
        file.display(),
        pushed.manifest_digest,
        pushed.component_sha256,
        reference.at_digest(&pushed.manifest_digest),
    );
    Ok(())
}

/// `plugin pull REFERENCE -o FILE`: the component written to `output`, and its digests.
///
/// # Errors
/// The reference does not parse, the pull fails, or the file cannot be written.
async fn plugin_pull(
    reference: &str,
    output: &Path,
    registry: &RegistryOptions,
) -> anyhow::Result<()> {
    use wasmop_plugin_host::oci;
    let reference = oci::OciReference::parse(reference).map_err(anyhow::Error::msg)?;
    let (extra_ca_pem, credentials) = registry.resolve(&reference)?;
    let options = oci::OciOptions {
        insecure: registry.insecure,
        extra_ca_pem: extra_ca_pem.as_deref(),
        credentials,
    };
    let pulled = oci::pull(&reference, &options)
        .await
        .map_err(anyhow::Error::msg)?;
    std::fs::write(output, &pulled.bytes)
        .with_context(|| format!("cannot write {}", output.display()))?;
    println!(
        "pulled {reference} (manifest {}) to {}, sha256 {}",
        pulled.manifest_digest,
        output.display(),
        wasmop_plugin_host::sha256_hex(&pulled.bytes)
    );
    Ok(())
}

/// What a `plugins.yaml` entry sets besides its source and settings, for `wasmop plugin check`
/// and `wasmop plugin run`: the defaults are the production limits and no grants, as for an
/// entry that sets none.
#[derive(Debug, clap::Args)]
pub struct EntryOptions {
    /// Let the plugin reach HOST (any port) or HOST:PORT over `wasi:http`, as an entry's
    /// `grants.allowedHosts`; repeat for more hosts. Without it every request is denied.
    #[arg(long = "allow-host", value_name = "HOST[:PORT]")]
    pub allow_hosts: Vec<String>,
    /// A directory the plugin may read at `/data`, as an entry's `grants.readOnlyDir`: under
    /// `--plugin-data-root`, by the operator's rule (no `..`, no symlink leading out of it).
    #[arg(long, value_name = "DIR")]
    pub read_only_dir: Option<PathBuf>,
    /// The directory `--read-only-dir` must be under, as `wasmop run --plugin-data-root`
    /// [default: the current directory].
    #[arg(long, env = "WASMOP_PLUGIN_DATA_ROOT", value_name = "DIR")]
    pub plugin_data_root: Option<PathBuf>,
    /// Linear memory cap in MiB (`limits.memoryMiB`).
    #[arg(long, value_name = "MIB", default_value_t = Limits::default().memory_mib,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub memory_mib: u32,
    /// Wall-clock cap of the call in milliseconds (`limits.timeoutMs`).
    #[arg(long, value_name = "MS", default_value_t = Limits::default().timeout_ms,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub timeout_ms: u32,
    /// Cap on the call's output in KiB (`limits.maxOutputKiB`).
    #[arg(long, value_name = "KIB", default_value_t = Limits::default().max_output_kib,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_output_kib: u32,
    /// PEM CA certificates the plugin's `https://` requests trust besides the webpki roots, as
    /// `wasmop run --extra-ca-file`.
    #[arg(long, value_name = "FILE")]
    pub extra_ca_file: Option<PathBuf>,
    /// Wall clock the component's compile may take, as `wasmop run --compile-timeout`: past it
    /// the plugin does not load. Accepts `90s`, `2m`.
    #[arg(long, env = "WASMOP_COMPILE_TIMEOUT", value_name = "DURATION", default_value = "60s",
          value_parser = parse_duration)]
    pub compile_timeout: std::time::Duration,
}

impl EntryOptions {
    /// The entry's `limits`.
    fn limits(&self) -> Limits {
        Limits {
            memory_mib: self.memory_mib,
            timeout_ms: self.timeout_ms,
            max_output_kib: self.max_output_kib,
        }
    }

    /// The entry's `grants`, with `--read-only-dir` resolved to its real path under
    /// `--plugin-data-root` (both made absolute against the current directory).
    ///
    /// # Errors
    /// `--read-only-dir` is refused by the rule of [`DataRoot::resolve`] or cannot be read,
    /// or `--plugin-data-root` is refused; an `--allow-host` is not a host.
    fn grants(&self) -> anyhow::Result<Grants> {
        let read_only_dir = match &self.read_only_dir {
            Some(dir) => {
                let shown = dir.display();
                let root = self.data_root()?;
                let absolute =
                    std::path::absolute(dir).with_context(|| format!("--read-only-dir {shown}"))?;
                let real = root
                    .resolve(&absolute.display().to_string())
                    .map_err(|why| anyhow::anyhow!("--read-only-dir {shown}: {why}"))?;
                std::fs::read_dir(&real)
                    .with_context(|| format!("cannot read --read-only-dir {shown}"))?;
                Some(real.display().to_string())
            }
            None => None,
        };
        for host in &self.allow_hosts {
            wasmop_plugin_host::sandbox::check_allowed_host(host)
                .map_err(|e| anyhow::anyhow!("--allow-host {e}"))?;
        }
        Ok(Grants {
            allowed_hosts: self.allow_hosts.clone(),
            read_only_dir,
        })
    }

    /// `--plugin-data-root`, the current directory by default.
    ///
    /// # Errors
    /// The directory is refused ([`DataRoot::new`]), or the current directory is unknown.
    fn data_root(&self) -> anyhow::Result<DataRoot> {
        let root = match &self.plugin_data_root {
            Some(root) => std::path::absolute(root)
                .with_context(|| format!("--plugin-data-root {}", root.display()))?,
            None => std::env::current_dir().context("the current directory")?,
        };
        let shown = root.display().to_string();
        DataRoot::new(root).map_err(|e| {
            let given = if self.plugin_data_root.is_some() {
                String::new()
            } else {
                " (the current directory; pass --plugin-data-root)".to_owned()
            };
            anyhow::anyhow!("--plugin-data-root {shown}{given}: {e}")
        })
    }

    /// A runtime for the entry: [`EntryOptions::runtime_options`], `--compile-timeout`, and
    /// `--plugin-data-root` as the plugin data root when `--read-only-dir` is given.
    ///
    /// # Errors
    /// As [`EntryOptions::runtime_options`] and [`EntryOptions::data_root`].
    fn runtime(&self) -> anyhow::Result<Arc<PluginRuntime>> {
        let runtime = PluginRuntime::new(self.runtime_options()?)?;
        if self.read_only_dir.is_some() {
            runtime.set_plugin_data_root(self.data_root()?);
        }
        runtime.set_compile_limits(wasmop_plugin_host::CompileLimits {
            timeout: self.compile_timeout,
            ..wasmop_plugin_host::CompileLimits::default()
        });
        Ok(runtime)
    }

    /// The runtime options: the defaults plus `--extra-ca-file`.
    ///
    /// # Errors
    /// `--extra-ca-file` cannot be read.
    fn runtime_options(&self) -> anyhow::Result<RuntimeOptions> {
        Ok(RuntimeOptions {
            extra_ca_pem: wasmop_plugin_host::read_extra_ca_file(self.extra_ca_file.as_deref())?,
            ..RuntimeOptions::default()
        })
    }
}

/// Runs a `wasmop plugin` command.
///
/// # Errors
/// An input that cannot be read or parsed; a plugin that fails is an exit code, not an error.
pub async fn run(command: PluginCommand) -> anyhow::Result<ExitCode> {
    match command {
        PluginCommand::New(opts) => {
            crate::plugin_new::plugin_new(&opts)?;
            Ok(ExitCode::SUCCESS)
        }
        PluginCommand::Check {
            plugin,
            hook,
            settings,
            entry,
            output,
        } => plugin_check(&plugin, hook, &settings, &entry, output).await,
        PluginCommand::CheckRegistry {
            file,
            extra_ca_file,
            plugin_data_root,
            docker_config,
            output,
        } => {
            let docker_config = read_docker_config(docker_config.as_deref())?;
            plugin_check_registry(
                &file,
                extra_ca_file.as_deref(),
                plugin_data_root,
                docker_config,
                output,
            )
            .await
        }
        PluginCommand::Test {
            plugin,
            hook,
            fixtures,
            settings,
            entry,
        } => plugin_test(&plugin, hook, fixtures.as_deref(), &settings, &entry).await,
        PluginCommand::Scaffold(ScaffoldCommand::Request { hook }) => {
            let (_, request) = crate::conformance::builtin_requests(hook)
                .into_iter()
                .next()
                .expect("every hook has built-in requests");
            println!("{}", serde_json::to_string_pretty(&request)?);
            Ok(ExitCode::SUCCESS)
        }
        PluginCommand::Push {
            file,
            reference,
            registry,
        } => plugin_push(&file, &reference, &registry)
            .await
            .map(|()| ExitCode::SUCCESS),
        PluginCommand::Pull {
            reference,
            output,
            registry,
        } => plugin_pull(&reference, &output, &registry)
            .await
            .map(|()| ExitCode::SUCCESS),
        PluginCommand::Run {
            hook,
            plugin,
            input,
            settings,
            repeat,
            entry,
        } => plugin_run(hook, &plugin, &input, &settings, repeat, &entry)
            .await
            .map(|()| ExitCode::SUCCESS),
    }
}

/// `plugin test`: the verdicts, one line each, and a last line with the count; exit 1 when a
/// property fails.
///
/// # Errors
/// Settings that are not JSON, a component file that cannot be read, an unreadable
/// `--fixtures` directory.
async fn plugin_test(
    plugin: &str,
    hook: Hook,
    fixtures: Option<&Path>,
    settings: &str,
    entry: &EntryOptions,
) -> anyhow::Result<ExitCode> {
    let runtime = entry.runtime()?;
    let suite = crate::conformance::Suite {
        runtime: &runtime,
        plugin,
        hook,
        settings: settings_value(settings)?,
        limits: entry.limits(),
        grants: entry.grants()?,
        fixtures,
    };
    let verdicts = suite.run().await?;
    for v in &verdicts {
        println!("{v}");
    }
    let failed = verdicts.iter().filter(|v| !v.ok).count();
    if failed == 0 {
        println!(
            "passed: {plugin} has the {} properties of a {hook} plugin",
            verdicts.len()
        );
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "FAILED: {failed} of {} properties of a {hook} plugin",
            verdicts.len()
        );
        Ok(ExitCode::FAILURE)
    }
}

/// `--plugin-data-root` of `wasmop run` and `plugin check-registry`: an absolute directory
/// that [`DataRoot::new`] accepts.
///
/// # Errors
/// [`DataRoot::new`]'s message.
pub fn parse_data_root(root: &str) -> Result<DataRoot, String> {
    DataRoot::new(root)
}

/// A duration as `wasmop run` takes it (`--compile-timeout`): `2s`, `500ms`, `1m30s` or
/// ISO 8601 `PT2S`; a bare number is seconds.
///
/// # Errors
/// Not a duration, or negative.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    if let Ok(secs) = s.trim().parse::<u64>() {
        return Ok(std::time::Duration::from_secs(secs));
    }
    let d: jiff::SignedDuration = s
        .trim()
        .parse()
        .map_err(|e| format!("`{s}` is not a duration such as 2s, 500ms or 1m30s: {e}"))?;
    std::time::Duration::try_from(d).map_err(|_| format!("`{s}` is negative"))
}

fn settings_value(settings: &str) -> anyhow::Result<serde_json::Value> {
    serde_json::from_str(settings).context("--settings is not valid JSON")
}

async fn plugin_check(
    plugin: &str,
    hook: Option<Hook>,
    settings: &str,
    entry: &EntryOptions,
    output: Report,
) -> anyhow::Result<ExitCode> {
    let (bytes, name) = read_plugin(plugin).await?;
    let runtime = entry.runtime()?;
    let settings = settings_value(settings)?;
    let (limits, grants) = (entry.limits(), entry.grants()?);
    let hooks: Vec<Hook> = hook.map_or_else(|| Hook::ALL.to_vec(), |h| vec![h]);
    let mut failures: Vec<(Hook, wasmop_plugin_host::LoadError)> = Vec::new();
    for h in hooks {
        let mut spec = PluginSpec::new(&name, h, plugin);
        spec.settings = Some(settings.clone());
        spec.limits = limits.clone();
        spec.grants = grants.clone();
        match runtime.load(&spec, &bytes).await {
            Ok(p) => {
                let (pname, version) = p.info();
                match output {
                    Report::Text => println!(
                        "ok: {plugin} is a {h} plugin ({pname} {version}), world {} of wasmop:plugin@0.1.0, sha256 {}; settings accepted",
                        h.world(),
                        p.digest()
                    ),
                    Report::Json => println!(
                        "{}",
                        serde_json::json!({
                            "ok": true, "plugin": plugin, "hook": h.as_str(), "name": pname,
                            "version": version, "world": h.world(), "sha256": p.digest(),
                        })
                    ),
                }
                return Ok(ExitCode::SUCCESS);
            }
            Err(e) => failures.push((h, e)),
        }
    }
    // A component that exports one hook's world failed as that hook: the others' "does not
    // export" lines say nothing more.
    if failures.iter().any(|(_, e)| !e.wrong_world) {
        failures.retain(|(_, e)| !e.wrong_world);
    }
    // A file that is no component fails every hook alike: say it once. A hook left alone of
    // several is named.
    let once = failures
        .windows(2)
        .all(|w| w[0].1.message == w[1].1.message)
        && (failures.len() > 1 || hook.is_some());
    if once {
        failures.truncate(1);
    }
    match output {
        Report::Text => {
            let why = if once {
                format!(" {}", failures[0].1.message)
            } else {
                failures
                    .iter()
                    .map(|(h, e)| format!("\n  {h}: {}", e.message))
                    .collect()
            };
            println!("FAIL: {plugin} is not a usable wasmop plugin:{why}");
        }
        Report::Json => {
            let failures: Vec<_> = failures
                .iter()
                .map(|(h, e)| {
                    let hook = if once && hook.is_none() {
                        None
                    } else {
                        Some(h.as_str())
                    };
                    serde_json::json!({"hook": hook, "message": e.message})
                })
                .collect();
            println!(
                "{}",
                serde_json::json!({"ok": false, "plugin": plugin, "failures": failures})
            );
        }
    }
    Ok(ExitCode::FAILURE)
}

/// The most a ConfigMap may hold, `data` and `binaryData` values together, in bytes: the API
/// server refuses a larger one (`core.MaxSecretSize`, 1 MiB).
pub const CONFIGMAP_MAX_BYTES: usize = 1 << 20;

/// One entry's verdict in `plugin check-registry`.
struct EntryVerdict {
    name: String,
    hook: Hook,
    source: String,
    /// `ok`, `fail` or `skip`.
    status: &'static str,
    message: String,
}

/// `plugin check-registry`: one line per entry of `file` (`ok`, `FAIL`, or `skip` for a
/// `configmap://` source whose ConfigMap is not in the file), then the plugin each hook uses
/// by default; exit 1 when the document is invalid or an entry fails. A `configmap://` source
/// whose ConfigMap in the file holds more than [`CONFIGMAP_MAX_BYTES`] fails: the API server
/// would refuse it.
async fn plugin_check_registry(
    file: &Path,
    extra_ca_file: Option<&Path>,
    plugin_data_root: DataRoot,
    docker_config: Option<Vec<u8>>,
    output: Report,
) -> anyhow::Result<ExitCode> {
    let shown = file.display();
    let RegistryFile {
        doc,
        binaries,
        configmap_bytes,
    } = read_registry_file(file)?;
    let config = match RegistryConfig::parse(&doc) {
        Ok(config) => config,
        Err(e) => {
            let why =
                format!("{shown}: {e}; the operator would serve the builtin defaults instead");
            match output {
                Report::Text => println!("FAIL: {why}"),
                Report::Json => println!(
                    "{}",
                    serde_json::json!({"ok": false, "error": why, "entries": [], "defaults": {}})
                ),
            }
            return Ok(ExitCode::FAILURE);
        }
    };
    let extra_ca_pem = wasmop_plugin_host::read_extra_ca_file(extra_ca_file)?;
    let runtime = PluginRuntime::new(RuntimeOptions {
        extra_ca_pem: extra_ca_pem.clone(),
        ..RuntimeOptions::default()
    })?;
    runtime.set_plugin_data_root(plugin_data_root);
    let registry = Registry::new(runtime);
    let fetch = ManifestFetch {
        binaries,
        local: LocalFetch {
            extra_ca_pem,
            docker_config,
        },
    };
    let report = registry.apply(config.clone(), &fetch).await;
    let mut verdicts = Vec::new();
    for spec in &config.plugins {
        let (name, hook) = (&spec.name, spec.hook);
        let configmap = match Source::parse(&spec.source) {
            Ok(Source::ConfigMap { name: cm, key }) => Some((cm, key)),
            _ => None,
        };
        let (status, message) = if let Some((cm, key)) = &configmap
            && !fetch.binaries.contains_key(&(cm.clone(), key.clone()))
        {
            (
                "skip",
                format!(
                    "{} is read in the cluster; put ConfigMap {cm} (binaryData key {key}) in {shown} to check it here",
                    spec.source
                ),
            )
        } else if let Some((cm, _)) = &configmap
            && let Some(&size) = configmap_bytes.get(cm)
            && size > CONFIGMAP_MAX_BYTES
        {
            (
                "fail",
                format!(
                    "ConfigMap {cm} holds {size} bytes ({:.1} MiB), over the 1 MiB ({CONFIGMAP_MAX_BYTES} bytes) the API server allows a ConfigMap: it would refuse it. Push the component to an OCI registry instead (`wasmop plugin push FILE oci://REGISTRY/REPOSITORY:TAG`) and use the oci:// source and sha256 it prints",
                    size as f64 / f64::from(1 << 20)
                ),
            )
        } else if let Some((_, e)) = report.failed.iter().find(|(n, _)| n == name) {
            ("fail", e.to_string())
        } else {
            let status = registry.status(hook, Some(name));
            ("ok", format!("{}; settings accepted", status.message))
        };
        verdicts.push(EntryVerdict {
            name: name.clone(),
            hook,
            source: spec.source.clone(),
            status,
            message,
        });
    }
    let failed = verdicts.iter().any(|v| v.status == "fail");
    let defaults: Vec<(Hook, String)> = Hook::ALL
        .iter()
        .map(|&h| (h, registry.status(h, None).name))
        .collect();
    match output {
        Report::Text => {
            for v in &verdicts {
                let status = if v.status == "fail" { "FAIL" } else { v.status };
                println!("{status}: {} ({}): {}", v.name, v.hook, v.message);
            }
            let defaults: Vec<String> = defaults
                .iter()
                .map(|(h, name)| format!("{h} → {name}"))
                .collect();
            println!("defaults: {}", defaults.join(", "));
        }
        Report::Json => {
            let entries: Vec<_> = verdicts
                .iter()
                .map(|v| {
                    serde_json::json!({"name": v.name, "hook": v.hook.as_str(), "source": v.source,
                                       "status": v.status, "message": v.message})
                })
                .collect();
            let defaults: serde_json::Map<String, serde_json::Value> = defaults
                .into_iter()
                .map(|(h, name)| (h.as_str().to_owned(), name.into()))
                .collect();
            println!(
                "{}",
                serde_json::json!({"ok": !failed, "error": null, "entries": entries,
                                   "defaults": defaults})
            );
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The registry of `file` (read as `plugin check-registry` reads it: a `plugins.yaml`, or YAML
/// holding ConfigMap `wasmop-plugins` and the ConfigMaps its `configmap://` sources name)
/// loaded as the operator loads it, with the default runtime options; an entry that fails to
/// load is left out, as the operator leaves it out (`wasmop plan --registry` then names it
/// when it resolves a chain).
///
/// # Errors
/// The file cannot be read, or its registry is invalid.
pub async fn load_registry_file(file: &Path) -> anyhow::Result<Arc<Registry>> {
    let shown = file.display();
    let RegistryFile { doc, binaries, .. } = read_registry_file(file)?;
    let config = RegistryConfig::parse(&doc).map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
    let registry = Registry::new(PluginRuntime::new(RuntimeOptions::default())?);
    let fetch = ManifestFetch {
        binaries,
        local: LocalFetch::default(),
    };
    registry.apply(config, &fetch).await;
    Ok(registry)
}

/// What `plugin check-registry` reads from its file.
struct RegistryFile {
    /// The `plugins.yaml` document.
    doc: String,
    /// The `binaryData` of the ConfigMaps in the file.
    binaries: Binaries,
    /// The size of each ConfigMap in the file, by name, as the API server counts it against
    /// [`CONFIGMAP_MAX_BYTES`]: the bytes of its `data` and `binaryData` values (decoded).
    configmap_bytes: std::collections::BTreeMap<String, usize>,
}

/// The `plugins.yaml` of `file` and the `binaryData` of the ConfigMaps in it, keyed by
/// (ConfigMap name, key). A file without a ConfigMap is `plugins.yaml` itself.
///
/// # Errors
/// The file cannot be read, a ConfigMap in it does not parse, or none is `wasmop-plugins`
/// while some are.
fn read_registry_file(file: &Path) -> anyhow::Result<RegistryFile> {
    use serde::Deserialize;
    let text =
        std::fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let mut doc = None;
    let mut binaries = std::collections::BTreeMap::new();
    let mut configmap_bytes = std::collections::BTreeMap::new();
    let mut configmaps = 0;
    for part in serde_yaml::Deserializer::from_str(&text) {
        let value = serde_yaml::Value::deserialize(part)
            .with_context(|| format!("{} is not YAML", file.display()))?;
        if value.get("kind").and_then(serde_yaml::Value::as_str) != Some("ConfigMap") {
            continue;
        }
        configmaps += 1;
        let cm = ConfigMap::parse(&value).map_err(|why| {
            anyhow::anyhow!("a ConfigMap in {} does not parse: {why}", file.display())
        })?;
        let size = cm.data.values().map(String::len).sum::<usize>()
            + cm.binary_data.values().map(Vec::len).sum::<usize>();
        configmap_bytes.insert(cm.name.clone(), size);
        if cm.name == CONFIGMAP_NAME {
            doc = cm.data.get(CONFIGMAP_KEY).cloned();
            if doc.is_none() {
                anyhow::bail!(
                    "ConfigMap {CONFIGMAP_NAME} in {} has no data key {CONFIGMAP_KEY}",
                    file.display()
                );
            }
        }
        for (key, bytes) in cm.binary_data {
            binaries.insert((cm.name.clone(), key), bytes);
        }
    }
    let found = |doc| RegistryFile {
        doc,
        binaries,
        configmap_bytes,
    };
    match doc {
        Some(doc) => Ok(found(doc)),
        None if configmaps == 0 => Ok(found(text)),
        None => anyhow::bail!(
            "{} holds ConfigMaps but not {CONFIGMAP_NAME}, whose data key {CONFIGMAP_KEY} is the registry",
            file.display()
        ),
    }
}

/// What `plugin check-registry` reads of a ConfigMap: its name, `data` and `binaryData`
/// (decoded).
#[derive(Debug, PartialEq)]
struct ConfigMap {
    /// `metadata.name` (empty without one).
    name: String,
    /// `data`: text values.
    data: std::collections::BTreeMap<String, String>,
    /// `binaryData`: base64 values, decoded.
    binary_data: std::collections::BTreeMap<String, Vec<u8>>,
}

impl ConfigMap {
    /// The ConfigMap `value`, as the API server would take it.
    ///
    /// # Errors
    /// `metadata.name` is not a string, `data` or `binaryData` is not a map of strings, or a
    /// `binaryData` value is not base64; naming the field.
    fn parse(value: &serde_yaml::Value) -> Result<Self, String> {
        use base64::Engine as _;
        let name = match value.get("metadata").and_then(|m| m.get("name")) {
            None | Some(serde_yaml::Value::Null) => String::new(),
            Some(serde_yaml::Value::String(name)) => name.clone(),
            Some(_) => return Err("metadata.name is not a string".into()),
        };
        let strings = |field: &str| -> Result<std::collections::BTreeMap<String, String>, String> {
            match value.get(field) {
                None | Some(serde_yaml::Value::Null) => Ok(Default::default()),
                Some(serde_yaml::Value::Mapping(map)) => map
                    .iter()
                    .map(|(k, v)| match (k, v) {
                        (serde_yaml::Value::String(k), serde_yaml::Value::String(v)) => {
                            Ok((k.clone(), v.clone()))
                        }
                        (serde_yaml::Value::String(k), _) => {
                            Err(format!("{field}.{k} is not a string"))
                        }
                        _ => Err(format!("{field} has a key that is not a string")),
                    })
                    .collect(),
                Some(_) => Err(format!("{field} is not a map")),
            }
        };
        let data = strings("data")?;
        let binary_data = strings("binaryData")?
            .into_iter()
            .map(|(k, v)| {
                base64::engine::general_purpose::STANDARD
                    .decode(v.trim())
                    .map(|bytes| (k.clone(), bytes))
                    .map_err(|e| format!("binaryData.{k} is not base64: {e}"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Self {
            name,
            data,
            binary_data,
        })
    }
}

/// The `binaryData` of ConfigMaps, by (ConfigMap name, key).
type Binaries = std::collections::BTreeMap<(String, String), Vec<u8>>;

/// Reads `configmap://` sources from the ConfigMaps of a file, everything else locally.
struct ManifestFetch {
    binaries: Binaries,
    local: LocalFetch,
}

#[async_trait::async_trait]
impl Fetch for ManifestFetch {
    async fn fetch(&self, source: &Source) -> Result<Vec<u8>, String> {
        match source {
            Source::ConfigMap { name, key } => self
                .binaries
                .get(&(name.clone(), key.clone()))
                .cloned()
                .ok_or_else(|| {
                    format!("ConfigMap {name} with binaryData key {key} is not in the file")
                }),
            other => self.local.fetch(other).await,
        }
    }
}

/// The bytes of `plugin` (`builtin://NAME` or a component file) and the name it goes by (the
/// builtin's name, or the file name without its extension).
///
/// # Errors
/// The file cannot be read, or there is no such builtin.
async fn read_plugin(plugin: &str) -> anyhow::Result<(Vec<u8>, String)> {
    let (source, name) = if let Some(name) = plugin.strip_prefix("builtin://") {
        (Source::Builtin(name.into()), name.to_owned())
    } else {
        let path =
            std::fs::canonicalize(plugin).with_context(|| format!("cannot find {plugin}"))?;
        (
            Source::File(path.display().to_string()),
            path.file_stem()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned(),
        )
    };
    let bytes = LocalFetch::default()
        .fetch(&source)
        .await
        .map_err(anyhow::Error::msg)?;
    Ok((bytes, name))
}

/// Loads `plugin` (`builtin://NAME` or a component file) for `hook` with `settings`, as the
/// CLI commands (`plugin run`, `plan`) do, with `limits` and `grants` (`plan`: the production
/// limits, nothing granted).
///
/// # Errors
/// When the file cannot be read, the component does not load or its settings are rejected.
pub async fn load_for_cli(
    runtime: &Arc<PluginRuntime>,
    hook: Hook,
    plugin: &str,
    settings: serde_json::Value,
    limits: Limits,
    grants: Grants,
) -> anyhow::Result<Arc<Plugin>> {
    let (bytes, name) = read_plugin(plugin).await?;
    let mut spec = PluginSpec::new(&name, hook, plugin);
    spec.settings = Some(settings);
    spec.limits = limits;
    spec.grants = grants;
    Ok(runtime.load(&spec, &bytes).await?)
}

/// `plugin run`: the answer of one call as JSON on stdout, in the WIT JSON form; with
/// `repeat` > 1 the call is made `repeat` times and the timings and peak memory go to stderr.
///
/// # Errors
/// The input cannot be read or is not a request of `hook`, the plugin does not load, or a call
/// fails.
async fn plugin_run(
    hook: Hook,
    plugin: &str,
    input: &Path,
    settings: &str,
    repeat: u32,
    entry: &EntryOptions,
) -> anyhow::Result<()> {
    use crate::conformance::{HostRequest, call};
    let stdin = input == Path::new("-");
    let shown = if stdin {
        "stdin".to_owned()
    } else {
        input.display().to_string()
    };
    let text = if stdin {
        std::io::read_to_string(std::io::stdin()).context("cannot read stdin")?
    } else {
        std::fs::read_to_string(input).with_context(|| format!("cannot read {shown}"))?
    };
    let request: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{shown}: not JSON: {e}"))?;
    let request = HostRequest::parse(hook, &request).map_err(|e| {
        anyhow::anyhow!(
            "{shown}: not a {hook} request (a {} with its WIT field names; `wasmop plugin \
             scaffold request --hook {hook}` prints one): {e}",
            crate::wit_json::request_type_name(hook)
        )
    })?;
    let runtime = entry.runtime()?;
    let plugin = load_for_cli(
        &runtime,
        hook,
        plugin,
        settings_value(settings)?,
        entry.limits(),
        entry.grants()?,
    )
    .await?;
    let mut times = Vec::with_capacity(repeat as usize);
    let mut first = None;
    for n in 0..repeat {
        let started = std::time::Instant::now();
        let answer = call(&plugin, &request).await.map_err(|e| {
            let e = run_error(e);
            if n == 0 {
                e
            } else {
                e.context(format!("call {} of {repeat}", n + 1))
            }
        })?;
        times.push(started.elapsed());
        first.get_or_insert(answer);
    }
    let answer = first.expect("at least one call").to_wit();
    println!("{}", serde_json::to_string_pretty(&answer)?);
    if repeat > 1 {
        eprintln!(
            "{}",
            bench_line(&mut times, plugin.memory_peak_bytes(), &entry.limits())
        );
    }
    Ok(())
}

/// The line `plugin run --repeat` prints: calls, p50, p99 and slowest call time (nearest
/// rank), and the peak linear memory against `limits.memoryMiB`. `times` must not be empty.
fn bench_line(times: &mut [std::time::Duration], peak: usize, limits: &Limits) -> String {
    times.sort_unstable();
    let at = |p: usize| times[(times.len() * p).div_ceil(100).max(1) - 1];
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    format!(
        "{} calls: p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms (limits.timeoutMs {} ms); peak \
         linear memory {:.2} MiB (limits.memoryMiB {} MiB)",
        times.len(),
        ms(at(50)),
        ms(at(99)),
        ms(times[times.len() - 1]),
        limits.timeout_ms,
        peak as f64 / f64::from(1u32 << 20),
        limits.memory_mib,
    )
}

/// A failed call of `plugin run`, with the flag that grants a denied host.
fn run_error(e: CallError) -> anyhow::Error {
    match &e.failure {
        Failure::DeniedHost { hosts, .. } => anyhow::anyhow!(
            "{e}; to grant it, pass {}",
            hosts
                .iter()
                .map(|h| format!("--allow-host {h}"))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        _ => e.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_wasmop_run_takes_them() {
        use std::time::Duration;
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("PT2S"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("600"), Ok(Duration::from_secs(600)));
        assert!(parse_duration("-2s").unwrap_err().contains("negative"));
        assert!(
            parse_duration("soon")
                .unwrap_err()
                .contains("not a duration")
        );
    }

    fn configmap(yaml: &str) -> Result<ConfigMap, String> {
        ConfigMap::parse(&serde_yaml::from_str(yaml).unwrap())
    }

    #[test]
    fn a_configmap_is_read_without_a_kubernetes_client() {
        let cm = configmap(
            "kind: ConfigMap\nmetadata: {name: plugins}\ndata: {plugins.yaml: 'plugins: []'}\n\
             binaryData: {x.wasm: AGFzbQ==}\n",
        )
        .unwrap();
        assert_eq!(cm.name, "plugins");
        assert_eq!(cm.data["plugins.yaml"], "plugins: []");
        assert_eq!(cm.binary_data["x.wasm"], b"\0asm");
        assert_eq!(
            configmap("kind: ConfigMap\n").unwrap(),
            ConfigMap {
                name: String::new(),
                data: Default::default(),
                binary_data: Default::default(),
            }
        );
        for (bad, why) in [
            ("metadata: {name: [a]}", "metadata.name is not a string"),
            ("data: {a: 1}", "data.a is not a string"),
            ("data: [a]", "data is not a map"),
            (
                "binaryData: {x.wasm: '%%'}",
                "binaryData.x.wasm is not base64",
            ),
        ] {
            let e = configmap(&format!("kind: ConfigMap\n{bad}\n")).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}

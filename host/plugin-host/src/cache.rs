//! On-disk cache of compiled components, keyed by the component's sha256 and the engine's
//! compatibility hash, as Kubewarden's policy-server and wasmtime's AOT guidance recommend
//! (docs/architecture.md, "The plugin host").
//!
//! Layout: `<dir>/<sha256>-<engine-hash>.cwasm` plus `<same>.cwasm.sha256`, the digest of the
//! artifact bytes written next to it. Only artifacts whose recorded digest matches are loaded.

use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Where compiled components are kept and how they are loaded.
#[derive(Clone, Debug)]
pub struct CompileCache {
    dir: Option<PathBuf>,
    engine_key: String,
}

/// How a component was obtained, for logs and benchmarks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Compiled now (cold).
    Compiled,
    /// Loaded from an artifact this host wrote earlier (warm).
    Cached,
}

/// The lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

impl CompileCache {
    /// A cache in `dir` (created with mode 0700 if absent); `None` compiles every time.
    ///
    /// # Errors
    /// `dir` cannot be created, or is writable by group or others (an artifact there could be
    /// planted by someone else, and loading one executes it).
    pub fn new(engine: &Engine, dir: Option<PathBuf>) -> anyhow::Result<Self> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let engine_key = format!("{:016x}", h.finish());
        if let Some(dir) = &dir {
            create_private_dir(dir)?;
        }
        Ok(Self { dir, engine_key })
    }

    /// The component for `bytes` whose sha256 is `digest`: loaded from the cache when a valid
    /// artifact exists, otherwise compiled (and then written to the cache).
    ///
    /// # Errors
    /// The bytes are not a valid component. Cache I/O problems are logged and fall back to
    /// compiling.
    pub fn load(
        &self,
        engine: &Engine,
        digest: &str,
        bytes: &[u8],
    ) -> anyhow::Result<(Component, Origin)> {
        let Some(dir) = &self.dir else {
            return Ok((Component::new(engine, bytes)?, Origin::Compiled));
        };
        let path = dir.join(format!("{digest}-{}.cwasm", self.engine_key));
        match self.load_artifact(engine, &path) {
            Ok(Some(component)) => return Ok((component, Origin::Cached)),
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), "ignoring unusable compiled artifact, recompiling: {e:#}")
            }
        }
        let artifact = engine.precompile_component(bytes)?;
        if let Err(e) = write_artifact(&path, &artifact) {
            tracing::warn!(path = %path.display(), "could not write compiled artifact: {e:#}");
        }
        // Loading what we just produced keeps one code path and gives mmap-backed code.
        match self.load_artifact(engine, &path) {
            Ok(Some(component)) => Ok((component, Origin::Compiled)),
            _ => Ok((Component::new(engine, bytes)?, Origin::Compiled)),
        }
    }

    /// Removes the files of compiled components that no longer serve: artifacts (and their
    /// recorded digests, and partial writes) whose component digest is not in `keep`, or that
    /// another engine wrote (an older wasmop), once they are `min_age` old (a directory shared
    /// with another process keeps what that process wrote lately). Files this cache does not
    /// name are left alone; a file that cannot be read or removed is skipped (debug log).
    /// Returns the files removed and the bytes they held.
    pub fn prune(
        &self,
        keep: &std::collections::BTreeSet<String>,
        min_age: Duration,
    ) -> (usize, u64) {
        let Some(dir) = &self.dir else {
            return (0, 0);
        };
        let Ok(entries) = fs::read_dir(dir) else {
            return (0, 0);
        };
        let (mut files, mut bytes) = (0, 0);
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some((digest, engine_key)) = name.to_str().and_then(artifact_name) else {
                continue;
            };
            if keep.contains(digest) && engine_key == self.engine_key {
                continue;
            }
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            let age = meta.modified().ok().and_then(|m| m.elapsed().ok());
            if age.is_none_or(|age| age < min_age) {
                continue;
            }
            match fs::remove_file(entry.path()) {
                Ok(()) => {
                    files += 1;
                    bytes += meta.len();
                }
                Err(e) => tracing::debug!(path = %entry.path().display(), "cannot prune: {e}"),
            }
        }
        (files, bytes)
    }

    fn load_artifact(&self, engine: &Engine, path: &Path) -> anyhow::Result<Option<Component>> {
        let Ok(bytes) = fs::read(path) else {
            return Ok(None);
        };
        let recorded =
            fs::read_to_string(digest_path(path)).context("artifact has no recorded digest")?;
        if recorded.trim() != sha256_hex(&bytes) {
            bail!("artifact digest does not match the one recorded when it was written");
        }
        // SAFETY: `deserialize` trusts its input to be wasmtime output for this engine. The bytes
        // were written by `write_artifact` of this host (into a directory that `new` checked is
        // private to this user), their sha256 matches the digest recorded at write time, and the
        // file name carries this engine's compatibility hash; wasmtime additionally checks the
        // version and configuration header and rejects a mismatch with an error.
        #[allow(unsafe_code)]
        let component = unsafe { Component::deserialize(engine, &bytes) };
        component.map(Some).map_err(Into::into)
    }
}

/// The component digest and engine key of a file this cache writes:
/// `<sha256>-<engine>.cwasm`, `<same>.cwasm.sha256` or a partial write `<sha256>-<engine>.tmp<pid>`.
fn artifact_name(name: &str) -> Option<(&str, &str)> {
    let (stem, rest) = name.split_once('.')?;
    if !(rest == "cwasm" || rest == "cwasm.sha256" || rest.starts_with("tmp")) {
        return None;
    }
    let (digest, engine_key) = stem.split_once('-')?;
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(digest, 64) && hex(engine_key, 16)).then_some((digest, engine_key))
}

fn digest_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".sha256");
    PathBuf::from(p)
}

fn write_artifact(path: &Path, artifact: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut f = fs::File::create(&tmp)?;
    f.write_all(artifact)?;
    f.sync_all()?;
    fs::write(digest_path(path), sha256_hex(artifact))?;
    fs::rename(&tmp, path)?;
    Ok(())
}

fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| {
            format!(
                "cannot create the compile cache directory {}",
                dir.display()
            )
        })?;
    let mode = fs::metadata(dir)?.permissions().mode();
    if mode & 0o022 != 0 {
        bail!(
            "compile cache directory {} is writable by group or others (mode {:o}); make it private (chmod 700)",
            dir.display(),
            mode & 0o777
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::time::SystemTime;

    #[test]
    fn prune_removes_what_no_plugin_uses_once_it_is_old_enough() {
        let dir = std::env::temp_dir().join(format!("wasmop-prune-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let engine = Engine::default();
        let cache = CompileCache::new(&engine, Some(dir.clone())).unwrap();
        let key = cache.engine_key.clone();
        let (used, unused, fresh) = ("a".repeat(64), "b".repeat(64), "c".repeat(64));
        let write = |name: &str, age: Duration| {
            let f = fs::File::create(dir.join(name)).unwrap();
            f.set_len(10).unwrap();
            f.set_modified(SystemTime::now() - age).unwrap();
        };
        let hour = Duration::from_secs(3600);
        for name in [
            format!("{used}-{key}.cwasm"),
            format!("{used}-{key}.cwasm.sha256"),
            format!("{unused}-{key}.cwasm"),
            format!("{unused}-{key}.cwasm.sha256"),
            format!("{unused}-{key}.tmp42"),
            format!("{used}-0123456789abcdef.cwasm"),
            format!("{unused}.cwasm"),
            "notes.txt".to_owned(),
        ] {
            write(&name, hour);
        }
        write(&format!("{fresh}-{key}.cwasm"), Duration::ZERO);

        let keep = BTreeSet::from([used.clone()]);
        assert_eq!(cache.prune(&keep, Duration::from_secs(600)), (4, 40));
        let mut left: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                format!("{used}-{key}.cwasm"),
                format!("{used}-{key}.cwasm.sha256"),
                format!("{unused}.cwasm"),
                format!("{fresh}-{key}.cwasm"),
                "notes.txt".to_owned(),
            ],
            "in use, not ours, or written lately: kept"
        );
        assert_eq!(
            cache.prune(&keep, Duration::ZERO),
            (1, 10),
            "then the fresh one"
        );
        let _ = fs::remove_dir_all(&dir);
    }
}

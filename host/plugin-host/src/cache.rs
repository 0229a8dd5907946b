//! On-disk cache of compiled components, keyed by the component's sha256 and the engine's
//! compatibility hash, as Kubewarden's policy-server and wasmtime's AOT guidance recommend
//! (docs/architecture.md, "The plugin host").
//!
//! Layout: `<dir>/<sha256>-<engine-hash>.cwasm` plus `<same>.cwasm.sha256`, the digest of the
//! artifact bytes written next to it. Only artifacts whose recorded digest matches are loaded.
//! While a component compiles, `<dir>/<sha256>.compiling` marks it, locked (`flock`) by the
//! process compiling ([`CompileCache::begin_compile`]). The kernel drops the lock when that
//! process ends, so a marker nobody locks was left by a process that ended while compiling
//! (killed for memory, most likely): that component is not compiled again until it changes or
//! the marker is removed.

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

/// The marker of a compile in progress, `<dir>/<sha256>.compiling`, locked while it lives;
/// removed (then unlocked) on drop, when the compile ended in this process: done, failed,
/// panicked, or finished in the background after its load gave up.
#[derive(Debug)]
pub struct CompileMarker {
    path: PathBuf,
    file: fs::File,
}

impl Drop for CompileMarker {
    fn drop(&mut self) {
        // Only our marker: the same file, not one made since the user removed ours.
        if same_file(&self.path, &self.file)
            && let Err(e) = fs::remove_file(&self.path)
        {
            tracing::warn!(path = %self.path.display(), "cannot remove the compile marker: {e}");
        }
    }
}

/// The file name suffix of compile markers.
const MARKER_SUFFIX: &str = ".compiling";

/// What a compile marker found in the cache directory says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Marker {
    /// A live process (this one or another) is compiling the component.
    Compiling,
    /// Nobody holds it: the process that compiled the component ended meanwhile.
    Left,
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
            let left = left_markers(dir);
            if !left.is_empty() {
                tracing::warn!(
                    ?left,
                    "compiling these components ended the process last time (out of memory?): \
                     they are not compiled again until they change or their marker is removed \
                     from {}",
                    dir.display()
                );
            }
        }
        Ok(Self { dir, engine_key })
    }

    /// Marks `digest` as compiling until the returned marker is dropped: writes and locks
    /// `<dir>/<digest>.compiling`. `None` without a directory, when another live compile of
    /// the same component holds the marker (in this process or another sharing the
    /// directory), or when it cannot be written (logged).
    ///
    /// # Errors
    /// A marker of `digest` that nobody holds: the process compiling this component ended
    /// before the compile did, most likely killed for memory. The message says so and how to
    /// clear it (change the component, or remove the file).
    pub fn begin_compile(&self, digest: &str) -> Result<Option<CompileMarker>, String> {
        use std::io::Write as _;
        let Some(dir) = &self.dir else {
            return Ok(None);
        };
        let path = dir.join(format!("{digest}{MARKER_SUFFIX}"));
        match probe(&path) {
            Some(Marker::Left) => {
                return Err(format!(
                    "compiling this component ended the process last time (out of memory?); \
                     change the component or remove {}",
                    path.display()
                ));
            }
            Some(Marker::Compiling) => return Ok(None),
            None => {}
        }
        // Written and locked under another name, then linked into place: nobody sees the
        // marker unlocked, and of two compiles starting at once one gets it.
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!(
            "{digest}{MARKER_SUFFIX}.tmp{}-{n}",
            std::process::id()
        ));
        let made = (|| -> std::io::Result<fs::File> {
            let mut file = fs::File::create(&tmp)?;
            file.try_lock().map_err(std::io::Error::from)?;
            writeln!(
                file,
                "compiling since {:?} in process {}",
                std::time::SystemTime::now(),
                std::process::id()
            )?;
            fs::hard_link(&tmp, &path)?;
            Ok(file)
        })();
        let _ = fs::remove_file(&tmp);
        match made {
            Ok(file) => Ok(Some(CompileMarker { path, file })),
            // Another compile of it began meanwhile.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => {
                tracing::warn!(path = %path.display(), "cannot write the compile marker: {e}");
                Ok(None)
            }
        }
    }

    /// The cached component of `digest`, if a valid artifact of this engine is there (`None`
    /// without a directory or an artifact). Loading one compiles nothing.
    ///
    /// # Errors
    /// An artifact that cannot be used (its recorded digest missing or different, or wasmtime
    /// refusing it): the caller compiles instead.
    pub fn load_cached(&self, engine: &Engine, digest: &str) -> anyhow::Result<Option<Component>> {
        let Some(dir) = &self.dir else {
            return Ok(None);
        };
        self.load_artifact(engine, &self.artifact_path(dir, digest))
    }

    /// Compiles `bytes` (whose sha256 is `digest`) and writes the artifact to the cache, unless
    /// `abandoned` is set by then (whoever waited for it gave up: the result is dropped, and
    /// nothing is cached). Artifact I/O problems are logged; the component is then compiled
    /// in memory.
    ///
    /// # Errors
    /// The bytes are not a valid component.
    pub fn compile(
        &self,
        engine: &Engine,
        digest: &str,
        bytes: &[u8],
        abandoned: &std::sync::atomic::AtomicBool,
    ) -> anyhow::Result<Component> {
        let Some(dir) = &self.dir else {
            return Ok(Component::new(engine, bytes)?);
        };
        let path = self.artifact_path(dir, digest);
        let artifact = engine.precompile_component(bytes)?;
        if abandoned.load(std::sync::atomic::Ordering::SeqCst) {
            bail!("the compile was abandoned");
        }
        if let Err(e) = write_artifact(&path, &artifact) {
            tracing::warn!(path = %path.display(), "could not write compiled artifact: {e:#}");
        }
        // Loading what we just produced keeps one code path and gives mmap-backed code.
        match self.load_artifact(engine, &path) {
            Ok(Some(component)) => Ok(component),
            _ => Ok(Component::new(engine, bytes)?),
        }
    }

    fn artifact_path(&self, dir: &Path, digest: &str) -> PathBuf {
        dir.join(format!("{digest}-{}.cwasm", self.engine_key))
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

/// The digests of the compile markers in `dir` that nobody holds.
fn left_markers(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut left: Vec<String> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let digest = name.strip_suffix(MARKER_SUFFIX)?;
            (probe(&e.path()) == Some(Marker::Left)).then(|| digest.to_owned())
        })
        .collect();
    left.sort();
    left
}

/// What the compile marker at `path` says, if there is one: whether a live process holds its
/// lock. A marker whose lock cannot be tried (a file system without locks) counts as left.
fn probe(path: &Path) -> Option<Marker> {
    let file = fs::File::open(path).ok()?;
    match file.try_lock() {
        Err(fs::TryLockError::WouldBlock) => Some(Marker::Compiling),
        // Unlocked: left, unless it was removed meanwhile (a compile that just ended).
        Ok(()) | Err(fs::TryLockError::Error(_)) => same_file(path, &file).then_some(Marker::Left),
    }
}

/// Whether `path` still names `file`.
fn same_file(path: &Path, file: &fs::File) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (fs::metadata(path), file.metadata()) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
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

    /// A compile marks its component until it ends; a marker nobody holds (left by a process
    /// that compiling ended) refuses that component, and that one only, until it is removed;
    /// one a live compile holds (another cache on the same directory) is not in the way.
    #[test]
    fn a_marker_left_by_the_last_process_stops_the_compile() {
        let dir = std::env::temp_dir().join(format!("wasmop-marker-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let engine = Engine::default();
        let (killer, other) = ("d".repeat(64), "e".repeat(64));
        let cache = CompileCache::new(&engine, Some(dir.clone())).unwrap();
        let marker = cache.begin_compile(&killer).unwrap().expect("a marker");
        let path = dir.join(format!("{killer}.compiling"));
        assert!(path.exists(), "marked while compiling");
        let beside = CompileCache::new(&engine, Some(dir.clone())).unwrap();
        assert!(
            beside.begin_compile(&killer).unwrap().is_none(),
            "a live compile's marker is not in the way, nor taken"
        );
        drop(marker);
        assert!(!path.exists(), "unmarked once the compile ended");
        let names = || {
            let mut names: Vec<String> = fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            names
        };
        assert_eq!(names(), Vec::<String>::new(), "nothing else left behind");

        // The process ends while compiling: its marker stays, nobody holding it.
        fs::write(&path, "compiling since … in process 1\n").unwrap();
        let next = CompileCache::new(&engine, Some(dir.clone())).unwrap();
        assert_eq!(
            next.begin_compile(&killer).unwrap_err(),
            format!(
                "compiling this component ended the process last time (out of memory?); \
                 change the component or remove {}",
                path.display()
            )
        );
        assert!(
            next.begin_compile(&other).unwrap().is_some(),
            "another component compiles"
        );
        assert_eq!(names(), [format!("{killer}.compiling")]);
        fs::remove_file(&path).unwrap();
        assert!(
            next.begin_compile(&killer).unwrap().is_some(),
            "once removed, it compiles"
        );
        let _ = fs::remove_dir_all(&dir);
    }
}

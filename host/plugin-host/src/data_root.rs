//! The one directory tree `grants.readOnlyDir` may name: the plugin data root the operator is
//! started with (`wasmop run --plugin-data-root`, the chart mounts a volume there).
//!
//! A granted directory is resolved when its entry loads, component by component beneath the
//! root: `..` is refused, a symlink is followed only while it stays inside the root, and the
//! directories of [`REFUSED_DIRS`] (and `/`) are refused whatever the root. The entry's
//! plugin then reads the directory's real path, which each call opens again without following
//! any symlink (`open_real_dir`), so a symlink planted inside the root after the load leads
//! nowhere.

use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// The plugin data root of `wasmop run` when `--plugin-data-root` is not given (the chart
/// mounts a volume there).
pub const DEFAULT_PLUGIN_DATA_ROOT: &str = "/var/lib/wasmop/plugin-data";

/// Directories a plugin is never granted, nor any directory inside one or holding one, even
/// under a root that contains them: the kernel's views of processes and the system, devices,
/// and the pod's ServiceAccount token and mounted Secrets. `/` (holding them all) is refused too.
pub const REFUSED_DIRS: [&str; 5] = ["/proc", "/sys", "/dev", "/var/run/secrets", "/run/secrets"];

/// Symlinks followed at most while resolving one directory (Linux's own limit).
const MAX_SYMLINKS: usize = 40;

/// The directory under which `grants.readOnlyDir` must resolve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataRoot {
    path: PathBuf,
}

impl Default for DataRoot {
    /// [`DEFAULT_PLUGIN_DATA_ROOT`].
    fn default() -> Self {
        Self {
            path: PathBuf::from(DEFAULT_PLUGIN_DATA_ROOT),
        }
    }
}

impl DataRoot {
    /// A root at `path`, which need not exist yet (a directory granted under a missing root
    /// fails its entry when it loads).
    ///
    /// # Errors
    /// `path` is relative, holds `..`, or is (or is inside, or holds) `/` or one of
    /// [`REFUSED_DIRS`], as written or as its real path.
    pub fn new(path: impl Into<PathBuf>) -> Result<Self, String> {
        let path = path.into();
        let shown = path.display();
        if !path.is_absolute() {
            return Err(format!(
                "the plugin data root {shown} must be an absolute path"
            ));
        }
        let path = normalize(&path).map_err(|e| format!("the plugin data root {shown}: {e}"))?;
        let check = |p: &Path| {
            refused(p).map_or(Ok(()), |why| {
                Err(format!(
                    "the plugin data root {shown} is refused: {why}; give a directory that \
                     holds only what plugins may read, e.g. {DEFAULT_PLUGIN_DATA_ROOT}"
                ))
            })
        };
        check(&path)?;
        if let Ok(real) = std::fs::canonicalize(&path) {
            check(&real)?;
        }
        Ok(Self { path })
    }

    /// The root as given (absolute, normalized).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The real path (no symlink in it) of `dir`, a `grants.readOnlyDir`: an absolute path
    /// under the root (the root itself included), whose components are walked one by one from
    /// the root's real path. A symlink is followed while its target stays inside the root (a
    /// relative target, or an absolute one under the root). Blocking file-system I/O.
    ///
    /// # Errors
    /// Why, to follow `DIR: ` where the caller names it (e.g. `grants.readOnlyDir "DIR": `):
    /// not an absolute path, `..`, a refused directory ([`REFUSED_DIRS`], `/`), outside the
    /// root, a symlink leading out of it (naming the link and its target), a component that
    /// does not exist or is not a directory, or a root that cannot be opened.
    pub fn resolve(&self, dir: &str) -> Result<PathBuf, String> {
        let root = self.path.display();
        let hint = format!(
            "a plugin may read only directories under the plugin data root {root} \
             (--plugin-data-root)"
        );
        let path = Path::new(dir);
        if !path.is_absolute() {
            return Err(format!("not an absolute path; {hint}"));
        }
        let path = normalize(path)?;
        if let Some(why) = refused(&path) {
            return Err(format!("refused: {why}; {hint}"));
        }
        let real_root = std::fs::canonicalize(&self.path)
            .map_err(|e| format!("the plugin data root {root} cannot be opened: {e}"))?;
        if let Some(why) = refused(&real_root) {
            return Err(format!(
                "refused: the plugin data root {root} is {}, and {why}",
                real_root.display()
            ));
        }
        let rel = path
            .strip_prefix(&self.path)
            .or_else(|_| path.strip_prefix(&real_root))
            .map_err(|_| format!("outside the plugin data root; {hint}"))?;
        let real = walk(&real_root, &self.path, rel).map_err(|e| format!("{e}; {hint}"))?;
        if let Some(why) = refused(&real) {
            return Err(format!(
                "refused: it is {}, and {why}; {hint}",
                real.display()
            ));
        }
        Ok(real)
    }
}

/// `path` without `.` components.
///
/// # Errors
/// A `..` component.
fn normalize(path: &Path) -> Result<PathBuf, String> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                return Err("`..` is not allowed in it".to_owned());
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    Ok(out)
}

/// Why `path` (absolute, normalized) may not be granted: it is `/`, or is, is inside or holds
/// one of [`REFUSED_DIRS`].
fn refused(path: &Path) -> Option<String> {
    if path == Path::new("/") {
        return Some("/ is the whole file system".to_owned());
    }
    REFUSED_DIRS.iter().find_map(|d| {
        let d = Path::new(d);
        let why = match d.to_str() {
            Some("/proc") => "the kernel's view of the operator's processes",
            Some("/sys") => "the kernel's view of the system",
            Some("/dev") => "devices",
            _ => "the pod's ServiceAccount token and mounted Secrets",
        };
        if path.starts_with(d) {
            Some(format!("{} holds {why}", d.display()))
        } else if d.starts_with(path) {
            Some(format!("it holds {} ({why})", d.display()))
        } else {
            None
        }
    })
}

/// The real path of `rel` (normal components only) beneath `root` (the real path of the root
/// configured as `configured`), following symlinks only while they stay beneath it.
fn walk(root: &Path, configured: &Path, rel: &Path) -> Result<PathBuf, String> {
    let mut cur = root.to_path_buf();
    let mut todo: std::collections::VecDeque<OsString> =
        rel.components().map(|c| c.as_os_str().to_owned()).collect();
    let mut links = 0;
    // The last symlink followed and its target, for the message of an escape.
    let mut via: Option<(PathBuf, PathBuf)> = None;
    let escape = |via: &Option<(PathBuf, PathBuf)>| match via {
        Some((link, target)) => format!(
            "{} is a symlink to {}, which leads out of the plugin data root",
            link.display(),
            target.display()
        ),
        None => "it leads out of the plugin data root".to_owned(),
    };
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            if cur == root {
                return Err(escape(&via));
            }
            cur.pop();
            continue;
        }
        let next = cur.join(&name);
        let meta = std::fs::symlink_metadata(&next)
            .map_err(|e| format!("{} cannot be read: {e}", next.display()))?;
        if meta.file_type().is_symlink() {
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(format!("more than {MAX_SYMLINKS} symlinks"));
            }
            let target = std::fs::read_link(&next)
                .map_err(|e| format!("{} cannot be read: {e}", next.display()))?;
            via = Some((next, target.clone()));
            let mut parts: Vec<OsString> = Vec::new();
            let rest = if target.is_absolute() {
                // Under the root's real path, or under the root as configured.
                let Some(under) = target
                    .strip_prefix(root)
                    .or_else(|_| target.strip_prefix(configured))
                    .ok()
                else {
                    return Err(escape(&via));
                };
                cur = root.to_path_buf();
                under.to_path_buf()
            } else {
                target
            };
            for c in rest.components() {
                match c {
                    Component::Normal(n) => parts.push(n.to_owned()),
                    Component::ParentDir => parts.push("..".into()),
                    _ => {}
                }
            }
            for part in parts.into_iter().rev() {
                todo.push_front(part);
            }
        } else if meta.is_dir() {
            cur = next;
        } else {
            return Err(format!("{} is not a directory", next.display()));
        }
    }
    Ok(cur)
}

/// A directory opened for one call's preopen ([`open_real_dir`]).
pub(crate) struct OpenedDir {
    #[cfg(target_os = "linux")]
    fd: rustix::fd::OwnedFd,
    #[cfg(not(target_os = "linux"))]
    path: PathBuf,
}

impl OpenedDir {
    /// The path that opens this very directory again: `/proc/self/fd/N` on Linux.
    pub(crate) fn path(&self) -> PathBuf {
        #[cfg(target_os = "linux")]
        {
            use rustix::fd::AsRawFd as _;
            PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
        }
        #[cfg(not(target_os = "linux"))]
        {
            self.path.clone()
        }
    }
}

/// Opens `real`, the real path [`DataRoot::resolve`] gave, one component at a time from `/`
/// without following a symlink: a component replaced by a symlink since (someone who can write
/// inside the root planting one to `/var/run/secrets`) fails the open. (Elsewhere than on
/// Linux, the path is opened as it is.)
///
/// # Errors
/// `real` is not absolute, or a component of it is no longer a directory.
pub(crate) fn open_real_dir(real: &Path) -> std::io::Result<OpenedDir> {
    #[cfg(target_os = "linux")]
    {
        use rustix::fs::{CWD, Mode, OFlags, openat};
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut fd = openat(CWD, "/", flags, Mode::empty())?;
        for c in real.components() {
            match c {
                Component::RootDir => {}
                Component::Normal(name) => {
                    fd = openat(&fd, name, flags, Mode::empty()).map_err(|e| {
                        std::io::Error::other(format!(
                            "{} is not the directory it was when the entry loaded (a symlink \
                             now?): {e}",
                            real.display()
                        ))
                    })?;
                }
                _ => {
                    return Err(std::io::Error::other(format!(
                        "{} is not a resolved absolute path",
                        real.display()
                    )));
                }
            }
        }
        Ok(OpenedDir { fd })
    }
    #[cfg(not(target_os = "linux"))]
    {
        Ok(OpenedDir {
            path: real.to_path_buf(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_the_roots_that_hold_what_no_plugin_may_read() {
        for bad in [
            "/",
            "/proc",
            "/sys/fs",
            "/dev",
            "/var/run/secrets",
            "/run/secrets/kubernetes.io",
            "/run",
            "/var/run",
        ] {
            let e = DataRoot::new(bad).unwrap_err();
            assert!(e.contains("is refused"), "{bad}: {e}");
        }
        assert!(DataRoot::new("data").unwrap_err().contains("absolute"));
        assert!(
            DataRoot::new("/var/lib/../run")
                .unwrap_err()
                .contains("`..`")
        );
        let root = DataRoot::new("/var/lib/wasmop/./plugin-data").unwrap();
        assert_eq!(root.path(), Path::new(DEFAULT_PLUGIN_DATA_ROOT));
        assert_eq!(DataRoot::default(), root);
    }
}

//! `wasmop plugin new --hook H --lang L DIR`: a plugin to start from, for each of the four hooks
//! in each of five languages, that builds with the toolchains `scripts/setup.sh` installs and
//! passes `wasmop plugin check` and `wasmop plugin test` as it is written.
//!
//! The files come from `host/plugin-tools/templates`, embedded in the binary: `<lang>/common/`
//! (the build script, README and package files of a language), `<lang>/<hook>/` (the policy and
//! the world's glue) and `fixtures/<hook>/` (requests and the answers they expect, written to
//! `fixtures/` for `plugin test --fixtures`), with `hooks/<hook>.md` (what the hook's plugin
//! does) in the README. A path component that starts with `_` is written with a `.`
//! (`_gitignore` is `.gitignore`), so that the templates' own dotfiles do not act on this
//! repository. `{{key}}` in a template is replaced by `Vars`; the SDKs and the WIT are used by
//! path from a wasmop checkout (`--sdk`), since none of them is published yet (docs/plugins.md,
//! "The author's path").

use std::path::{Path, PathBuf};

use anyhow::Context;

use wasmop_plugin_host::Hook;

/// A language `plugin new` writes plugins in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    /// Rust on the Rust SDK (`plugins/sdk`), built with cargo for `wasm32-wasip2`.
    Rust,
    /// Python on componentize-py and the SDK's helper module (`plugins/sdk-python`).
    Python,
    /// JavaScript on componentize-js and the SDK's helper module (`plugins/sdk-js`).
    Js,
    /// Go on the Go SDK (`plugins/sdk-go`), built for `wasip1`.
    Go,
    /// C on `wit-bindgen c`, built with clang and wasi-libc.
    C,
}

impl Lang {
    /// Every language, in the order the docs list them.
    #[cfg(test)]
    pub const ALL: [Lang; 5] = [Lang::Rust, Lang::Python, Lang::Js, Lang::Go, Lang::C];

    /// The name `--lang` takes, and the directory of its templates.
    pub fn as_str(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::Js => "js",
            Lang::Go => "go",
            Lang::C => "c",
        }
    }

    /// What the plugin needs of the wasmop checkout, relative to it: the WIT, and the
    /// language's SDK.
    fn needs(self) -> [&'static str; 2] {
        let sdk = match self {
            Lang::Rust => "plugins/sdk/Cargo.toml",
            Lang::Python => "plugins/sdk-python/wasmop_plugin.py",
            Lang::Js => JS_HELPER,
            Lang::Go => "plugins/sdk-go/go.mod",
            Lang::C => WIT,
        };
        [WIT, sdk]
    }
}

impl std::fmt::Display for Lang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The WIT of the worlds, relative to a wasmop checkout.
const WIT: &str = "plugins/sdk/wit/plugin.wit";

/// The JS SDK's helper module, relative to a wasmop checkout: a JS plugin gets a copy beside
/// its sources (componentize-js resolves imports under the plugin's directory only).
const JS_HELPER: &str = "plugins/sdk-js/wasmop-plugin.js";

/// Options of `wasmop plugin new`.
#[derive(Debug, clap::Args)]
pub struct NewOptions {
    /// The hook the plugin is for.
    #[arg(long)]
    pub hook: Hook,
    /// The language to write it in.
    #[arg(long, value_enum)]
    pub lang: Lang,
    /// The plugin's name: its `info` name, package name and component file (`NAME.wasm`);
    /// lowercase letters, digits and `-` [default: the last component of DIR].
    #[arg(long)]
    pub name: Option<String>,
    /// The wasmop checkout whose SDK and WIT the plugin uses, by path (nothing is published
    /// yet) [default: the checkout this binary was built from].
    #[arg(long, value_name = "PATH")]
    pub sdk: Option<PathBuf>,
    /// The directory to write the plugin into: a new one, or an empty one.
    pub dir: PathBuf,
}

/// One template file: the directory it is in under `host/plugin-tools/templates` (`<lang>/common`,
/// `<lang>/<hook>`, `fixtures/<hook>` or `hooks`), its path there, and its text.
struct Template {
    dir: &'static str,
    path: &'static str,
    text: &'static str,
}

macro_rules! template {
    ($dir:literal, $path:literal) => {
        Template {
            dir: $dir,
            path: $path,
            text: include_str!(concat!("../templates/", $dir, "/", $path)),
        }
    };
}

/// Every template (a test checks that this is every file under `host/plugin-tools/templates`).
const TEMPLATES: &[Template] = &[
    template!("hooks", "routing.md"),
    template!("hooks", "scaling.md"),
    template!("hooks", "restart.md"),
    template!("hooks", "dr.md"),
    template!("fixtures/routing", "copy-of-the-default-route.json"),
    template!("fixtures/routing", "other-routes-stay.json"),
    template!("fixtures/scaling", "refuses-another-vote.json"),
    template!(
        "fixtures/scaling",
        "votes-down-when-the-settings-say-so.json"
    ),
    template!("fixtures/scaling", "votes-up-by-default.json"),
    template!("fixtures/restart", "refuses-pods-that-are-not-a-list.json"),
    template!(
        "fixtures/restart",
        "restarts-every-pod-when-the-settings-say-so.json"
    ),
    template!("fixtures/restart", "restarts-nothing-by-default.json"),
    template!("fixtures/dr", "creates-an-absent-lease.json"),
    template!("fixtures/dr", "renews-its-own-lease.json"),
    template!("fixtures/dr", "takes-over-an-expired-lease.json"),
    template!("fixtures/dr", "takes-the-hosts-settings.json"),
    template!("fixtures/dr", "waits-while-a-peer-holds-it.json"),
    template!("rust/common", "README.md"),
    template!("rust/common", "Cargo.toml"),
    template!("rust/common", "_cargo/config.toml"),
    template!("rust/common", "build.sh"),
    template!("rust/common", "_gitignore"),
    template!("rust/routing", "src/lib.rs"),
    template!("rust/scaling", "src/lib.rs"),
    template!("rust/restart", "src/lib.rs"),
    template!("rust/dr", "src/lib.rs"),
    template!("python/common", "README.md"),
    template!("python/common", "build.sh"),
    template!("python/common", "_gitignore"),
    template!("python/routing", "app.py"),
    template!("python/routing", "policy.py"),
    template!("python/routing", "test_policy.py"),
    template!("python/scaling", "app.py"),
    template!("python/scaling", "policy.py"),
    template!("python/scaling", "test_policy.py"),
    template!("python/restart", "app.py"),
    template!("python/restart", "policy.py"),
    template!("python/restart", "test_policy.py"),
    template!("python/dr", "app.py"),
    template!("python/dr", "policy.py"),
    template!("python/dr", "test_policy.py"),
    template!("js/common", "README.md"),
    template!("js/common", "build.sh"),
    template!("js/common", "package.json"),
    template!("js/common", "_gitignore"),
    template!("js/routing", "plugin.js"),
    template!("js/routing", "policy.js"),
    template!("js/routing", "policy.test.js"),
    template!("js/scaling", "plugin.js"),
    template!("js/scaling", "policy.js"),
    template!("js/scaling", "policy.test.js"),
    template!("js/restart", "plugin.js"),
    template!("js/restart", "policy.js"),
    template!("js/restart", "policy.test.js"),
    template!("js/dr", "plugin.js"),
    template!("js/dr", "policy.js"),
    template!("js/dr", "policy.test.js"),
    template!("go/common", "README.md"),
    template!("go/common", "go.mod"),
    template!("go/common", "build.sh"),
    template!("go/common", "_gitignore"),
    template!("go/routing", "plugin.go"),
    template!("go/routing", "policy.go"),
    template!("go/routing", "policy_test.go"),
    template!("go/scaling", "plugin.go"),
    template!("go/scaling", "policy.go"),
    template!("go/scaling", "policy_test.go"),
    template!("go/restart", "plugin.go"),
    template!("go/restart", "policy.go"),
    template!("go/restart", "policy_test.go"),
    template!("go/dr", "plugin.go"),
    template!("go/dr", "policy.go"),
    template!("go/dr", "policy_test.go"),
    template!("c/common", "README.md"),
    template!("c/common", "build.sh"),
    template!("c/common", "json.h"),
    template!("c/common", "_gitignore"),
    template!("c/routing", "plugin.c"),
    template!("c/scaling", "plugin.c"),
    template!("c/restart", "plugin.c"),
    template!("c/dr", "plugin.c"),
];

/// The command an author runs these tools with, as this process was started: `wasmop-plugin`
/// (the authors' binary, `host/plugin-tools`) or `wasmop plugin` (the operator's subcommand),
/// so that the README and the next steps name a command the author has.
fn cli() -> &'static str {
    let program = std::env::args_os().next().map(PathBuf::from);
    let standalone = program
        .as_deref()
        .and_then(Path::file_name)
        .is_some_and(|n| n.to_string_lossy().starts_with("wasmop-plugin"));
    if standalone {
        "wasmop-plugin"
    } else {
        "wasmop plugin"
    }
}

/// The values of a template's `{{key}}`s for one plugin.
struct Vars {
    pairs: Vec<(&'static str, String)>,
}

impl Vars {
    /// The values for a plugin `name` of `hook` in `lang`, on the checkout `sdk`:
    ///
    /// - `name`, `hook`, `lang`, `sdk` (absolute);
    /// - `world` (`restart-predicate`) and `c_world` (`restart_predicate`, the prefix of
    ///   `wit-bindgen c`'s names);
    /// - `wasm`: the component file, `NAME.wasm`; `crate`: the Rust library's file name;
    /// - `settings`: the registry entry's settings, as YAML flow;
    /// - `policy`: `hooks/<hook>.md`, what the plugin does;
    /// - `cli`: the command that runs these tools ([`cli`]).
    fn new(name: &str, hook: Hook, lang: Lang, sdk: &Path) -> Self {
        let settings = match hook {
            Hook::Routing => "{}",
            Hook::Scaling => "{vote: up}",
            Hook::Restart => "{restart: false}",
            Hook::Dr => "{waitTimeInSeconds: 5, failureThreshold: 3}",
        };
        let policy = template_text("hooks", &format!("{hook}.md")).trim_end();
        Self {
            pairs: vec![
                ("name", name.to_owned()),
                ("hook", hook.as_str().to_owned()),
                ("lang", lang.as_str().to_owned()),
                ("sdk", sdk.display().to_string()),
                ("world", hook.world().to_owned()),
                ("c_world", hook.world().replace('-', "_")),
                ("wasm", format!("{name}.wasm")),
                ("crate", name.replace('-', "_")),
                ("settings", settings.to_owned()),
                ("policy", policy.to_owned()),
                ("cli", cli().to_owned()),
            ],
        }
    }

    /// `text` with each `{{key}}` replaced by its value.
    ///
    /// # Errors
    /// A `{{key}}` that is not one of [`Vars::new`]'s (a template's mistake), by name.
    fn render(&self, text: &str) -> Result<String, String> {
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(start) = rest.find("{{") {
            let after = &rest[start + 2..];
            let key_len = after
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .unwrap_or(after.len());
            let key = &after[..key_len];
            if key.is_empty() || !after[key_len..].starts_with("}}") {
                // Not a placeholder (`{{{hook}}` opens a YAML map before one): keep one brace.
                out.push_str(&rest[..=start]);
                rest = &rest[start + 1..];
                continue;
            }
            let (_, value) = self
                .pairs
                .iter()
                .find(|(k, _)| *k == key)
                .ok_or_else(|| format!("unknown placeholder {{{{{key}}}}}"))?;
            out.push_str(&rest[..start]);
            out.push_str(value);
            rest = &after[key_len + 2..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// The text of the template `dir/path`.
fn template_text(dir: &str, path: &str) -> &'static str {
    TEMPLATES
        .iter()
        .find(|t| t.dir == dir && t.path == path)
        .map(|t| t.text)
        .unwrap_or_else(|| panic!("no template {dir}/{path}"))
}

/// The files of a `hook` plugin in `lang`: (path in the plugin's directory, template).
fn files(hook: Hook, lang: Lang) -> Vec<(String, &'static Template)> {
    let common = format!("{lang}/common");
    let own = format!("{lang}/{hook}");
    let fixtures = format!("fixtures/{hook}");
    TEMPLATES
        .iter()
        .filter(|t| t.dir == common || t.dir == own || t.dir == fixtures)
        .map(|t| {
            let under = if t.dir == fixtures { "fixtures/" } else { "" };
            let path = t
                .path
                .split('/')
                .map(|part| match part.strip_prefix('_') {
                    Some(dotted) => format!(".{dotted}"),
                    None => part.to_owned(),
                })
                .collect::<Vec<_>>()
                .join("/");
            (format!("{under}{path}"), t)
        })
        .collect()
}

/// Whether `name` can name a plugin: 1 to 63 lowercase ASCII letters, digits and `-`, starting
/// with a letter and not ending with `-` (a registry entry's name, a crate, a Go module path
/// element, a file name).
fn valid_name(name: &str) -> bool {
    name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Whether `path` can be written into the generated files as it is: TOML and Go strings,
/// shell words, Markdown. Other characters are refused rather than escaped for each format.
fn plain_path(path: &str) -> bool {
    path.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+@~,".contains(c))
}

/// The checkout this binary was built from (`host/plugin-tools/../..`).
fn built_from() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The wasmop checkout `--sdk` names (or the one the binary was built from), made absolute.
///
/// # Errors
/// It is not a directory holding what `lang` needs (the WIT and the language's SDK), or its
/// path has characters the generated files cannot hold.
fn resolve_sdk(given: Option<&Path>, lang: Lang) -> anyhow::Result<PathBuf> {
    let (path, how) = match given {
        Some(p) => (p.to_path_buf(), "--sdk"),
        None => (
            built_from(),
            "the checkout this wasmop was built from; pass --sdk PATH to another",
        ),
    };
    let sdk = std::fs::canonicalize(&path).map_err(|e| {
        anyhow::anyhow!(
            "{} ({how}) is not a wasmop checkout: {e}. The plugin uses the SDK and the WIT of \
             one by path until they are published: pass --sdk PATH to a checkout of wasmop",
            path.display()
        )
    })?;
    for need in lang.needs() {
        if !sdk.join(need).is_file() {
            anyhow::bail!(
                "{} ({how}) is not a wasmop checkout with the {lang} SDK: it has no {need}. \
                 Pass --sdk PATH to a checkout of wasmop",
                sdk.display()
            );
        }
    }
    let shown = sdk.display().to_string();
    if !plain_path(&shown) {
        anyhow::bail!(
            "the wasmop checkout's path {shown} has characters the generated files cannot hold \
             as they are (spaces, quotes, `$`, …): use a path of letters, digits and `/._-+@~,` \
             (e.g. a symbolic link to it) with --sdk"
        );
    }
    Ok(sdk)
}

/// `plugin new`: writes the plugin and prints what it wrote and what to run next.
///
/// # Errors
/// The name is not valid, DIR exists and is not an empty directory, the checkout is not one
/// (see `resolve_sdk`), or a file cannot be written.
pub fn plugin_new(opts: &NewOptions) -> anyhow::Result<()> {
    let (hook, lang, dir) = (opts.hook, opts.lang, &opts.dir);
    let name = match &opts.name {
        Some(name) => name.clone(),
        None => dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    };
    if !valid_name(&name) {
        let from = if opts.name.is_some() {
            "--name".to_owned()
        } else {
            format!("the last component of {}", dir.display())
        };
        anyhow::bail!(
            "the plugin name {name:?} ({from}) must be 1 to 63 lowercase letters, digits and \
             `-`, starting with a letter and not ending with `-`: pass --name NAME"
        );
    }
    if dir.exists() {
        let mut entries = std::fs::read_dir(dir).with_context(|| {
            format!(
                "{} exists and is not a directory: choose a new one",
                dir.display()
            )
        })?;
        if entries.next().is_some() {
            anyhow::bail!(
                "{} exists and is not empty: choose a new directory (plugin new overwrites \
                 nothing)",
                dir.display()
            );
        }
    }
    let sdk = resolve_sdk(opts.sdk.as_deref(), lang)?;
    let vars = Vars::new(&name, hook, lang, &sdk);
    let mut written = Vec::new();
    for (path, template) in files(hook, lang) {
        let text = vars
            .render(template.text)
            .map_err(|e| anyhow::anyhow!("template {}/{}: {e}", template.dir, template.path))?;
        write(dir, &path, &text)?;
        written.push(path);
    }
    if lang == Lang::Js {
        let helper = std::fs::read_to_string(sdk.join(JS_HELPER))
            .with_context(|| format!("cannot read {}", sdk.join(JS_HELPER).display()))?;
        write(dir, "wasmop-plugin.js", &helper)?;
        written.push("wasmop-plugin.js".into());
    }
    written.sort();
    let shown = dir.display();
    println!(
        "wrote a {hook} plugin in {lang}, {name}, to {shown}: {}\n\
         next (README.md has each step, and how to register it):\n  \
         {shown}/build.sh\n  \
         {cli} check {shown}/{name}.wasm --hook {hook}\n  \
         {cli} test {shown}/{name}.wasm --hook {hook}",
        written.join(", "),
        cli = cli(),
    );
    Ok(())
}

/// Writes `text` to `dir/path`, creating directories; `build.sh` executable.
///
/// # Errors
/// The file or a directory cannot be written.
fn write(dir: &Path, path: &str, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let file = dir.join(path);
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(&file, text).with_context(|| format!("cannot write {}", file.display()))?;
    if path.ends_with(".sh") {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755))
            .with_context(|| format!("cannot make {} executable", file.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file under host/plugin-tools/templates, relative to it.
    fn on_disk(dir: &Path, under: &Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                on_disk(&path, under, out);
            } else {
                out.push(path.strip_prefix(under).unwrap().display().to_string());
            }
        }
    }

    #[test]
    fn every_template_file_is_embedded() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("templates");
        let mut files = Vec::new();
        on_disk(&root, &root, &mut files);
        files.sort();
        let mut embedded: Vec<String> = TEMPLATES
            .iter()
            .map(|t| format!("{}/{}", t.dir, t.path))
            .collect();
        embedded.sort();
        assert_eq!(files, embedded);
    }

    #[test]
    fn every_plugin_renders_without_a_placeholder_left() {
        for lang in Lang::ALL {
            for hook in Hook::ALL {
                let vars = Vars::new("my-plugin", hook, lang, Path::new("/src/wasmop"));
                let files = files(hook, lang);
                assert!(
                    files.iter().any(|(p, _)| p == "build.sh")
                        && files.iter().any(|(p, _)| p == "README.md")
                        && files.iter().any(|(p, _)| p == ".gitignore")
                        && files.iter().any(|(p, _)| p.starts_with("fixtures/")),
                    "{lang} {hook}: {:?}",
                    files.iter().map(|(p, _)| p).collect::<Vec<_>>()
                );
                // One hook's own files at least, and none of another hook's.
                assert!(files.iter().any(|(_, t)| t.dir.ends_with(hook.as_str())));
                for (path, t) in files {
                    let text = vars
                        .render(t.text)
                        .unwrap_or_else(|e| panic!("{path}: {e}"));
                    let left = text.match_indices("{{").find(|(i, _)| {
                        let after = &text[i + 2..];
                        after.starts_with(|c: char| c.is_ascii_lowercase())
                            && after.find("}}").is_some_and(|end| {
                                after[..end]
                                    .chars()
                                    .all(|c| c.is_ascii_lowercase() || c == '_')
                            })
                    });
                    assert_eq!(left, None, "{lang} {hook} {path}: a placeholder is left");
                    if path == "README.md" {
                        assert!(text.contains("defaults: {"), "{text}");
                        assert!(text.contains(&format!("--hook {hook}")), "{text}");
                        assert!(text.contains("/src/wasmop"), "{text}");
                    }
                }
            }
        }
    }

    #[test]
    fn render_replaces_keys_and_refuses_unknown_ones() {
        let vars = Vars::new("x", Hook::Dr, Lang::C, Path::new("/w"));
        assert_eq!(
            vars.render("{{name}}.wasm, {{{hook}}: {{name}}}, c: {{c_world}}")
                .unwrap(),
            "x.wasm, {dr: x}, c: state_checker"
        );
        assert_eq!(
            vars.render("{{nope}}").unwrap_err(),
            "unknown placeholder {{nope}}"
        );
        assert_eq!(vars.render("{{ {a}} }}").unwrap(), "{{ {a}} }}");
    }

    #[test]
    fn names_and_paths() {
        for ok in ["a", "my-plugin", "dr2"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "My", "2dr", "a_b", "a-", &"a".repeat(64)] {
            assert!(!valid_name(bad), "{bad}");
        }
        assert!(plain_path("/home/me/src/wasmop-1.0"));
        assert!(!plain_path("/home/me/my src"));
        assert!(!plain_path("/tmp/$x"));
    }
}

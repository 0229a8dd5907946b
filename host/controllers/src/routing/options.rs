//! Options of the routing controller: the flags of `wasmop run` and the plan settings they give.

use std::collections::BTreeSet;

use super::plan::PlanConfig;

/// Options of the routing controller (flags of `wasmop run`), as upstream's.
#[derive(Clone, Debug, clap::Args)]
#[group(skip)]
pub struct Options {
    /// The pod label that tells versions apart: clones get `<label>=<version of the
    /// DynamicEnv>`, and base DestinationRule subsets are found by `<label>=<defaultVersion>`.
    #[arg(
        long = "version-label",
        env = "WASMOP_ROUTING_VERSION_LABEL",
        default_value = "version"
    )]
    pub version_label: String,
    /// The version of the base workloads when a subset names no `defaultVersion`.
    #[arg(
        long = "default-version",
        env = "WASMOP_ROUTING_DEFAULT_VERSION",
        default_value = "shared"
    )]
    pub default_version: String,
    /// Labels of a base Deployment not copied to its clones (comma-separated), e.g. labels
    /// of a GitOps tool that would claim the clone.
    #[arg(
        long = "remove-labels",
        env = "WASMOP_ROUTING_REMOVE_LABELS",
        value_delimiter = ','
    )]
    pub remove_labels: Vec<String>,
}

impl Default for Options {
    fn default() -> Self {
        let cfg = PlanConfig::default();
        Self {
            version_label: cfg.version_label,
            default_version: cfg.default_version,
            remove_labels: Vec::new(),
        }
    }
}

impl Options {
    /// The plan settings these options give.
    pub fn plan_config(&self) -> PlanConfig {
        PlanConfig {
            version_label: self.version_label.clone(),
            default_version: self.default_version.clone(),
            remove_labels: self
                .remove_labels
                .iter()
                .filter(|l| !l.is_empty())
                .cloned()
                .collect::<BTreeSet<_>>(),
        }
    }
}

//! The default plugins, embedded in the binary and served as `builtin://NAME`.

use super::Hook;

/// A default plugin compiled into the binary.
#[derive(Clone, Copy, Debug)]
pub struct Builtin {
    /// Name used in `builtin://NAME` and as the default registry name.
    pub name: &'static str,
    /// The hook it implements.
    pub hook: Hook,
    /// The component bytes.
    pub wasm: &'static [u8],
}

/// Every default plugin, one per hook.
pub const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "routing-istio",
        hook: Hook::Routing,
        wasm: include_bytes!(concat!(env!("OUT_DIR"), "/routing_istio.wasm")),
    },
    Builtin {
        name: "scaling-prometheus",
        hook: Hook::Scaling,
        wasm: include_bytes!(concat!(env!("OUT_DIR"), "/scaling_prometheus.wasm")),
    },
    Builtin {
        name: "restart-sidecar",
        hook: Hook::Restart,
        wasm: include_bytes!(concat!(env!("OUT_DIR"), "/restart_sidecar.wasm")),
    },
    Builtin {
        name: "dr-lease",
        hook: Hook::Dr,
        wasm: include_bytes!(concat!(env!("OUT_DIR"), "/dr_lease.wasm")),
    },
];

/// The builtin called `name`, if any.
pub fn find(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

/// The builtin for `hook` (each hook has exactly one).
pub fn for_hook(hook: Hook) -> &'static Builtin {
    BUILTINS
        .iter()
        .find(|b| b.hook == hook)
        .expect("every hook has a builtin")
}

//! The default plugins, embedded in the binary and served as `builtin://NAME`.

use crate::spec::Hook;

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

/// Every builtin plugin: the default of each hook first, then `none` (the DR state checker of
/// single-instance installs).
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
    Builtin {
        name: "none",
        hook: Hook::Dr,
        wasm: include_bytes!(concat!(env!("OUT_DIR"), "/dr_none.wasm")),
    },
];

/// The builtin called `name`, if any.
pub fn find(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

/// The error for a `builtin://NAME` that names none: `unknown builtin "NAME" (known: …)`.
pub fn unknown(name: &str) -> String {
    let known: Vec<_> = BUILTINS.iter().map(|b| b.name).collect();
    format!("unknown builtin {name:?} (known: {})", known.join(", "))
}

/// The default builtin for `hook` (the first of [`BUILTINS`] for it).
pub(crate) fn for_hook(hook: Hook) -> &'static Builtin {
    BUILTINS
        .iter()
        .find(|b| b.hook == hook)
        .expect("every hook has a builtin")
}

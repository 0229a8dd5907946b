"""{{name}}: a routing plugin. Requests that match one of the DynamicEnv's istioMatches go to
its subset: before each route to the service's default version, one copy per istioMatch,
narrowed by it and sent to the subset (README.md says what the host checks).

Plain Python with unit tests (test_policy.py); app.py hands it the world's calls.
"""

import copy
import json
from dataclasses import dataclass, field

from wasmop_plugin import Invalid, json_object


def check_settings(text: str) -> None:
    """Checks the settings JSON object: this plugin takes no settings yet."""
    settings = json_object(text, "settings", "settings")
    if settings:
        raise Invalid(f"unknown settings keys {sorted(settings)}: this plugin takes no settings yet", "settings")


@dataclass
class Request:
    """The route-request fields the policy reads. `matches` are the DynamicEnv's istioMatches in
    the form of an Istio match entry: `{"headers": {NAME: {"exact": V}}, "sourceLabels": {K: V}}`.
    """

    host: str
    namespace: str
    subset: str
    default_version: str
    route_prefix: str
    virtual_service: str
    matches: list = field(default_factory=list)


def is_service(host, r: Request, vs_namespace: str) -> bool:
    """Whether a destination host names the request's service: host, host.namespace,
    host.namespace.svc or host.namespace.svc.cluster.local; the short name only when the
    VirtualService is in the service's namespace (Istio reads it in the VirtualService's)."""
    long = f"{r.host}.{r.namespace}"
    return (host == r.host and vs_namespace in ("", r.namespace)) or host in (
        long,
        f"{long}.svc",
        f"{long}.svc.cluster.local",
    )


def narrow(entry: dict, match: dict):
    """`entry` (a route's match entry) narrowed by `match`, or None when it already has another
    condition on one of its headers or source labels."""
    out = copy.deepcopy(entry)
    for kind in ("headers", "sourceLabels"):
        conditions = out.setdefault(kind, {})
        if not isinstance(conditions, dict):
            return None
        for key, want in match.get(kind, {}).items():
            if conditions.setdefault(key, want) != want:
                return None
        if not conditions:
            del out[kind]
    return out


def default_destination(route: dict, r: Request, vs_namespace: str):
    """The route's destination to the service at its default version, or None."""
    for d in route.get("route") or []:
        dest = d.get("destination") if isinstance(d, dict) else None
        if (
            isinstance(dest, dict)
            and is_service(dest.get("host"), r, vs_namespace)
            and dest.get("subset") == r.default_version
        ):
            return dest
    return None


def route(r: Request) -> list:
    """The complete new spec.http of the request's VirtualService."""
    try:
        vs = json.loads(r.virtual_service)
    except ValueError as e:
        raise Invalid(f"not JSON: {e}", "request.virtual-service")
    spec = vs.get("spec") if isinstance(vs, dict) else None
    routes = (spec or {}).get("http") or []
    if not isinstance(routes, list):
        raise Invalid("spec.http is not a list", "request.virtual-service")
    vs_namespace = (vs.get("metadata") or {}).get("namespace") or ""
    out, copies = [], 0
    for original in routes:
        if not isinstance(original, dict):
            raise Invalid("spec.http holds a route that is not an object", "request.virtual-service")
        name = original.get("name")
        if isinstance(name, str) and name.startswith(r.route_prefix):
            continue  # this plugin's earlier output: made again below
        dest = default_destination(original, r, vs_namespace)
        if dest is not None:
            entries = original.get("match") or [{}]
            for match in r.matches:
                narrowed = [n for e in entries if isinstance(e, dict) and (n := narrow(e, match)) is not None]
                if not narrowed:
                    continue
                dup = copy.deepcopy(original)
                dup["name"] = f"{r.route_prefix}{copies}"
                dup["match"] = narrowed
                dup["route"] = [{"destination": {**dest, "subset": r.subset}}]
                out.append(dup)
                copies += 1
        out.append(original)
    return out

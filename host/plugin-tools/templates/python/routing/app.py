"""{{name}}: the router world's class, which componentize-py's bindings (wit_world, generated
from the WIT at build time) call; the policy is in policy.py."""

import json

import wit_world
from wasmop_plugin import log, plugin_errors
from wit_world.imports import routing, types

import policy

KINDS = {routing.StringMatch_Exact: "exact", routing.StringMatch_Prefix: "prefix", routing.StringMatch_Regex: "regex"}


def istio_match(m: routing.IstioMatch) -> dict:
    """An istioMatch in the form of an Istio match entry."""
    return {
        "headers": {h.name: {KINDS[type(h.value)]: h.value.value} for h in m.headers},
        "sourceLabels": {label.key: label.value for label in m.source_labels},
    }


class WitWorld(wit_world.WitWorld):
    def info(self) -> types.PluginInfo:
        return types.PluginInfo(name="{{name}}", version="0.1.0", hook=types.Hook.ROUTING)

    @plugin_errors
    def validate_settings(self, settings: str) -> None:
        policy.check_settings(settings)

    @plugin_errors
    def route(self, settings: str, request: routing.RouteRequest) -> routing.RouteResponse:
        policy.check_settings(settings)
        http = policy.route(
            policy.Request(
                host=request.host,
                namespace=request.namespace,
                subset=request.subset,
                default_version=request.default_version,
                route_prefix=request.route_prefix,
                virtual_service=request.virtual_service,
                matches=[istio_match(m) for m in request.matches],
            )
        )
        log("debug", f"{request.dynamic_env}: {len(http)} routes for subset {request.subset}")
        return routing.RouteResponse(http=json.dumps(http))

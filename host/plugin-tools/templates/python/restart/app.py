"""{{name}}: the restart-predicate world's class, which componentize-py's bindings (wit_world,
generated from the WIT at build time) call; the policy is in policy.py."""

import wit_world
from wasmop_plugin import log, plugin_errors
from wit_world.imports import restart, types

import policy


class WitWorld(wit_world.WitWorld):
    def info(self) -> types.PluginInfo:
        return types.PluginInfo(name="{{name}}", version="0.1.0", hook=types.Hook.RESTART)

    @plugin_errors
    def validate_settings(self, settings: str) -> None:
        policy.settings_restart(settings)

    @plugin_errors
    def evaluate(self, settings: str, request: restart.RestartRequest) -> list:
        decisions = policy.evaluate(policy.settings_restart(settings), request.pods)
        log("debug", f"policy {request.policy}: {len(decisions)} pods judged")
        return [restart.PodDecision(restart=r, reason=why) for r, why in decisions]

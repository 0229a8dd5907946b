"""{{name}}: the scaler world's class, which componentize-py's bindings (wit_world, generated
from the WIT at build time) call; the policy is in policy.py."""

import wit_world
from wasmop_plugin import log, plugin_errors
from wit_world.imports import scaling, types

import policy


class WitWorld(wit_world.WitWorld):
    def info(self) -> types.PluginInfo:
        return types.PluginInfo(name="{{name}}", version="0.1.0", hook=types.Hook.SCALING)

    @plugin_errors
    def validate_settings(self, settings: str) -> None:
        policy.settings_vote(settings)

    @plugin_errors
    def vote(self, settings: str, request: scaling.TriggerRequest) -> scaling.TriggerVote:
        vote = policy.settings_vote(settings)
        reason = policy.reason(vote, request.trigger_type, request.elastic_service)
        log("debug", reason)
        return scaling.TriggerVote(vote=scaling.Vote.UP if vote == "up" else scaling.Vote.DOWN, value=None, reason=reason)

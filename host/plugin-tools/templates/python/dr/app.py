"""{{name}}: the state-checker world's class, which componentize-py's bindings (wit_world,
generated from the WIT at build time) call; the policy is in policy.py."""

import wit_world
from wasmop_plugin import log, plugin_errors
from wit_world.imports import dr, types

import policy

STATES = {"active": dr.State.ACTIVE, "passive": dr.State.PASSIVE}
ACTIONS = {"none": dr.Action.NONE, "create": dr.Action.CREATE, "renew": dr.Action.RENEW, "takeover": dr.Action.TAKEOVER}


class WitWorld(wit_world.WitWorld):
    def info(self) -> types.PluginInfo:
        return types.PluginInfo(name="{{name}}", version="0.1.0", hook=types.Hook.DR)

    @plugin_errors
    def validate_settings(self, settings: str) -> None:
        policy.check_settings(settings)

    @plugin_errors
    def check(self, settings: str, request: dr.StateRequest) -> dr.StateDecision:
        policy.check_settings(settings)
        lease = request.lease
        state, action, reason = policy.check(
            policy.Tick(
                identity=request.identity,
                now=request.now,
                lease=policy.Lease(owner=lease.owner, updated_time=lease.updated_time) if lease is not None else None,
                wait_time_seconds=request.wait_time_seconds,
                failure_threshold=request.failure_threshold,
                started_at=request.started_at,
                warmup_seconds=request.warmup_seconds,
            )
        )
        log("debug", f"{request.identity}: {reason}")
        return dr.StateDecision(state=STATES[state], action=ACTIONS[action], reason=reason)

"""{{name}}: a restart plugin. No pod restarts unless the settings say {"restart": true}: a
starting point to replace with a policy that compares each pod with the desired proxy state.

Plain Python with unit tests (test_policy.py); app.py hands it the world's calls.
"""

import json

from wasmop_plugin import Invalid, parse_settings


def settings_restart(text: str) -> bool:
    """Whether the settings JSON object says to restart every pod (false by default)."""
    restart = parse_settings(text, ["restart"]).get("restart", False)
    if not isinstance(restart, bool):
        raise Invalid(f"restart must be true or false, got {restart!r}", "settings.restart")
    return restart


def evaluate(restart: bool, pods_json: str) -> list:
    """One (restart, reason) per pod of the page (a JSON array of Pods), in page order."""
    try:
        pods = json.loads(pods_json)
    except ValueError:
        pods = None
    if not isinstance(pods, list):
        raise Invalid("pods must be a JSON array of Pod objects", "request.pods")
    decisions = []
    for pod in pods:
        meta = (pod.get("metadata") if isinstance(pod, dict) else None) or {}
        name = f"{meta.get('namespace', '?')}/{meta.get('name', '?')}"
        decisions.append((restart, f"{name}: the settings' restart is {'true' if restart else 'false'}"))
    return decisions

"""{{name}}: a scaling plugin. Every trigger gets the vote its settings name (up unless they say
down): a starting point to replace with a policy that reads the trigger.

Plain Python with unit tests (test_policy.py); app.py hands it the world's calls.
"""

from wasmop_plugin import Invalid, parse_settings


def settings_vote(text: str) -> str:
    """The vote the settings JSON object names: "up" (the default) or "down"."""
    vote = parse_settings(text, ["vote"]).get("vote", "up")
    if vote not in ("up", "down"):
        raise Invalid(f'vote must be "up" or "down", got {vote!r}', "settings.vote")
    return vote


def reason(vote: str, trigger_type: str, elastic_service: str) -> str:
    """Why the trigger votes as it does, for the ElasticService's status."""
    return f"{trigger_type} trigger of {elastic_service}: the settings' vote, {vote}"

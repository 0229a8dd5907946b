"""{{name}}: a dr plugin. It follows the lease as the default plugin, dr-lease, does (README.md
lists the rules): a starting point to change where your sites need it.

Plain Python with unit tests (test_policy.py); app.py hands it the world's calls.
"""

from dataclasses import dataclass
from typing import Optional

from wasmop_plugin import Invalid, parse_settings

# The keys of the host's DR settings (docs/dr.md), which a dr entry's settings carry beside the
# plugin's own: the host checks them.
HOST_KEYS = ["backend", "leaseName", "waitTimeInSeconds", "failureThreshold", "warmupSeconds", "podIdentifier", "dynamoDB"]

# The lease owner that keeps every instance passive (Admiral's manual switch).
SKIP_LEASE_POD = "SKIP-LEASE-POD"


def check_settings(text: str) -> None:
    """Checks the settings JSON object: the host's keys only, for now."""
    parse_settings(text, HOST_KEYS)


@dataclass
class Lease:
    owner: str
    updated_time: int


@dataclass
class Tick:
    """The state-request fields the policy reads; times in Unix milliseconds."""

    identity: str
    now: int
    lease: Optional[Lease]
    wait_time_seconds: int
    failure_threshold: int
    started_at: int
    warmup_seconds: int


def check(t: Tick):
    """The (state, action, reason) of one tick, the first matching rule winning: state is
    "active" or "passive", action "none", "create", "renew" or "takeover"."""
    if t.wait_time_seconds == 0 or t.failure_threshold == 0:
        raise Invalid("wait-time-seconds and failure-threshold must be at least 1", "request")
    warming = t.now - t.started_at < t.warmup_seconds * 1000
    expiry_ms = t.wait_time_seconds * t.failure_threshold * 1000
    lease = t.lease
    if lease is None:
        return ("passive", "none", "no lease, warming up") if warming else ("active", "create", "no lease: creating it")
    if lease.owner == SKIP_LEASE_POD:
        return "passive", "none", "the owner is SKIP-LEASE-POD: every instance stays passive"
    if warming:
        return "passive", "none", "warming up"
    if lease.owner == t.identity:
        return "active", "renew", "holding the lease: renewing it"
    age = t.now - lease.updated_time
    if age > expiry_ms:
        return "active", "takeover", f"the lease of {lease.owner} was renewed {age} ms ago, more than {expiry_ms} ms: taking it over"
    return "passive", "none", f"the lease is held by {lease.owner}"

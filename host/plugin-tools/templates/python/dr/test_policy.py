"""Unit tests of policy.py: `PYTHONPATH=<wasmop>/plugins/sdk-python python3 -m unittest`."""

import unittest

import policy
from wasmop_plugin import Invalid


def tick(owner=None, updated_ago_ms=0, warmup_seconds=0, failure_threshold=3):
    now = 1_000_000
    lease = policy.Lease(owner, now - updated_ago_ms) if owner else None
    return policy.Tick("eu-1", now, lease, 15, failure_threshold, 0, warmup_seconds)


class CheckTest(unittest.TestCase):
    def test_follows_the_lease(self):
        cases = [
            (tick(), ("active", "create")),
            (tick("eu-1", 15_000), ("active", "renew")),
            (tick("us-1", 45_000), ("passive", "none")),
            (tick("us-1", 45_001), ("active", "takeover")),
            (tick(policy.SKIP_LEASE_POD, 900_000), ("passive", "none")),
            (tick(warmup_seconds=2_000), ("passive", "none")),
        ]
        for t, want in cases:
            self.assertEqual(policy.check(t)[:2], want, t)

    def test_takes_the_hosts_keys_and_refuses_others(self):
        policy.check_settings('{"backend": "k8s-lease", "waitTimeInSeconds": 5}')
        with self.assertRaises(Invalid) as e:
            policy.check_settings('{"colour": 1}')
        self.assertEqual(e.exception.field, "settings")
        with self.assertRaises(Invalid) as e:
            policy.check(tick(failure_threshold=0))
        self.assertEqual(e.exception.field, "request")


if __name__ == "__main__":
    unittest.main()

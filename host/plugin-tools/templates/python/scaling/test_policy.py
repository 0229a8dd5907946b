"""Unit tests of policy.py: `PYTHONPATH=<wasmop>/plugins/sdk-python python3 -m unittest`."""

import unittest

import policy
from wasmop_plugin import Invalid


class VoteTest(unittest.TestCase):
    def test_votes_as_the_settings_say(self):
        self.assertEqual(policy.settings_vote("{}"), "up")
        self.assertEqual(policy.settings_vote('{"vote": "down"}'), "down")
        self.assertIn("shop/reviews", policy.reason("up", "cron", "shop/reviews"))

    def test_refuses_other_settings_with_their_field(self):
        for text, field in [('{"vote": "sideways"}', "settings.vote"), ('{"colour": 1}', "settings"), ("[]", "settings")]:
            with self.assertRaises(Invalid) as e:
                policy.settings_vote(text)
            self.assertEqual(e.exception.field, field, text)


if __name__ == "__main__":
    unittest.main()

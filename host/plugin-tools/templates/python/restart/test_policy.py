"""Unit tests of policy.py: `PYTHONPATH=<wasmop>/plugins/sdk-python python3 -m unittest`."""

import unittest

import policy
from wasmop_plugin import Invalid

PODS = '[{"metadata": {"name": "a", "namespace": "shop"}}, {"metadata": {"name": "b", "namespace": "shop"}}]'


class EvaluateTest(unittest.TestCase):
    def test_one_decision_per_pod_as_the_settings_say(self):
        keep = policy.evaluate(policy.settings_restart("{}"), PODS)
        self.assertEqual([r for r, _ in keep], [False, False])
        self.assertTrue(keep[0][1].startswith("shop/a: "), keep[0][1])
        every = policy.evaluate(policy.settings_restart('{"restart": true}'), PODS)
        self.assertEqual([r for r, _ in every], [True, True])
        self.assertEqual(policy.evaluate(True, "[]"), [])

    def test_refuses_what_it_cannot_read_with_the_field(self):
        with self.assertRaises(Invalid) as e:
            policy.evaluate(False, "{}")
        self.assertEqual(e.exception.field, "request.pods")
        for text, field in [('{"restart": "yes"}', "settings.restart"), ('{"colour": 1}', "settings")]:
            with self.assertRaises(Invalid) as e:
                policy.settings_restart(text)
            self.assertEqual(e.exception.field, field, text)


if __name__ == "__main__":
    unittest.main()

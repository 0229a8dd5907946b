"""Unit tests of policy.py: `PYTHONPATH=<wasmop>/plugins/sdk-python python3 -m unittest`."""

import json
import unittest

import policy
from wasmop_plugin import Invalid

JASON = {"headers": {"end-user": {"exact": "jason"}}, "sourceLabels": {}}


def request(http):
    vs = {"metadata": {"namespace": "shop"}, "spec": {"http": http}}
    return policy.Request(
        host="reviews",
        namespace="shop",
        subset="feature-x",
        default_version="shared",
        route_prefix="de-feature-x-",
        virtual_service=json.dumps(vs),
        matches=[JASON],
    )


class RouteTest(unittest.TestCase):
    def test_a_copy_of_the_default_route_goes_to_the_subset(self):
        default = {
            "name": "default",
            "match": [{"uri": {"prefix": "/"}}],
            "route": [{"destination": {"host": "reviews", "subset": "shared"}, "weight": 100}],
        }
        http = policy.route(request([default]))
        self.assertEqual(
            http,
            [
                {
                    "name": "de-feature-x-0",
                    "match": [{"uri": {"prefix": "/"}, "headers": {"end-user": {"exact": "jason"}}}],
                    "route": [{"destination": {"host": "reviews", "subset": "feature-x"}}],
                },
                default,
            ],
        )
        self.assertEqual(policy.route(request(http)), http, "its own output gives the same routes")

    def test_other_routes_stay_and_conflicting_entries_are_left_out(self):
        other = {"name": "v3", "route": [{"destination": {"host": "reviews", "subset": "v3"}}]}
        bob = {
            "name": "bob",
            "match": [{"headers": {"end-user": {"exact": "bob"}}}],
            "route": [{"destination": {"host": "reviews", "subset": "shared"}}],
        }
        self.assertEqual(policy.route(request([other, bob])), [other, bob])

    def test_errors_name_their_field(self):
        policy.check_settings("{}")
        with self.assertRaises(Invalid) as e:
            policy.check_settings('{"colour": 1}')
        self.assertEqual(e.exception.field, "settings")
        bad = request([])
        bad.virtual_service = "nope"
        with self.assertRaises(Invalid) as e:
            policy.route(bad)
        self.assertEqual(e.exception.field, "request.virtual-service")


if __name__ == "__main__":
    unittest.main()

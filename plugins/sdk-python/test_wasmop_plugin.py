"""Native tests of wasmop_plugin (python3 -m unittest), with stand-ins for the generated
bindings that a component build provides."""

import sys
import types as pytypes
import unittest
from dataclasses import dataclass
from datetime import timedelta

import wasmop_plugin as w


@dataclass
class FakePluginError:
    message: str
    field: object


class FakeErr(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


class PluginErrorsTest(unittest.TestCase):
    def setUp(self):
        runtime = pytypes.ModuleType("componentize_py_types")
        runtime.Err = FakeErr
        imports = pytypes.ModuleType("wit_world.imports")
        imports.types = pytypes.SimpleNamespace(PluginError=FakePluginError)
        self.saved = {k: sys.modules.get(k) for k in ("componentize_py_types", "wit_world", "wit_world.imports")}
        sys.modules.update({"componentize_py_types": runtime, "wit_world": pytypes.ModuleType("wit_world"),
                            "wit_world.imports": imports})

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v

    def test_invalid_becomes_the_plugin_error(self):
        @w.plugin_errors
        def vote(settings):
            w.parse_settings(settings, ["holidays"])
            return "ok"

        self.assertEqual(vote("{}"), "ok")
        with self.assertRaises(FakeErr) as caught:
            vote('{"colour": 1}')
        self.assertEqual(caught.exception.value.field, "settings")
        self.assertIn("unknown settings keys ['colour']", caught.exception.value.message)


class ParsingTest(unittest.TestCase):
    def test_json_object(self):
        self.assertEqual(w.json_object('{"a": 1}', "metadata", "request.metadata"), {"a": 1})
        for text in ("[]", "{", "null"):
            with self.assertRaises(w.Invalid) as caught:
                w.json_object(text, "metadata", "request.metadata")
            self.assertEqual(caught.exception.field, "request.metadata")

    def test_go_durations(self):
        self.assertEqual(w.parse_go_duration("24h", "f"), timedelta(hours=24))
        self.assertEqual(w.parse_go_duration("1h30m", "f"), timedelta(minutes=90))
        self.assertEqual(w.parse_go_duration("1.5h", "f"), timedelta(minutes=90))
        self.assertEqual(w.parse_go_duration("500ms", "f"), timedelta(milliseconds=500))
        for bad in ("", "5", "-1h", "0s", "1x", "1h 5m", "h", None):
            with self.assertRaises(w.Invalid) as caught:
                w.parse_go_duration(bad, "settings.maxAge")
            self.assertEqual(caught.exception.field, "settings.maxAge")

    def test_log_outside_a_component_and_bad_levels(self):
        w.log("debug", "natively this goes to stderr")
        with self.assertRaises(ValueError):
            w.log("loud", "x")


if __name__ == "__main__":
    unittest.main()

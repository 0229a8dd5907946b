"""Helpers for wasmop plugins written in Python (componentize-py).

The bindings come from the WIT itself: `componentize-py -d plugins/sdk/wit -w WORLD componentize
-p . -p plugins/sdk-python app -o plugin.wasm` generates the `wit_world` package at build time
(`componentize-py -d plugins/sdk/wit -w WORLD bindings DIR` writes it out for an editor). A
plugin subclasses `wit_world.WitWorld`; records are dataclasses with snake_case fields
(`request.elastic_service`), enums are `enum.Enum`s (`scaling.Vote.UP`), an `option` is a value
or None, and a `result`'s error is raised as `componentize_py_types.Err(...)`.

This module holds what plugins otherwise write by hand:

- `Invalid(message, field)`: raise it from anywhere in the plugin's logic for a setting or input
  it refuses; `field` is the dotted path (`settings.holidays[0]`).
- `@plugin_errors` on an export turns an `Invalid` into the `plugin-error` the world returns.
- `json_object`, `parse_settings`, `parse_go_duration`: parsing with `Invalid` errors.
- `log(level, message)`: the host's log import (stderr when not in a component, as in tests).

It imports the generated bindings only when it needs them, so a plugin's logic and this module
run natively too (`python3 -m unittest` in this directory).
"""

import functools
import json
import re
import sys
from datetime import timedelta

__all__ = ["Invalid", "json_object", "parse_settings", "parse_go_duration", "plugin_errors", "log"]


class Invalid(Exception):
    """A setting or input the plugin refuses: `message` says what to change, `field` is the
    offending value's dotted path (or None)."""

    def __init__(self, message: str, field=None):
        super().__init__(message)
        self.message = message
        self.field = field


def json_object(text: str, what: str, field: str) -> dict:
    """Parses `text` as a JSON object; raises Invalid at `field` (naming it `what`) otherwise."""
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise Invalid(f"{what} is not valid JSON: {e}", field)
    if not isinstance(obj, dict):
        raise Invalid(f"{what} must be a JSON object", field)
    return obj


def parse_settings(text: str, keys) -> dict:
    """Parses the settings JSON object; raises Invalid at `settings` for a key not in `keys`."""
    obj = json_object(text, "settings", "settings")
    unknown = sorted(set(obj) - set(keys))
    if unknown:
        raise Invalid(f"unknown settings keys {unknown}; the keys are {', '.join(sorted(keys))}", "settings")
    return obj


_GO_TERM = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s|us|µs|ns)")
_GO_UNIT_SECONDS = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_go_duration(text, field: str) -> timedelta:
    """Parses a positive Go duration (`24h`, `1h30m`, `1.5h`, `500ms`) into a timedelta;
    raises Invalid at `field` for anything else (a sign, `0`, another unit)."""
    total, pos = 0.0, 0
    if isinstance(text, str):
        for m in _GO_TERM.finditer(text):
            if m.start() != pos:
                break
            total += float(m.group(1)) * _GO_UNIT_SECONDS[m.group(2)]
            pos = m.end()
    if not isinstance(text, str) or not text or pos != len(text) or total <= 0:
        raise Invalid(f"{text!r} is not a positive Go duration such as 8h, 90m or 1h30m", field)
    return timedelta(seconds=total)


def plugin_errors(method):
    """Decorates an export of the plugin's WitWorld: an Invalid it raises becomes the
    `Err(types.PluginError(message, field))` of the world's result."""

    @functools.wraps(method)
    def export(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except Invalid as e:
            from componentize_py_types import Err
            from wit_world.imports import types

            raise Err(types.PluginError(message=e.message, field=e.field))

    return export


_LEVELS = ("trace", "debug", "info", "warn", "error")


def log(level: str, message: str) -> None:
    """Writes `message` to the operator's log at `level` (trace, debug, info, warn, error)
    through the host's log import; outside a component, to stderr as `[level] message`."""
    if level not in _LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(_LEVELS)}")
    try:
        from wit_world.imports import log as host
    except ImportError:
        print(f"[{level}] {message}", file=sys.stderr)
        return
    host.log(getattr(host.Level, level.upper()), message)

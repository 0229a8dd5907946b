"""Example `scaling` plugin in Python: a time-of-day scaler.

A trigger of type `schedule` votes `up` while the local time is inside one of its windows and
`down` outside them, so an ElasticService stays warm during office hours and scales to zero at
night, at weekends and on the holidays listed in the settings.

Trigger metadata (from the ElasticService's `spec.triggers[].metadata`):

    {"windows": ["Mon-Fri 08:00-18:00", "Sat 10:00-14:00"], "utcOffset": "+01:00"}

- a window is `DAYS HH:MM-HH:MM`; DAYS is `daily`, a day (`Mon`), a range (`Mon-Fri`) or a
  comma list (`Mon,Wed,Fri`); an end at or before the start runs past midnight into the next
  day (`Fri 22:00-02:00` covers Friday night);
- `utcOffset` (optional) is the fixed offset of local time, `+HH:MM` or `-HH:MM`; without it
  the settings' `utcOffset` applies, else UTC.

Settings (all optional): `{"utcOffset": "+00:00", "holidays": ["2026-12-25"]}`: on a holiday
(local date) every window is closed.

Built with componentize-py (see README.md); the bindings module `wit_world` is generated from
plugins/sdk/wit/plugin.wit at build time, and `wasmop_plugin` is the SDK's helper module
(plugins/sdk-python).
"""

import re
from datetime import date, datetime, timedelta, timezone

import wit_world
from wasmop_plugin import Invalid, json_object, log, parse_settings, plugin_errors
from wit_world.imports import scaling, types

DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
WINDOW = re.compile(r"^\s*(\S+)\s+(\d{2}):(\d{2})-(\d{2}):(\d{2})\s*$")
OFFSET = re.compile(r"^([+-])(\d{2}):(\d{2})$")


def parse_offset(text, field):
    m = OFFSET.match(text) if isinstance(text, str) else None
    if not m or int(m.group(2)) > 14 or int(m.group(3)) > 59:
        raise Invalid(f"{text!r} is not a UTC offset like +01:00 or -05:30", field)
    minutes = int(m.group(2)) * 60 + int(m.group(3))
    return timezone(timedelta(minutes=-minutes if m.group(1) == "-" else minutes))


def parse_days(text, field):
    text = text.lower()
    if text in ("daily", "*"):
        return set(range(7))
    days = set()
    for part in text.split(","):
        ends = part.split("-")
        if len(ends) > 2 or any(e not in DAYS for e in ends):
            raise Invalid(f"{part!r} is not a day (Mon..Sun), a range (Mon-Fri) or 'daily'", field)
        first, last = DAYS.index(ends[0]), DAYS.index(ends[-1])
        days.update((first + i) % 7 for i in range((last - first) % 7 + 1))
    return days


def parse_window(text, field):
    m = WINDOW.match(text) if isinstance(text, str) else None
    if not m:
        raise Invalid(f"{text!r} is not a window like 'Mon-Fri 08:00-18:00'", field)
    start_h, start_m, end_h, end_m = (int(g) for g in m.groups()[1:])
    if start_h > 23 or end_h > 24 or start_m > 59 or end_m > 59 or (end_h == 24 and end_m):
        raise Invalid(f"{text!r} has a time outside 00:00-24:00", field)
    return parse_days(m.group(1), field), start_h * 60 + start_m, end_h * 60 + end_m


def in_window(window, local: datetime) -> bool:
    days, start, end = window
    minute = local.hour * 60 + local.minute
    today, yesterday = local.weekday(), (local.weekday() - 1) % 7
    if start < end:
        return today in days and start <= minute < end
    # Past midnight: the evening part belongs to today, the morning part to yesterday.
    return (today in days and minute >= start) or (yesterday in days and minute < end)


class Settings:
    def __init__(self, text: str):
        obj = parse_settings(text, ["utcOffset", "holidays"])
        self.tz = parse_offset(obj.get("utcOffset", "+00:00"), "settings.utcOffset")
        holidays = obj.get("holidays", [])
        if not isinstance(holidays, list):
            raise Invalid("holidays must be a list of dates (YYYY-MM-DD)", "settings.holidays")
        self.holidays = set()
        for i, h in enumerate(holidays):
            try:
                self.holidays.add(date.fromisoformat(h))
            except (TypeError, ValueError):
                raise Invalid(f"{h!r} is not a date like 2026-12-25", f"settings.holidays[{i}]")


def decide(settings: Settings, metadata_json: str, now_ms: int):
    """(vote, reason) for one `schedule` trigger at `now_ms` (Unix ms)."""
    meta = json_object(metadata_json, "trigger metadata", "request.metadata")
    windows = meta.get("windows")
    if not isinstance(windows, list) or not windows:
        raise Invalid("metadata.windows must be a non-empty list such as ['Mon-Fri 08:00-18:00']", "request.metadata.windows")
    parsed = [parse_window(w, f"request.metadata.windows[{i}]") for i, w in enumerate(windows)]
    tz = parse_offset(meta["utcOffset"], "request.metadata.utcOffset") if "utcOffset" in meta else settings.tz
    local = datetime.fromtimestamp(now_ms / 1000, tz)
    stamp = local.strftime("%a %Y-%m-%d %H:%M") + f" (UTC{local.strftime('%z')})"
    if local.date() in settings.holidays:
        return scaling.Vote.DOWN, f"{stamp} is a holiday: every window is closed"
    for text, window in zip(windows, parsed):
        if in_window(window, local):
            return scaling.Vote.UP, f"{stamp} is inside {text.strip()}"
    return scaling.Vote.DOWN, f"{stamp} is outside {', '.join(w.strip() for w in windows)}"


class WitWorld(wit_world.WitWorld):
    def info(self) -> types.PluginInfo:
        return types.PluginInfo(name="schedule-scaler", version="0.1.0", hook=types.Hook.SCALING)

    @plugin_errors
    def validate_settings(self, settings: str) -> None:
        Settings(settings)

    @plugin_errors
    def vote(self, settings: str, request: scaling.TriggerRequest) -> scaling.TriggerVote:
        if request.trigger_type != "schedule":
            raise Invalid(
                f"trigger type {request.trigger_type!r} is not handled; this plugin handles 'schedule'",
                "request.trigger-type")
        vote, reason = decide(Settings(settings), request.metadata, request.now)
        log("debug", f"{request.elastic_service}: {vote.name.lower()}: {reason}")
        return scaling.TriggerVote(vote=vote, value=None, reason=reason)

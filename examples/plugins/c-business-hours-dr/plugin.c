// Example `dr` plugin in C: a follow-the-sun state checker.
//
// Inside this site's business hours it runs the lease state machine of the default `dr-lease`
// plugin (Admiral's state checker): create an absent lease, renew its own, take over one not
// renewed for failureThreshold x waitTimeInSeconds, stay passive during warm-up and while the
// owner is SKIP-LEASE-POD. Outside business hours it stays passive and does not renew, so its
// lease expires and a site whose business hours have begun takes over.
//
// Settings (all optional): {"utcOffsetMinutes": 60, "startHour": 8, "endHour": 18,
// "weekdaysOnly": true}. Business hours are [startHour, endHour) local time, where local time is
// UTC plus utcOffsetMinutes; with weekdaysOnly, Saturday and Sunday are outside them. The entry's
// settings also carry the host's DR keys (backend, waitTimeInSeconds, ..., see docs/dr.md); they
// are the host's to check and are skipped here.
//
// Bindings: `wit-bindgen c plugins/sdk/wit --world state-checker` (state_checker.h). Strings
// returned to the host are malloc'd: the generated post-return functions free them.

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "state_checker.h"

#define SKIP_LEASE_POD "SKIP-LEASE-POD"

typedef struct {
  long utc_offset_minutes;
  long start_hour;
  long end_hour;
  bool weekdays_only;
} settings_t;

static void set_error(state_checker_plugin_error_t *err, const char *message, const char *field) {
  state_checker_string_dup(&err->message, message);
  err->field.is_some = field != NULL;
  if (field != NULL) {
    state_checker_string_dup(&err->field.val, field);
  }
}

static void log_line(wasmop_plugin_log_level_t level, const char *message) {
  state_checker_string_t s;
  state_checker_string_set(&s, message);
  wasmop_plugin_log_log(level, &s);
}

// A tiny parser for the flat settings object: string keys, integer or boolean values.
typedef struct {
  const uint8_t *p;
  const uint8_t *end;
} cursor_t;

static void skip_ws(cursor_t *c) {
  while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) {
    c->p++;
  }
}

static bool eat(cursor_t *c, char ch) {
  skip_ws(c);
  if (c->p < c->end && *c->p == (uint8_t)ch) {
    c->p++;
    return true;
  }
  return false;
}

// Reads a string without escapes into buf (NUL-terminated); false if malformed or too long.
static bool read_key(cursor_t *c, char *buf, size_t cap) {
  size_t n = 0;
  if (!eat(c, '"')) {
    return false;
  }
  while (c->p < c->end && *c->p != '"') {
    if (*c->p == '\\' || n + 1 >= cap) {
      return false;
    }
    buf[n++] = (char)*c->p++;
  }
  buf[n] = 0;
  return eat(c, '"');
}

// Skips one JSON value of any type (strings with escapes, nested objects and arrays).
static bool skip_value(cursor_t *c) {
  int depth = 0;
  skip_ws(c);
  do {
    if (c->p >= c->end) {
      return false;
    }
    uint8_t ch = *c->p++;
    if (ch == '"') {
      while (c->p < c->end && *c->p != '"') {
        c->p += (*c->p == '\\') ? 2 : 1;
      }
      if (c->p >= c->end) {
        return false;
      }
      c->p++;
    } else if (ch == '{' || ch == '[') {
      depth++;
    } else if (ch == '}' || ch == ']') {
      depth--;
    } else if (depth == 0) {
      // A number, true, false or null: up to the next delimiter.
      while (c->p < c->end && *c->p != ',' && *c->p != '}' && *c->p != ']' && *c->p != ' ' &&
             *c->p != '\n' && *c->p != '\r' && *c->p != '\t') {
        c->p++;
      }
    }
  } while (depth > 0);
  return depth == 0;
}

// The keys of the host's DR settings (docs/dr.md), passed to the plugin with its own.
static bool is_host_key(const char *key) {
  static const char *keys[] = {"backend", "leaseName", "waitTimeInSeconds", "failureThreshold",
                               "warmupSeconds", "podIdentifier", "dynamoDB"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    if (strcmp(key, keys[i]) == 0) {
      return true;
    }
  }
  return false;
}

static bool read_int(cursor_t *c, long *out) {
  bool neg = false;
  long v = 0;
  int digits = 0;
  skip_ws(c);
  if (c->p < c->end && *c->p == '-') {
    neg = true;
    c->p++;
  }
  while (c->p < c->end && *c->p >= '0' && *c->p <= '9' && digits < 9) {
    v = v * 10 + (*c->p++ - '0');
    digits++;
  }
  if (digits == 0 || (c->p < c->end && ((*c->p >= '0' && *c->p <= '9') || *c->p == '.' || *c->p == 'e' || *c->p == 'E'))) {
    return false;
  }
  *out = neg ? -v : v;
  return true;
}

static bool read_bool(cursor_t *c, bool *out) {
  skip_ws(c);
  if ((size_t)(c->end - c->p) >= 4 && memcmp(c->p, "true", 4) == 0) {
    c->p += 4;
    *out = true;
    return true;
  }
  if ((size_t)(c->end - c->p) >= 5 && memcmp(c->p, "false", 5) == 0) {
    c->p += 5;
    *out = false;
    return true;
  }
  return false;
}

// Parses settings; on failure fills err and returns false.
static bool parse_settings(const state_checker_string_t *json, settings_t *s, state_checker_plugin_error_t *err) {
  cursor_t c = {json->ptr, json->ptr + json->len};
  char key[32];
  s->utc_offset_minutes = 0;
  s->start_hour = 8;
  s->end_hour = 18;
  s->weekdays_only = true;
  if (!eat(&c, '{')) {
    set_error(err, "settings must be a JSON object", "settings");
    return false;
  }
  if (!eat(&c, '}')) {
    do {
      if (!read_key(&c, key, sizeof key) || !eat(&c, ':')) {
        set_error(err, "settings must be a flat JSON object of numbers and booleans", "settings");
        return false;
      }
      if (strcmp(key, "utcOffsetMinutes") == 0) {
        if (!read_int(&c, &s->utc_offset_minutes) || s->utc_offset_minutes < -720 || s->utc_offset_minutes > 840) {
          set_error(err, "utcOffsetMinutes must be an integer from -720 to 840", "settings.utcOffsetMinutes");
          return false;
        }
      } else if (strcmp(key, "startHour") == 0) {
        if (!read_int(&c, &s->start_hour) || s->start_hour < 0 || s->start_hour > 23) {
          set_error(err, "startHour must be an integer from 0 to 23", "settings.startHour");
          return false;
        }
      } else if (strcmp(key, "endHour") == 0) {
        if (!read_int(&c, &s->end_hour) || s->end_hour < 1 || s->end_hour > 24) {
          set_error(err, "endHour must be an integer from 1 to 24", "settings.endHour");
          return false;
        }
      } else if (strcmp(key, "weekdaysOnly") == 0) {
        if (!read_bool(&c, &s->weekdays_only)) {
          set_error(err, "weekdaysOnly must be true or false", "settings.weekdaysOnly");
          return false;
        }
      } else if (is_host_key(key)) {
        if (!skip_value(&c)) {
          set_error(err, "settings must be valid JSON", "settings");
          return false;
        }
      } else {
        char msg[160];
        snprintf(msg, sizeof msg,
                 "unknown settings key \"%s\"; the keys are utcOffsetMinutes, startHour, endHour, weekdaysOnly "
                 "and the host's DR keys", key);
        set_error(err, msg, "settings");
        return false;
      }
    } while (eat(&c, ','));
    if (!eat(&c, '}')) {
      set_error(err, "settings must be a flat JSON object of numbers and booleans", "settings");
      return false;
    }
  }
  skip_ws(&c);
  if (c.p != c.end) {
    set_error(err, "unexpected text after the settings object", "settings");
    return false;
  }
  if (s->start_hour >= s->end_hour) {
    set_error(err, "startHour must be before endHour", "settings.endHour");
    return false;
  }
  return true;
}

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// Whether `now_ms` (Unix ms) is within business hours; describes the window in `window`.
static bool in_business_hours(const settings_t *s, int64_t now_ms, char *window, size_t cap) {
  static const char *days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  int64_t local_min = floor_div(now_ms, 60000) + s->utc_offset_minutes;
  int64_t day = floor_div(local_min, 1440);
  int64_t minute_of_day = local_min - day * 1440;
  int weekday = (int)(((day + 4) % 7 + 7) % 7);  // 1970-01-01 was a Thursday
  bool workday = !s->weekdays_only || (weekday != 0 && weekday != 6);
  bool in_hours = minute_of_day >= s->start_hour * 60 && minute_of_day < s->end_hour * 60;
  long offset = s->utc_offset_minutes < 0 ? -s->utc_offset_minutes : s->utc_offset_minutes;
  snprintf(window, cap, "%02ld:00-%02ld:00%s UTC%c%02ld:%02ld, now %s %02d:%02d", s->start_hour, s->end_hour,
           s->weekdays_only ? " Mon-Fri" : "", s->utc_offset_minutes < 0 ? '-' : '+', offset / 60, offset % 60,
           days[weekday], (int)(minute_of_day / 60), (int)(minute_of_day % 60));
  return workday && in_hours;
}

static void decide(state_checker_state_decision_t *ret, wasmop_plugin_dr_state_t state, wasmop_plugin_dr_action_t action,
                   const char *reason) {
  ret->state = state;
  ret->action = action;
  state_checker_string_dup(&ret->reason, reason);
  log_line(WASMOP_PLUGIN_LOG_LEVEL_DEBUG, reason);
}

static bool is(const state_checker_string_t *s, const char *text) {
  size_t n = strlen(text);
  return s->len == n && memcmp(s->ptr, text, n) == 0;
}

void exports_state_checker_info(state_checker_plugin_info_t *ret) {
  state_checker_string_dup(&ret->name, "business-hours-dr");
  state_checker_string_dup(&ret->version, "0.1.0");
  ret->hook = WASMOP_PLUGIN_TYPES_HOOK_DR;
}

bool exports_state_checker_validate_settings(state_checker_string_t *settings, state_checker_plugin_error_t *err) {
  settings_t s;
  bool ok = parse_settings(settings, &s, err);
  state_checker_string_free(settings);
  return ok;
}

bool exports_state_checker_check(state_checker_string_t *settings, state_checker_state_request_t *req,
                                 state_checker_state_decision_t *ret, state_checker_plugin_error_t *err) {
  settings_t s;
  char window[96], reason[256];
  bool ok = parse_settings(settings, &s, err);
  state_checker_string_free(settings);
  if (ok && (req->wait_time_seconds == 0 || req->failure_threshold == 0)) {
    set_error(err, "waitTimeInSeconds and failureThreshold must be at least 1", "request");
    ok = false;
  }
  if (!ok) {
    state_checker_state_request_free(req);
    return false;
  }
  bool open = in_business_hours(&s, req->now, window, sizeof window);
  bool warming = req->now - req->started_at < (int64_t)req->warmup_seconds * 1000;
  int64_t expiry_ms = (int64_t)req->failure_threshold * req->wait_time_seconds * 1000;
  wasmop_plugin_dr_option_lease_record_t *lease = &req->lease;
  if (!open) {
    snprintf(reason, sizeof reason, "outside business hours (%s): passive, not renewing", window);
    decide(ret, WASMOP_PLUGIN_DR_STATE_PASSIVE, WASMOP_PLUGIN_DR_ACTION_NONE, reason);
  } else if (lease->is_some && is(&lease->val.owner, SKIP_LEASE_POD)) {
    decide(ret, WASMOP_PLUGIN_DR_STATE_PASSIVE, WASMOP_PLUGIN_DR_ACTION_NONE,
           "lease owner is SKIP-LEASE-POD: every instance stays passive");
  } else if (warming) {
    snprintf(reason, sizeof reason, "warming up for %u s: passive", req->warmup_seconds);
    decide(ret, WASMOP_PLUGIN_DR_STATE_PASSIVE, WASMOP_PLUGIN_DR_ACTION_NONE, reason);
  } else if (!lease->is_some) {
    snprintf(reason, sizeof reason, "no lease and inside business hours (%s): creating it", window);
    decide(ret, WASMOP_PLUGIN_DR_STATE_ACTIVE, WASMOP_PLUGIN_DR_ACTION_CREATE, reason);
  } else if (lease->val.owner.len == 0) {
    decide(ret, WASMOP_PLUGIN_DR_STATE_ACTIVE, WASMOP_PLUGIN_DR_ACTION_TAKEOVER, "the lease has no owner: taking it over");
  } else if (lease->val.owner.len == req->identity.len &&
             memcmp(lease->val.owner.ptr, req->identity.ptr, req->identity.len) == 0) {
    snprintf(reason, sizeof reason, "holding the lease inside business hours (%s): renewing", window);
    decide(ret, WASMOP_PLUGIN_DR_STATE_ACTIVE, WASMOP_PLUGIN_DR_ACTION_RENEW, reason);
  } else if (req->now - lease->val.updated_time > expiry_ms) {
    snprintf(reason, sizeof reason, "lease of %.*s not renewed for %lld ms (limit %lld): taking over",
             (int)lease->val.owner.len, (const char *)lease->val.owner.ptr,
             (long long)(req->now - lease->val.updated_time), (long long)expiry_ms);
    decide(ret, WASMOP_PLUGIN_DR_STATE_ACTIVE, WASMOP_PLUGIN_DR_ACTION_TAKEOVER, reason);
  } else {
    snprintf(reason, sizeof reason, "lease held by %.*s: passive", (int)lease->val.owner.len,
             (const char *)lease->val.owner.ptr);
    decide(ret, WASMOP_PLUGIN_DR_STATE_PASSIVE, WASMOP_PLUGIN_DR_ACTION_NONE, reason);
  }
  state_checker_state_request_free(req);
  return true;
}

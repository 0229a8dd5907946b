// json.h: a small JSON reader and writer for the plugin, enough for its settings, a page of
// Pods and a VirtualService; replace it with the library of your choice.
//
// Reading works on spans of the text (json_t): json_parse checks a whole document once, after
// which json_next walks an object's members or an array's items and json_get finds a member,
// without allocating; strings are decoded only when asked (json_strdup, json_streq). Values the
// plugin does not look into stay raw text, which json_out_raw copies as they came. The writer
// (json_out_t) grows a malloc'd buffer, the string the host frees after the call.
#ifndef PLUGIN_JSON_H
#define PLUGIN_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// The raw text of one JSON value.
typedef struct {
  const char *p;
  size_t n;
} json_t;

// Nesting deeper than this is refused.
#define JSON_MAX_DEPTH 64

static inline const char *json_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

static inline bool json_hex4(const char *p, const char *end, uint32_t *out) {
  uint32_t v = 0;
  if (end - p < 4) return false;
  for (int i = 0; i < 4; i++) {
    char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
    else return false;
  }
  *out = v;
  return true;
}

// The end of the string token at p (at its opening quote), or NULL when it is malformed.
static inline const char *json_skip_string(const char *p, const char *end) {
  uint32_t u;
  for (p++; p < end; p++) {
    unsigned char c = (unsigned char)*p;
    if (c == '"') return p + 1;
    if (c < 0x20) return NULL;
    if (c == '\\') {
      if (++p >= end) return NULL;
      if (*p == 'u') {
        if (!json_hex4(p + 1, end, &u)) return NULL;
        p += 4;
      } else if (!strchr("\"\\/bfnrt", *p)) {
        return NULL;
      }
    }
  }
  return NULL;
}

static inline const char *json_skip_digits(const char *p, const char *end) {
  const char *start = p;
  while (p < end && *p >= '0' && *p <= '9') p++;
  return p > start ? p : NULL;
}

// The end of the value at p (after whitespace), or NULL when it is malformed.
static inline const char *json_skip(const char *p, const char *end, int depth) {
  p = json_ws(p, end);
  if (p >= end || depth > JSON_MAX_DEPTH) return NULL;
  switch (*p) {
  case '"':
    return json_skip_string(p, end);
  case '{':
  case '[': {
    char close = *p == '{' ? '}' : ']';
    p = json_ws(p + 1, end);
    if (p < end && *p == close) return p + 1;
    for (;;) {
      if (close == '}') {
        if (p >= end || *p != '"' || !(p = json_skip_string(p, end))) return NULL;
        p = json_ws(p, end);
        if (p >= end || *p++ != ':') return NULL;
      }
      if (!(p = json_skip(p, end, depth + 1))) return NULL;
      p = json_ws(p, end);
      if (p >= end) return NULL;
      if (*p == close) return p + 1;
      if (*p++ != ',') return NULL;
      p = json_ws(p, end);
    }
  }
  case 't':
    return end - p >= 4 && memcmp(p, "true", 4) == 0 ? p + 4 : NULL;
  case 'f':
    return end - p >= 5 && memcmp(p, "false", 5) == 0 ? p + 5 : NULL;
  case 'n':
    return end - p >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
  default:
    if (*p == '-') p++;
    if (p < end && *p == '0') p++;
    else if (!(p = json_skip_digits(p, end))) return NULL;
    if (p < end && *p == '.' && !(p = json_skip_digits(p + 1, end))) return NULL;
    if (p < end && (*p == 'e' || *p == 'E')) {
      p++;
      if (p < end && (*p == '+' || *p == '-')) p++;
      if (!(p = json_skip_digits(p, end))) return NULL;
    }
    return p;
  }
}

// Whether text[0..n) is one JSON value (with whitespace around it); *out is that value.
static inline bool json_parse(const void *text, size_t n, json_t *out) {
  const char *p = text, *end = p + n;
  const char *start = json_ws(p, end), *stop = json_skip(start, end, 0);
  if (!stop || json_ws(stop, end) != end) return false;
  out->p = start;
  out->n = (size_t)(stop - start);
  return true;
}

// The first character of a value: '{', '[', '"', 't', 'f', 'n', or '-' or a digit (a number).
static inline char json_kind(json_t v) { return v.n > 0 ? v.p[0] : 0; }

// A cursor over the members of an object or the items of an array.
typedef struct {
  const char *p;
  const char *end;
  bool object;
} json_iter_t;

// A cursor over v, an object or an array that json_parse checked.
static inline json_iter_t json_items(json_t v) {
  json_iter_t it = {v.p + 1, v.p + v.n - 1, json_kind(v) == '{'};
  return it;
}

// The next member (*key its string token, *value its value) or item (*value; key may be NULL):
// false at the end.
static inline bool json_next(json_iter_t *it, json_t *key, json_t *value) {
  const char *p = json_ws(it->p, it->end);
  if (p < it->end && *p == ',') p = json_ws(p + 1, it->end);
  if (p >= it->end) return false;
  if (it->object) {
    const char *k = p;
    p = json_skip_string(p, it->end);
    if (key) {
      key->p = k;
      key->n = (size_t)(p - k);
    }
    p = json_ws(p, it->end) + 1; // the ':'
  }
  p = json_ws(p, it->end);
  const char *stop = json_skip(p, it->end, 0);
  value->p = p;
  value->n = (size_t)(stop - p);
  it->p = stop;
  return true;
}

// Decodes the string token s into buf (at least s.n bytes): the length written.
static inline size_t json_decode(json_t s, char *buf) {
  const char *p = s.p + 1, *end = s.p + s.n - 1;
  size_t n = 0;
  while (p < end) {
    if (*p != '\\') {
      buf[n++] = *p++;
      continue;
    }
    p++;
    char c = *p++;
    uint32_t u = 0, lo;
    switch (c) {
    case 'b': buf[n++] = '\b'; continue;
    case 'f': buf[n++] = '\f'; continue;
    case 'n': buf[n++] = '\n'; continue;
    case 'r': buf[n++] = '\r'; continue;
    case 't': buf[n++] = '\t'; continue;
    case 'u': break;
    default: buf[n++] = c; continue;
    }
    json_hex4(p, end, &u);
    p += 4;
    if (u >= 0xD800 && u < 0xDC00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u' && json_hex4(p + 2, end, &lo) &&
        lo >= 0xDC00 && lo < 0xE000) {
      u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
      p += 6;
    }
    // UTF-8; an escape takes at least 6 bytes of the token, its encoding at most 4.
    if (u < 0x80) {
      buf[n++] = (char)u;
    } else if (u < 0x800) {
      buf[n++] = (char)(0xC0 | (u >> 6));
      buf[n++] = (char)(0x80 | (u & 0x3F));
    } else if (u < 0x10000) {
      buf[n++] = (char)(0xE0 | (u >> 12));
      buf[n++] = (char)(0x80 | ((u >> 6) & 0x3F));
      buf[n++] = (char)(0x80 | (u & 0x3F));
    } else {
      buf[n++] = (char)(0xF0 | (u >> 18));
      buf[n++] = (char)(0x80 | ((u >> 12) & 0x3F));
      buf[n++] = (char)(0x80 | ((u >> 6) & 0x3F));
      buf[n++] = (char)(0x80 | (u & 0x3F));
    }
  }
  return n;
}

// The decoded string s as a malloc'd, NUL-terminated string, or NULL when s is not a string.
static inline char *json_strdup(json_t s) {
  if (json_kind(s) != '"') return NULL;
  char *buf = malloc(s.n);
  if (!buf) abort();
  buf[json_decode(s, buf)] = 0;
  return buf;
}

// Whether s is a string that decodes to text[0..n).
static inline bool json_streq(json_t s, const void *text, size_t n) {
  if (json_kind(s) != '"') return false;
  if (s.n == n + 2 && memchr(s.p, '\\', s.n) == NULL) return memcmp(s.p + 1, text, n) == 0;
  char *d = json_strdup(s);
  bool eq = strlen(d) == n && memcmp(d, text, n) == 0;
  free(d);
  return eq;
}

// The member `name` of the object v into *out: false when v is not an object or has none.
static inline bool json_get(json_t v, const char *name, json_t *out) {
  json_t key, value;
  if (json_kind(v) != '{') return false;
  json_iter_t it = json_items(v);
  while (json_next(&it, &key, &value)) {
    if (json_streq(key, name, strlen(name))) {
      *out = value;
      return true;
    }
  }
  return false;
}

// A growing output buffer; its text is malloc'd (NUL-terminated, the NUL not counted).
typedef struct {
  char *buf;
  size_t len;
  size_t cap;
} json_out_t;

static inline void json_out_add(json_out_t *o, const void *s, size_t n) {
  if (o->len + n + 1 > o->cap) {
    o->cap = (o->len + n + 1) * 2;
    o->buf = realloc(o->buf, o->cap);
    if (!o->buf) abort();
  }
  memcpy(o->buf + o->len, s, n);
  o->len += n;
  o->buf[o->len] = 0;
}

// Appends text as it is (JSON punctuation, a number).
static inline void json_out_text(json_out_t *o, const char *text) { json_out_add(o, text, strlen(text)); }

// Appends a value as it came.
static inline void json_out_raw(json_out_t *o, json_t v) { json_out_add(o, v.p, v.n); }

// Appends s[0..n) as a JSON string.
static inline void json_out_string(json_out_t *o, const void *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = s;
  json_out_add(o, "\"", 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = p[i];
    if (c == '"' || c == '\\') {
      char esc[2] = {'\\', (char)c};
      json_out_add(o, esc, 2);
    } else if (c < 0x20) {
      char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
      json_out_add(o, esc, 6);
    } else {
      json_out_add(o, &p[i], 1);
    }
  }
  json_out_add(o, "\"", 1);
}

#endif

/* json.c: the JSON that checkpoint.c writes and reads (safetensors headers): a growing
 * text buffer with string escaping, and a reader of strings (escapes and \u surrogate
 * pairs decoded to UTF-8, at most FLOWC_JSON_MAX_STRING bytes) and arrays of non-negative
 * integers, which keeps the first syntax error. See flowc_rt.h. */
#include "flowc_rt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define text flowc_text
#define reader flowc_json
#define put FLOWC_RT(json_put)
#define puts_ FLOWC_RT(json_puts)
#define put_string FLOWC_RT(json_put_string)
#define ws FLOWC_RT(json_ws)
#define syntax FLOWC_RT(json_syntax)
#define eat FLOWC_RT(json_eat)
#define string FLOWC_RT(json_string)
#define integers FLOWC_RT(json_integers)
#define MAX_NAME FLOWC_JSON_MAX_STRING

/* ---- writing --------------------------------------------------------------------------- */
void put(text *t, const char *s, size_t n) {
  if (t->failed) return;
  if (t->used + n + 1 > t->size) {
    size_t size = (t->size + n + 1) * 2;
    char *data = realloc(t->data, size);
    if (!data) {
      t->failed = 1;
      return;
    }
    t->data = data;
    t->size = size;
  }
  memcpy(t->data + t->used, s, n);
  t->used += n;
  t->data[t->used] = 0;
}

void puts_(text *t, const char *s) { put(t, s, strlen(s)); }

/* A JSON string literal of s (UTF-8 bytes pass through; quotes, backslashes and control
 * characters are escaped). */
void put_string(text *t, const char *s) {
  put(t, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    char esc[8];
    if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = (char)c;
      put(t, esc, 2);
    } else if (c < 0x20) {
      snprintf(esc, sizeof esc, "\\u%04x", c);
      put(t, esc, 6);
    } else {
      put(t, s, 1);
    }
  }
  put(t, "\"", 1);
}


/* ---- reading --------------------------------------------------------------------------- */
void ws(reader *r) {
  while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
    r->p++;
}

int syntax(reader *r, const char *what) {
  if (!r->error) r->error = what;
  return 0;
}

int eat(reader *r, char c) {
  ws(r);
  if (r->p < r->end && *r->p == c) {
    r->p++;
    return 1;
  }
  return 0;
}

static int hex4(reader *r, unsigned *out) {
  *out = 0;
  for (int k = 0; k < 4; k++, r->p++) {
    if (r->p >= r->end) return 0;
    char c = *r->p;
    unsigned v = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                 : (c | 32) >= 'a' && (c | 32) <= 'f' ? (unsigned)((c | 32) - 'a' + 10) : 16;
    if (v > 15) return 0;
    *out = *out * 16 + v;
  }
  return 1;
}

/* A JSON string into out (UTF-8, NUL-terminated, at most MAX_NAME bytes). */
int string(reader *r, char *out) {
  size_t n = 0;
  if (!eat(r, '"')) return syntax(r, "expected a string");
  while (r->p < r->end && *r->p != '"') {
    unsigned c = (unsigned char)*r->p++;
    if (c == '\\') {
      if (r->p >= r->end) break;
      char e = *r->p++;
      const char *simple = strchr("\"\\/bfnrt", e);
      if (e && simple) {
        c = (unsigned char)"\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
      } else if (e == 'u') {
        if (!hex4(r, &c)) return syntax(r, "a bad \\u escape");
        if (c >= 0xD800 && c < 0xDC00) { /* a surrogate pair */
          unsigned lo;
          if (r->p + 2 > r->end || r->p[0] != '\\' || r->p[1] != 'u') return syntax(r, "a lone surrogate");
          r->p += 2;
          if (!hex4(r, &lo) || lo < 0xDC00 || lo > 0xDFFF) return syntax(r, "a lone surrogate");
          c = 0x10000 + ((c - 0xD800) << 10) + (lo - 0xDC00);
        }
        char utf8[4];
        int len = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
        if (len == 1) utf8[0] = (char)c;
        else {
          for (int k = len - 1; k > 0; k--, c >>= 6) utf8[k] = (char)(0x80 | (c & 0x3F));
          utf8[0] = (char)((len == 2 ? 0xC0 : len == 3 ? 0xE0 : 0xF0) | c);
        }
        if (n + (size_t)len > MAX_NAME) return syntax(r, "a string too long");
        memcpy(out + n, utf8, (size_t)len);
        n += (size_t)len;
        continue;
      } else {
        return syntax(r, "a bad escape");
      }
    } else if (c < 0x20) {
      return syntax(r, "a control character in a string");
    }
    if (n + 1 > MAX_NAME) return syntax(r, "a string too long");
    out[n++] = (char)c;
  }
  if (r->p >= r->end) return syntax(r, "an unterminated string");
  r->p++;
  out[n] = 0;
  return 1;
}

static int integer(reader *r, uint64_t *out) {
  ws(r);
  const char *start = r->p;
  uint64_t v = 0;
  while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
    if (v > (UINT64_MAX - 9) / 10) return syntax(r, "a number too large");
    v = v * 10 + (uint64_t)(*r->p++ - '0');
  }
  if (r->p == start) return syntax(r, "expected a non-negative integer");
  *out = v;
  return 1;
}

/* An array of at most `max` non-negative integers; *count gets their number. */
int integers(reader *r, uint64_t *out, int max, int *count) {
  *count = 0;
  if (!eat(r, '[')) return syntax(r, "expected an array");
  if (eat(r, ']')) return 1;
  do {
    if (*count >= max) return syntax(r, "an array too long");
    if (!integer(r, &out[(*count)++])) return 0;
  } while (eat(r, ','));
  return eat(r, ']') ? 1 : syntax(r, "expected ']'");
}


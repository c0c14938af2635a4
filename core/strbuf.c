/* strbuf.c - the string builder and UTF-8 / quoting helpers (strbuf.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "strbuf.h"

/* Strict UTF-8 (no overlong forms, no surrogates, <= U+10FFFF), as jansson checks. */
int dlcx_utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        int len;
        uint32_t cp;
        if (c >= 0xc2 && c <= 0xdf) len = 2, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef) len = 3, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4) len = 4, cp = c & 0x07;
        else return 0;
        if (n - i < (size_t)len) return 0;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += (size_t)len;
    }
    return 1;
}

/* Names need not be UTF-8: a run of continuation bytes has no boundary, so past 92
 * bytes the cut happens anyway (at most 4 + 1 bytes are written per step, and
 * "...\0"). */
const char *dlcx_show(char out[DLCX_SHOW_CAP], const char *s) {
    size_t o = 0;
    for (size_t i = 0; s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (o >= 80 && ((c & 0xc0) != 0x80 || o >= 92)) {
            memcpy(out + o, "...", 4);
            return out;
        }
        if (c < 0x20 || c == 0x7f) {
            snprintf(out + o, DLCX_SHOW_CAP - o, "\\x%02x", c);
            o += 4;
        } else {
            out[o++] = (char)c;
        }
    }
    out[o] = 0;
    return out;
}

void dlcx_sb_add(dlcx_sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) {
            if (cap > SIZE_MAX / 2) { b->oom = 1; return; }
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

void dlcx_sb_str(dlcx_sbuf *b, const char *s) { dlcx_sb_add(b, s, strlen(s)); }

void dlcx_sb_int(dlcx_sbuf *b, long long v) {
    char tmp[32];
    int k = snprintf(tmp, sizeof tmp, "%lld", v);
    dlcx_sb_add(b, tmp, (size_t)k);
}

void dlcx_sb_json_str(dlcx_sbuf *b, const char *s) {
    dlcx_sb_add(b, "\"", 1);
    const char *run = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        dlcx_sb_add(b, run, (size_t)(s - run));
        char esc[8];
        switch (c) {
        case '"': dlcx_sb_add(b, "\\\"", 2); break;
        case '\\': dlcx_sb_add(b, "\\\\", 2); break;
        case '\b': dlcx_sb_add(b, "\\b", 2); break;
        case '\f': dlcx_sb_add(b, "\\f", 2); break;
        case '\n': dlcx_sb_add(b, "\\n", 2); break;
        case '\r': dlcx_sb_add(b, "\\r", 2); break;
        case '\t': dlcx_sb_add(b, "\\t", 2); break;
        default:
            snprintf(esc, sizeof esc, "\\u%04x", c);
            dlcx_sb_add(b, esc, 6);
        }
        run = s + 1;
    }
    dlcx_sb_add(b, run, (size_t)(s - run));
    dlcx_sb_add(b, "\"", 1);
}

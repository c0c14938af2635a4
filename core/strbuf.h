/*
 * strbuf.h - internal (not installed): a growing string builder and the UTF-8 /
 * quoting helpers of libdiloco's writers (the safetensors header in ckpt.c; later
 * the wire protocol's text parts).  Nothing here sets dlc_last_error: callers turn
 * a builder's `oom` flag or a failed check into their own message.
 *
 *     dlcx_sbuf b = {0};
 *     dlcx_sb_add(&b, "{", 1);
 *     dlcx_sb_json_str(&b, name);            // "name", escaped; name must be UTF-8
 *     dlcx_sb_int(&b, 42);
 *     if (b.oom) { free(b.p); return dlc_error(DLC_ERR_NOMEM, ...); }
 *     use(b.p, b.len);                       // NUL-terminated once anything was added
 *     free(b.p);                             // the caller owns b.p
 */
#ifndef DILOCO_STRBUF_H
#define DILOCO_STRBUF_H

#include <stddef.h>

/* A string under construction.  Zero-initialise it; p is NULL until the first add,
 * then always NUL-terminated.  Once an allocation fails, oom is set, the content so
 * far is kept and every later add does nothing. */
typedef struct dlcx_sbuf {
    char *p;         /* owned by whoever owns the builder: free(p) */
    size_t len, cap; /* bytes used (without the NUL), bytes allocated */
    int oom;
} dlcx_sbuf;

/* Appends the n bytes at s (which may contain NULs). */
void dlcx_sb_add(dlcx_sbuf *b, const char *s, size_t n);
/* Appends the NUL-terminated string s. */
void dlcx_sb_str(dlcx_sbuf *b, const char *s);
/* Appends v in decimal. */
void dlcx_sb_int(dlcx_sbuf *b, long long v);
/* Appends s (NUL-terminated, valid UTF-8: check with dlcx_utf8_valid) as a JSON
 * string literal: quotes, \" \\ and control bytes escaped. */
void dlcx_sb_json_str(dlcx_sbuf *b, const char *s);

/* 1 if the n bytes at s are strict UTF-8 (no overlong forms, no surrogates,
 * <= U+10FFFF), as jansson checks; else 0. */
int dlcx_utf8_valid(const unsigned char *s, size_t n);

/* A string from a hostile source as it may appear in a message: control bytes as
 * \xNN, cut to about 80 bytes at a character boundary with "...".  Writes into out
 * (DLCX_SHOW_CAP bytes) and returns it.  s need not be UTF-8. */
#define DLCX_SHOW_CAP 100
const char *dlcx_show(char out[DLCX_SHOW_CAP], const char *s);

#endif

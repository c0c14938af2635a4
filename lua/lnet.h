/*
 * lnet.h - shared by the two files of the diloco.net binding: lnet.c (the Net type, its
 * methods, frames and events) and lnetopt.c (the options of diloco.net.new).  Private to
 * the binding; the API is docs/lua-api.md.
 */
#ifndef DILOCO_LNET_H
#define DILOCO_LNET_H

#include "diloco/net.h"
#include "ldiloco.h"

/* The config strings the net may keep pointers to (cfg.secret_file, cfg.tls_*): lnet.c
 * copies them into the box's tail so that they live exactly as long as the net. */
enum { DLCL_NET_S_SECRET_FILE, DLCL_NET_S_CERT, DLCL_NET_S_KEY, DLCL_NET_S_CA, DLCL_NET_S_COUNT };

/* Capability bits (DLC_CAP_*) that have names. */
#define DLCL_NET_CAP_BITS 4

/* diloco.net.new's options, read and checked. */
typedef struct dlcL_netopts {
    dlc_net_config cfg;       /* secret borrowed from the options table; secret_file, tls_*,
                               * hello and layout NULL: the caller points them into the box */
    const char *strs[DLCL_NET_S_COUNT]; /* borrowed from the options table, or NULL */
    int has_hello;            /* hello = {...} was given */
    dlc_hello hello;
    int fragments, block;     /* layout: P (0 = no layout) and the codec block */
    int64_t numel[DLC_PROTO_FRAGMENTS_MAX];
} dlcL_netopts;

/* Reads the options table at t into *o; raises naming the first bad option. */
void dlcL_net_options(lua_State *L, int t, dlcL_netopts *o);
/* t[k] as a number in lo..hi (an integer if `integer`; lo excluded if `open`), def when
 * nil; a bad value raises "who: k = v: expected <expect>". */
double dlcL_net_num(lua_State *L, int t, const char *who, const char *k, double def, double lo, double hi,
                    int integer, int open, const char *expect);
/* The name of capability bit i, of codec i (NULL: none). */
const char *dlcL_net_cap_name(int i);
const char *dlcL_net_codec_name(int i);

#endif

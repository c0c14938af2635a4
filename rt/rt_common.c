/*
 * rt_common.c - helpers the syncer and learner drivers share (rt_internal.h), and the
 * syncer's address file (rt.h).
 */
#define _DEFAULT_SOURCE /* getifaddrs */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "diloco/proto.h"
#include "rt_internal.h"

static dlc_status dup_into(char **dst, const char **src, size_t len) {
    *dst = NULL;
    if (!*src) return DLC_OK;
    if (!(*dst = malloc(len + 1))) return dlc_error(DLC_ERR_NOMEM, "rt: out of memory for a configuration string");
    memcpy(*dst, *src, len);
    (*dst)[len] = 0;
    *src = *dst;
    return DLC_OK;
}

dlc_status rt_strings_copy(rt_strings *s, dlc_net_config *cfg, const char **run) {
    memset(s, 0, sizeof *s);
    const char *secret = cfg->secret;
    if (dup_into(&s->secret, &secret, cfg->secret_len) != DLC_OK) return DLC_ERR_NOMEM;
    cfg->secret = secret;
    if (cfg->secret_file && dup_into(&s->secret_file, &cfg->secret_file, strlen(cfg->secret_file)) != DLC_OK)
        return DLC_ERR_NOMEM;
    if (cfg->tls_cert && dup_into(&s->cert, &cfg->tls_cert, strlen(cfg->tls_cert)) != DLC_OK) return DLC_ERR_NOMEM;
    if (cfg->tls_key && dup_into(&s->key, &cfg->tls_key, strlen(cfg->tls_key)) != DLC_OK) return DLC_ERR_NOMEM;
    if (cfg->tls_ca && dup_into(&s->ca, &cfg->tls_ca, strlen(cfg->tls_ca)) != DLC_OK) return DLC_ERR_NOMEM;
    if (!*run) *run = "";
    if (strlen(*run) > DLC_PROTO_RUN_MAX)
        return dlc_error(DLC_ERR_ARG, "run id of %zu bytes: expected at most %d", strlen(*run), DLC_PROTO_RUN_MAX);
    return dup_into(&s->run, run, strlen(*run));
}

void rt_strings_free(rt_strings *s) {
    if (s->secret) memset(s->secret, 0, strlen(s->secret));
    free(s->secret);
    free(s->secret_file);
    free(s->cert);
    free(s->key);
    free(s->ca);
    free(s->run);
    memset(s, 0, sizeof *s);
}

dlc_status rt_layout(const dlc_plan *plan, dlc_codec_params codec, dlc_proto_layout *out, int64_t **numel) {
    int P = dlc_plan_count(plan);
    if (P < 1 || P > DLC_PROTO_FRAGMENTS_MAX)
        return dlc_error(DLC_ERR_ARG, "rt: %d fragments: expected 1..%d", P, DLC_PROTO_FRAGMENTS_MAX);
    if (!(*numel = malloc((size_t)P * sizeof **numel))) return dlc_error(DLC_ERR_NOMEM, "rt: out of memory");
    int64_t total = 0;
    for (int p = 0; p < P; p++) total += (*numel)[p] = dlc_plan_numel(plan, p);
    memset(out, 0, sizeof *out);
    out->fragments = P;
    out->numel = *numel;
    out->model_numel = total;
    out->codec = codec;
    return DLC_OK;
}

dlc_status rt_limits(const char *who, const int64_t *numel, int P, dlc_net_config *cfg) {
    int big = 0;
    for (int p = 1; p < P; p++)
        if (numel[p] > numel[big]) big = p;
    uint64_t need = (uint64_t)numel[big] * sizeof(float) + DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX;
    if (need > DLC_PROTO_FRAME_MAX_LIMIT)
        return dlc_error(DLC_ERR_ARG, "%s: the largest of the %d fragments holds %lld floats: its frame (%llu bytes "
                         "as f32) is beyond the protocol's largest, %zu bytes: split the model into more fragments "
                         "(sync.fragments)", who, P, (long long)numel[big], (unsigned long long)need,
                         DLC_PROTO_FRAME_MAX_LIMIT);
    /* a syncer's connections may carry a REPLICA (to its standby, from its primary:
     * docs/protocol.md, "Standbys"): the largest fragment with its momentum and the most
     * contributor records the protocol allows (the run's learner count is not known
     * here), up to the protocol's largest frame (a larger one is refused when it is sent,
     * named) */
    if (strncmp(who, "syncer", 6) == 0) {
        uint64_t replica = 2 * (uint64_t)numel[big] * sizeof(float) +
                           (uint64_t)DLC_PROTO_REPLICA_CONTRIBS_MAX * DLC_PROTO_REPLICA_RECORD + DLC_PROTO_PREFIX +
                           DLC_PROTO_HEADER_MAX;
        if (replica > DLC_PROTO_FRAME_MAX_LIMIT) replica = DLC_PROTO_FRAME_MAX_LIMIT;
        if (replica > need) need = replica;
    }
    if (cfg->frame_max < need) cfg->frame_max = (size_t)need;
    if (cfg->in_max < cfg->frame_max) cfg->in_max = cfg->frame_max;
    if (cfg->mem_max < 2 * cfg->frame_max) cfg->mem_max = 2 * cfg->frame_max;
    return DLC_OK;
}

void rt_window(const int64_t *numel, int P, int frames, dlc_net_config *cfg) {
    size_t big = 0;
    for (int p = 0; p < P; p++)
        if ((size_t)numel[p] > big) big = (size_t)numel[p];
    size_t window = (size_t)frames * (big * sizeof(float) + DLC_PROTO_PREFIX + DLC_PROTO_HEADER_MAX);
    if (window < RT_WINDOW_MIN) window = RT_WINDOW_MIN;
    if (cfg->out_max > window) cfg->out_max = window;
    size_t in = window > cfg->frame_max ? window : cfg->frame_max;
    if (cfg->in_max > in) cfg->in_max = in;
}

dlc_status rt_hello(dlc_hello *h, const dlc_plan *plan, const char *run, int learner, int block, int dp,
                    const dlc_run_params *rp) {
    memset(h, 0, sizeof *h);
    h->proto_min = DLC_PROTO_VERSION_MIN;
    h->proto_max = DLC_PROTO_VERSION_MAX;
    if (strlen(run) > DLC_PROTO_RUN_MAX)
        return dlc_error(DLC_ERR_ARG, "run id of %zu bytes: expected at most %d", strlen(run), DLC_PROTO_RUN_MAX);
    strcpy(h->run, run);
    h->model_hash = dlc_plan_model_hash(plan);
    h->plan = plan;
    /* a learner's HELLO lists its tensors; the syncer names the first that differs from
     * its own (a larger model states only the hash) */
    if (dlc_plan_tensors(plan) <= DLC_PROTO_TENSORS_MAX) h->tensors = dlc_plan_tensors(plan);
    for (int i = 0; i < h->tensors; i++) h->tensor_hash[i] = dlc_plan_tensor_hash(plan, i);
    h->plan_hash = dlc_plan_hash(plan);
    h->learner = learner;
    h->caps = DLC_CAP_RESYNC_PHASE | (dp ? DLC_CAP_GRADIENT | DLC_CAP_REPLAY : DLC_CAP_SHARDED);
    h->codecs = (1u << DLC_CODEC_COUNT) - 1;
    h->block = block;
    if (rp) { /* the peer compares it field by field */
        h->run_params = *rp;
        h->run_hash = dlc_run_hash(rp);
    }
    if (learner == RT_SERVER) { /* the server's terms: it owns every fragment itself */
        h->learner = -1;
        h->fragments = dlc_plan_count(plan);
        h->endpoints = 1; /* endpoint[0] = "": this one */
    }
    return DLC_OK;
}

dlc_status dlc_rt_address_file(const char *path, double timeout, char *addr, size_t cap, char *run, size_t rcap) {
    double t0 = dlc_rt_clock();
    for (;;) {
        FILE *f = fopen(path, "r");
        if (f) {
            char line[512];
            addr[0] = run[0] = 0;
            if (fgets(line, sizeof line, f)) {
                line[strcspn(line, "\r\n")] = 0;
                snprintf(addr, cap, "%s", line);
            }
            while (fgets(line, sizeof line, f)) {
                line[strcspn(line, "\r\n")] = 0;
                if (strncmp(line, "run ", 4) == 0) snprintf(run, rcap, "%.*s", (int)(rcap - 1), line + 4);
            }
            fclose(f);
            if (addr[0]) return DLC_OK;
        } else if (errno != ENOENT) {
            return dlc_error(DLC_ERR_IO, "connect @%s: %s", path, strerror(errno));
        }
        if (dlc_rt_clock() - t0 >= timeout)
            return dlc_error(DLC_ERR_STATE, "connect @%s: no address file within %g s (the syncer's --address-file)",
                             path, timeout);
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* The IPv4 address of the interface that routes off this host into out (INET_ADDRSTRLEN
 * bytes): the source address of the default route (a UDP socket "connected" to a
 * documentation address sends nothing, but the kernel picks the route), else the first
 * interface that is up and not loopback, else 127.0.0.1. */
static void route_address(char *out) {
    strcpy(out, "127.0.0.1");
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(9)}, me;
        socklen_t len = sizeof me;
        inet_pton(AF_INET, "192.0.2.1", &to.sin_addr); /* TEST-NET-1: never answered */
        int ok = connect(fd, (struct sockaddr *)&to, sizeof to) == 0 &&
                 getsockname(fd, (struct sockaddr *)&me, &len) == 0 && me.sin_addr.s_addr != htonl(INADDR_ANY);
        close(fd);
        if (ok) {
            inet_ntop(AF_INET, &me.sin_addr, out, INET_ADDRSTRLEN);
            return;
        }
    }
    struct ifaddrs *all = NULL;
    if (getifaddrs(&all) != 0) return;
    for (struct ifaddrs *i = all; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) ||
            (i->ifa_flags & IFF_LOOPBACK))
            continue;
        inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out, INET_ADDRSTRLEN);
        break;
    }
    freeifaddrs(all);
}

/* Splits "HOST:PORT", "[V6]:PORT", "HOST" or "[V6]" into host (brackets kept) and port
 * (-1 when none).  0, or -1 for a malformed port. */
static int split_host_port(const char *a, char *host, size_t cap, long *port) {
    const char *colon = NULL;
    if (a[0] == '[') {
        const char *close = strchr(a, ']');
        if (!close) return -1;
        colon = close[1] == ':' ? close + 1 : NULL;
        if (!colon && close[1]) return -1;
    } else {
        colon = strrchr(a, ':');
        if (colon && strchr(a, ':') != colon) colon = NULL; /* a bare IPv6 address */
    }
    size_t hl = colon ? (size_t)(colon - a) : strlen(a);
    if (hl >= cap) return -1;
    memcpy(host, a, hl);
    host[hl] = 0;
    *port = -1;
    if (colon) {
        char *end = NULL;
        errno = 0;
        *port = strtol(colon + 1, &end, 10);
        if (!colon[1] || *end || errno || *port < 0 || *port > 65535) return -1;
    }
    return 0;
}

dlc_status dlc_rt_advertise(const char *listen, int port, const char *advertise, char *out, size_t cap) {
    char host[256];
    long p = -1;
    if (port < 0 || port > 65535) return dlc_error(DLC_ERR_ARG, "advertise: port %d: expected 0..65535", port);
    if (advertise && advertise[0]) {
        if (split_host_port(advertise, host, sizeof host, &p) != 0 || !host[0])
            return dlc_error(DLC_ERR_ARG,
                             "--advertise %s: expected HOST:PORT, or HOST (or HOST:0) for the port the syncer "
                             "listens on", advertise);
    } else {
        if (split_host_port(listen ? listen : "", host, sizeof host, &p) != 0)
            return dlc_error(DLC_ERR_ARG, "--listen %s: expected HOST:PORT", listen);
        p = -1;
        if (!host[0] || !strcmp(host, "0.0.0.0") || !strcmp(host, "[::]") || !strcmp(host, "::") ||
            !strcmp(host, "*")) {
            char ip[INET_ADDRSTRLEN];
            route_address(ip);
            snprintf(host, sizeof host, "%s", ip);
        }
    }
    if (strchr(host, ':') && host[0] != '[') { /* a bare IPv6 address: bracketed, as HOST:PORT needs */
        struct in6_addr a6;
        if (inet_pton(AF_INET6, host, &a6) != 1)
            return dlc_error(DLC_ERR_ARG, "%s %s: expected HOST:PORT, or HOST (or HOST:0) for the port the syncer "
                             "listens on (an IPv6 address in brackets: [ADDR]:PORT)",
                             advertise && advertise[0] ? "--advertise" : "--listen",
                             advertise && advertise[0] ? advertise : listen);
        char b[sizeof host];
        snprintf(b, sizeof b, "[%.*s]", (int)sizeof host - 3, host);
        memcpy(host, b, sizeof host);
    }
    if ((size_t)snprintf(out, cap, "%s:%ld", host, p > 0 ? p : (long)port) >= cap)
        return dlc_error(DLC_ERR_ARG, "advertise: the address %s:%ld is longer than %zu bytes", host,
                         p > 0 ? p : (long)port, cap);
    return DLC_OK;
}

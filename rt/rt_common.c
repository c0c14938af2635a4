/*
 * rt_common.c - helpers the syncer and learner drivers share (rt_internal.h), and the
 * syncer's address file (rt.h).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
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
    h->caps = DLC_CAP_RESYNC_PHASE | (dp ? DLC_CAP_GRADIENT | DLC_CAP_REPLAY : 0);
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

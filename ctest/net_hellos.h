/*
 * net_hellos.h - the HELLOs of the transport's tests (ctest/net_*.c): a server's terms
 * (one fragment, every capability and codec, the given run id) and a client's asking for
 * an id (learner -1: the WELCOME assigns one).
 */
#ifndef DLC_NET_HELLOS_H
#define DLC_NET_HELLOS_H
#include <stdio.h>
#include "diloco/proto.h"

static inline void net_test_hellos(const char *run, dlc_hello *server, dlc_hello *client) {
    dlc_frame f;
    dlc_frame_init(&f, DLC_FRAME_WELCOME);
    *server = f.hello;
    server->proto_min = DLC_PROTO_VERSION_MIN, server->proto_max = DLC_PROTO_VERSION_MAX;
    snprintf(server->run, sizeof server->run, "%s", run);
    server->model_hash = 11, server->plan_hash = 22, server->block = 128;
    server->caps = DLC_CAP_ALL, server->codecs = 0x3f;
    server->fragments = 1, server->endpoints = 1;
    *client = *server;
    client->fragments = 0, client->endpoints = 0, client->learner = -1;
}

#endif

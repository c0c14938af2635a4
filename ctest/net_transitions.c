/* net_transitions.c - the transport's one set_state (net/net.c) against the table of
 * docs/transport.md: every (from, to) pair of connection states is tried in a forked
 * child; the legal ones return, the illegal ones must die by the always-on assert
 * (SIGABRT).  White-box: net.c is included here, since no public call can reach an
 * illegal transition. */
#include <signal.h>
#include <sys/wait.h>
#include "../net/conn.c"
#include "check.h"

/* The documented table, written out again: from -> the states it may go to. */
static const int expected[DLC_CONN_STATE_COUNT][DLC_CONN_STATE_COUNT] = {
    /*                 connecting authenticating ready draining closed */
    [DLC_CONN_CONNECTING] = {0, 1, 0, 0, 1},
    [DLC_CONN_AUTHENTICATING] = {0, 0, 1, 1, 1},
    [DLC_CONN_READY] = {0, 0, 0, 1, 1},
    [DLC_CONN_DRAINING] = {0, 0, 0, 0, 1},
    [DLC_CONN_CLOSED] = {1, 0, 0, 0, 0},
};

static int survives(int from, int to) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(3); /* the assert's report */
        static dlc_net net;
        static conn c;
        pthread_mutex_init(&net.lock, NULL);
        c.net = &net, c.state = (dlc_conn_state)from;
        set_state(&c, (dlc_conn_state)to);
        _exit(c.state == (dlc_conn_state)to ? 0 : 2);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 1;
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) return 0;
    return -1;
}

int main(void) {
    for (int from = 0; from < DLC_CONN_STATE_COUNT; from++)
        for (int to = 0; to < DLC_CONN_STATE_COUNT; to++) {
            int got = survives(from, to);
            if (got != expected[from][to])
                fprintf(stderr, "%s -> %s: expected %s, got %d\n", dlc_conn_state_name(from), dlc_conn_state_name(to),
                        expected[from][to] ? "legal" : "an abort", got);
            CHECK(got == expected[from][to]);
        }
    CHECK(strcmp(dlc_conn_state_name(DLC_CONN_DRAINING), "draining") == 0 && !dlc_conn_state_name(DLC_CONN_STATE_COUNT));
    return check_done("net_transitions");
}

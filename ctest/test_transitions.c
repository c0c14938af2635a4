/* test_transitions.c - the one set_state of the learner and the set_round_state of the
 * syncer against their documented transition tables (learner.h, syncer.h): every (from,
 * to) pair is tried in a forked child; the legal ones return, the illegal ones must die
 * by the always-on assert (SIGABRT).  White-box: the state machines' sources are included
 * here (no public call can reach an illegal transition: each refuses with DLC_ERR_STATE
 * first, which test_learner.c and test_syncer.c check), each in its own namespace. */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include "check.h"

#define push learner_push
#define receive_gradient learner_receive_gradient
#include "../core/learner.c"
#undef push
#undef receive_gradient
#define push syncer_push
#define receive_gradient syncer_receive_gradient
#include "../core/syncer.c"
#undef push
#undef receive_gradient

/* 1 if fn(from, to) returned in a child, 0 if the child died by SIGABRT, -1 otherwise. */
static int survives(void (*fn)(int, int), int from, int to) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr); /* the assert's report */
        fn(from, to);
        _exit(0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return 1;
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) return 0;
    return -1;
}

static void learner_move(int from, int to) {
    dlc_learner l;
    memset(&l, 0, sizeof l);
    l.state = (dlc_learner_state)from;
    set_state(&l, (dlc_learner_state)to);
}

static void round_move(int from, int to) {
    sfrag f;
    memset(&f, 0, sizeof f);
    f.state = (dlc_round_state)from;
    set_round_state(&f, (dlc_round_state)to);
}

int main(void) {
    /* learner.h: JOINING -> TRAINING | STOPPED; TRAINING -> WAITING | STOPPED;
     * WAITING -> TRAINING | STOPPED; STOPPED -> JOINING */
    enum { J = DLC_LEARNER_JOINING, T = DLC_LEARNER_TRAINING, W = DLC_LEARNER_WAITING, S = DLC_LEARNER_STOPPED };
    static const int legal[4][4] = {
        [J] = {[T] = 1, [S] = 1}, [T] = {[W] = 1, [S] = 1}, [W] = {[T] = 1, [S] = 1}, [S] = {[J] = 1}};
    for (int a = 0; a < DLC_LEARNER_STATE_COUNT; a++)
        for (int b = 0; b <= DLC_LEARNER_STATE_COUNT; b++) { /* b == COUNT: out of range */
            int want = b < DLC_LEARNER_STATE_COUNT && legal[a][b];
            int got = survives(learner_move, a, b);
            if (got != want)
                fprintf(stderr, "learner %s -> %s: %s\n", dlc_learner_state_name(a),
                        b < DLC_LEARNER_STATE_COUNT ? dlc_learner_state_name(b) : "(out of range)",
                        got ? "allowed" : "aborted");
            CHECK(got == want);
        }
    /* syncer.h: IDLE -> COLLECTING | GRACE; COLLECTING -> GRACE | IDLE; GRACE -> IDLE | COLLECTING */
    enum { I = DLC_ROUND_IDLE, C = DLC_ROUND_COLLECTING, G = DLC_ROUND_GRACE };
    static const int rlegal[3][3] = {[I] = {[C] = 1, [G] = 1}, [C] = {[G] = 1, [I] = 1}, [G] = {[I] = 1, [C] = 1}};
    for (int a = 0; a < DLC_ROUND_STATE_COUNT; a++)
        for (int b = 0; b <= DLC_ROUND_STATE_COUNT; b++) {
            int want = b < DLC_ROUND_STATE_COUNT && rlegal[a][b];
            int got = survives(round_move, a, b);
            if (got != want)
                fprintf(stderr, "round %s -> %s: %s\n", dlc_round_state_name(a),
                        b < DLC_ROUND_STATE_COUNT ? dlc_round_state_name(b) : "(out of range)",
                        got ? "allowed" : "aborted");
            CHECK(got == want);
        }
    return check_done("test_transitions");
}

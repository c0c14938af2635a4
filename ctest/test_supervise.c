/* test_supervise.c - the supervisor of learner processes (supervise.h) against scripted
 * events: each case feeds exits, faults, the syncer's losses and the clock, and compares
 * the actions queued with the ones the rules call for, written out by hand. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "check.h"
#include "diloco/supervise.h"

/* The queued actions as one line of text: "spawn 0 fresh; island 0 up; ...". */
static const char *drain(dlc_sup *s) {
    static char buf[4096];
    size_t n = 0;
    buf[0] = 0;
    dlc_sup_action a;
    while (dlc_sup_poll(s, &a) == 1) {
        char one[160];
        switch (a.kind) {
        case DLC_SUP_SPAWN:
            snprintf(one, sizeof one, "spawn %d%s%s", a.learner, a.fresh ? " fresh" : "", a.rollback ? " rollback" : "");
            break;
        case DLC_SUP_SIGNAL:
            snprintf(one, sizeof one, "signal %d %s%s", a.learner, dlc_sup_signal_name(a.signal),
                     a.rank >= 0 ? (a.rank == 1 ? " rank 1" : " rank ?") : "");
            break;
        case DLC_SUP_ISLAND: snprintf(one, sizeof one, "island %d %s", a.learner, dlc_island_state_name(a.island)); break;
        case DLC_SUP_FAULT:
            snprintf(one, sizeof one, "fault %d %s %s%s%s%s v=%g", a.learner, dlc_sup_fault_name(a.fault),
                     a.begin ? "begin" : "end", a.final ? " final" : "", a.cause ? " cause=" : "",
                     a.cause ? dlc_sup_cause_name(a.cause) : "", a.value);
            break;
        case DLC_SUP_ROLLBACK:
            snprintf(one, sizeof one, "rollback %d cause=%s after %g", a.learner, dlc_sup_cause_name(a.cause), a.value);
            break;
        case DLC_SUP_GIVE_UP: snprintf(one, sizeof one, "give_up %d", a.learner); break;
        default: snprintf(one, sizeof one, "?"); break;
        }
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", n ? "; " : "", one);
        if (n >= sizeof buf) break;
    }
    return buf;
}

#define EXPECT(s, want)                                                                            \
    do {                                                                                           \
        const char *got_ = drain(s);                                                               \
        if (strcmp(got_, (want)) == 0) check_pass++;                                               \
        else {                                                                                     \
            check_fail++;                                                                          \
            fprintf(stderr, "%s:%d: actions\n  got:  %s\n  want: %s\n", __FILE__, __LINE__, got_, (want)); \
        }                                                                                          \
    } while (0)

static dlc_sup *make(int M, int elastic, int rollbacks, int restarts) {
    dlc_sup_params p = dlc_sup_default_params();
    p.learners = M, p.elastic = elastic, p.rollbacks = rollbacks, p.restarts = restarts;
    dlc_sup *s = dlc_sup_new(&p);
    CHECK_OK(s);
    return s;
}

static dlc_sup_state state(dlc_sup *s, int m) {
    dlc_sup_learner l;
    CHECK(dlc_sup_get_learner(s, m, &l) == DLC_OK);
    return l.state;
}

/* Exits: 0 is done, and 3 (undelivered); a crash restarts after 1, 2, 4 s ... until `restarts` in a row; a usage
 * error (2) fails at once. */
static void test_exits(void) {
    dlc_sup *s = make(2, 1, 0, 2);
    CHECK(dlc_sup_start(s, 0) == DLC_OK);
    EXPECT(s, "spawn 0 fresh; island 0 up; spawn 1 fresh; island 1 up");
    CHECK(dlc_sup_exited(s, 0, 1, 1, 0) == DLC_OK);
    EXPECT(s, "island 0 off; island 0 down; fault 0 crash begin v=1");
    CHECK(dlc_sup_tick(s, 1.5) == DLC_OK);
    EXPECT(s, "");
    CHECK(dlc_sup_tick(s, 2) == DLC_OK);
    EXPECT(s, "spawn 0; island 0 up; fault 0 back end cause=crash v=0");
    CHECK(dlc_sup_exited(s, 0, 3, -1, 11) == DLC_OK); /* by a signal: a crash too, the second in a row */
    EXPECT(s, "island 0 off; island 0 down; fault 0 crash begin v=2");
    CHECK(dlc_sup_tick(s, 5) == DLC_OK);
    EXPECT(s, "spawn 0; island 0 up; fault 0 back end cause=crash v=0");
    CHECK(dlc_sup_exited(s, 0, 6, 1, 0) == DLC_OK); /* the third: past restarts = 2 */
    EXPECT(s, "island 0 off; fault 0 crash begin final v=0");
    CHECK(state(s, 0) == DLC_SUP_FAILED);
    CHECK(dlc_sup_exited(s, 1, 7, 2, 0) == DLC_OK); /* a usage error repeats: not restarted */
    EXPECT(s, "island 1 off; fault 1 crash begin final v=0");
    CHECK(dlc_sup_all_ended(s));
    dlc_sup_free(s);

    s = make(1, 1, 0, 5);
    dlc_sup_start(s, 0);
    drain(s);
    CHECK(dlc_sup_exited(s, 0, 10, 0, 0) == DLC_OK);
    EXPECT(s, "island 0 off; island 0 done");
    CHECK(state(s, 0) == DLC_SUP_DONE && dlc_sup_all_ended(s));
    dlc_sup_free(s);

    /* trained to its end unheard by the syncer: done too, not restarted (a restart would
     * not deliver it) and not a crash */
    s = make(2, 1, 0, 5);
    dlc_sup_start(s, 0);
    drain(s);
    CHECK(dlc_sup_exited(s, 1, 4, DLC_SUP_EXIT_UNDELIVERED, 0) == DLC_OK);
    EXPECT(s, "island 1 off; island 1 done");
    CHECK(dlc_sup_tick(s, 100) == DLC_OK);
    EXPECT(s, "");
    CHECK(state(s, 1) == DLC_SUP_DONE && !dlc_sup_all_ended(s));
    dlc_sup_free(s);
}

/* A kill of the schedule: down for its duration, then back; a kill for good never returns;
 * once the others finished, one still down is done instead (not restarted alone). */
static void test_kills(void) {
    dlc_sup *s = make(2, 1, 0, 5);
    dlc_sup_start(s, 0);
    drain(s);
    CHECK(dlc_sup_kill(s, 0, 10, 5, 1) == DLC_OK);
    EXPECT(s, "island 0 down; signal 0 KILL rank 1; fault 0 kill begin v=5");
    CHECK(dlc_sup_exited(s, 0, 10.1, -1, 9) == DLC_OK); /* the machine's kill: down, not a crash */
    EXPECT(s, "island 0 off; island 0 down");
    dlc_sup_learner l;
    dlc_sup_get_learner(s, 0, &l);
    CHECK(l.state == DLC_SUP_DOWN && l.crashes == 0 && l.restart_at == 15 && l.down_cause == DLC_SUP_CAUSE_KILL);
    CHECK(dlc_sup_kill(s, 0, 11, 5, -1) == DLC_OK); /* no process: not executed */
    EXPECT(s, "");
    CHECK(dlc_sup_tick(s, 15) == DLC_OK);
    EXPECT(s, "spawn 0; island 0 up; fault 0 back end cause=kill v=0");
    CHECK(dlc_sup_kill(s, 0, 20, INFINITY, -1) == DLC_OK);
    EXPECT(s, "island 0 down; signal 0 KILL; fault 0 kill begin v=inf");
    dlc_sup_exited(s, 0, 20.1, -1, 9);
    drain(s);
    CHECK(dlc_sup_tick(s, 1e9) == DLC_OK);
    EXPECT(s, "");
    CHECK(!dlc_sup_all_ended(s));
    CHECK(dlc_sup_exited(s, 1, 1e9 + 1, 0, 0) == DLC_OK);
    EXPECT(s, "island 1 off; island 1 done");
    CHECK(dlc_sup_tick(s, 1e9 + 1) == DLC_OK);
    EXPECT(s, "fault 0 restart_skipped end v=0");
    CHECK(state(s, 0) == DLC_SUP_DONE && dlc_sup_all_ended(s));
    dlc_sup_free(s);
}

/* Non-elastic: while one is lost (or down), the others that run are held; all go on
 * together once it is back. */
static void test_holds(void) {
    dlc_sup *s = make(3, 0, 0, 5);
    dlc_sup_start(s, 0);
    drain(s);
    CHECK(dlc_sup_lost(s, 1, 4) == DLC_OK);
    EXPECT(s, "signal 0 STOP; island 0 held; fault 0 held begin v=0; signal 2 STOP; island 2 held; fault 2 held begin v=0");
    CHECK(dlc_sup_joined(s, 1, 6) == DLC_OK);
    EXPECT(s, "signal 0 CONT; island 0 up; fault 0 held end v=0; signal 2 CONT; island 2 up; fault 2 held end v=0");
    /* held, then crashed and started again: the new process is not held (nor let go) */
    dlc_sup_lost(s, 1, 7);
    drain(s);
    CHECK(dlc_sup_exited(s, 0, 8, 1, 0) == DLC_OK);
    EXPECT(s, "island 0 off; island 0 down; fault 0 crash begin v=1");
    CHECK(dlc_sup_tick(s, 9) == DLC_OK);
    EXPECT(s, "spawn 0; island 0 up; fault 0 back end cause=crash v=0");
    CHECK(dlc_sup_joined(s, 1, 10) == DLC_OK);
    EXPECT(s, "signal 2 CONT; island 2 up; fault 2 held end v=0");
    /* elastic: nobody is held */
    dlc_sup_free(s);
    s = make(3, 1, 0, 5);
    dlc_sup_start(s, 0);
    drain(s);
    CHECK(dlc_sup_lost(s, 1, 4) == DLC_OK);
    EXPECT(s, "");
    dlc_sup_free(s);
}

/* A pause stops the process until its end; a slow fault runs it 1/factor of each period;
 * a slow's end lets it run. */
static void test_pause_slow(void) {
    dlc_sup *s = make(1, 1, 0, 5);
    dlc_sup_start(s, 0);
    drain(s);
    CHECK(dlc_sup_pause(s, 0, 1, 3) == DLC_OK);
    EXPECT(s, "signal 0 STOP; island 0 paused; fault 0 pause begin v=3");
    CHECK(dlc_sup_tick(s, 3.9) == DLC_OK);
    EXPECT(s, "");
    CHECK(dlc_sup_tick(s, 4) == DLC_OK);
    EXPECT(s, "signal 0 CONT; island 0 up; fault 0 pause end v=0");
    CHECK(dlc_sup_slow(s, 0, 10, 4, 1, 20) == DLC_OK); /* runs 0.125 s of each 0.5 */
    EXPECT(s, "fault 0 slow begin v=20");
    CHECK(dlc_sup_tick(s, 10.1) == DLC_OK);
    EXPECT(s, "");
    CHECK(dlc_sup_tick(s, 10.2) == DLC_OK);
    EXPECT(s, "signal 0 STOP");
    CHECK(dlc_sup_tick(s, 10.4) == DLC_OK);
    EXPECT(s, "");
    CHECK(dlc_sup_tick(s, 10.55) == DLC_OK);
    EXPECT(s, "signal 0 CONT");
    CHECK(dlc_sup_tick(s, 10.8) == DLC_OK);
    EXPECT(s, "signal 0 STOP");
    dlc_sup_learner l;
    dlc_sup_get_learner(s, 0, &l);
    CHECK(l.slow_factor == 4);
    CHECK(dlc_sup_slow(s, 0, 10.9, 1, 0, 0) == DLC_OK); /* its end: the product is 1 again */
    EXPECT(s, "fault 0 slow end v=0");
    CHECK(dlc_sup_tick(s, 10.9) == DLC_OK);
    EXPECT(s, "signal 0 CONT");
    CHECK(dlc_sup_tick(s, 11.2) == DLC_OK);
    EXPECT(s, "");
    dlc_sup_get_learner(s, 0, &l);
    CHECK(l.slow_factor == 1 && l.state == DLC_SUP_RUNNING);
    /* a factor below 1 (a recipe's "faster"): the process runs all the time, never stopped */
    CHECK(dlc_sup_slow(s, 0, 12, 0.5, 1, 5) == DLC_OK);
    EXPECT(s, "fault 0 slow begin v=5");
    for (double t = 12.1; t < 14; t += 0.1) dlc_sup_tick(s, t);
    EXPECT(s, "");
    dlc_sup_free(s);
}

/* A stop: TERM to every process (CONT first to a stopped one); one down stays down as
 * stopped; KILL once to those still there after the grace; a machine-killed one that
 * exits after the stop is stopped, not down. */
static void test_stop(void) {
    dlc_sup *s = make(3, 1, 0, 5);
    dlc_sup_start(s, 0);
    drain(s);
    dlc_sup_pause(s, 0, 1, 100);
    dlc_sup_kill(s, 2, 1, 5, -1);
    dlc_sup_exited(s, 2, 1.1, -1, 9);
    drain(s);
    CHECK(dlc_sup_stop(s, 2) == DLC_OK);
    EXPECT(s, "signal 0 CONT; signal 0 TERM; signal 1 TERM");
    CHECK(state(s, 2) == DLC_SUP_STOPPED && dlc_sup_stopping(s));
    CHECK(dlc_sup_stop(s, 2.5) == DLC_OK); /* once */
    EXPECT(s, "");
    CHECK(dlc_sup_kill(s, 1, 3, 5, -1) == DLC_OK); /* no more faults once stopping */
    EXPECT(s, "");
    CHECK(dlc_sup_exited(s, 0, 3, 143, 0) == DLC_OK);
    EXPECT(s, "island 0 off");
    CHECK(state(s, 0) == DLC_SUP_STOPPED);
    CHECK(dlc_sup_tick(s, 62) == DLC_OK);
    EXPECT(s, "");
    CHECK(dlc_sup_tick(s, 62.5) == DLC_OK);
    EXPECT(s, "fault 1 stop_timeout begin v=60; signal 1 KILL");
    CHECK(dlc_sup_tick(s, 70) == DLC_OK);
    EXPECT(s, "");
    CHECK(!dlc_sup_all_ended(s));
    CHECK(dlc_sup_exited(s, 1, 70, -1, 9) == DLC_OK);
    EXPECT(s, "island 1 off");
    CHECK(dlc_sup_all_ended(s));
    dlc_sup_free(s);
}

/* A process that does not join within join_timeout_s is killed once; its exit is a crash. */
static void test_join_timeout(void) {
    dlc_sup_params p = dlc_sup_default_params();
    p.learners = 2, p.join_timeout_s = 100;
    dlc_sup *s = dlc_sup_new(&p);
    dlc_sup_start(s, 0);
    drain(s);
    dlc_sup_joined(s, 1, 5);
    drain(s);
    CHECK(dlc_sup_tick(s, 100) == DLC_OK);
    EXPECT(s, "");
    CHECK(dlc_sup_tick(s, 100.5) == DLC_OK);
    EXPECT(s, "fault 0 join_timeout begin v=100; signal 0 KILL");
    CHECK(dlc_sup_tick(s, 101) == DLC_OK);
    EXPECT(s, "");
    CHECK(dlc_sup_exited(s, 0, 101, -1, 9) == DLC_OK);
    EXPECT(s, "island 0 off; island 0 down; fault 0 crash begin v=1");
    dlc_sup_free(s);
}

/* Non-elastic data parallel: a kill rolls the whole job back once its down time is over
 * and every process is gone (ROLLBACK once); the host's rollback starts all again; a
 * learner failed for good ends the run. */
static void test_rollbacks(void) {
    dlc_sup *s = make(3, 0, 1, 1);
    dlc_sup_start(s, 0);
    drain(s);
    CHECK(dlc_sup_exited(s, 2, 1, 0, 0) == DLC_OK); /* done early: rolled back too */
    drain(s);
    CHECK(dlc_sup_kill(s, 0, 10, 5, -1) == DLC_OK);
    EXPECT(s, "island 0 down; signal 0 KILL; fault 0 kill begin v=5; island 0 down; signal 1 KILL; "
              "island 1 down; island 2 down; fault 0 job_rollback begin cause=kill v=5");
    CHECK(dlc_sup_rolling(s) && state(s, 2) == DLC_SUP_DOWN);
    CHECK(dlc_sup_lost(s, 1, 10.1) == DLC_OK); /* the losses the rollback causes: nothing more */
    EXPECT(s, "");
    dlc_sup_exited(s, 0, 10.2, -1, 9);
    EXPECT(s, "island 0 off; island 0 down");
    CHECK(dlc_sup_tick(s, 16) == DLC_OK); /* learner 1's process is not gone yet */
    EXPECT(s, "");
    dlc_sup_exited(s, 1, 16, -1, 9);
    EXPECT(s, "island 1 off; island 1 down");
    CHECK(dlc_sup_tick(s, 16.1) == DLC_OK);
    EXPECT(s, "rollback 0 cause=kill after 6.1");
    CHECK(dlc_sup_tick(s, 16.2) == DLC_OK); /* once */
    EXPECT(s, "");
    CHECK(dlc_sup_rolled_back(s, 17) == DLC_OK);
    EXPECT(s, "spawn 0 rollback; island 0 up; spawn 1 rollback; island 1 up; spawn 2 rollback; island 2 up");
    CHECK(!dlc_sup_rolling(s));
    CHECK_SFAILS(dlc_sup_rolled_back(s, 18), DLC_ERR_STATE, "no rollback waits");
    /* a crash: rolled back after its backoff; the second in a row (restarts = 1) ends it */
    CHECK(dlc_sup_exited(s, 1, 20, 1, 0) == DLC_OK);
    EXPECT(s, "island 1 off; island 1 down; signal 0 KILL; island 0 down; island 1 down; signal 2 KILL; island 2 down; "
              "fault 1 job_rollback begin cause=crash v=1; fault 1 crash begin v=1");
    dlc_sup_exited(s, 0, 20.1, -1, 9);
    dlc_sup_exited(s, 2, 20.1, -1, 9);
    dlc_sup_tick(s, 21);
    drain(s);
    dlc_sup_rolled_back(s, 21);
    drain(s);
    CHECK(dlc_sup_exited(s, 1, 22, 1, 0) == DLC_OK);
    EXPECT(s, "island 1 off; fault 1 crash begin final v=0; signal 0 KILL; signal 2 KILL; give_up 1");
    dlc_sup_exited(s, 0, 22.1, -1, 9);
    dlc_sup_exited(s, 2, 22.1, -1, 9);
    drain(s);
    CHECK(state(s, 0) == DLC_SUP_STOPPED && state(s, 1) == DLC_SUP_FAILED && state(s, 2) == DLC_SUP_STOPPED);
    CHECK(dlc_sup_all_ended(s));
    dlc_sup_free(s);
}

/* Bad arguments change nothing and name what was wrong. */
static void test_bad_args(void) {
    dlc_sup_params p = dlc_sup_default_params();
    p.learners = 0;
    CHECK_PFAILS(dlc_sup_new(&p), DLC_ERR_RANGE, "learners = 0: expected 1..4096");
    p = dlc_sup_default_params(), p.restart_min_s = NAN;
    CHECK_PFAILS(dlc_sup_new(&p), DLC_ERR_ARG, "restart_min_s = nan");
    p = dlc_sup_default_params(), p.restart_max_s = 0.5;
    CHECK_PFAILS(dlc_sup_new(&p), DLC_ERR_ARG, "restart_max_s = 0.5 below restart_min_s = 1");
    CHECK_PFAILS(dlc_sup_new(NULL), DLC_ERR_ARG, "NULL params");
    dlc_sup *s = make(2, 1, 0, 5);
    CHECK_SFAILS(dlc_sup_exited(s, 0, 1, 0, 0), DLC_ERR_STATE, "learner 0 has no process");
    dlc_sup_start(s, 5);
    drain(s);
    CHECK_SFAILS(dlc_sup_tick(s, 4), DLC_ERR_ARG, "now = 4 goes back (the last was 5)");
    CHECK_SFAILS(dlc_sup_tick(s, NAN), DLC_ERR_ARG, "expected a finite time");
    CHECK_SFAILS(dlc_sup_kill(s, 2, 6, 1, -1), DLC_ERR_RANGE, "learner 2: expected 0..1");
    CHECK_SFAILS(dlc_sup_kill(s, 0, 6, -1, -1), DLC_ERR_ARG, "down_s = -1");
    CHECK_SFAILS(dlc_sup_slow(s, 0, 6, 0, 1, 1), DLC_ERR_ARG, "factor = 0: expected the product");
    CHECK_SFAILS(dlc_sup_slow(s, 0, 6, INFINITY, 1, 1), DLC_ERR_ARG, "factor = inf");
    CHECK_SFAILS(dlc_sup_pause(s, 0, 6, NAN), DLC_ERR_ARG, "duration_s = nan");
    EXPECT(s, "");
    dlc_sup_learner l;
    CHECK(dlc_sup_get_learner(s, 0, &l) == DLC_OK && l.state == DLC_SUP_RUNNING && l.process);
    CHECK_SFAILS(dlc_sup_get_learner(s, -1, &l), DLC_ERR_RANGE, "learner -1");
    CHECK(strcmp(dlc_sup_state_name(DLC_SUP_PAUSED), "paused") == 0 && strcmp(dlc_sup_state_name(99), "?") == 0);
    dlc_sup_free(s);
    dlc_sup_free(NULL);
}

int main(void) {
    test_exits();
    test_kills();
    test_holds();
    test_pause_slow();
    test_stop();
    test_join_timeout();
    test_rollbacks();
    test_bad_args();
    return check_done("supervise");
}

/* supervise.c - the supervisor of a run's learner processes (supervise.h).
 *
 * One record per learner and the job's rollback; every event checks its arguments first,
 * then changes the records and queues the actions its host carries out, in the order the
 * host must (an island's state before the fault event that explains it, a rollback's
 * KILLs before its fault).  The queue grows as needed; the host drains it after each
 * event. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "diloco/supervise.h"

static const char *const state_names[] = {"off", "running", "paused", "down", "done", "failed", "stopped"};
_Static_assert(sizeof state_names / sizeof *state_names == DLC_SUP_STATE_COUNT, "one name per state");
static const char *const cause_names[] = {"", "kill", "crash", "rollback", "lost", "pause"};
_Static_assert(sizeof cause_names / sizeof *cause_names == DLC_SUP_CAUSE_COUNT, "one name per cause");
static const char *const fault_names[] = {"crash", "back",     "restart_skipped", "held",         "kill",
                                          "pause", "slow",     "job_rollback",    "join_timeout", "stop_timeout"};
_Static_assert(sizeof fault_names / sizeof *fault_names == DLC_SUP_FAULT_COUNT, "one name per fault");
static const char *const signal_names[] = {"STOP", "CONT", "TERM", "KILL"};

const char *dlc_sup_state_name(int s) { return s >= 0 && s < DLC_SUP_STATE_COUNT ? state_names[s] : "?"; }
const char *dlc_sup_cause_name(int c) { return c >= 0 && c < DLC_SUP_CAUSE_COUNT ? cause_names[c] : "?"; }
const char *dlc_sup_fault_name(int f) { return f >= 0 && f < DLC_SUP_FAULT_COUNT ? fault_names[f] : "?"; }
const char *dlc_sup_signal_name(int s) { return s >= 0 && s <= DLC_SUP_SIGKILL ? signal_names[s] : "?"; }

typedef struct learner {
    dlc_sup_learner pub;
    int kill_expected;  /* killed by the machine (a kill fault, a rollback): down, not a crash */
    int stop_expected;  /* killed because a non-elastic run cannot go on: stopped */
    int kill_sent;      /* a deadline's KILL went (once) */
    int slowed;         /* a slow duty cycle runs */
    double slow_t0, slow_until;
    int slow_running;   /* the duty cycle's last signal: CONT (1) or STOP (0) */
} learner;

struct dlc_sup {
    dlc_sup_params p;
    learner *l;
    double now;
    int stopping;
    double stop_t;
    int stop_killed;
    int rolling;        /* a rollback waits */
    int roll_asked;     /* its ROLLBACK is queued: the host's dlc_sup_rolled_back comes next */
    double roll_since, roll_back_at;
    int roll_learner;
    dlc_sup_cause roll_cause;
    dlc_sup_action *q;  /* queue: [head, tail) of cap */
    size_t head, tail, cap;
    int nomem;
};

dlc_sup_params dlc_sup_default_params(void) {
    return (dlc_sup_params){.learners = 1, .elastic = 1, .restarts = 5, .restart_min_s = 1, .restart_max_s = 30,
                            .slow_period_s = 0.5, .stop_timeout_s = 60, .join_timeout_s = 0}; /* the rest 0 */
}

static int bad_seconds(double x, int positive) { return !(x >= 0) || !isfinite(x) || (positive && x == 0); }

dlc_sup *dlc_sup_new(const dlc_sup_params *p) {
    if (!p) return dlc_error(DLC_ERR_ARG, "sup_new: NULL params"), NULL;
    if (p->learners < 1 || p->learners > DLC_SUP_MAX_LEARNERS)
        return dlc_error(DLC_ERR_RANGE, "sup_new: learners = %d: expected 1..%d", p->learners, DLC_SUP_MAX_LEARNERS),
               NULL;
    if (p->restarts < 0) return dlc_error(DLC_ERR_RANGE, "sup_new: restarts = %d: expected >= 0", p->restarts), NULL;
    const struct { const char *name; double v; int positive; } secs[] = {
        {"restart_min_s", p->restart_min_s, 1},   {"restart_max_s", p->restart_max_s, 1},
        {"slow_period_s", p->slow_period_s, 1},   {"stop_timeout_s", p->stop_timeout_s, 0},
        {"join_timeout_s", p->join_timeout_s, 0},
    };
    for (size_t k = 0; k < sizeof secs / sizeof *secs; k++)
        if (bad_seconds(secs[k].v, secs[k].positive))
            return dlc_error(DLC_ERR_ARG, "sup_new: %s = %g: expected finite seconds %s 0", secs[k].name, secs[k].v,
                             secs[k].positive ? ">" : ">="),
                   NULL;
    if (p->restart_max_s < p->restart_min_s)
        return dlc_error(DLC_ERR_ARG, "sup_new: restart_max_s = %g below restart_min_s = %g", p->restart_max_s,
                         p->restart_min_s),
               NULL;
    dlc_sup *s = calloc(1, sizeof *s);
    if (s) s->l = calloc((size_t)p->learners, sizeof *s->l);
    if (!s || !s->l) {
        free(s);
        return dlc_error(DLC_ERR_NOMEM, "sup_new: %d learners", p->learners), NULL;
    }
    s->p = *p;
    s->p.elastic = p->elastic != 0, s->p.rollbacks = p->rollbacks != 0;
    s->now = -INFINITY;
    for (int m = 0; m < p->learners; m++) {
        s->l[m].pub.restart_at = -1;
        s->l[m].pub.slow_factor = 1;
    }
    return s;
}

void dlc_sup_free(dlc_sup *s) {
    if (!s) return;
    free(s->q);
    free(s->l);
    free(s);
}

/* ---- the queue ---- */

static dlc_sup_action *push(dlc_sup *s, dlc_sup_action_kind kind, int m) {
    if (s->tail == s->cap) {
        if (s->head > 0) { /* slide the queued down */
            memmove(s->q, s->q + s->head, (s->tail - s->head) * sizeof *s->q);
            s->tail -= s->head, s->head = 0;
        } else {
            size_t cap = s->cap ? 2 * s->cap : 64;
            dlc_sup_action *q = realloc(s->q, cap * sizeof *q);
            if (!q) {
                s->nomem = 1;
                return NULL;
            }
            s->q = q, s->cap = cap;
        }
    }
    dlc_sup_action *a = &s->q[s->tail++];
    memset(a, 0, sizeof *a);
    a->kind = kind, a->learner = m, a->time = s->now, a->rank = -1;
    return a;
}

static void act_spawn(dlc_sup *s, int m, int fresh, int rollback) {
    dlc_sup_action *a = push(s, DLC_SUP_SPAWN, m);
    if (a) a->fresh = fresh, a->rollback = rollback;
}
static void act_signal(dlc_sup *s, int m, dlc_sup_signal sig, int rank) {
    dlc_sup_action *a = push(s, DLC_SUP_SIGNAL, m);
    if (a) a->signal = sig, a->rank = rank;
}
static void act_island(dlc_sup *s, int m, dlc_island_state st) {
    dlc_sup_action *a = push(s, DLC_SUP_ISLAND, m);
    if (a) a->island = st;
}
static dlc_sup_action *act_fault(dlc_sup *s, int m, dlc_sup_fault f, int begin, double value) {
    dlc_sup_action *a = push(s, DLC_SUP_FAULT, m);
    if (a) a->fault = f, a->begin = begin, a->value = value;
    return a;
}

int dlc_sup_poll(dlc_sup *s, dlc_sup_action *out) {
    if (!s || !out || s->head == s->tail) return 0;
    *out = s->q[s->head++];
    if (s->head == s->tail) s->head = s->tail = 0;
    return 1;
}

/* ---- arguments ---- */

static dlc_status check_now(dlc_sup *s, double now, const char *fn) {
    if (!s) return dlc_error(DLC_ERR_ARG, "%s: NULL supervisor", fn);
    if (!isfinite(now)) return dlc_error(DLC_ERR_ARG, "%s: now = %g: expected a finite time", fn, now);
    if (now < s->now)
        return dlc_error(DLC_ERR_ARG, "%s: now = %g goes back (the last was %g): expected non-decreasing times", fn,
                         now, s->now);
    return DLC_OK;
}

static dlc_status check_learner(dlc_sup *s, int m, double now, const char *fn) {
    dlc_status st = check_now(s, now, fn);
    if (st != DLC_OK) return st;
    if (m < 0 || m >= s->p.learners)
        return dlc_error(DLC_ERR_RANGE, "%s: learner %d: expected 0..%d", fn, m, s->p.learners - 1);
    return DLC_OK;
}

static dlc_status done(dlc_sup *s) {
    if (!s->nomem) return DLC_OK;
    s->nomem = 0;
    return dlc_error(DLC_ERR_NOMEM, "supervisor: out of memory for its actions (some were lost)");
}

/* ---- the rules ---- */

static void spawn(dlc_sup *s, int m, int fresh, int rollback) {
    learner *L = &s->l[m];
    act_spawn(s, m, fresh, rollback);
    L->pub.state = DLC_SUP_RUNNING;
    L->pub.process = 1;
    L->pub.started_at = s->now;
    L->pub.restart_at = -1;
    L->pub.joined = 0;
    L->pub.held = 0; /* a new process runs: a hold, if due, comes with the next loss or join */
    L->kill_sent = 0;
    act_island(s, m, DLC_ISLAND_UP);
}

/* Non-elastic (not rollbacks): while anyone is lost or down, every other running one is
 * held; all go on once none is. */
static void hold_others(dlc_sup *s) {
    if (s->p.elastic || s->p.rollbacks) return;
    int anyone = 0;
    for (int m = 0; m < s->p.learners; m++) {
        const dlc_sup_learner *L = &s->l[m].pub;
        anyone |= (L->lost && L->state != DLC_SUP_DONE) || L->state == DLC_SUP_DOWN;
    }
    for (int m = 0; m < s->p.learners; m++) {
        dlc_sup_learner *L = &s->l[m].pub;
        int hold = anyone && !L->lost && L->state == DLC_SUP_RUNNING;
        if (L->process && hold != L->held) {
            act_signal(s, m, hold ? DLC_SUP_SIGSTOP : DLC_SUP_SIGCONT, -1);
            L->held = hold;
            act_island(s, m, hold ? DLC_ISLAND_HELD : DLC_ISLAND_UP);
            act_fault(s, m, DLC_SUP_F_HELD, hold, 0);
        }
    }
}

/* A failure of learner m (cause) stops the job until back_at: every process killed, all
 * restarted together by the host's rollback. */
static void begin_rollback(dlc_sup *s, int m, dlc_sup_cause cause, double back_at) {
    if (s->stopping) return; /* the losses a stop causes are not failures */
    if (s->rolling) {        /* another failure meanwhile: all wait for the later one */
        if (back_at > s->roll_back_at) s->roll_back_at = back_at;
        s->l[m].pub.restart_at = -1; /* restarted with the others, never alone */
        return;
    }
    s->rolling = 1, s->roll_asked = 0;
    s->roll_since = s->now, s->roll_back_at = back_at, s->roll_learner = m, s->roll_cause = cause;
    for (int j = 0; j < s->p.learners; j++) {
        learner *L = &s->l[j];
        if (L->pub.process && !L->kill_expected) { /* (a kill fault's own KILL went already) */
            L->kill_expected = 1;                    /* reaped as down, not as a crash */
            act_signal(s, j, DLC_SUP_SIGKILL, -1);
        }
        if (L->pub.state == DLC_SUP_DONE) L->pub.state = DLC_SUP_DOWN;
        L->slowed = 0, L->pub.slow_factor = 1, L->pub.restart_at = -1;
        act_island(s, j, DLC_ISLAND_DOWN);
        if (j != m) L->pub.down_cause = DLC_SUP_CAUSE_ROLLBACK;
        else if (L->pub.down_cause == DLC_SUP_CAUSE_NONE || L->pub.down_cause == DLC_SUP_CAUSE_ROLLBACK)
            L->pub.down_cause = cause;
    }
    dlc_sup_action *a = act_fault(s, m, DLC_SUP_F_JOB_ROLLBACK, 1, back_at > s->now ? back_at - s->now : 0);
    if (a) a->cause = cause;
}

static double backoff(const dlc_sup *s, int crashes) {
    double w = s->p.restart_min_s * pow(2.0, crashes - 1);
    return w < s->p.restart_max_s ? w : s->p.restart_max_s;
}

dlc_status dlc_sup_start(dlc_sup *s, double now) {
    dlc_status st = check_now(s, now, "sup_start");
    if (st != DLC_OK) return st;
    s->now = now;
    for (int m = 0; m < s->p.learners; m++)
        if (s->l[m].pub.state == DLC_SUP_OFF) spawn(s, m, 1, 0);
    return done(s);
}

dlc_status dlc_sup_exited(dlc_sup *s, int m, double now, int code, int signo) {
    dlc_status st = check_learner(s, m, now, "sup_exited");
    if (st != DLC_OK) return st;
    learner *L = &s->l[m];
    if (!L->pub.process) return dlc_error(DLC_ERR_STATE, "sup_exited: learner %d has no process", m);
    (void)signo; /* the host words the exit; here only whether it was 0, 2 or 3 counts */
    s->now = now;
    L->pub.process = 0;
    act_island(s, m, DLC_ISLAND_OFF); /* gone: down or done below, else no measure covers it */
    if (L->stop_expected) {
        L->pub.state = DLC_SUP_STOPPED;
    } else if (L->kill_expected && s->stopping) {
        L->kill_expected = 0;
        L->pub.state = DLC_SUP_STOPPED;
    } else if (L->kill_expected) { /* a kill or a rollback took it: back after its down time */
        L->kill_expected = 0;
        L->pub.state = DLC_SUP_DOWN;
        act_island(s, m, DLC_ISLAND_DOWN);
    } else if (code == 0 || code == DLC_SUP_EXIT_UNDELIVERED) {
        L->pub.state = DLC_SUP_DONE;
        act_island(s, m, DLC_ISLAND_DONE);
    } else if (s->stopping) {
        L->pub.state = DLC_SUP_STOPPED;
    } else {
        L->pub.crashes++;
        if (code == 2 || L->pub.crashes > s->p.restarts) { /* a usage error repeats: not restarted */
            L->pub.state = DLC_SUP_FAILED;
            dlc_sup_action *a = act_fault(s, m, DLC_SUP_F_CRASH, 1, 0);
            if (a) a->final = 1;
            if (s->p.rollbacks) { /* non-elastic: without it nobody can go on */
                for (int j = 0; j < s->p.learners; j++) {
                    learner *O = &s->l[j];
                    if (O->pub.process) {
                        act_signal(s, j, DLC_SUP_SIGKILL, -1);
                        O->kill_expected = 0;
                    }
                    if (O->pub.state != DLC_SUP_FAILED) O->stop_expected = 1;
                    if (!O->pub.process && O->pub.state != DLC_SUP_FAILED) O->pub.state = DLC_SUP_STOPPED;
                }
                s->rolling = 0;
                push(s, DLC_SUP_GIVE_UP, m);
            }
        } else {
            double wait = backoff(s, L->pub.crashes);
            L->pub.state = DLC_SUP_DOWN;
            L->pub.restart_at = now + wait;
            L->pub.down_cause = DLC_SUP_CAUSE_CRASH;
            act_island(s, m, DLC_ISLAND_DOWN);
            if (s->p.rollbacks) begin_rollback(s, m, DLC_SUP_CAUSE_CRASH, now + wait);
            act_fault(s, m, DLC_SUP_F_CRASH, 1, wait);
        }
    }
    if (!L->pub.process) L->slowed = 0, L->pub.slow_factor = 1;
    return done(s);
}

dlc_status dlc_sup_joined(dlc_sup *s, int m, double now) {
    dlc_status st = check_learner(s, m, now, "sup_joined");
    if (st != DLC_OK) return st;
    s->now = now;
    s->l[m].pub.joined = 1;
    s->l[m].pub.lost = 0;
    hold_others(s);
    return done(s);
}

dlc_status dlc_sup_lost(dlc_sup *s, int m, double now) {
    dlc_status st = check_learner(s, m, now, "sup_lost");
    if (st != DLC_OK) return st;
    s->now = now;
    learner *L = &s->l[m];
    L->pub.lost = 1;
    if (s->p.rollbacks && L->pub.process && !s->rolling) { /* hung (paused) or cut off: everyone goes back */
        int paused = L->pub.state == DLC_SUP_PAUSED;
        begin_rollback(s, m, paused ? DLC_SUP_CAUSE_PAUSE : DLC_SUP_CAUSE_LOST, paused ? L->pub.resume_at : now);
    }
    hold_others(s);
    return done(s);
}

dlc_status dlc_sup_kill(dlc_sup *s, int m, double now, double down_s, int rank) {
    dlc_status st = check_learner(s, m, now, "sup_kill");
    if (st != DLC_OK) return st;
    if (!(down_s >= 0)) return dlc_error(DLC_ERR_ARG, "sup_kill: down_s = %g: expected seconds >= 0 (inf: for good)", down_s);
    s->now = now;
    learner *L = &s->l[m];
    if (!L->pub.process || s->stopping) return DLC_OK;
    L->kill_expected = 1;
    L->pub.restart_at = isfinite(down_s) ? now + down_s : INFINITY;
    L->pub.down_cause = DLC_SUP_CAUSE_KILL;
    act_island(s, m, DLC_ISLAND_DOWN);
    act_signal(s, m, DLC_SUP_SIGKILL, rank);
    L->pub.held = 0;
    dlc_sup_action *a = act_fault(s, m, DLC_SUP_F_KILL, 1, down_s);
    if (a) a->rank = rank;
    if (s->p.rollbacks) begin_rollback(s, m, DLC_SUP_CAUSE_KILL, now + down_s);
    return done(s);
}

dlc_status dlc_sup_pause(dlc_sup *s, int m, double now, double duration_s) {
    dlc_status st = check_learner(s, m, now, "sup_pause");
    if (st != DLC_OK) return st;
    if (!(duration_s >= 0)) return dlc_error(DLC_ERR_ARG, "sup_pause: duration_s = %g: expected seconds >= 0", duration_s);
    s->now = now;
    learner *L = &s->l[m];
    if (!L->pub.process || s->stopping) return DLC_OK;
    act_signal(s, m, DLC_SUP_SIGSTOP, -1);
    L->pub.state = DLC_SUP_PAUSED;
    L->pub.resume_at = now + duration_s;
    act_island(s, m, DLC_ISLAND_PAUSED);
    act_fault(s, m, DLC_SUP_F_PAUSE, 1, duration_s);
    return done(s);
}

dlc_status dlc_sup_slow(dlc_sup *s, int m, double now, double factor, int begin, double duration_s) {
    dlc_status st = check_learner(s, m, now, "sup_slow");
    if (st != DLC_OK) return st;
    if (!(factor > 0) || !isfinite(factor)) /* (below 1 it runs all the time: the process cannot go faster) */
        return dlc_error(DLC_ERR_ARG, "sup_slow: factor = %g: expected the product of the slow factors under way, > 0",
                         factor);
    s->now = now;
    learner *L = &s->l[m];
    if (!L->pub.process || s->stopping) return DLC_OK;
    if (L->slowed && factor == 1) L->slow_until = now; /* the duty cycle lets it run, then forgets it */
    else if (L->slowed) L->pub.slow_factor = factor;
    else if (factor != 1) { /* it runs 1/factor of each period (CONT), stopped the rest */
        L->slowed = 1, L->pub.slow_factor = factor;
        L->slow_t0 = now, L->slow_until = INFINITY, L->slow_running = 1;
    }
    act_fault(s, m, DLC_SUP_F_SLOW, begin != 0, begin ? duration_s : 0);
    return done(s);
}

dlc_status dlc_sup_stop(dlc_sup *s, double now) {
    dlc_status st = check_now(s, now, "sup_stop");
    if (st != DLC_OK) return st;
    s->now = now;
    if (s->stopping) return DLC_OK;
    s->stopping = 1, s->stop_t = now;
    for (int m = 0; m < s->p.learners; m++) {
        learner *L = &s->l[m];
        if (L->pub.process) {
            /* a stopped process takes its TERM only once continued */
            if (L->pub.state == DLC_SUP_PAUSED || L->slowed || L->pub.held) act_signal(s, m, DLC_SUP_SIGCONT, -1);
            L->slowed = 0, L->pub.slow_factor = 1, L->pub.held = 0;
            act_signal(s, m, DLC_SUP_SIGTERM, -1);
        } else if (L->pub.state == DLC_SUP_DOWN) { /* waiting for its restart (or a rollback's): it stays down */
            L->pub.state = DLC_SUP_STOPPED;
        }
    }
    s->rolling = 0;
    return done(s);
}

dlc_status dlc_sup_rolled_back(dlc_sup *s, double now) {
    dlc_status st = check_now(s, now, "sup_rolled_back");
    if (st != DLC_OK) return st;
    if (!s->rolling) return dlc_error(DLC_ERR_STATE, "sup_rolled_back: no rollback waits");
    s->now = now;
    for (int m = 0; m < s->p.learners; m++) {
        if (s->l[m].pub.process) return dlc_error(DLC_ERR_STATE, "sup_rolled_back: learner %d's process runs", m);
    }
    for (int m = 0; m < s->p.learners; m++) spawn(s, m, 0, 1);
    s->rolling = 0;
    return done(s);
}

dlc_status dlc_sup_tick(dlc_sup *s, double now) {
    dlc_status st = check_now(s, now, "sup_tick");
    if (st != DLC_OK) return st;
    s->now = now;
    int M = s->p.learners;
    /* the run is over once every learner that is not down has finished: one still down is
     * not restarted to train on alone */
    if (!s->rolling) {
        int finished = 0, up = 0;
        for (int m = 0; m < M; m++) {
            dlc_sup_state x = s->l[m].pub.state;
            if (x == DLC_SUP_DONE) finished = 1;
            else if (x != DLC_SUP_DOWN && x != DLC_SUP_FAILED && x != DLC_SUP_STOPPED) up = 1;
        }
        if (finished && !up)
            for (int m = 0; m < M; m++)
                if (s->l[m].pub.state == DLC_SUP_DOWN) {
                    s->l[m].pub.state = DLC_SUP_DONE;
                    act_fault(s, m, DLC_SUP_F_RESTART_SKIPPED, 0, 0);
                }
    }
    for (int m = 0; m < M; m++) {
        learner *L = &s->l[m];
        if (L->pub.state == DLC_SUP_DOWN && L->pub.restart_at >= 0 && now >= L->pub.restart_at && !s->stopping &&
            !s->rolling) {
            dlc_sup_cause why = L->pub.down_cause != DLC_SUP_CAUSE_NONE ? L->pub.down_cause : DLC_SUP_CAUSE_KILL;
            spawn(s, m, 0, 0);
            dlc_sup_action *a = act_fault(s, m, DLC_SUP_F_BACK, 0, 0);
            if (a) a->cause = why;
        }
    }
    if (s->rolling && !s->stopping && now >= s->roll_back_at) {
        int gone = 1;
        for (int m = 0; m < M; m++) gone &= !s->l[m].pub.process;
        /* queued once: the host calls dlc_sup_rolled_back, which ends the wait */
        if (gone && !s->roll_asked) {
            s->roll_asked = 1;
            dlc_sup_action *a = push(s, DLC_SUP_ROLLBACK, s->roll_learner);
            if (a) a->cause = s->roll_cause, a->value = now - s->roll_since;
        }
    }
    for (int m = 0; m < M; m++) {
        learner *L = &s->l[m];
        if (L->slowed && L->pub.process && L->pub.state != DLC_SUP_PAUSED) {
            double period = s->p.slow_period_s;
            int run = now >= L->slow_until || fmod(now - L->slow_t0, period) < period / L->pub.slow_factor;
            if (run != L->slow_running) {
                act_signal(s, m, run ? DLC_SUP_SIGCONT : DLC_SUP_SIGSTOP, -1);
                L->slow_running = run;
            }
            if (now >= L->slow_until) L->slowed = 0, L->pub.slow_factor = 1;
        } else if (L->slowed && !L->pub.process) {
            L->slowed = 0, L->pub.slow_factor = 1;
        }
        if (L->pub.state == DLC_SUP_PAUSED && now >= L->pub.resume_at && L->pub.process) {
            act_signal(s, m, DLC_SUP_SIGCONT, -1);
            L->pub.state = DLC_SUP_RUNNING;
            act_island(s, m, L->pub.held ? DLC_ISLAND_HELD : DLC_ISLAND_UP);
            act_fault(s, m, DLC_SUP_F_PAUSE, 0, 0);
        }
    }
    if (s->stopping && !s->stop_killed && now - s->stop_t > s->p.stop_timeout_s) {
        s->stop_killed = 1;
        for (int m = 0; m < M; m++)
            if (s->l[m].pub.process) {
                act_fault(s, m, DLC_SUP_F_STOP_TIMEOUT, 1, s->p.stop_timeout_s);
                act_signal(s, m, DLC_SUP_SIGKILL, -1);
            }
    }
    if (s->p.join_timeout_s > 0)
        for (int m = 0; m < M; m++) {
            learner *L = &s->l[m];
            if (L->pub.state == DLC_SUP_RUNNING && L->pub.process && !L->pub.joined && !L->kill_sent &&
                now - L->pub.started_at > s->p.join_timeout_s) {
                L->kill_sent = 1;
                L->kill_expected = 0; /* its exit is a crash: restarted with backoff */
                act_fault(s, m, DLC_SUP_F_JOIN_TIMEOUT, 1, s->p.join_timeout_s);
                act_signal(s, m, DLC_SUP_SIGKILL, -1);
            }
        }
    return done(s);
}

dlc_status dlc_sup_get_learner(const dlc_sup *s, int m, dlc_sup_learner *out) {
    if (!s || !out) return dlc_error(DLC_ERR_ARG, "sup_get_learner: NULL %s", s ? "out" : "supervisor");
    if (m < 0 || m >= s->p.learners)
        return dlc_error(DLC_ERR_RANGE, "sup_get_learner: learner %d: expected 0..%d", m, s->p.learners - 1);
    *out = s->l[m].pub;
    return DLC_OK;
}

int dlc_sup_rolling(const dlc_sup *s) { return s ? s->rolling : 0; }
int dlc_sup_stopping(const dlc_sup *s) { return s ? s->stopping : 0; }

int dlc_sup_all_ended(const dlc_sup *s) {
    if (!s) return 0;
    for (int m = 0; m < s->p.learners; m++) {
        dlc_sup_state x = s->l[m].pub.state;
        if (x != DLC_SUP_DONE && x != DLC_SUP_FAILED && x != DLC_SUP_STOPPED) return 0;
    }
    return 1;
}

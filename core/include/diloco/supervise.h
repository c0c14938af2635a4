/*
 * supervise.h - the supervisor of a run's learner processes, sans-IO: what `diloco-lua
 * run` decides about the processes of its islands, written once as a state machine.  Its
 * host (lua/diloco/supervisor.lua) owns the processes, their logs and the syncer; it
 * tells the machine what happened (a process started or exited, a fault of the schedule
 * began, the syncer lost or heard a learner, the run stops) and the time, and carries out
 * the actions the machine queues: start a process, signal one, an island's state in the
 * account (account.h), a fault event, a rollback of the whole job.
 *
 *     dlc_sup_params p = dlc_sup_default_params();
 *     p.learners = 3, p.restarts = 5;
 *     dlc_sup *s = dlc_sup_new(&p);
 *     dlc_sup_start(s, 0.0);                        // SPAWN each learner (fresh)
 *     for (;;) {
 *         ... a learner's process exited:  dlc_sup_exited(s, m, now, code, signo);
 *         ... a kill of the schedule:      dlc_sup_kill(s, m, now, down_s, rank);
 *         dlc_sup_tick(s, now);             // restarts, resumes, slow duty cycles, deadlines
 *         dlc_sup_action a;
 *         while (dlc_sup_poll(s, &a) == 1) carry out a;
 *     }
 *
 * The rules (docs/runtime.md, "Faults on real processes"):
 *   - a process that exits 0 is done, and so is one that exits DLC_SUP_EXIT_UNDELIVERED (3:
 *     it trained to its end without the syncer, which a restart cannot deliver either);
 *     one the machine killed (a kill fault, a rollback) is
 *     down until its restart time; any other exit is a crash, restarted after a backoff
 *     (restart_min_s doubled per crash in a row, up to restart_max_s) unless it was a
 *     usage error (exit status 2) or the crashes passed `restarts`: then it failed for good;
 *   - once every learner that is not down has finished, one still down is not restarted
 *     to train on alone: it is done (a fault RESTART_SKIPPED);
 *   - non-elastic (elastic = 0): while a learner is lost or down, every other running one
 *     is held (SIGSTOP), and all go on together once it is back;
 *   - rollbacks = 1 (non-elastic data parallel): a failure (a kill, a crash, a learner lost
 *     or paused) stops the job: every process is killed and, once the failed one's down
 *     time is over and every process is gone, the host rolls the job back (ROLLBACK) and
 *     calls dlc_sup_rolled_back, which starts all again; a learner failed for good ends
 *     the run (GIVE_UP);
 *   - a pause stops a process until its end; a slow fault runs it 1/factor of each
 *     slow_period (CONT, STOP), the product of the factors under way (below 1: all the
 *     time, a process cannot be made faster);
 *   - a stop (a signal to the run) sends TERM to every process (CONT first to a stopped
 *     one) and KILL to those still there after stop_timeout_s; a process that has not
 *     joined the syncer within join_timeout_s is killed (and restarted as a crash).
 * Learners are 0-based here; times are the host's seconds, non-decreasing.
 */
#ifndef DILOCO_SUPERVISE_H
#define DILOCO_SUPERVISE_H

#include "diloco/account.h"
#include "diloco/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DLC_SUP_MAX_LEARNERS 4096
/* The exit status of a learner that finished its steps unheard by the syncer (gone,
 * stopped, or its id taken): what it trained since is in its checkpoint only. */
#define DLC_SUP_EXIT_UNDELIVERED 3

typedef enum dlc_sup_state {
    DLC_SUP_OFF = 0,  /* "off": not started yet */
    DLC_SUP_RUNNING,  /* "running": its process runs (maybe held, maybe slowed) */
    DLC_SUP_PAUSED,   /* "paused": a pause fault stopped its process until resume_at */
    DLC_SUP_DOWN,     /* "down": killed or crashed, started again at restart_at (or by a rollback) */
    DLC_SUP_DONE,     /* "done": its process exited 0 (or the others finished while it was down) */
    DLC_SUP_FAILED,   /* "failed": crashed for good */
    DLC_SUP_STOPPED,  /* "stopped": ended by the run's stop */
    DLC_SUP_STATE_COUNT
} dlc_sup_state;

/* Why a learner is down (and what its restart's fault event is called). */
typedef enum dlc_sup_cause {
    DLC_SUP_CAUSE_NONE = 0,
    DLC_SUP_CAUSE_KILL,     /* "kill": a kill fault */
    DLC_SUP_CAUSE_CRASH,    /* "crash": its process failed */
    DLC_SUP_CAUSE_ROLLBACK, /* "rollback": another's failure rolled the job back */
    DLC_SUP_CAUSE_LOST,     /* "lost": the syncer lost it (a rollback's cause) */
    DLC_SUP_CAUSE_PAUSE,    /* "pause": lost while paused (a rollback's cause) */
    DLC_SUP_CAUSE_COUNT
} dlc_sup_cause;

typedef enum dlc_sup_signal { DLC_SUP_SIGSTOP = 0, DLC_SUP_SIGCONT, DLC_SUP_SIGTERM, DLC_SUP_SIGKILL } dlc_sup_signal;

typedef enum dlc_sup_fault {
    DLC_SUP_F_CRASH = 0,       /* its process crashed: restart_in s, or final (no restart) */
    DLC_SUP_F_BACK,            /* a down learner started again (begin 0; cause: why it was down) */
    DLC_SUP_F_RESTART_SKIPPED, /* down, not restarted: the others finished */
    DLC_SUP_F_HELD,            /* held (begin 1) or let go (begin 0) in a non-elastic run */
    DLC_SUP_F_KILL,            /* a kill fault executed (begin 1; duration, rank) */
    DLC_SUP_F_PAUSE,           /* a pause began (duration) or ended */
    DLC_SUP_F_SLOW,            /* a slow fault began (factor, duration) or ended, on a live process */
    DLC_SUP_F_JOB_ROLLBACK,    /* the job rolls back (begin 1; cause, back_in) */
    DLC_SUP_F_JOIN_TIMEOUT,    /* not joined within join_timeout_s: killed */
    DLC_SUP_F_STOP_TIMEOUT,    /* not gone within stop_timeout_s of the stop: killed */
    DLC_SUP_FAULT_COUNT
} dlc_sup_fault;

typedef enum dlc_sup_action_kind {
    DLC_SUP_SPAWN = 0, /* start learner m's process (fresh: the run's first start; rollback:
                        * from the rollback's step) */
    DLC_SUP_SIGNAL,    /* send `signal` to learner m's process (rank >= 0: that MPI rank only,
                        * when the host can; -1: the whole island) */
    DLC_SUP_ISLAND,    /* learner m's island is in account state `island` from `time` on */
    DLC_SUP_FAULT,     /* a fault event: fault, begin, value (restart_in, duration, back_in or
                        * factor), cause, final (a crash not restarted), rank */
    DLC_SUP_ROLLBACK,  /* every process is gone and the down time is over: the host rolls the
                        * job back (checkpoints, syncer) and calls dlc_sup_rolled_back */
    DLC_SUP_GIVE_UP,   /* learner m failed for good and the run cannot go on without it */
} dlc_sup_action_kind;

typedef struct dlc_sup_action {
    dlc_sup_action_kind kind;
    int learner;             /* 0-based; -1 for none */
    double time;
    int fresh, rollback;     /* SPAWN */
    dlc_sup_signal signal;   /* SIGNAL */
    int rank;                /* SIGNAL, FAULT KILL: -1 the island */
    dlc_island_state island; /* ISLAND */
    dlc_sup_fault fault;     /* FAULT */
    int begin, final;        /* FAULT */
    double value;            /* FAULT: restart_in, duration (inf: none), back_in or factor */
    dlc_sup_cause cause;     /* FAULT BACK, JOB_ROLLBACK; ROLLBACK */
} dlc_sup_action;

typedef struct dlc_sup_params {
    int learners;           /* M >= 1 */
    int elastic;            /* 0: hold the others while one is lost or down */
    int rollbacks;          /* 1: non-elastic data parallel, a failure rolls the job back */
    int restarts;           /* crashes in a row a learner may have (>= 0) */
    double restart_min_s;   /* first restart's wait (1) */
    double restart_max_s;   /* the longest (30) */
    double slow_period_s;   /* a slow fault's duty cycle (0.5) */
    double stop_timeout_s;  /* a stop's grace before KILL (60) */
    double join_timeout_s;  /* a started process must join within this (0: no limit) */
} dlc_sup_params;

typedef struct dlc_sup_learner {
    dlc_sup_state state;
    int process;            /* 1 while its process runs (started, not yet exited) */
    int held, joined, lost;
    int crashes;            /* in a row */
    dlc_sup_cause down_cause;
    double restart_at;      /* DOWN: when it starts again; -1 none (a rollback's, or never) */
    double resume_at;       /* PAUSED: when it goes on */
    double started_at;
    double slow_factor;     /* 1: not slowed */
} dlc_sup_learner;

typedef struct dlc_sup dlc_sup; /* opaque */

DLC_API dlc_sup_params dlc_sup_default_params(void);
DLC_API dlc_sup *dlc_sup_new(const dlc_sup_params *p);
DLC_API void dlc_sup_free(dlc_sup *s); /* NULL ok */

/* Events.  Each returns DLC_OK, or DLC_ERR_ARG / DLC_ERR_RANGE for a bad argument (a
 * learner out of range, a time that is not finite or goes back), changing nothing. */
DLC_API dlc_status dlc_sup_start(dlc_sup *s, double now);                 /* SPAWN every learner */
DLC_API dlc_status dlc_sup_exited(dlc_sup *s, int m, double now, int code, int signo); /* code -1: by signal */
DLC_API dlc_status dlc_sup_joined(dlc_sup *s, int m, double now);         /* the syncer heard it join */
DLC_API dlc_status dlc_sup_lost(dlc_sup *s, int m, double now);           /* the syncer lost it */
/* Faults of the schedule; each acts only on a learner whose process runs (a kill, pause or
 * slow of one that is down is not executed). */
DLC_API dlc_status dlc_sup_kill(dlc_sup *s, int m, double now, double down_s, int rank); /* down_s inf: for good */
DLC_API dlc_status dlc_sup_pause(dlc_sup *s, int m, double now, double duration_s);
DLC_API dlc_status dlc_sup_slow(dlc_sup *s, int m, double now, double factor, int begin, double duration_s);
DLC_API dlc_status dlc_sup_stop(dlc_sup *s, double now);                  /* the run stops */
DLC_API dlc_status dlc_sup_rolled_back(dlc_sup *s, double now);           /* after ROLLBACK: SPAWN all */
DLC_API dlc_status dlc_sup_tick(dlc_sup *s, double now);                  /* what is due by now */

/* The next action (1), or 0 when none is queued. */
DLC_API int dlc_sup_poll(dlc_sup *s, dlc_sup_action *out);
DLC_API dlc_status dlc_sup_get_learner(const dlc_sup *s, int m, dlc_sup_learner *out);
DLC_API int dlc_sup_rolling(const dlc_sup *s);  /* 1 while a rollback waits */
DLC_API int dlc_sup_stopping(const dlc_sup *s); /* 1 after dlc_sup_stop */
/* 1 when every learner has ended (done, failed, stopped) and none is down awaiting a
 * restart or a rollback. */
DLC_API int dlc_sup_all_ended(const dlc_sup *s);

DLC_API const char *dlc_sup_state_name(int state);   /* "off", "running", ...; "?" */
DLC_API const char *dlc_sup_cause_name(int cause);   /* "", "kill", "crash", ...; "?" */
DLC_API const char *dlc_sup_fault_name(int fault);   /* "crash", "back", ...; "?" */
DLC_API const char *dlc_sup_signal_name(int signal); /* "STOP", "CONT", "TERM", "KILL"; "?" */

#ifdef __cplusplus
}
#endif
#endif

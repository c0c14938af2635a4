/* test_account.c - the run's account (account.h) against rows worked out by hand:
 * scripted state changes (kill, pause, done) with the work an island's processes report,
 * every bucket to the second; a process clock that ran through a pause (the row still
 * sums to the window: the pause is not counted twice); ready with nothing to do (sim's
 * done tail, taken from the idle time); the fates scaled to the compute that ran; off
 * time as other; late and repeated state changes; the total weighted by nominal rates;
 * goodput and uptime over windows, merges out of order and past the end; bad arguments
 * refused naming the field, nothing changed. */
#include "check.h"
#include "diloco/account.h"

/* Checks every bucket of a row (seconds, in bucket order) and that the shares sum to 1. */
static void check_row(const dlc_account_row *r, const double want[DLC_BUCKET_COUNT], double window, int line) {
    double sum = 0, share = 0;
    for (int b = 0; b < DLC_BUCKET_COUNT; b++) {
        if (fabs(r->s[b] - want[b]) > 1e-9) {
            check_fail++;
            fprintf(stderr, "%s:%d: bucket %s = %.9g, expected %.9g\n", __FILE__, line, dlc_account_bucket_name(b),
                    r->s[b], want[b]);
        } else {
            check_pass++;
        }
        sum += r->s[b], share += r->share[b];
    }
    CHECK_NEAR(r->window, window, 1e-12);
    CHECK_NEAR(sum, window, 1e-9);
    CHECK_NEAR(share, window > 0 ? 1 : 0, 1e-12);
}

static dlc_account_work work(double busy, double idle, double tps) {
    dlc_account_work w = {.busy_s = busy, .idle_s = idle, .ready_since = -1, .nominal_tps = tps};
    return w;
}

static void test_names(void) {
    CHECK(!strcmp(dlc_island_state_name(DLC_ISLAND_PAUSED), "paused"));
    CHECK(!strcmp(dlc_island_state_name(DLC_ISLAND_STATE_COUNT), "?"));
    CHECK(!strcmp(dlc_account_bucket_name(DLC_BUCKET_OTHER), "other"));
    CHECK(!strcmp(dlc_account_bucket_name(-1), "?"));
    dlc_island_state s;
    CHECK(dlc_island_state_parse("held", &s) == DLC_OK && s == DLC_ISLAND_HELD);
    CHECK_SFAILS(dlc_island_state_parse("sleeping", &s), DLC_ERR_ARG, "expected off, starting, up, down, paused");
}

/* Island 0: up at 0, killed 10..20, paused 30..35, done at 50; window [0, 60]. */
static void test_scripted_row(void) {
    dlc_account *a = dlc_account_new(2, 0);
    CHECK_OK(a);
    if (!a) return;
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_UP, 0) == DLC_OK);
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_DOWN, 10) == DLC_OK);
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_UP, 20) == DLC_OK);
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_PAUSED, 30) == DLC_OK);
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_UP, 35) == DLC_OK);
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_DONE, 50) == DLC_OK);
    double since = -1;
    CHECK(dlc_account_state(a, 0, &since) == DLC_ISLAND_DONE && since == 50);
    CHECK_NEAR(dlc_account_seconds(a, 0, DLC_ISLAND_UP, 60), 35, 1e-12);
    CHECK_NEAR(dlc_account_seconds(a, 0, DLC_ISLAND_DONE, 60), 10, 1e-12);
    /* up 35 s: 20 computing, 10 waiting, 5 nobody measured (other).  Of 16 s sent (16
     * steps) 8 steps were merged: useful 8 + the 1 s kept; 2 overwritten, 1 unsent, 1
     * discarded; the 8 unmerged sent seconds and the discarded one dropped; the 1 s of
     * compute no fate holds (a step cut short) dropped too. */
    dlc_account_work w = work(20, 10, 100);
    w.fates = (dlc_learner_account){.sent_steps = 16, .sent_s = 16, .kept_s = 1, .overwritten_s = 1.5,
                                    .unsent_s = 0.5, .discarded_s = 0};
    w.merged_steps = 8;
    CHECK(dlc_account_set_work(a, 0, &w) == DLC_OK);
    dlc_account_row r;
    CHECK(dlc_account_row_of(a, 0, 60, &r) == DLC_OK);
    /* counted: 9 useful + 1.5 + 0.5 + 8 dropped = 19 of 20 busy: dropped 9 */
    check_row(&r, (double[]){9, 1.5, 9, 0.5, 15, 10, 10, 5}, 60, __LINE__);
    /* the same row asked twice, and again at a later end: done grows, nothing else */
    CHECK(dlc_account_row_of(a, 0, 70, &r) == DLC_OK);
    check_row(&r, (double[]){9, 1.5, 9, 0.5, 15, 10, 20, 5}, 70, __LINE__);
    /* island 1 never started (a by-hand launch the run never saw): all other */
    CHECK(dlc_account_row_of(a, 1, 60, &r) == DLC_OK);
    check_row(&r, (double[]){0, 0, 0, 0, 0, 0, 0, 60}, 60, __LINE__);
    dlc_account_free(a);
}

/* The real run's bug: a paused learner's process clock kept running, so its train and
 * wait seconds cover the pause too.  The row scales them to the up time. */
static void test_pause_not_counted_twice(void) {
    dlc_account *a = dlc_account_new(1, 5);
    CHECK_OK(a);
    if (!a) return;
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_STARTING, 5) == DLC_OK);
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_UP, 7) == DLC_OK);
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_PAUSED, 20) == DLC_OK);
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_UP, 44) == DLC_OK);
    /* up 13 + 21 = 34 s; the process says 45 s computing and 23 waiting (68: the pause in) */
    dlc_account_work w = work(45, 23, 10);
    w.fates = (dlc_learner_account){.sent_steps = 10, .sent_s = 45};
    w.merged_steps = 10;
    CHECK(dlc_account_set_work(a, 0, &w) == DLC_OK);
    dlc_account_row r;
    CHECK(dlc_account_row_of(a, 0, 65, &r) == DLC_OK);
    check_row(&r, (double[]){22.5, 0, 0, 0, 24, 11.5 + 2, 0, 0}, 60, __LINE__);
    dlc_account_free(a);
}

/* sim: ready with no step fitting before the end: done since then, out of the idle. */
static void test_ready_tail(void) {
    dlc_account *a = dlc_account_new(1, 0);
    CHECK_OK(a);
    if (!a) return;
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_UP, 0) == DLC_OK);
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_DOWN, 2) == DLC_OK);
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_UP, 3) == DLC_OK);
    dlc_account_work w = work(6, 4, 1);
    w.ready_since = 8;
    w.fates = (dlc_learner_account){.sent_steps = 6, .sent_s = 6};
    w.merged_steps = 9; /* more merged than sent (another process's steps): all of them */
    CHECK(dlc_account_set_work(a, 0, &w) == DLC_OK);
    dlc_account_row r;
    CHECK(dlc_account_row_of(a, 0, 11, &r) == DLC_OK);
    check_row(&r, (double[]){6, 0, 0, 0, 1, 1, 3, 0}, 11, __LINE__);
    /* ready since before its last change (the revival at 3): done from the change on */
    w.ready_since = 1;
    w.busy_s = 0, w.idle_s = 10;
    CHECK(dlc_account_set_work(a, 0, &w) == DLC_OK);
    CHECK(dlc_account_row_of(a, 0, 11, &r) == DLC_OK);
    check_row(&r, (double[]){0, 0, 0, 0, 1, 2, 8, 0}, 11, __LINE__);
    dlc_account_free(a);
}

/* Fates worth more than the compute (rounding, or steps of unequal length): scaled to it;
 * no fates at all, the merged share of its steps. */
static void test_fates_scaled(void) {
    dlc_account *a = dlc_account_new(1, 0);
    CHECK_OK(a);
    if (!a) return;
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_UP, 0) == DLC_OK);
    dlc_account_work w = work(10, 0, 1);
    w.fates = (dlc_learner_account){.sent_steps = 4, .sent_s = 8, .overwritten_s = 4, .unsent_s = 4, .discarded_s = 4};
    w.merged_steps = 2;
    CHECK(dlc_account_set_work(a, 0, &w) == DLC_OK);
    dlc_account_row r;
    CHECK(dlc_account_row_of(a, 0, 10, &r) == DLC_OK);
    /* useful 4, over 4, unsent 4, dropped 4 + 4 = 8: 20 counted for 10 run */
    check_row(&r, (double[]){2, 2, 4, 2, 0, 0, 0, 0}, 10, __LINE__);
    /* no fates known (a syncer started by hand reads no learner's metrics): the merged
     * share of its steps useful, the rest other, nothing called dropped */
    w = work(8, 2, 1);
    w.steps = 40, w.merged_steps = 30;
    CHECK(dlc_account_set_work(a, 0, &w) == DLC_OK);
    CHECK(dlc_account_row_of(a, 0, 10, &r) == DLC_OK);
    check_row(&r, (double[]){6, 0, 0, 0, 0, 2, 0, 2}, 10, __LINE__);
    w.merged_steps = 50; /* (more merged than it says it ran: all of it) */
    CHECK(dlc_account_set_work(a, 0, &w) == DLC_OK);
    CHECK(dlc_account_row_of(a, 0, 10, &r) == DLC_OK);
    check_row(&r, (double[]){8, 0, 0, 0, 0, 2, 0, 0}, 10, __LINE__);
    dlc_account_free(a);
}

/* Times never run backwards: a late change is taken at the last one; a repeated state
 * changes nothing; a row for a time before the last change still sums to its window. */
static void test_late_and_repeated(void) {
    dlc_account *a = dlc_account_new(1, 0);
    CHECK_OK(a);
    if (!a) return;
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_UP, 4) == DLC_OK);
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_UP, 6) == DLC_OK); /* same state: still up since 4 */
    double since = 0;
    CHECK(dlc_account_state(a, 0, &since) == DLC_ISLAND_UP && since == 4);
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_DOWN, 3) == DLC_OK); /* late: at 4 */
    CHECK(dlc_account_state(a, 0, &since) == DLC_ISLAND_DOWN && since == 4);
    CHECK_NEAR(dlc_account_seconds(a, 0, DLC_ISLAND_UP, 10), 0, 1e-12);
    CHECK_NEAR(dlc_account_seconds(a, 0, DLC_ISLAND_DOWN, 10), 6, 1e-12);
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_UP, 8) == DLC_OK);
    dlc_account_row r;
    CHECK(dlc_account_row_of(a, 0, 2, &r) == DLC_OK); /* the past: scaled, sums to 2 */
    double sum = 0;
    for (int b = 0; b < DLC_BUCKET_COUNT; b++) sum += r.s[b];
    CHECK_NEAR(sum, 2, 1e-12);
    CHECK(dlc_account_row_of(a, 0, -1, &r) == DLC_OK); /* before t0: an empty window */
    check_row(&r, (double[]){0, 0, 0, 0, 0, 0, 0, 0}, 0, __LINE__);
    dlc_account_free(a);
}

/* The total weighs islands by their nominal rate; goodput is useful tokens over the
 * capacity; uptime counts windows with a merge, before the end. */
static void test_total_goodput_uptime(void) {
    dlc_account *a = dlc_account_new(2, 10);
    CHECK_OK(a);
    if (!a) return;
    CHECK(dlc_account_enter(a, 0, DLC_ISLAND_UP, 10) == DLC_OK);
    CHECK(dlc_account_enter(a, 1, DLC_ISLAND_UP, 10) == DLC_OK);
    CHECK(dlc_account_enter(a, 1, DLC_ISLAND_DOWN, 20) == DLC_OK);
    dlc_account_work w0 = work(20, 0, 300), w1 = work(10, 0, 100);
    w0.fates = (dlc_learner_account){.sent_steps = 1, .sent_s = 20};
    w1.fates = (dlc_learner_account){.sent_steps = 1, .sent_s = 10};
    w0.merged_steps = 1;
    CHECK(dlc_account_set_work(a, 0, &w0) == DLC_OK);
    CHECK(dlc_account_set_work(a, 1, &w1) == DLC_OK);
    dlc_account_row t;
    CHECK(dlc_account_total(a, 30, &t) == DLC_OK);
    /* island 0: useful 20 of 20; island 1: dropped 10, down 10; weights 3:1 */
    check_row(&t, (double[]){15, 0, 2.5, 0, 2.5, 0, 0, 0}, 20, __LINE__);
    /* merges at 12, 11 (late), 27 and 30 (the end: outside); windows of 5 s from 10 */
    CHECK(dlc_account_merge(a, 12, 3000) == DLC_OK);
    CHECK(dlc_account_merge(a, 11, 1000) == DLC_OK);
    CHECK(dlc_account_merge(a, 27, 2000) == DLC_OK);
    CHECK(dlc_account_merge(a, 30, 2000) == DLC_OK);
    CHECK(dlc_account_merges(a) == 4);
    CHECK_NEAR(dlc_account_useful_tokens(a), 8000, 1e-9);
    CHECK_NEAR(dlc_account_goodput(a, 30), 8000.0 / (400 * 20), 1e-12);
    /* another tally over this capacity (shard 1 of a run in shards: every shard's) */
    CHECK_NEAR(dlc_account_goodput_of(a, 30, 12000), 12000.0 / (400 * 20), 1e-12);
    CHECK(dlc_account_goodput_of(a, 30, -1) == 0 && dlc_account_goodput_of(a, 30, NAN) == 0);
    CHECK_NEAR(dlc_account_uptime(a, 30, 5), 2.0 / 4, 1e-12);  /* [10,15) and [25,30) */
    CHECK_NEAR(dlc_account_uptime(a, 31, 5), 3.0 / 5, 1e-12);  /* 30 now inside: [30,35) */
    CHECK_NEAR(dlc_account_uptime(a, 30, 100), 1, 1e-12);     /* one window */
    CHECK(dlc_account_uptime(a, 30, 0) == 0 && dlc_account_goodput(a, 10) == 0);
    /* a syncer restored from its checkpoint of two merges: the later ones are gone */
    CHECK(dlc_account_forget_merges(a, 2) == DLC_OK && dlc_account_merges(a) == 2);
    CHECK(dlc_account_set_useful_tokens(a, 4000) == DLC_OK);
    CHECK_NEAR(dlc_account_uptime(a, 31, 5), 1.0 / 5, 1e-12);
    CHECK_NEAR(dlc_account_goodput(a, 30), 0.5, 1e-12);
    CHECK(dlc_account_forget_merges(a, 9) == DLC_OK && dlc_account_merges(a) == 2); /* none to forget */
    dlc_account_free(a);
}

static void test_refusals(void) {
    CHECK_PFAILS(dlc_account_new(0, 0), DLC_ERR_RANGE, "0 islands: expected 1..4096");
    CHECK_PFAILS(dlc_account_new(2, NAN), DLC_ERR_ARG, "t0 = nan");
    dlc_account *a = dlc_account_new(2, 0);
    CHECK_OK(a);
    if (!a) return;
    CHECK_SFAILS(dlc_account_enter(a, 2, DLC_ISLAND_UP, 1), DLC_ERR_RANGE, "island 2: expected 0..1");
    CHECK_SFAILS(dlc_account_enter(a, 0, DLC_ISLAND_STATE_COUNT, 1), DLC_ERR_ARG, "state 7");
    CHECK_SFAILS(dlc_account_enter(a, 0, DLC_ISLAND_UP, INFINITY), DLC_ERR_ARG, "t = inf");
    CHECK(dlc_account_state(a, 0, NULL) == DLC_ISLAND_OFF);
    dlc_account_work w = work(1, 1, 1);
    w.fates.kept_s = -1;
    CHECK_SFAILS(dlc_account_set_work(a, 1, &w), DLC_ERR_ARG, "kept_s = -1: expected a finite number >= 0");
    w = work(NAN, 1, 1);
    CHECK_SFAILS(dlc_account_set_work(a, 1, &w), DLC_ERR_ARG, "busy_s = nan");
    CHECK_SFAILS(dlc_account_merge(a, 1, -5), DLC_ERR_ARG, "useful_tokens = -5");
    CHECK_SFAILS(dlc_account_forget_merges(a, -1), DLC_ERR_RANGE, "keep = -1");
    CHECK_SFAILS(dlc_account_set_useful_tokens(a, NAN), DLC_ERR_ARG, "nan: expected a finite number");
    CHECK(dlc_account_merges(a) == 0 && dlc_account_useful_tokens(a) == 0);
    dlc_account_row r;
    CHECK(dlc_account_row_of(a, 1, 4, &r) == DLC_OK); /* the refused work changed nothing */
    check_row(&r, (double[]){0, 0, 0, 0, 0, 0, 0, 4}, 4, __LINE__);
    dlc_account_free(a);
}

int main(void) {
    test_names();
    test_scripted_row();
    test_pause_not_counted_twice();
    test_ready_tail();
    test_fates_scaled();
    test_late_and_repeated();
    test_total_goodput_uptime();
    test_refusals();
    return check_done("test_account");
}

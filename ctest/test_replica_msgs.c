/*
 * test_replica_msgs.c - the state machines given the standbys' messages (msg.h:
 * DLC_MSG_REPLICA, DLC_MSG_REPLICA_ACK), which travel only between a primary's driver and
 * its standby's and are neither a learner's nor a syncer's to receive: each is refused
 * with DLC_ERR_FORMAT naming it, and nothing changes (no action, no version, no round,
 * no model): from a live learner's id, and from one the syncer does not hold live (whose
 * other messages make it rejoin: these must not).
 */
#include "check.h"
#include "check_fx.h"
#include "diloco/learner.h"
#include "diloco/syncer.h"

static int syncer_actions(dlc_syncer *s) {
    dlc_syncer_action a;
    int n = 0;
    while (dlc_syncer_poll(s, &a)) n++;
    return n;
}

static int learner_actions(dlc_learner *l) {
    dlc_learner_action a;
    int n = 0;
    while (dlc_learner_poll(l, &a)) n++;
    return n;
}

static void test_syncer(void) {
    fx x;
    fx_make(&x, 2, 301);
    dlc_syncer_params sp = dlc_syncer_default_params();
    sp.learners = 3, sp.quorum = 2; /* (learner 3 never joins) */
    dlc_syncer *s = dlc_syncer_new(&sp, x.plan, dlc_params_data(x.p));
    CHECK_OK(s);
    if (!s) return;
    for (int m = 0; m < 2; m++) { /* (each call's actions polled before the next call) */
        CHECK(dlc_syncer_join(s, m, 0) == DLC_OK);
        CHECK(syncer_actions(s) == 2); /* its two fragments */
    }
    uint8_t pay[64] = {0};
    dlc_msg cases[] = {
        {.type = DLC_MSG_REPLICA, .learner = 0, .fragment = 0, .version = 1, .payload = pay, .len = sizeof pay},
        {.type = DLC_MSG_REPLICA_ACK, .learner = 1, .fragment = 1, .version = 0},
    };
    const char *says[] = {"syncer: a replica message from learner 1: expected contribution",
                          "syncer: a replica_ack message from learner 2: expected contribution"};
    for (int i = 0; i < 2; i++) {
        CHECK_SFAILS(dlc_syncer_receive(s, &cases[i], 1.0), DLC_ERR_FORMAT, says[i]);
        CHECK(syncer_actions(s) == 0 && dlc_syncer_live(s) == 2);
        CHECK(dlc_syncer_version(s, 0) == 0 && dlc_syncer_version(s, 1) == 0 && dlc_syncer_round_count(s, 0) == 0);
        /* from learner 3, not live: refused as well, no rejoin */
        dlc_msg c = cases[i];
        c.learner = 2;
        CHECK_SFAILS(dlc_syncer_receive(s, &c, 1.0), DLC_ERR_FORMAT, "message from learner 3: expected contribution");
        CHECK(syncer_actions(s) == 0 && dlc_syncer_live(s) == 2 && !dlc_syncer_is_live(s, 2));
    }
    dlc_syncer_free(s);
    fx_free(&x);
}

static void test_learner(void) {
    fx x;
    fx_make(&x, 1, 302);
    dlc_learner_params lp = dlc_learner_default_params();
    lp.id = 0, lp.H = 8, lp.heartbeat = 0;
    dlc_learner *l = dlc_learner_new(&lp, x.p, x.plan);
    CHECK_OK(l);
    if (!l) return;
    float before[NMAX], after[NMAX], pay[16];
    int64_t n = dlc_plan_numel(x.plan, 0);
    gather(&x, 0, dlc_params_data(x.p), before);
    randv(pay, 16, 303, 1.0f); /* (what it carries is never looked at) */
    dlc_msg cases[] = {
        {.type = DLC_MSG_REPLICA, .learner = 0, .fragment = 0, .version = 1, .payload = (const uint8_t *)pay,
         .len = sizeof pay},
        {.type = DLC_MSG_REPLICA_ACK, .learner = 0, .fragment = 0, .version = 1},
    };
    const char *says[] = {"learner 1: a replica message: a learner takes fragment and gradient_avg",
                          "learner 1: a replica_ack message: a learner takes fragment and gradient_avg"};
    for (int i = 0; i < 2; i++) {
        CHECK_SFAILS(dlc_learner_receive(l, &cases[i], 1.0), DLC_ERR_FORMAT, says[i]);
        CHECK(learner_actions(l) == 0 && dlc_learner_state_of(l) == DLC_LEARNER_JOINING);
        gather(&x, 0, dlc_params_data(x.p), after);
        CHECK(memcmp(before, after, (size_t)n * sizeof(float)) == 0);
    }
    dlc_learner_free(l);
    fx_free(&x);
}

int main(void) {
    CHECK(strcmp(dlc_msg_type_name(DLC_MSG_REPLICA), "replica") == 0 &&
          strcmp(dlc_msg_type_name(DLC_MSG_REPLICA_ACK), "replica_ack") == 0 && !dlc_msg_type_name(DLC_MSG_TYPE_COUNT));
    test_syncer();
    test_learner();
    return check_done("test_replica_msgs");
}

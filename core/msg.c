/* msg.c - names and link cost of the state machines' messages (msg.h). */
#include "diloco/msg.h"

static const char *const type_names[] = {"heartbeat", "contribution", "fragment", "gradient",   "gradient_avg",
                                         "bye",       "replay",       "replica",  "replica_ack"};
_Static_assert(sizeof type_names / sizeof type_names[0] == DLC_MSG_TYPE_COUNT, "one name per message type");

const char *dlc_msg_type_name(dlc_msg_type type) {
    return (unsigned)type < DLC_MSG_TYPE_COUNT ? type_names[type] : NULL;
}

int64_t dlc_msg_wire_bytes(const dlc_msg *m) { return m ? DLC_MSG_OVERHEAD + (int64_t)m->len : 0; }

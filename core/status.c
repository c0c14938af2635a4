/* status.c - error codes and the thread-local last-error message. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <assert.h>
#include "diloco/status.h"
#include "diloco/version.h"
#include "internal.h"

static const char *const status_names[] = {
    "ok", "invalid argument", "shape mismatch", "out of memory", "i/o error",
    "malformed input", "invalid state", "out of range", "internal error",
};
static_assert(sizeof status_names / sizeof status_names[0] == DLC_STATUS_COUNT,
              "status name table out of sync with dlc_status");

static _Thread_local char last_msg[1024];
static _Thread_local dlc_status last_code;

const char *dlc_status_str(int status) {
    if (status > 0 || -status >= DLC_STATUS_COUNT) return "unknown status";
    return status_names[-status];
}

const char *dlc_last_error(void) { return last_msg; }
dlc_status dlc_last_status(void) { return last_code; }

dlc_status dlc_error(dlc_status status, const char *fmt, ...) {
    /* formatted aside first: an argument may be dlc_last_error() itself (a caller adding
     * its context to a callee's message), which vsnprintf must not read while writing */
    char msg[sizeof last_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(last_msg, msg, sizeof msg);
    last_code = status;
    return status;
}

const char *dlc_version(void) { return DLC_VERSION_STRING; }

void dlc_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "libdiloco: assertion failed: %s (%s:%d)\n", expr, file, line);
    abort();
}

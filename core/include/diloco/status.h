/*
 * status.h - error codes, the thread-local error message, and the always-on assert.
 *
 * Every fallible libdiloco function either returns a dlc_status (negative = failure)
 * or returns a pointer that is NULL on failure.  In both cases the failing function
 * has stored a human-readable message (what, the value, a hint) retrievable with
 * dlc_last_error() on the same thread, and the code with dlc_last_status().
 *
 *     dlc_tensor *c = dlc_matmul(a, b, 0, 0);
 *     if (!c) fprintf(stderr, "%s\n", dlc_last_error());
 *         // "matmul: [4,3] x [2,5]: inner dimensions 3 and 2 differ"
 *
 * Library code never prints and never exits.
 */
#ifndef DILOCO_STATUS_H
#define DILOCO_STATUS_H

#include <stddef.h>

#if defined(DLC_BUILDING) && defined(__GNUC__)
#define DLC_API __attribute__((visibility("default")))
#else
#define DLC_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dlc_status {
    DLC_OK = 0,
    DLC_ERR_ARG = -1,     /* an argument has a wrong value */
    DLC_ERR_SHAPE = -2,   /* tensor shapes do not fit together */
    DLC_ERR_NOMEM = -3,   /* an allocation failed */
    DLC_ERR_IO = -4,      /* a file or socket operation failed */
    DLC_ERR_FORMAT = -5,  /* malformed file or message */
    DLC_ERR_STATE = -6,   /* call not allowed in the object's current state */
    DLC_ERR_RANGE = -7,   /* an index or count is out of range */
    DLC_ERR_INTERNAL = -8 /* a bug in libdiloco */
} dlc_status;
#define DLC_STATUS_COUNT 9

/* Name of a status code ("ok", "invalid argument", ...); never NULL. */
DLC_API const char *dlc_status_str(int status);

/* Message and code of the last failure on this thread.  The message is valid until
 * the next failing call on this thread; it is "" if nothing failed yet. */
DLC_API const char *dlc_last_error(void);
DLC_API dlc_status dlc_last_status(void);

/* Records a failure (printf-style message) and returns `status`, so library code
 * can write `return dlc_error(DLC_ERR_ARG, "lr = %g: must be > 0", lr);`.  An argument
 * may be dlc_last_error() itself, to add context to a callee's message. */
DLC_API dlc_status dlc_error(dlc_status status, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Library version, "MAJOR.MINOR.PATCH". */
DLC_API const char *dlc_version(void);

/* Always-on assertion for invariants (never for input validation): reports file,
 * line and expression on stderr and aborts. */
DLC_API void dlc_assert_fail(const char *expr, const char *file, int line);
#define DLC_ASSERT(x) ((x) ? (void)0 : dlc_assert_fail(#x, __FILE__, __LINE__))

#ifdef __cplusplus
}
#endif
#endif

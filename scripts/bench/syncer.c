/* bench_syncer (scripts/bench/syncer): the syncer at real model sizes, through the
 * embedding API (diloco/client.h), one syncer process and M learner processes on
 * loopback.  For each size N (millions of f32 parameters), side by side in one run:
 *   references, measured here and now: memcpy (64 MiB blocks, out of the caches as the
 *     syncer's working set of several models is, copied until max(4N bytes, 256 MiB) have
 *     moved; median of 3) and a bare loopback TCP socket
 *     (two threads, 127.0.0.1, blocking send/recv in 4 MiB chunks of max(4N bytes,
 *     256 MiB); median of 3), both in GB/s (1e9 bytes); and the first touch of fresh
 *     memory (a model-sized buffer, at least 64 MiB, written once) in 4 KiB pages against
 *     one from dlc_big_alloc (mem.h: 2 MiB pages where the kernel gives them), that
 *     also against the socket (a first join writes at least a model of fresh memory, the
 *     learner's base); and the resync frames' CRC-32 against memcpy (a join checksums the
 *     whole model on both sides);
 *   the syncer: a child process (this program exec'ed again with a hidden --role), a
 *     dlc_server of the model as 16 tensors of N/16 floats (random), run
 *     {"sync": {"preset": "decoupled", "H": 8, "fragments": P}} (f32), M learners,
 *     listening on 127.0.0.1:0 (its port to a file the parent waits for); it takes its
 *     events with dlc_srt_poll on dlc_server_srt (dlc_server_poll's flat event has no
 *     reject reason) and counts them.  It stops when its stdin reaches EOF (the parent
 *     closes the pipe once every learner has exited, or dies), then prints one line: its
 *     dlc_srt_stats, the events, its CPU time (getrusage) since dlc_server_new returned,
 *     and VmHWM and VmRSS (from /proc/self/status) at start and end;
 *   M learners: child processes, each dlc_client_new on its own N floats (same layout),
 *     the join timed from just before dlc_client_new to its return (the whole model
 *     received), then for --seconds: a synthetic inner step (1e-6 added to every 61st
 *     element of every tensor, the offset rotating, then a sleep so that it takes
 *     --step-ms in all) and dlc_client_step(c, 4096), timed; then dlc_client_finish(c, 60).
 *     Each prints one line: join seconds, steps, mean and max ms in dlc_client_step,
 *     dlc_client_applied, VmHWM.
 * The table, one row per size:
 *   join: mean of the learners' join time, and its rate (4N bytes / join s) ÷ the socket;
 *     the learners join at once, sharing the syncer;
 *   ingest: CONTRIBUTION wire bytes the syncer received (bytes_in_type) per CPU-second of
 *     the syncer process (all its threads, from dlc_server_new's return to the end: the
 *     joins' sends, the merges and the broadcasts included) ÷ memcpy;
 *   merges/s: merges between the first JOINED and the last MERGED event;
 *   step: the learners' mean ms inside dlc_client_step (averaged over the learners; in
 *     brackets the longest single call of any), and its share of the whole step (the
 *     loop's wall time / steps);
 *   RSS: peak RSS above the process's RSS at its start (before it allocated the model:
 *     VmHWM - VmRSS then) ÷ 4N bytes; for the syncer that counts its own copy of the
 *     initial model (freed after dlc_server_new); for the learners (the larger of the M)
 *     1 (their own arrays) is taken off: what the client holds beyond the host's model;
 *   stale: contributions rejected as stale ÷ contributions (merged + rejected);
 *     dropped, held, superseded: the syncer's sends (dlc_srt_stats).
 * Goals of issue 38: syncer RSS <= (3 + R) x the model, R = 4 the version ring (<= 7);
 * learner client <= 1 x beyond the host's arrays; ingest >= 0.5 x memcpy; join >= 0.5 x
 * the socket.  Each is printed under the table, met or MISSED.
 * A size is skipped, with a line, when MemAvailable (/proc/meminfo) is below the estimate
 * (9 + 5 M) x 4N bytes (the syncer's peak of about 7 models, its copy of the initial
 * one counted, and a margin of 2; each learner's arrays and a client of about 4).  Every child is waited for, killed by its pid on an error; a
 * child that fails prints dlc_last_error() on stderr and exits non-zero, and the parent
 * names it; exit 1 if any size failed.
 * With --shards 1,2 every size runs once per shard count S: S syncer processes, shard k
 * of S each (client.h's dlc_server_config.shard, docs/shards.md), the learners given every
 * shard's address; the row's ingest is the slowest shard's, its syncer RSS the largest
 * shard's (as a multiple of the whole model), merges/s and the shares over every shard.
 *   bench_syncer [--sizes 16,64,256] [--learners 2] [--fragments 4] [--shards 1]
 *                [--seconds 20] [--step-ms 50]
 * Run it on a quiet host: it measures wall and CPU time.
 */
#include <diloco/client.h>
#include <diloco/mem.h>

#include <errno.h>
#include <isa-l/crc.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SECRET "bench_syncer: the run secret 0123456789"
#define TENSORS 16
#define STRIDE 61
#define TOKENS 4096
#define MIB ((size_t)1 << 20)
#define REF_MIN (256 * MIB)
#define RING 4
#define MAX_SHARDS 8

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)ru.ru_stime.tv_usec;
}

/* a "Key:   123 kB" line of a /proc file, in kB; -1 if absent */
static long long proc_kb(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    size_t n = strlen(key);
    long long v = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            v = atoll(line + n + 1);
            break;
        }
    fclose(f);
    return v;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- the model: TENSORS tensors of about numel / TENSORS floats ---- */

typedef struct model {
    int64_t numel;
    float *data;
    int count;
    dlc_client_tensor t[TENSORS];
    char names[TENSORS][8];
} model;

static int model_make(model *m, int64_t numel) {
    memset(m, 0, sizeof *m);
    m->numel = numel;
    m->data = malloc((size_t)numel * sizeof(float));
    if (!m->data) return -1;
    m->count = numel < TENSORS ? (int)numel : TENSORS;
    int64_t each = numel / m->count, off = 0;
    for (int i = 0; i < m->count; i++) {
        snprintf(m->names[i], sizeof m->names[i], "t%02d", i);
        int64_t n = i == m->count - 1 ? numel - off : each;
        m->t[i] = (dlc_client_tensor){m->names[i], m->data + off, n, 0, NULL};
        off += n;
    }
    return 0;
}

static void model_random(model *m, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int64_t i = 0; i < m->numel; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        m->data[i] = ((float)(x >> 40) / (float)(1 << 24) - 0.5f) * 0.05f;
    }
}

static void run_text(char *buf, size_t n, int fragments) {
    snprintf(buf, n, "{\"sync\": {\"preset\": \"decoupled\", \"H\": 8, \"fragments\": %d}}", fragments);
}

/* ---- the syncer's process ---- */

static int role_syncer(int64_t numel, int learners, int fragments, const char *port_file, int shard, int shards) {
    long long base_kb = proc_kb("/proc/self/status", "VmRSS");
    model m;
    if (model_make(&m, numel) != 0) return fprintf(stderr, "bench_syncer: syncer: out of memory\n"), 1;
    model_random(&m, 1);
    char run[128];
    run_text(run, sizeof run, fragments);
    dlc_server_config sc = dlc_server_default_config();
    sc.tensors = m.t, sc.count = m.count, sc.run = run, sc.learners = learners, sc.secret = SECRET;
    sc.listen = "127.0.0.1:0";
    sc.shard = shard, sc.shards = shards; /* (docs/shards.md) */
    dlc_server *s = dlc_server_new(&sc);
    if (!s) return fprintf(stderr, "bench_syncer: syncer: dlc_server_new: %s\n", dlc_last_error()), 1;
    free(m.data); /* copied by dlc_server_new */
    long long new_kb = proc_kb("/proc/self/status", "VmRSS");
    double cpu0 = cpu_seconds();

    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", dlc_server_port(s)) < 0 || fclose(f) != 0 || rename(tmp, port_file) != 0) {
        fprintf(stderr, "bench_syncer: syncer: cannot write %s: %s\n", port_file, strerror(errno));
        dlc_server_free(s);
        return 1;
    }

    dlc_srt *srt = dlc_server_srt(s);
    int64_t n_kind[DLC_SRT_EVENT_COUNT] = {0}, n_reason[DLC_REJECT_REASON_COUNT] = {0};
    int64_t contribs = 0, behind_count = 0;
    double first_join = -1, last_merge = -1;
    int stop = 0, rc = 0;
    while (!stop) {
        dlc_srt_event ev;
        int got = dlc_srt_poll(srt, &ev, 50);
        while (got == 1) {
            if ((int)ev.kind >= 0 && ev.kind < DLC_SRT_EVENT_COUNT) n_kind[ev.kind]++;
            if (ev.kind == DLC_SRT_MERGED) contribs += ev.merge.count, last_merge = ev.time;
            if (ev.kind == DLC_SRT_JOINED && first_join < 0) first_join = ev.time;
            if (ev.kind == DLC_SRT_REJECTED && (int)ev.reason >= 0 && ev.reason < DLC_REJECT_REASON_COUNT)
                n_reason[ev.reason]++;
            if (ev.kind == DLC_SRT_BEHIND) behind_count += ev.count;
            if (ev.kind == DLC_SRT_LOST || ev.kind == DLC_SRT_REFUSED)
                fprintf(stderr, "bench_syncer: syncer: %s, learner %d: %s\n", dlc_srt_event_name(ev.kind), ev.learner,
                        ev.text);
            dlc_srt_event_release(&ev);
            got = dlc_srt_poll(srt, &ev, 0);
        }
        if (got < 0) {
            fprintf(stderr, "bench_syncer: syncer: dlc_srt_poll: %s\n", dlc_last_error());
            rc = 1;
            break;
        }
        struct pollfd p = {0, POLLIN, 0};
        if (poll(&p, 1, 0) > 0) stop = 1; /* EOF (or anything) on stdin: the end */
    }
    dlc_srt_stats st;
    if (dlc_srt_get_stats(srt, &st) != DLC_OK) {
        fprintf(stderr, "bench_syncer: syncer: dlc_srt_get_stats: %s\n", dlc_last_error());
        dlc_server_free(s);
        return 1;
    }
    double cpu = cpu_seconds() - cpu0;
    long long hwm_kb = proc_kb("/proc/self/status", "VmHWM"), end_kb = proc_kb("/proc/self/status", "VmRSS");
    int64_t other = st.rejects - n_reason[DLC_REJECT_STALE];
    printf("syncer merges=%lld rejects=%lld stale=%lld other_rejects=%lld contribs=%lld bytes_in=%llu "
           "bytes_out=%llu contrib_in=%llu sends_dropped=%lld sends_held=%lld sends_superseded=%lld "
           "events_dropped=%lld joined=%lld lost=%lld bye=%lld refused=%lld behind=%lld behind_count=%lld "
           "first_join=%.6f last_merge=%.6f wall=%.3f cpu_s=%.6f base_kb=%lld new_kb=%lld hwm_kb=%lld end_kb=%lld\n",
           (long long)st.merges, (long long)st.rejects, (long long)n_reason[DLC_REJECT_STALE], (long long)other,
           (long long)contribs, (unsigned long long)st.bytes_in, (unsigned long long)st.bytes_out,
           (unsigned long long)st.bytes_in_type[DLC_FRAME_CONTRIBUTION], (long long)st.sends_dropped,
           (long long)st.sends_held, (long long)st.sends_superseded, (long long)st.events_dropped,
           (long long)n_kind[DLC_SRT_JOINED], (long long)n_kind[DLC_SRT_LOST], (long long)n_kind[DLC_SRT_BYE],
           (long long)n_kind[DLC_SRT_REFUSED], (long long)n_kind[DLC_SRT_BEHIND], (long long)behind_count,
           first_join, last_merge, st.now, cpu, base_kb, new_kb, hwm_kb, end_kb);
    fflush(stdout);
    dlc_server_free(s);
    return rc;
}

/* ---- a learner's process ---- */

static int role_learner(int64_t numel, int fragments, const char *connect, double seconds, double step_ms) {
    long long base_kb = proc_kb("/proc/self/status", "VmRSS");
    model m;
    if (model_make(&m, numel) != 0) return fprintf(stderr, "bench_syncer: learner: out of memory\n"), 1;
    memset(m.data, 0, (size_t)numel * sizeof(float)); /* the host's arrays exist before the join */
    char run[128];
    run_text(run, sizeof run, fragments);
    dlc_client_config cc = dlc_client_default_config();
    cc.tensors = m.t, cc.count = m.count, cc.run = run, cc.connect = connect, cc.secret = SECRET;
    cc.join_timeout = 120;
    double t0 = now();
    dlc_client *c = dlc_client_new(&cc);
    double join = now() - t0;
    if (!c) return fprintf(stderr, "bench_syncer: learner: dlc_client_new: %s\n", dlc_last_error()), 1;
    int id = dlc_client_id(c);

    double in_step = 0, max_step = 0, start = now(), next = start;
    int64_t steps = 0;
    int off = 0;
    while (now() - start < seconds) {
        double ts = now();
        for (int i = 0; i < m.count; i++)
            for (int64_t j = off % m.t[i].numel; j < m.t[i].numel; j += STRIDE) m.t[i].data[j] += 1e-6f;
        off = (off + 1) % STRIDE;
        next = ts + step_ms * 1e-3;
        struct timespec until = {(time_t)next, (long)((next - floor(next)) * 1e9)};
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR) {
        }
        double c0 = now();
        dlc_status st = dlc_client_step(c, TOKENS);
        double dt = now() - c0;
        if (st != DLC_OK) {
            fprintf(stderr, "bench_syncer: learner %d: dlc_client_step: %s\n", id, dlc_last_error());
            dlc_client_free(c);
            return 1;
        }
        in_step += dt, steps++;
        if (dt > max_step) max_step = dt;
    }
    double loop = now() - start;
    double f0 = now();
    dlc_status st = dlc_client_finish(c, 60);
    double fin = now() - f0;
    if (st != DLC_OK) {
        fprintf(stderr, "bench_syncer: learner %d: dlc_client_finish: %s\n", id, dlc_last_error());
        dlc_client_free(c);
        return 1;
    }
    int64_t applied = dlc_client_applied(c);
    dlc_lrt_stats ls;
    memset(&ls, 0, sizeof ls);
    dlc_lrt_get_stats(dlc_client_lrt(c), &ls);
    long long hwm_kb = proc_kb("/proc/self/status", "VmHWM");
    printf("learner id=%d join_s=%.6f steps=%lld loop_s=%.6f mean_ms=%.4f max_ms=%.4f applied=%lld finish_s=%.3f "
           "sent=%lld reconnects=%lld encode_wait_s=%.4f base_kb=%lld hwm_kb=%lld\n",
           id, join, (long long)steps, loop, steps ? 1e3 * in_step / (double)steps : 0.0, 1e3 * max_step,
           (long long)applied, fin, (long long)ls.sent, (long long)ls.reconnects, ls.encode_wait_s, base_kb, hwm_kb);
    fflush(stdout);
    dlc_client_free(c);
    free(m.data);
    return 0;
}

/* ---- references ---- */

static volatile unsigned char sink;

/* GB/s over 64 MiB blocks (not cache-resident), until max(bytes, REF_MIN) moved; median
 * of 3: memcpy (crc 0), or the resync frames' CRC-32 (crc 1: core/proto.c, ISA-L's
 * crc32_gzip_refl, zlib's CRC) over the same blocks. */
static double ref_blocks(size_t bytes, int crc) {
    size_t blk = 64 * MIB, total = bytes > REF_MIN ? bytes : REF_MIN;
    unsigned char *a = malloc(blk), *b = malloc(blk);
    if (!a || !b) return free(a), free(b), -1;
    memset(a, 1, blk), memset(b, 2, blk);
    uint32_t c = 0;
    if (crc) c = crc32_gzip_refl(0, a, blk); /* warm */
    else memcpy(b, a, blk);
    double r[3];
    for (int k = 0; k < 3; k++) {
        double t0 = now();
        size_t done = 0;
        while (done < total) {
            size_t n = total - done < blk ? total - done : blk;
            if (crc) {
                c = crc32_gzip_refl(c, a, n);
            } else {
                memcpy(b, a, n);
                a[done % blk] ^= 1; /* each copy differs: not hoisted */
            }
            done += n;
        }
        r[k] = (double)total / (now() - t0) / 1e9;
        sink ^= b[blk / 2] ^ (unsigned char)c;
    }
    free(a), free(b);
    qsort(r, 3, sizeof *r, cmp_double);
    return r[1];
}

/* First touch of fresh memory, GB/s: a model-sized buffer (at least 64 MiB) written
 * once, as a buffer received or decoded into is; in 4 KiB pages (malloc, huge pages
 * refused with MADV_NOHUGEPAGE) and from dlc_big_alloc (2 MiB pages where the kernel
 * gives them); median of 3, each on a new buffer. */
static void ref_touch(size_t bytes, double *small, double *big) {
    size_t n = bytes > 64 * MIB ? bytes : 64 * MIB;
    double r[2][3];
    for (int k = 0; k < 3; k++)
        for (int kind = 0; kind < 2; kind++) {
            unsigned char *a = kind ? dlc_big_alloc(n) : malloc(n);
            if (!a) {
                *small = *big = -1;
                return;
            }
#ifdef MADV_NOHUGEPAGE
            if (!kind) {
                uintptr_t pg = 4096, lo = ((uintptr_t)a + pg - 1) & ~(pg - 1), hi = ((uintptr_t)a + n) & ~(pg - 1);
                if (hi > lo) madvise((void *)lo, hi - lo, MADV_NOHUGEPAGE);
            }
#endif
            double t0 = now();
            memset(a, 3, n);
            r[kind][k] = (double)n / (now() - t0) / 1e9;
            sink ^= a[n / 2];
            free(a);
        }
    qsort(r[0], 3, sizeof(double), cmp_double);
    qsort(r[1], 3, sizeof(double), cmp_double);
    *small = r[0][1], *big = r[1][1];
}

typedef struct sock_rx {
    int lfd;
    size_t total;
    double end;
    int err;
} sock_rx;

static void *sock_reader(void *arg) {
    sock_rx *x = arg;
    int fd = accept(x->lfd, NULL, NULL);
    if (fd < 0) return x->err = errno, NULL;
    size_t cap = 4 * MIB, got = 0;
    unsigned char *buf = malloc(cap);
    if (!buf) return close(fd), x->err = ENOMEM, NULL;
    while (got < x->total) {
        ssize_t n = recv(fd, buf, cap, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            x->err = n < 0 ? errno : EPIPE;
            break;
        }
        got += (size_t)n;
    }
    x->end = now();
    sink ^= buf[0];
    free(buf);
    close(fd);
    return NULL;
}

/* one transfer of `total` bytes over a fresh loopback connection: GB/s, or -1 */
static double sock_once(size_t total, const unsigned char *chunk, size_t cap) {
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0) return -1;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET, sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK), sa.sin_port = 0;
    socklen_t sl = sizeof sa;
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 1) != 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &sl) != 0)
        return close(lfd), -1;
    sock_rx x = {lfd, total, 0, 0};
    pthread_t th;
    if (pthread_create(&th, NULL, sock_reader, &x) != 0) return close(lfd), -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    double t0 = 0;
    int err = fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0;
    if (!err) {
        t0 = now();
        size_t sent = 0;
        while (sent < total) {
            size_t n = total - sent < cap ? total - sent : cap;
            ssize_t w = send(fd, chunk, n, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                err = 1;
                break;
            }
            sent += (size_t)w;
        }
    }
    if (fd >= 0) shutdown(fd, SHUT_WR);
    if (err) shutdown(lfd, SHUT_RDWR); /* an accept still waiting returns */
    pthread_join(th, NULL);
    if (fd >= 0) close(fd);
    close(lfd);
    if (err || x.err) return -1;
    return (double)total / (x.end - t0) / 1e9;
}

/* loopback socket GB/s: max(bytes, REF_MIN) in 4 MiB sends; median of 3 after a warm-up */
static double ref_socket(size_t bytes) {
    size_t total = bytes > REF_MIN ? bytes : REF_MIN, cap = 4 * MIB;
    unsigned char *chunk = malloc(cap);
    if (!chunk) return -1;
    memset(chunk, 3, cap);
    double r[3];
    int bad = sock_once(64 * MIB, chunk, cap) < 0;
    for (int k = 0; k < 3 && !bad; k++) bad = (r[k] = sock_once(total, chunk, cap)) < 0;
    free(chunk);
    if (bad) return -1;
    qsort(r, 3, sizeof *r, cmp_double);
    return r[1];
}

/* ---- the parent ---- */

typedef struct child {
    pid_t pid;
    int out;        /* its stdout, read end */
    int in;         /* its stdin, write end (the syncer's), or -1 */
    int status;     /* from waitpid, once done */
    int done;
    char line[2048];
} child;

static void set_cloexec(int fd) { fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) | FD_CLOEXEC); }

/* exec of /proc/self/exe with argv, stdout to a pipe; with_stdin: stdin from a pipe too,
 * else /dev/null */
static int spawn(child *ch, char *const argv[], int with_stdin) {
    memset(ch, 0, sizeof *ch);
    ch->in = -1, ch->out = -1, ch->pid = -1;
    int po[2], pi[2] = {-1, -1};
    if (pipe(po) != 0) return -1;
    if (with_stdin && pipe(pi) != 0) return close(po[0]), close(po[1]), -1;
    set_cloexec(po[0]), set_cloexec(po[1]);
    if (with_stdin) set_cloexec(pi[0]), set_cloexec(pi[1]);
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        close(po[0]), close(po[1]);
        if (with_stdin) close(pi[0]), close(pi[1]);
        return -1;
    }
    if (pid == 0) {
        int in = with_stdin ? pi[0] : open("/dev/null", O_RDONLY);
        if (in < 0 || dup2(in, 0) < 0 || dup2(po[1], 1) < 0) _exit(127);
        execv("/proc/self/exe", argv);
        fprintf(stderr, "bench_syncer: exec /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    close(po[1]);
    if (with_stdin) close(pi[0]);
    ch->pid = pid, ch->out = po[0], ch->in = with_stdin ? pi[1] : -1;
    return 0;
}

/* 1 when it has exited (status kept), 0 while it runs */
static int reap(child *ch) {
    if (ch->done || ch->pid <= 0) return 1;
    pid_t r = waitpid(ch->pid, &ch->status, WNOHANG);
    if (r == ch->pid || (r < 0 && errno == ECHILD)) ch->done = 1;
    return ch->done;
}

static void kill_child(child *ch) {
    if (ch->pid > 0 && !ch->done) {
        kill(ch->pid, SIGKILL);
        waitpid(ch->pid, &ch->status, 0);
        ch->done = 1;
    }
}

/* its output's last line (the one result line), once it has exited */
static void collect(child *ch) {
    char buf[8192];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof buf - 1 && (r = read(ch->out, buf + n, sizeof buf - 1 - n)) != 0) {
        if (r < 0) {
            if (errno == EINTR) continue;
            break;
        }
        n += (size_t)r;
    }
    buf[n] = 0;
    while (n > 0 && buf[n - 1] == '\n') buf[--n] = 0;
    char *last = strrchr(buf, '\n');
    const char *l = last ? last + 1 : buf;
    size_t len = strlen(l) < sizeof ch->line - 1 ? strlen(l) : sizeof ch->line - 1;
    memcpy(ch->line, l, len);
    ch->line[len] = 0;
    close(ch->out), ch->out = -1;
    if (ch->in >= 0) close(ch->in), ch->in = -1;
}

static int exited_ok(const child *ch) { return ch->done && WIFEXITED(ch->status) && WEXITSTATUS(ch->status) == 0; }

static const char *how(const child *ch, char *buf, size_t n) {
    if (WIFEXITED(ch->status)) snprintf(buf, n, "exited with %d", WEXITSTATUS(ch->status));
    else if (WIFSIGNALED(ch->status)) snprintf(buf, n, "killed by signal %d", WTERMSIG(ch->status));
    else snprintf(buf, n, "status %d", ch->status);
    return buf;
}

/* the value of " key=" in a result line; NAN if absent */
static double kv(const char *line, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(line, pat);
    return p ? strtod(p + strlen(pat), NULL) : NAN;
}

typedef struct row {
    double size_m, model_mb;
    double memcpy_gbs, socket_gbs;
    double join_s, join_ratio;
    double ingest_gbs, ingest_ratio;
    double merges_s;
    double step_ms, step_max_ms, step_share;
    double syncer_x, learner_x;
    double stale_share;
    long long dropped, held, superseded;
    int shards;
} row;

/* one size: the references, then the syncer and the learners; 0 and *out filled, or -1 */
static int run_size(double size_m, int M, int P, int S, double seconds, double step_ms, row *out) {
    int64_t numel = (int64_t)llround(size_m * 1e6);
    size_t bytes = (size_t)numel * sizeof(float);
    memset(out, 0, sizeof *out);
    out->size_m = size_m, out->model_mb = (double)bytes / 1e6, out->shards = S;

    out->memcpy_gbs = ref_blocks(bytes, 0);
    out->socket_gbs = ref_socket(bytes);
    if (out->memcpy_gbs <= 0 || out->socket_gbs <= 0) {
        fprintf(stderr, "bench_syncer: %gM: the references failed (out of memory, or a socket error: %s)\n", size_m,
                strerror(errno));
        return -1;
    }
    double touch_small, touch_big, crc = ref_blocks(bytes, 1);
    ref_touch(bytes, &touch_small, &touch_big);
    printf("%gM: model %.1f MB; memcpy %.2f GB/s, loopback socket %.2f GB/s; first touch of fresh memory %.2f GB/s "
           "in 4 KiB pages, %.2f GB/s from dlc_big_alloc (%.1fx; %.3fx the socket); CRC-32 %.2f GB/s "
           "(%.2fx memcpy)\n", size_m, out->model_mb, out->memcpy_gbs, out->socket_gbs, touch_small, touch_big,
           touch_small > 0 ? touch_big / touch_small : 0, touch_big / out->socket_gbs, crc, crc / out->memcpy_gbs);

    char dir[] = "/tmp/bench_syncer.XXXXXX";
    if (!mkdtemp(dir)) return fprintf(stderr, "bench_syncer: mkdtemp: %s\n", strerror(errno)), -1;
    char port_file[MAX_SHARDS][sizeof dir + 16], numel_s[32], m_s[16], p_s[16], sec_s[32], step_s[32], s_s[16];
    char k_s[MAX_SHARDS][16], connect[MAX_SHARDS * 24];
    snprintf(numel_s, sizeof numel_s, "%lld", (long long)numel);
    snprintf(m_s, sizeof m_s, "%d", M), snprintf(p_s, sizeof p_s, "%d", P), snprintf(s_s, sizeof s_s, "%d", S);
    snprintf(sec_s, sizeof sec_s, "%.17g", seconds), snprintf(step_s, sizeof step_s, "%.17g", step_ms);

    child syncers[MAX_SHARDS], *learners = calloc((size_t)M, sizeof *learners);
    if (!learners) return rmdir(dir), -1;
    for (int i = 0; i < M; i++) learners[i].pid = -1, learners[i].out = learners[i].in = -1;
    for (int k = 0; k < MAX_SHARDS; k++) syncers[k].pid = -1, syncers[k].out = syncers[k].in = -1;
    int rc = -1, started = 0, nsync = 0;
    for (; nsync < S; nsync++) { /* each shard a process of its own (one: the syncer) */
        int k = nsync;
        snprintf(port_file[k], sizeof port_file[k], "%s/port-%d", dir, k + 1);
        snprintf(k_s[k], sizeof k_s[k], "%d", k + 1);
        char *sargv[] = {"bench_syncer", "--role", "syncer", "--numel", numel_s, "--learners", m_s, "--fragments",
                         p_s, "--port-file", port_file[k], "--shard", k_s[k], "--shards", s_s, NULL};
        if (spawn(&syncers[k], sargv, 1) != 0) {
            fprintf(stderr, "bench_syncer: cannot start syncer shard %d: %s\n", k + 1, strerror(errno));
            goto out;
        }
    }
    /* their ports, once they listen (a large model takes a while to make) */
    size_t used = 0;
    connect[0] = '\0';
    for (int k = 0; k < S; k++) {
        int port = 0;
        for (double t0 = now(); !port;) {
            FILE *f = fopen(port_file[k], "r");
            if (f) {
                if (fscanf(f, "%d", &port) != 1) port = 0;
                fclose(f);
            }
            if (port) break;
            if (reap(&syncers[k])) {
                char h[64];
                fprintf(stderr, "bench_syncer: %gM: syncer shard %d %s before it listened\n", size_m, k + 1,
                        how(&syncers[k], h, sizeof h));
                goto out;
            }
            if (now() - t0 > 300) {
                fprintf(stderr, "bench_syncer: %gM: no port from syncer shard %d within 300 s\n", size_m, k + 1);
                goto out;
            }
            struct timespec ts = {0, 20000000};
            nanosleep(&ts, NULL);
        }
        used += (size_t)snprintf(connect + used, sizeof connect - used, "%s127.0.0.1:%d", k ? "," : "", port);
    }
    char *largv[] = {"bench_syncer", "--role", "learner", "--numel", numel_s, "--fragments", p_s, "--connect", connect,
                     "--seconds", sec_s, "--step-ms", step_s, NULL};
    for (; started < M; started++)
        if (spawn(&learners[started], largv, 0) != 0) {
            fprintf(stderr, "bench_syncer: cannot start learner %d: %s\n", started, strerror(errno));
            goto out;
        }
    /* the learners: join (120 s at most), train, finish (60 s at most) */
    double deadline = now() + 120 + seconds + 60 + 60;
    for (;;) {
        int running = 0;
        for (int i = 0; i < M; i++) {
            if (reap(&learners[i])) {
                if (!exited_ok(&learners[i])) {
                    char h[64];
                    fprintf(stderr, "bench_syncer: %gM: learner process %d %s\n", size_m, i,
                            how(&learners[i], h, sizeof h));
                    goto out;
                }
            } else running++;
        }
        if (!running) break;
        for (int k = 0; k < S; k++)
            if (reap(&syncers[k])) {
                char h[64];
                fprintf(stderr, "bench_syncer: %gM: syncer shard %d %s while learners ran\n", size_m, k + 1,
                        how(&syncers[k], h, sizeof h));
                goto out;
            }
        if (now() > deadline) {
            fprintf(stderr, "bench_syncer: %gM: learners still running past the deadline\n", size_m);
            goto out;
        }
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    /* the end for the syncers: EOF on their stdin */
    for (int k = 0; k < S; k++) close(syncers[k].in), syncers[k].in = -1;
    for (int k = 0; k < S; k++) {
        for (double t0 = now(); !reap(&syncers[k]);) {
            if (now() - t0 > 60) {
                fprintf(stderr, "bench_syncer: %gM: syncer shard %d did not end within 60 s of its stdin closing\n",
                        size_m, k + 1);
                goto out;
            }
            struct timespec ts = {0, 20000000};
            nanosleep(&ts, NULL);
        }
        if (!exited_ok(&syncers[k])) {
            char h[64];
            fprintf(stderr, "bench_syncer: %gM: syncer shard %d %s\n", size_m, k + 1, how(&syncers[k], h, sizeof h));
            goto out;
        }
        collect(&syncers[k]);
        printf("  shard %d/%d: %s\n", k + 1, S, syncers[k].line);
    }
    double join = 0, mean_ms = 0, max_ms = 0, loop_per_step = 0, lx = 0;
    for (int i = 0; i < M; i++) {
        collect(&learners[i]);
        printf("  %s\n", learners[i].line);
        const char *l = learners[i].line;
        double steps = kv(l, "steps");
        if (isnan(kv(l, "join_s")) || !(steps > 0)) {
            fprintf(stderr, "bench_syncer: %gM: learner process %d: no result line\n", size_m, i);
            goto out;
        }
        join += kv(l, "join_s") / M;
        mean_ms += kv(l, "mean_ms") / M;
        if (kv(l, "max_ms") > max_ms) max_ms = kv(l, "max_ms");
        loop_per_step += 1e3 * kv(l, "loop_s") / steps / M;
        double x = (kv(l, "hwm_kb") - kv(l, "base_kb")) * 1024 / (double)bytes - 1;
        if (x > lx || i == 0) lx = x;
    }
    /* over the shards: ingest the slowest shard's, merges/s and the shares summed, the
     * syncer's memory the largest shard's (each as a multiple of the whole model) */
    double c = 0, stale = 0;
    out->ingest_gbs = INFINITY;
    for (int k = 0; k < S; k++) {
        const char *s = syncers[k].line;
        if (isnan(kv(s, "cpu_s"))) {
            fprintf(stderr, "bench_syncer: %gM: syncer shard %d printed no result line\n", size_m, k + 1);
            goto out;
        }
        double g = kv(s, "contrib_in") / kv(s, "cpu_s") / 1e9;
        if (g < out->ingest_gbs) out->ingest_gbs = g;
        double span = kv(s, "last_merge") - kv(s, "first_join");
        out->merges_s += span > 0 ? kv(s, "merges") / span : 0;
        double x = (kv(s, "hwm_kb") - kv(s, "base_kb")) * 1024 / (double)bytes;
        if (x > out->syncer_x) out->syncer_x = x;
        c += kv(s, "contribs") + kv(s, "rejects"), stale += kv(s, "stale");
        out->dropped += (long long)kv(s, "sends_dropped"), out->held += (long long)kv(s, "sends_held");
        out->superseded += (long long)kv(s, "sends_superseded");
    }
    out->join_s = join;
    out->join_ratio = (double)bytes / join / 1e9 / out->socket_gbs;
    out->ingest_ratio = out->ingest_gbs / out->memcpy_gbs;
    out->step_ms = mean_ms, out->step_max_ms = max_ms;
    out->step_share = loop_per_step > 0 ? mean_ms / loop_per_step : 0;
    out->learner_x = lx;
    out->stale_share = c > 0 ? stale / c : 0;
    rc = 0;
out:
    if (rc != 0) { /* everything started, killed by its pid */
        for (int i = 0; i < started; i++) kill_child(&learners[i]);
        for (int k = 0; k < nsync; k++)
            if (syncers[k].pid > 0) kill_child(&syncers[k]);
    }
    for (int i = 0; i < started; i++)
        if (learners[i].out >= 0) close(learners[i].out);
    for (int k = 0; k < nsync; k++) {
        if (syncers[k].out >= 0) close(syncers[k].out);
        if (syncers[k].in >= 0) close(syncers[k].in);
        unlink(port_file[k]);
    }
    free(learners);
    rmdir(dir);
    return rc;
}

static void usage(void) {
    fprintf(stderr, "usage: bench_syncer [--sizes 16,64,256] [--learners 2] [--fragments 4] [--shards 1,2] "
                    "[--seconds 20] [--step-ms 50]\n");
}

int main(int argc, char **argv) {
    const char *sizes = "16,64,256", *role = NULL, *port_file = NULL, *connect = NULL, *shard_list = "1";
    int M = 2, P = 4, shard = 1, shards = 1;
    double seconds = 20, step_ms = 50;
    long long numel = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage(), 2;
        if (!strcmp(a, "--sizes")) sizes = v;
        else if (!strcmp(a, "--learners")) M = atoi(v);
        else if (!strcmp(a, "--fragments")) P = atoi(v);
        else if (!strcmp(a, "--seconds")) seconds = atof(v);
        else if (!strcmp(a, "--step-ms")) step_ms = atof(v);
        else if (!strcmp(a, "--role")) role = v; /* hidden: the children */
        else if (!strcmp(a, "--numel")) numel = atoll(v);
        else if (!strcmp(a, "--port-file")) port_file = v;
        else if (!strcmp(a, "--connect")) connect = v;
        else if (!strcmp(a, "--shard")) shard = atoi(v);
        else if (!strcmp(a, "--shards")) { if (role) shards = atoi(v); else shard_list = v; }
        else return usage(), 2;
        i++;
    }
    if (M < 1 || P < 1 || !(seconds > 0) || !(step_ms > 0)) return usage(), 2;
    if (role) {
        if (numel < 1) return usage(), 2;
        if (!strcmp(role, "syncer") && port_file) return role_syncer(numel, M, P, port_file, shard, shards);
        if (!strcmp(role, "learner") && connect) return role_learner(numel, P, connect, seconds, step_ms);
        return usage(), 2;
    }
    signal(SIGPIPE, SIG_IGN);

    double list[64];
    int n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", sizes);
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t && n < 64; t = strtok_r(NULL, ",", &save)) {
        char *end;
        double v = strtod(t, &end);
        if (*end || !(v * 1e6 >= TENSORS)) return fprintf(stderr, "bench_syncer: bad size '%s'\n", t), usage(), 2;
        list[n++] = v;
    }
    if (!n) return usage(), 2;
    int slist[MAX_SHARDS], ns = 0;
    snprintf(buf, sizeof buf, "%s", shard_list);
    for (char *t = strtok_r(buf, ",", &save); t && ns < MAX_SHARDS; t = strtok_r(NULL, ",", &save)) {
        char *end;
        long v = strtol(t, &end, 10);
        if (*end || v < 1 || v > MAX_SHARDS || v > P)
            return fprintf(stderr, "bench_syncer: bad shard count '%s' (1..%d, at most --fragments)\n", t, MAX_SHARDS),
                   usage(), 2;
        slist[ns++] = (int)v;
    }
    if (!ns) return usage(), 2;

    printf("bench_syncer: decoupled, H 8, %d fragments, f32, %d learner processes + S syncer shard processes on "
           "loopback; %d tensors a model; a step of %g ms then dlc_client_step, for %g s\n",
           P, M, TENSORS, step_ms, seconds);
    row *rows = calloc((size_t)(n * ns), sizeof *rows);
    int *ok = calloc((size_t)(n * ns), sizeof *ok), failed = 0;
    if (!rows || !ok) return fprintf(stderr, "bench_syncer: out of memory\n"), 1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < ns; j++) {
            double model_b = list[i] * 4e6, need = (9.0 + 5.0 * M) * model_b;
            long long avail_kb = proc_kb("/proc/meminfo", "MemAvailable");
            if (avail_kb >= 0 && need > (double)avail_kb * 1024) {
                printf("%gM: skipped: needs about (9 + 5 x %d) x %.0f MB = %.1f GB, MemAvailable is %.1f GB\n",
                       list[i], M, model_b / 1e6, need / 1e9, (double)avail_kb * 1024 / 1e9);
                continue;
            }
            fflush(stdout);
            printf("%gM, %d shard%s:\n", list[i], slist[j], slist[j] > 1 ? "s" : "");
            if (run_size(list[i], M, P, slist[j], seconds, step_ms, &rows[i * ns + j]) == 0) ok[i * ns + j] = 1;
            else printf("%gM, S = %d: FAILED (above)\n", list[i], slist[j]), failed = 1;
            fflush(stdout);
        }
    n *= ns;

    int measured = 0;
    for (int i = 0; i < n; i++) measured += ok[i];
    if (!measured) {
        printf("no size measured\n");
        free(rows), free(ok);
        return 1;
    }
    printf("\n| M params | shards | model MB | memcpy GB/s | socket GB/s | join s | join ÷ socket | ingest GB/cpu-s "
           "(slowest shard) | ingest ÷ memcpy | merges/s | step ms (max) | step share | syncer RSS ×model (largest "
           "shard) | learner RSS −1 ×model | stale | dropped | held | superseded |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < n; i++) {
        if (!ok[i]) continue;
        row *r = &rows[i];
        printf("| %g | %d | %.1f | %.2f | %.2f | %.3f | %.3f | %.2f | %.3f | %.1f | %.3f (%.1f) | %.2f%% | %.2f | %.2f "
               "| %.1f%% | %lld | %lld | %lld |\n",
               r->size_m, r->shards, r->model_mb, r->memcpy_gbs, r->socket_gbs, r->join_s, r->join_ratio, r->ingest_gbs,
               r->ingest_ratio, r->merges_s, r->step_ms, r->step_max_ms, 100 * r->step_share, r->syncer_x,
               r->learner_x, 100 * r->stale_share, r->dropped, r->held, r->superseded);
    }
    printf("\ngoals of issue 38 (R = %d):\n", RING);
    for (int i = 0; i < n; i++) {
        if (!ok[i]) continue;
        row *r = &rows[i];
        printf("%gM, S = %d: syncer RSS %.2f x model (goal <= %d: %s); learner client %.2f x beyond its arrays (goal <= 1: %s); "
               "ingest %.3f x memcpy (goal >= 0.5: %s); join %.3f x socket (goal >= 0.5: %s)\n",
               r->size_m, r->shards, r->syncer_x, 3 + RING, r->syncer_x <= 3 + RING ? "met" : "MISSED", r->learner_x,
               r->learner_x <= 1 ? "met" : "MISSED", r->ingest_ratio, r->ingest_ratio >= 0.5 ? "met" : "MISSED",
               r->join_ratio, r->join_ratio >= 0.5 ? "met" : "MISSED");
    }
    free(rows), free(ok);
    return failed;
}

/*
 * net_tls.c - the transport over TLS (dlc_net_config.tls): a CA and a server
 * certificate for 127.0.0.1 are made with the openssl tool into a temporary directory;
 * a client that trusts the CA completes the handshake and an exchange; a client that
 * trusts another CA, and a client speaking plain TCP, are refused, and the server still
 * serves; a client that connects before its server listens retries until it does.  The run secret is checked inside TLS as without it.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "check.h"
#include "diloco/net.h"
#include "net_clock.h"

static char dir[] = "/tmp/dlc_tlsXXXXXX";
static char ca[300], cert[300], key[300], other_ca[300];

static int sh(const char *fmt, const char *a) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, fmt, a, a, a, a, a, a, a, a);
    return system(cmd);
}

static int make_certs(void) {
    if (!mkdtemp(dir)) return 0;
    snprintf(ca, sizeof ca, "%s/ca.pem", dir), snprintf(cert, sizeof cert, "%s/cert.pem", dir);
    snprintf(key, sizeof key, "%s/key.pem", dir), snprintf(other_ca, sizeof other_ca, "%s/other.pem", dir);
    const char *script =
        "cd %s && "
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=dlc-test-ca 2>/dev/null && "
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.pem -days 2 -subj /CN=other 2>/dev/null && "
        "openssl req -newkey rsa:2048 -nodes -keyout key.pem -out cert.csr -subj /CN=127.0.0.1 2>/dev/null && "
        "printf 'subjectAltName=IP:127.0.0.1\\n' > ext.cnf && "
        "openssl x509 -req -in cert.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out cert.pem -days 2 "
        "-extfile ext.cnf 2>/dev/null";
    return sh(script, dir) == 0;
}

static dlc_net_config config(void) {
    dlc_net_config c = dlc_net_default_config();
    c.secret = "tls secret", c.secret_len = 10;
    c.tls = 1;
    c.auth_timeout_s = 3, c.reconnect_max_s = 0;
    return c;
}

static atomic_int stop;
static dlc_net *server, *plain; /* plain: a server without TLS */
static pthread_mutex_t seen_mu = PTHREAD_MUTEX_INITIALIZER;
static char seen[2][700];        /* the latest REFUSED or LOST text of server, plain */

static void *serve(void *arg) { /* echo every heartbeat back with steps + 1 */
    int k = arg != NULL;
    dlc_net *sv = k ? plain : server;
    while (!atomic_load(&stop)) {
        dlc_net_event ev;
        if (dlc_net_poll(sv, &ev, 50) != 1) continue;
        if (ev.kind == DLC_NET_REFUSED || ev.kind == DLC_NET_LOST) {
            pthread_mutex_lock(&seen_mu);
            snprintf(seen[k], sizeof seen[k], "%s", ev.text);
            pthread_mutex_unlock(&seen_mu);
        }
        if (ev.kind == DLC_NET_FRAME && ev.frame.type == DLC_FRAME_HEARTBEAT && ev.frame.msg.steps > 0) {
            dlc_frame f;
            dlc_frame_init(&f, DLC_FRAME_HEARTBEAT);
            f.msg.steps = ev.frame.msg.steps + 1;
            dlc_net_send(sv, ev.peer, &f, NULL, NULL);
        }
        dlc_net_event_release(&ev);
    }
    return NULL;
}

/* Waits up to 5 s for server k's (0: TLS, 1: plain) latest REFUSED or LOST text to say
 * needle: 1 if it did (else 0, printing what it said). */
static int seen_says(int k, const char *needle) {
    for (double end = now_s() + 5;; sleep_s(0.01)) {
        pthread_mutex_lock(&seen_mu);
        int got = strstr(seen[k], needle) != NULL;
        if (got || now_s() >= end) {
            if (!got) fprintf(stderr, "server %d said \"%s\", not \"%s\"\n", k, seen[k], needle);
            pthread_mutex_unlock(&seen_mu);
            return got;
        }
        pthread_mutex_unlock(&seen_mu);
    }
}

/* One client: 1 if it got READY and its heartbeat echoed. */
static int exchange(dlc_net_config c, int port, char *why, size_t whycap) {
    dlc_net *cl = dlc_net_new(&c);
    if (!cl) {
        snprintf(why, whycap, "%s", dlc_last_error());
        return 0;
    }
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    int peer = dlc_net_connect(cl, addr);
    dlc_net_event ev;
    int ok = 0;
    double end = now_s() + 6;
    why[0] = '\0';
    while (now_s() < end) {
        if (dlc_net_poll(cl, &ev, 50) != 1) continue;
        if (ev.kind == DLC_NET_READY) {
            dlc_frame f;
            dlc_frame_init(&f, DLC_FRAME_HEARTBEAT);
            f.msg.steps = 41;
            dlc_net_send(cl, peer, &f, NULL, NULL);
        } else if (ev.kind == DLC_NET_FRAME && ev.frame.msg.steps == 42) {
            ok = 1;
        } else if (ev.kind == DLC_NET_LOST || ev.kind == DLC_NET_REFUSED) {
            snprintf(why, whycap, "%s", ev.text);
            dlc_net_event_release(&ev);
            break;
        }
        dlc_net_event_release(&ev);
        if (ok) break;
    }
    dlc_net_free(cl);
    return ok;
}

/* A TLS client that connects before its server listens (a learner started with its
 * syncer): the refused connect is a socket error, retried, not a TLS failure (which would
 * be final), and once the server listens the client gets through. */
static void test_before_listen(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
          getsockname(fd, (struct sockaddr *)&sa, &len) == 0);
    close(fd); /* a port nobody listens on, until below */
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(sa.sin_port));
    dlc_net_config c = config();
    c.tls_ca = ca, c.reconnect_min_s = 0.05, c.reconnect_max_s = 0.2;
    dlc_net *cl = dlc_net_new(&c);
    CHECK_OK(cl);
    dlc_net_connect(cl, addr);
    dlc_net *late = NULL;
    int lost = 0, ready = 0;
    for (double end = now_s() + 10; now_s() < end && !ready;) {
        dlc_net_event ev;
        if (dlc_net_poll(cl, &ev, 50) != 1) continue;
        if (ev.kind == DLC_NET_LOST && !late) {
            lost = 1;
            CHECK(ev.code == DLC_PERR_NONE && strstr(ev.text, "refused"));
            if (ev.code != DLC_PERR_NONE || !strstr(ev.text, "refused"))
                fprintf(stderr, "before the server listens: %s (code %d)\n", ev.text, (int)ev.code);
            dlc_net_config sc = config();
            sc.tls_cert = cert, sc.tls_key = key;
            late = dlc_net_new(&sc);
            CHECK_OK(late);
            CHECK(dlc_net_listen(late, addr) == ntohs(sa.sin_port));
        }
        if (ev.kind == DLC_NET_READY) ready = 1;
        dlc_net_event_release(&ev);
    }
    CHECK(lost && ready);
    dlc_net_free(cl);
    dlc_net_free(late);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    if (!make_certs()) {
        fprintf(stderr, "net_tls: cannot make test certificates with the openssl tool (Debian package openssl)\n");
        return 1;
    }
    dlc_net_config sc = config();
    sc.tls_cert = cert, sc.tls_key = key;
    server = dlc_net_new(&sc);
    CHECK_OK(server);
    int port = dlc_net_listen(server, "127.0.0.1:0");
    CHECK(port > 0);
    pthread_t t;
    pthread_create(&t, NULL, serve, NULL);
    char why[700];

    dlc_net_config cc = config();
    cc.tls_ca = ca;
    CHECK(exchange(cc, port, why, sizeof why));

    /* a client that trusts another CA refuses the server's certificate */
    cc.tls_ca = other_ca;
    CHECK(!exchange(cc, port, why, sizeof why) && strstr(why, "TLS"));
    if (!strstr(why, "TLS")) fprintf(stderr, "wrong CA: %s\n", why);

    /* a plain-TCP client gets nowhere (its AUTH is not a TLS record), and each end says
     * which of them expected TLS */
    dlc_net_config pc = dlc_net_default_config();
    pc.secret = "tls secret", pc.secret_len = 10, pc.auth_timeout_s = 2, pc.reconnect_max_s = 0;
    char says[80];
    snprintf(says, sizeof says, "does the server at 127.0.0.1:%d expect TLS?", port);
    CHECK(!exchange(pc, port, why, sizeof why) && strstr(why, says));
    if (!strstr(why, says)) fprintf(stderr, "plain client: %s\n", why);
    CHECK(seen_says(0, "does not speak TLS, and this end expects it")); /* (its REFUSED may come after the LOST) */

    /* a TLS client to a server without TLS: the same, the other way round */
    dlc_net_config ps = dlc_net_default_config();
    ps.secret = "tls secret", ps.secret_len = 10;
    plain = dlc_net_new(&ps);
    CHECK_OK(plain);
    int pport = dlc_net_listen(plain, "127.0.0.1:0");
    pthread_t tp;
    pthread_create(&tp, NULL, serve, (void *)1);
    cc.tls_ca = ca;
    CHECK(!exchange(cc, pport, why, sizeof why) && strstr(why, "does not speak TLS, and this end expects it"));
    if (!strstr(why, "does not speak TLS")) fprintf(stderr, "TLS client to a plain server: %s\n", why);
    CHECK(seen_says(1, "the peer speaks TLS (a TLS handshake record), and this end does not"));

    /* the run secret is still checked inside TLS */
    cc.tls_ca = ca, cc.secret = "wrong secret", cc.secret_len = 12;
    CHECK(!exchange(cc, port, why, sizeof why) && strstr(why, "does not know"));

    /* and after all of them, a good client still gets through */
    cc.secret = "tls secret", cc.secret_len = 10;
    CHECK(exchange(cc, port, why, sizeof why));
    /* also one without an I/O thread: the TLS handshake runs in its polls */
    cc.inline_io = 1;
    CHECK(exchange(cc, port, why, sizeof why));
    cc.inline_io = 0;

    test_before_listen();

    /* configuration errors name the file */
    dlc_net_config bad = config();
    bad.tls_cert = "/nonexistent.pem", bad.tls_key = key;
    CHECK_PFAILS(dlc_net_new(&bad), DLC_ERR_IO, "tls_cert \"/nonexistent.pem\"");
    bad = config();
    CHECK_PFAILS(dlc_net_new(&bad), DLC_ERR_ARG, "without tls_ca");

    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    pthread_join(tp, NULL);
    dlc_net_free(server);
    dlc_net_free(plain);
    sh("rm -rf %s", dir);
    return check_done("net_tls");
}

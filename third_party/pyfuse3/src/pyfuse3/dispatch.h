/*
dispatch.h -- datahub: a workspace's requests run by C threads straight into Python handlers
(issue 41, loop20). The end of fastloop.h, which includes it.

fastloop.h's reader hands every request it cannot answer to the trio loop: a copy, a queue, an
eventfd, a trio turn, a coroutine stepped by a task; a handler that blocks (a small file's
FLUSH: the pack's fdatasync) then hops to a worker thread and back to trio to reply. A
workspace's handlers are synchronous (they block; none needs trio), so here the C threads run
them themselves:

- at most one thread at a time holds the *reader role*: it reads /dev/fuse (non-blocking, poll
  on the fd and the stop eventfd), answers what fastloop.h answers in C, hands INIT (and what
  comes before it) to the trio loop as fastloop.h does, and runs every other request through
  the dispatch function (the extension's: it takes the GIL, runs fuse_session_process_buf on
  the thread's own buffer and steps the handler's coroutine to its end);
- a handler about to block calls pyfuse3_fd_blocking() (Python: pyfuse3.dispatch_blocking()):
  the role goes to an idle thread (a condition variable), else to a new one while fewer than
  the maximum run, else it stays vacant until a thread finishes its handler. The blocking
  thread finishes its request (the reply included) and then takes the role if vacant, or
  waits idle. A handler that never blocks (a LOOKUP, a WRITE into memory) costs no hand-off;
- the end of the session (ENODEV, a read error) is queued once for the trio loop, as
  fastloop.h does, and every thread stops; so does pyfuse3_fl_signal_stop.

Threads, owners, lock order: pyfuse3_fd.lock guards the role, the idle count, the thread list
and stop. It is a leaf: nothing else is taken while it is held, and it is never held across a
system call that waits or while taking the GIL. Python callers of pyfuse3_fd_blocking hold
the GIL and then take it (GIL, then this lock), as every C lock of fastloop.h. The dispatch
function takes the GIL with no C lock held. Each thread's read buffer is its own and is used by
its handler only while that handler runs, in that thread; a thread that gave the role up and
then waited a second for it again trims it (pyfuse3_fd_trim), so idle threads hold no big
request's pages for long.

A WRITE's handler gets a read-only view of this buffer, not a copy (perf41d: the extension's
fuse_write_buf, only in these threads). The extension releases the view after the handler; a
slice of it, or a buffer taken from it, still alive then is a bug of the file system: the
extension calls pyfuse3_fd_keep, the thread never reads into, trims or unmaps that buffer
again, and the session ends (EIO) instead of a later request's bytes showing through it.
*/
#ifndef PYFUSE3_DISPATCH_H
#define PYFUSE3_DISPATCH_H
#include "fastloop.h"
#include <sys/mman.h>
#include <time.h>

#define PYFUSE3_FD_INIT 26
#define PYFUSE3_FD_MAX_THREADS 256
/* What an idle thread keeps of its buffer: the pages of every request but a big WRITE's */
#define PYFUSE3_FD_KEEP ((size_t)64 * 1024)
/* Seconds a thread waits idle before it gives a big request's pages back (perf41): the role
   goes round two or three threads, one handoff per blocking request (a small file's FLUSH), so
   a trim at every handoff cost each file an madvise and the page faults of its next WRITE */
#define PYFUSE3_FD_TRIM_AFTER_S 1

/* the extension's hooks: run one request (the GIL taken inside); a thread's first and last
   call (the thread state it keeps for its life) */
typedef void (*pyfuse3_fd_fn)(const char *buf, size_t n);
typedef void *(*pyfuse3_fd_begin_fn)(void);
typedef void (*pyfuse3_fd_end_fn)(void *state);

struct pyfuse3_fd_counters {
    uint64_t dispatched; /* requests run by the dispatching threads */
    uint64_t handoffs;   /* reader roles handed over by a handler about to block */
    uint64_t vacant;     /* ... with no idle thread and the maximum running: left vacant */
    uint64_t kept;       /* buffers left to a view a WRITE's handler kept (pyfuse3_fd_keep) */
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int want;    /* the next main() dispatches (pyfuse3.dispatch(threads)) */
    int max;     /* threads at most */
    int started; /* threads started (their ids in tids) */
    int reader;  /* a thread holds the reader role */
    int idle;    /* threads waiting for the role */
    int stop;
    int ended;   /* the end of the session was queued for the trio loop */
    pyfuse3_fd_fn fn;
    pyfuse3_fd_begin_fn begin;
    pyfuse3_fd_end_fn end;
    pthread_t tids[PYFUSE3_FD_MAX_THREADS];
    struct pyfuse3_fd_counters n;
} pyfuse3_fd = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static __thread int pyfuse3_fd_is_reader; /* this thread holds the reader role */
static __thread int pyfuse3_fd_thread;    /* this thread is a dispatching thread */
static __thread int pyfuse3_fd_kept;      /* a handler kept a view of this thread's buffer */

/* 1 in a dispatching thread: a handler's coroutine is stepped where libfuse calls it */
static int pyfuse3_fd_here(void) {
    return pyfuse3_fd_thread;
}

static void *pyfuse3_fd_main(void *unused);

/* Ask for dispatching threads (at most max) at the next start; 0 turns it off. */
static void pyfuse3_fd_set(int max, pyfuse3_fd_fn fn, pyfuse3_fd_begin_fn begin, pyfuse3_fd_end_fn end) {
    pthread_mutex_lock(&pyfuse3_fd.lock);
    pyfuse3_fd.want = max > 0 && fn != NULL;
    pyfuse3_fd.max = max < 1 ? 1 : (max > PYFUSE3_FD_MAX_THREADS ? PYFUSE3_FD_MAX_THREADS : max);
    pyfuse3_fd.fn = fn;
    pyfuse3_fd.begin = begin;
    pyfuse3_fd.end = end;
    pthread_mutex_unlock(&pyfuse3_fd.lock);
}

static int pyfuse3_fd_wanted(void) {
    int w;
    pthread_mutex_lock(&pyfuse3_fd.lock);
    w = pyfuse3_fd.want;
    pthread_mutex_unlock(&pyfuse3_fd.lock);
    return w;
}

/* start one more thread (caller holds the lock); 0, or an errno */
static int pyfuse3_fd_spawn_locked(void) {
    int err;
    if (pyfuse3_fd.started >= pyfuse3_fd.max)
        return EAGAIN;
    err = pthread_create(&pyfuse3_fd.tids[pyfuse3_fd.started], NULL, pyfuse3_fd_main, NULL);
    if (err != 0)
        return err;
    pthread_setname_np(pyfuse3_fd.tids[pyfuse3_fd.started], "pyfuse3-disp");
    pyfuse3_fd.started++;
    return 0;
}

/* the end of the session: queued once for the trio loop, and every thread stops */
static void pyfuse3_fd_end_session(int err) {
    int first;
    pthread_mutex_lock(&pyfuse3_fd.lock);
    first = !pyfuse3_fd.ended;
    pyfuse3_fd.ended = 1;
    pyfuse3_fd.stop = 1;
    pthread_cond_broadcast(&pyfuse3_fd.cond);
    pthread_mutex_unlock(&pyfuse3_fd.lock);
    if (first)
        pyfuse3_fl_push_end(err);
}

/* A view of this thread's read buffer outlived its handler (called with the GIL held, by the
   extension, after the handler returned): the buffer is left to it (never read into, trimmed or
   unmapped again; the thread stops after this request) and the session ends with EIO, as for a
   handler's exception. Why not go on: the next read would change the bytes under the view. */
static void pyfuse3_fd_keep(void) {
    if (!pyfuse3_fd_thread || pyfuse3_fd_kept)
        return;
    pyfuse3_fd_kept = 1;
    pthread_mutex_lock(&pyfuse3_fd.lock);
    pyfuse3_fd.n.kept++;
    pthread_mutex_unlock(&pyfuse3_fd.lock);
    pyfuse3_fd_end_session(EIO);
}

/* A handler is about to block (called with the GIL held): another thread reads meanwhile.
   Returns 1 in a dispatching thread (the caller may block here), 0 elsewhere (the trio loop:
   the caller must not). */
static int pyfuse3_fd_blocking(void) {
    if (!pyfuse3_fd_thread)
        return 0;
    if (!pyfuse3_fd_is_reader)
        return 1;
    pyfuse3_fd_is_reader = 0;
    pthread_mutex_lock(&pyfuse3_fd.lock);
    pyfuse3_fd.reader = 0;
    pyfuse3_fd.n.handoffs++;
    if (pyfuse3_fd.idle > 0)
        pthread_cond_signal(&pyfuse3_fd.cond);
    else if (pyfuse3_fd_spawn_locked() != 0)
        pyfuse3_fd.n.vacant++; /* the first thread whose handler ends reads */
    pthread_mutex_unlock(&pyfuse3_fd.lock);
    return 1;
}

static void pyfuse3_fd_trim(char *buf, size_t cap, size_t *high);

/* Wait until this thread may read (1), or the session stops (0). A thread holding a big
   request's pages (``high``) waits at most PYFUSE3_FD_TRIM_AFTER_S for the role, then gives
   them back (pyfuse3_fd_trim, outside the lock) and waits on. While it trims it still counts
   as idle, so a handoff signals instead of starting a thread; that signal may find no waiter,
   and the role is then vacant, which the loop's check of ``reader`` takes. */
static int pyfuse3_fd_take_role(char *buf, size_t cap, size_t *high) {
    int ok;
    pthread_mutex_lock(&pyfuse3_fd.lock);
    while (pyfuse3_fd.reader && !pyfuse3_fd.stop) {
        pyfuse3_fd.idle++;
        if (*high > PYFUSE3_FD_KEEP) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += PYFUSE3_FD_TRIM_AFTER_S;
            if (pthread_cond_timedwait(&pyfuse3_fd.cond, &pyfuse3_fd.lock, &until) == ETIMEDOUT) {
                pthread_mutex_unlock(&pyfuse3_fd.lock);
                pyfuse3_fd_trim(buf, cap, high);
                pthread_mutex_lock(&pyfuse3_fd.lock);
            }
        } else {
            pthread_cond_wait(&pyfuse3_fd.cond, &pyfuse3_fd.lock);
        }
        pyfuse3_fd.idle--;
    }
    ok = !pyfuse3_fd.stop;
    if (ok)
        pyfuse3_fd.reader = 1;
    pthread_mutex_unlock(&pyfuse3_fd.lock);
    pyfuse3_fd_is_reader = ok;
    return ok;
}

/* Hand a request to the trio loop (INIT: its reply may offer io_uring, and operations.init()
   runs there), as fastloop.h's reader does; 0, or ENOMEM. */
static int pyfuse3_fd_hand_over(const char *buf, size_t n) {
    struct pyfuse3_fl_msg *m = malloc(sizeof *m + n);
    if (m == NULL)
        return ENOMEM;
    pyfuse3_ur_note_init(buf, n);
    m->size = n;
    m->err = 0;
    memcpy(m->data, buf, n);
    pyfuse3_fl_push(m);
    return 0;
}

/* A thread's read buffer: a mapping of its own (page-aligned, madvise-able: pyfuse3_fd_trim)
   between two PROT_NONE pages, so an overrun faults instead of writing into a neighbour and
   /proc/PID/smaps shows each buffer apart, never merged with an adjacent mapping
   (tests/fuse/test_leftovers21_dispatch.py). NULL if it cannot be mapped. */
static char *pyfuse3_fd_buffer(size_t cap) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *base = mmap(NULL, cap + 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
        return NULL;
    if (mprotect(base + page, cap, PROT_READ | PROT_WRITE) != 0) {
        munmap(base, cap + 2 * page);
        return NULL;
    }
    return base + page;
}

static void pyfuse3_fd_buffer_free(char *buf, size_t cap) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (buf != NULL)
        munmap(buf - page, cap + 2 * page);
}

/* An idle thread (pyfuse3_fd_take_role) gives back the pages a big request filled (up to 1 MiB)
   once it has waited PYFUSE3_FD_TRIM_AFTER_S for the role (MADV_DONTNEED: zero pages when read
   into again). Before leftovers21, every thread that had ever read a 1 MiB WRITE held it
   resident for the life of the mount (up to 256 threads). ``high``: the largest request read
   since the last trim. */
static void pyfuse3_fd_trim(char *buf, size_t cap, size_t *high) {
    if (*high <= PYFUSE3_FD_KEEP)
        return;
    (void)madvise(buf + PYFUSE3_FD_KEEP, cap - PYFUSE3_FD_KEEP, MADV_DONTNEED); /* advice: may fail */
    *high = 0;
}

static void *pyfuse3_fd_main(void *unused) {
    int devfd = pyfuse3_fl.devfd;
    size_t cap = (size_t)sysconf(_SC_PAGESIZE) * 256 + 0x1000; /* as fastloop.h's reader */
    size_t high = 0;
    char *buf = pyfuse3_fd_buffer(cap);
    void *state = pyfuse3_fd.begin != NULL ? pyfuse3_fd.begin() : NULL;
    struct pollfd p[2];
    (void)unused;
    pyfuse3_fd_thread = 1;
    p[0].fd = devfd;
    p[0].events = POLLIN;
    p[1].fd = pyfuse3_fl.stopfd;
    p[1].events = POLLIN;
    if (buf == NULL) {
        pyfuse3_fd_end_session(ENOMEM);
        goto out;
    }
    while (pyfuse3_fd_take_role(buf, cap, &high)) {
        /* the reader: read and run requests until a handler gives the role up */
        while (pyfuse3_fd_is_reader) {
            const struct pyfuse3_fl_in *in = (const struct pyfuse3_fl_in *)buf;
            ssize_t n;
            if (__atomic_load_n(&pyfuse3_fl.stop, __ATOMIC_ACQUIRE)) {
                pyfuse3_fd_end_session(0); /* terminate(): the trio loop ends by itself */
                break;
            }
            n = read(devfd, buf, cap);
            if (n < 0) {
                int err = errno;
                if (err == EAGAIN) {
                    if (poll(p, 2, -1) < 0 && errno != EINTR) {
                        pyfuse3_fd_end_session(errno);
                        break;
                    }
                    continue; /* the stop eventfd is checked at the top */
                }
                if (err == EINTR || err == ENOENT)
                    continue;
                pyfuse3_fd_end_session(pyfuse3_fl_connection_gone(err) ? 0 : err);
                break;
            }
            if (n == 0 || (size_t)n < sizeof *in) {
                pyfuse3_fd_end_session(n == 0 ? 0 : EIO);
                break;
            }
            if (pyfuse3_fl_answer(devfd, buf, (size_t)n) || pyfuse3_fl_forget(buf, (size_t)n))
                continue;
            if (in->opcode == PYFUSE3_FD_INIT) {
                if (pyfuse3_fd_hand_over(buf, (size_t)n) != 0) {
                    pyfuse3_fd_end_session(ENOMEM);
                    break;
                }
                continue;
            }
            __atomic_fetch_add(&pyfuse3_fd.n.dispatched, 1, __ATOMIC_RELAXED);
            if ((size_t)n > high)
                high = (size_t)n;
            pyfuse3_fd.fn(buf, (size_t)n); /* may give the role up (pyfuse3_fd_blocking) */
            if (pyfuse3_fd_kept)
                break;
        }
        if (pyfuse3_fd_is_reader) { /* the session ended under this reader */
            pthread_mutex_lock(&pyfuse3_fd.lock);
            pyfuse3_fd.reader = 0;
            pthread_mutex_unlock(&pyfuse3_fd.lock);
            pyfuse3_fd_is_reader = 0;
        }
        if (pyfuse3_fd_kept) {
            buf = NULL; /* left mapped for the view a handler kept: never freed */
            break;
        }
    }
out:
    pyfuse3_fd_buffer_free(buf, cap);
    if (pyfuse3_fd.end != NULL)
        pyfuse3_fd.end(state);
    return NULL;
}

/* Start the first dispatching thread (fastloop.h's pyfuse3_fl_start, when asked); 0 or errno */
static int pyfuse3_fd_start(void) {
    int err;
    pthread_mutex_lock(&pyfuse3_fd.lock);
    pyfuse3_fd.started = 0;
    pyfuse3_fd.reader = 0;
    pyfuse3_fd.idle = 0;
    pyfuse3_fd.stop = 0;
    pyfuse3_fd.ended = 0;
    memset(&pyfuse3_fd.n, 0, sizeof pyfuse3_fd.n);
    err = pyfuse3_fd_spawn_locked();
    pthread_mutex_unlock(&pyfuse3_fd.lock);
    return err;
}

/* Stop and join every dispatching thread (without the GIL: their handlers finish first) */
static void pyfuse3_fd_join(void) {
    int i, started;
    pthread_mutex_lock(&pyfuse3_fd.lock);
    pyfuse3_fd.stop = 1;
    pthread_cond_broadcast(&pyfuse3_fd.cond);
    pthread_mutex_unlock(&pyfuse3_fd.lock);
    /* a thread started only while a handler runs, and every handler runs in one of these */
    for (i = 0;; i++) {
        pthread_mutex_lock(&pyfuse3_fd.lock);
        started = pyfuse3_fd.started;
        pthread_mutex_unlock(&pyfuse3_fd.lock);
        if (i >= started)
            break;
        pthread_join(pyfuse3_fd.tids[i], NULL);
    }
    /* started stays as it was (the counters after the session); pyfuse3_fd_start resets it */
}

static void pyfuse3_fd_snapshot(struct pyfuse3_fd_counters *n, int *threads, int *running) {
    pthread_mutex_lock(&pyfuse3_fd.lock);
    *n = pyfuse3_fd.n;
    n->dispatched = __atomic_load_n(&pyfuse3_fd.n.dispatched, __ATOMIC_RELAXED);
    *threads = pyfuse3_fd.started;
    *running = pyfuse3_fd.want;
    pthread_mutex_unlock(&pyfuse3_fd.lock);
}
#endif

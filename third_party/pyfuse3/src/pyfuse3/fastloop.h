/*
fastloop.h -- datahub: a C thread that reads /dev/fuse and answers what fastopen.h can.

With FUSE passthrough, an open of a disk-tier file costs the daemon three requests (OPEN,
the FUSE_IOCTL of Python's isatty(), RELEASE). All three were answered in C already, but
each lone request still cost a trio turn (epoll wake-up, trio's lock, wait_readable, then
the read). Here one thread, which never takes the GIL, is the only reader of the session fd:

- it answers OPEN of a published file (fastopen.h's rules), RELEASE of a table handle, and
  FUSE_IOCTL of a file with ENOSYS (what libfuse answers: pyfuse3 registers no ioctl
  handler; a directory's ioctl is handed over, libfuse answers those with ENOTTY), by
  writing the reply to the fd itself;
- it hands every other request over unchanged: a copy of the raw buffer goes to a queue and
  an eventfd wakes the trio loop, which runs fuse_session_process_buf on it as before;
- the end of the session (ENODEV at unmount, ECONNABORTED when the connection is torn down
  under a read, or a read error) is queued as a last,
  sticky message: every loop task that pops it ends as it did on libfuse's own read.

The fastopen table is now shared by two threads: every entry point below takes
pyfuse3_fo_lock. The thread never takes the GIL, so Python-side callers (which hold it)
cannot deadlock with it. A queued message stays the popping task's until its request is
done (pyfuse3_fl_free), as libfuse's receive buffer did.
*/
#ifndef PYFUSE3_FASTLOOP_H
#define PYFUSE3_FASTLOOP_H
#include "fastopen.h"
#include "lookup.h"
#include "fastread.h"
#include "fastwrite.h"
#include <poll.h>
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_setname_np */
#endif
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>

/* kernel ABI (include/uapi/linux/fuse.h); Debian 12's header predates passthrough */
struct pyfuse3_fl_in {
    uint32_t len;
    uint32_t opcode;
    uint64_t unique;
    uint64_t nodeid;
    uint32_t uid, gid, pid;
    uint16_t total_extlen, padding;
};
struct pyfuse3_fl_out {
    uint32_t len;
    int32_t error;
    uint64_t unique;
};
struct pyfuse3_fl_open_in {
    uint32_t flags;
    uint32_t open_flags;
};
struct pyfuse3_fl_open_out {
    uint64_t fh;
    uint32_t open_flags;
    int32_t backing_id;
};
struct pyfuse3_fl_release_in {
    uint64_t fh;
    uint32_t flags;
    uint32_t release_flags;
    uint64_t lock_owner;
};
struct pyfuse3_fl_ioctl_in {
    uint64_t fh;
    uint32_t flags;
    uint32_t cmd;
    uint64_t arg;
    uint32_t in_size;
    uint32_t out_size;
};
struct pyfuse3_fl_read_in {
    uint64_t fh;
    uint64_t offset;
    uint32_t size;
    uint32_t read_flags;
    uint64_t lock_owner;
    uint32_t flags;
    uint32_t padding;
};
struct pyfuse3_fl_write_in {
    uint64_t fh;
    uint64_t offset;
    uint32_t size;
    uint32_t write_flags;
    uint64_t lock_owner;
    uint32_t flags;
    uint32_t padding;
};
struct pyfuse3_fl_write_out {
    uint32_t size;
    uint32_t padding;
};
#define PYFUSE3_FL_FORGET 2
#define PYFUSE3_FL_WRITE 16
#define PYFUSE3_FL_BATCH_FORGET 42
#define PYFUSE3_FL_OPEN 14
#define PYFUSE3_FL_READ 15
#define PYFUSE3_FL_RELEASE 18
#define PYFUSE3_FL_IOCTL 39
#define PYFUSE3_FL_IOCTL_DIR (1 << 4)
#define PYFUSE3_FOPEN_NOFLUSH (1 << 5)
#define PYFUSE3_FOPEN_PASSTHROUGH (1 << 7)

static pthread_mutex_t pyfuse3_fo_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- the fastopen table, locked (every caller outside this file goes through these) ---- */
#define PYFUSE3_FO_LOCKED(type, call) \
    type r;                           \
    pthread_mutex_lock(&pyfuse3_fo_lock); \
    r = call;                         \
    pthread_mutex_unlock(&pyfuse3_fo_lock); \
    return r;

static int pyfuse3_fo_handle_l(int devfd, uint64_t ino, uint64_t *fh, int32_t *backing_id) {
    PYFUSE3_FO_LOCKED(int, pyfuse3_fo_handle(devfd, ino, fh, backing_id))
}
static int pyfuse3_fo_pin_l(uint64_t ino, uint64_t *fh, int32_t *backing_id) {
    PYFUSE3_FO_LOCKED(int, pyfuse3_fo_pin(ino, fh, backing_id))
}
static int pyfuse3_fo_release_l(int devfd, uint64_t fh) {
    PYFUSE3_FO_LOCKED(int, pyfuse3_fo_release(devfd, fh))
}
static int pyfuse3_fo_publish_l(int devfd, uint64_t ino, int fd) {
    PYFUSE3_FO_LOCKED(int, pyfuse3_fo_publish(devfd, ino, fd))
}
static int pyfuse3_fo_retract_l(int devfd, uint64_t ino) {
    PYFUSE3_FO_LOCKED(int, pyfuse3_fo_retract(devfd, ino))
}
static long pyfuse3_fo_handles_l(uint64_t ino) {
    PYFUSE3_FO_LOCKED(long, pyfuse3_fo_handles(ino))
}
static int pyfuse3_fo_held_fd_l(uint64_t ino) {
    PYFUSE3_FO_LOCKED(int, pyfuse3_fo_held_fd(ino))
}
static uint64_t pyfuse3_fo_retract_file_l(int devfd, uint64_t dev, uint64_t st_ino) {
    PYFUSE3_FO_LOCKED(uint64_t, pyfuse3_fo_retract_file(devfd, dev, st_ino))
}
static int pyfuse3_fo_revalidate_l(uint64_t ino, int64_t size, int64_t nlink, int64_t ctime_ns,
                                   int64_t mtime_ns, uint64_t *fh, int32_t *backing_id) {
    PYFUSE3_FO_LOCKED(int, pyfuse3_fo_revalidate(ino, size, nlink, ctime_ns, mtime_ns, fh, backing_id))
}
static unsigned pyfuse3_fo_drain_hits_l(uint64_t *out, unsigned max) {
    PYFUSE3_FO_LOCKED(unsigned, pyfuse3_fo_drain_hits(out, max))
}
static unsigned pyfuse3_fo_sweep_l(int devfd, unsigned slots, uint64_t *out, unsigned max) {
    PYFUSE3_FO_LOCKED(unsigned, pyfuse3_fo_sweep(devfd, slots, out, max))
}
static unsigned pyfuse3_fo_published_l(void) {
    PYFUSE3_FO_LOCKED(unsigned, pyfuse3_fo_published())
}
static void pyfuse3_fo_close_all_l(int devfd) {
    pthread_mutex_lock(&pyfuse3_fo_lock);
    pyfuse3_fo_close_all(devfd);
    pthread_mutex_unlock(&pyfuse3_fo_lock);
}
/* a consistent copy of the counters and the entry count */
static void pyfuse3_fo_snapshot(struct pyfuse3_fo_counters *n, unsigned *count) {
    pthread_mutex_lock(&pyfuse3_fo_lock);
    *n = pyfuse3_fo_n;
    *count = pyfuse3_fo_count;
    pthread_mutex_unlock(&pyfuse3_fo_lock);
}

/* fuse_open's fast path (a request handed over, or the old loop): 1 if answered here */
static int pyfuse3_fo_try_open_l(int devfd, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    uint64_t fh;
    int32_t id;
    int ok;
    pthread_mutex_lock(&pyfuse3_fo_lock);
    ok = pyfuse3_fo_open(devfd, ino, fi->flags, &fh, &id);
    pthread_mutex_unlock(&pyfuse3_fo_lock);
    if (!ok)
        return 0;
    fi->fh = fh;
    pyfuse3_fi_set_backing_id(fi, id);
    pyfuse3_fi_set_noflush(fi); /* a read-only handle: nothing for close() to flush */
    fi->keep_cache = 0; /* outside FOPEN_PASSTHROUGH_MASK: the kernel would fail the open */
    fi->direct_io = 0;
    fi->nonseekable = 0;
    if (fuse_reply_open(req, fi) != 0)
        pyfuse3_fo_release_l(devfd, fh); /* the open did not happen: no RELEASE will come */
    return 1;
}

/* fuse_release's fast path: 1 if answered here */
static int pyfuse3_fo_try_release_l(int devfd, fuse_req_t req, struct fuse_file_info *fi) {
    int ok = 0;
    if (!pyfuse3_fo_answer)
        return 0;
    pthread_mutex_lock(&pyfuse3_fo_lock);
    if (pyfuse3_fo_release(devfd, fi->fh)) {
        pyfuse3_fo_n.c_releases++;
        ok = 1;
    }
    pthread_mutex_unlock(&pyfuse3_fo_lock);
    if (ok)
        fuse_reply_err(req, 0);
    return ok;
}

/* ---- the reader thread and its hand-over queue ---- */
struct pyfuse3_fl_msg {
    struct pyfuse3_fl_msg *next;
    size_t size; /* 0: the end of the session (err: 0 unmounted, else the read's errno) */
    int err;
    char data[] __attribute__((aligned(16)));
};

struct pyfuse3_fl_counters {
    uint64_t opens;    /* OPEN answered by the thread */
    uint64_t releases; /* RELEASE answered by the thread */
    uint64_t ioctls;   /* FUSE_IOCTL answered by the thread */
    uint64_t lookups;  /* LOOKUP of published names answered by the thread (lookup.h) */
    uint64_t handed;   /* requests handed over to the trio loop */
    uint64_t wakeups;  /* eventfd writes (the loop was idle) */
    uint64_t forgets;  /* FORGET and BATCH_FORGET dropped by the thread (pyfuse3_fl_forget) */
    uint64_t writes;   /* WRITE of a published staged handle answered by the thread (fastwrite.h) */
};

static struct {
    pthread_mutex_t lock; /* the queue */
    struct pyfuse3_fl_msg *head, *tail;
    int signalled; /* the eventfd was written since the loop last found the queue empty */
    int devfd, evfd, stopfd;
    int stop;
    int running;
    int dispatching; /* dispatch.h's threads read instead of pyfuse3_fl_main */
    pthread_t thread;
    struct pyfuse3_fl_counters n;
} pyfuse3_fl = {.lock = PTHREAD_MUTEX_INITIALIZER, .devfd = -1, .evfd = -1, .stopfd = -1};

/* 0: the old loop (pyfuse3.passthrough_fastloop(False), or libfuse < 3.17) */
static int pyfuse3_fl_want = PYFUSE3_FASTPATH;

static void pyfuse3_fl_push(struct pyfuse3_fl_msg *m) {
    int wake;
    uint64_t one = 1;
    m->next = NULL;
    pthread_mutex_lock(&pyfuse3_fl.lock);
    if (pyfuse3_fl.tail)
        pyfuse3_fl.tail->next = m;
    else
        pyfuse3_fl.head = m;
    pyfuse3_fl.tail = m;
    if (m->size)
        pyfuse3_fl.n.handed++;
    wake = !pyfuse3_fl.signalled;
    pyfuse3_fl.signalled = 1;
    if (wake)
        pyfuse3_fl.n.wakeups++;
    pthread_mutex_unlock(&pyfuse3_fl.lock);
    if (wake)
        while (write(pyfuse3_fl.evfd, &one, sizeof one) < 0 && errno == EINTR)
            ;
}

/* queue the end of the session (static: it needs no allocation, e.g. after ENOMEM) */
static struct pyfuse3_fl_msg pyfuse3_fl_end_msg;
/* The device read errors that mean the session is over, not that it failed. */
static int pyfuse3_fl_connection_gone(int err) {
    return err == ENODEV || err == ECONNABORTED;
}

static void pyfuse3_fl_push_end(int err) {
    pyfuse3_fl_end_msg.size = 0;
    pyfuse3_fl_end_msg.err = err;
    pyfuse3_fl_push(&pyfuse3_fl_end_msg);
}

/* uring.h: replies to requests taken from an io_uring queue go back through it */
static ssize_t pyfuse3_ur_send(int fd, struct iovec *iov, int count);
static char *pyfuse3_ur_payload_of(uint64_t unique, size_t *room);
static void pyfuse3_ur_note_init(const char *buf, size_t n);
static void pyfuse3_ur_stop(void);

/* writev, as libfuse replies (strace-based tests see the same syscalls), or a commit into
   the io_uring entry the request came from (uring.h) */
static int pyfuse3_fl_reply(int devfd, const void *msg, size_t len) {
    struct iovec iov = {(void *)msg, len};
    ssize_t n = pyfuse3_ur_send(devfd, &iov, 1);
    return n == (ssize_t)len ? 0 : -1;
}

/* READ of a file the kernel opened itself (handle 0) whose page file is published
   (fastread.h): answered from it, 1; else 0 (hand it over). Each answering thread keeps
   its own buffer, as large as the largest READ it answered. */
static int pyfuse3_fl_read(int devfd, uint64_t unique, uint64_t ino, uint64_t off, uint32_t size) {
    static __thread char *buf;
    static __thread size_t cap;
    struct pyfuse3_fr_file *f = NULL;
    struct pyfuse3_fl_out h;
    struct iovec iov[2];
    ssize_t got;
    int direct = 0;
    size_t room = 0;
    char *dst = pyfuse3_ur_payload_of(unique, &room); /* over io_uring: the entry's payload */
    if (dst != NULL && size <= room) {
        got = pyfuse3_fr_read(ino, off, size, dst, room, &f, &direct);
    } else {
        if (size > cap) {
            size_t want = ((size_t)size + 0xFFFFF) & ~(size_t)0xFFFFF; /* whole MiBs */
            free(buf);
            buf = aligned_alloc(4096, want);
            cap = buf == NULL ? 0 : want;
            if (buf == NULL)
                return 0;
        }
        dst = buf;
        got = pyfuse3_fr_read(ino, off, size, buf, cap, &f, &direct);
    }
    if (got < 0)
        return 0;
    h.len = (uint32_t)(sizeof h + (size_t)got);
    h.error = 0;
    h.unique = unique;
    iov[0].iov_base = &h;
    iov[0].iov_len = sizeof h;
    iov[1].iov_base = dst;
    iov[1].iov_len = (size_t)got;
    pyfuse3_ur_send(devfd, iov, got ? 2 : 1);
    pyfuse3_fr_done(f, off, (size_t)got, direct);
    return 1;
}

/* 1 if the thread answered the request (exactly as fuse_session_process_buf would), 0 to
   hand it over */
static int pyfuse3_fl_answer(int devfd, const char *buf, size_t n) {
    const struct pyfuse3_fl_in *in = (const struct pyfuse3_fl_in *)buf;
    const void *arg = in + 1;
    if (in->len != n)
        return 0;
    switch (in->opcode) {
    case PYFUSE3_FL_LOOKUP: {
        struct {
            struct pyfuse3_fl_out h;
            struct pyfuse3_lk_entry_out e;
        } r;
        const char *name = (const char *)arg;
        size_t room = n - sizeof *in, len;
        if (n <= sizeof *in || in->total_extlen != 0)
            return 0;
        len = strnlen(name, room);
        if (len == 0 || len == room) /* no terminating NUL: libfuse's business */
            return 0;
        memset(&r.h, 0, sizeof r.h);
        if (!pyfuse3_lk_get(in->nodeid, name, len, &r.e))
            return 0;
        r.h.len = sizeof r;
        r.h.unique = in->unique;
        pyfuse3_fl_reply(devfd, &r, sizeof r);
        __atomic_fetch_add(&pyfuse3_fl.n.lookups, 1, __ATOMIC_RELAXED);
        return 1;
    }
    case PYFUSE3_FL_OPEN: {
        struct {
            struct pyfuse3_fl_out h;
            struct pyfuse3_fl_open_out o;
        } r;
        uint64_t fh;
        int32_t id;
        int ok;
        if (n < sizeof *in + sizeof(struct pyfuse3_fl_open_in))
            return 0;
        pthread_mutex_lock(&pyfuse3_fo_lock);
        ok = pyfuse3_fo_open(devfd, in->nodeid, (int)((const struct pyfuse3_fl_open_in *)arg)->flags,
                             &fh, &id);
        pthread_mutex_unlock(&pyfuse3_fo_lock);
        if (!ok)
            return 0;
        memset(&r, 0, sizeof r);
        r.h.len = sizeof r;
        r.h.unique = in->unique;
        r.o.fh = fh;
        r.o.open_flags = PYFUSE3_FOPEN_PASSTHROUGH | PYFUSE3_FOPEN_NOFLUSH; /* passthrough.h */
        r.o.backing_id = id;
        if (pyfuse3_fl_reply(devfd, &r, sizeof r) != 0)
            pyfuse3_fo_release_l(devfd, fh); /* the open did not happen: no RELEASE will come */
        __atomic_fetch_add(&pyfuse3_fl.n.opens, 1, __ATOMIC_RELAXED);
        return 1;
    }
    case PYFUSE3_FL_RELEASE: {
        struct pyfuse3_fl_out r = {sizeof r, 0, in->unique};
        int ok = 0;
        if (!pyfuse3_fo_answer || n < sizeof *in + sizeof(struct pyfuse3_fl_release_in))
            return 0;
        pthread_mutex_lock(&pyfuse3_fo_lock);
        if (pyfuse3_fo_release(devfd, ((const struct pyfuse3_fl_release_in *)arg)->fh)) {
            pyfuse3_fo_n.c_releases++;
            ok = 1;
        }
        pthread_mutex_unlock(&pyfuse3_fo_lock);
        if (!ok)
            return 0;
        pyfuse3_fl_reply(devfd, &r, sizeof r);
        __atomic_fetch_add(&pyfuse3_fl.n.releases, 1, __ATOMIC_RELAXED);
        return 1;
    }
    case PYFUSE3_FL_READ: {
        const struct pyfuse3_fl_read_in *r = (const struct pyfuse3_fl_read_in *)arg;
        if (n < sizeof *in + sizeof *r || r->fh != 0) /* 0: a file the kernel opened itself */
            return 0;
        return pyfuse3_fl_read(devfd, in->unique, in->nodeid, r->offset, r->size);
    }
    case PYFUSE3_FL_WRITE: {
        const struct pyfuse3_fl_write_in *w = (const struct pyfuse3_fl_write_in *)arg;
        struct {
            struct pyfuse3_fl_out h;
            struct pyfuse3_fl_write_out o;
        } r;
        int64_t got;
        if (in->total_extlen != 0 || n < sizeof *in + sizeof *w || n - sizeof *in - sizeof *w != w->size)
            return 0;
        got = pyfuse3_fw_write(w->fh, w->offset, (const char *)(w + 1), w->size, w->write_flags);
        if (got == PYFUSE3_FW_HAND)
            return 0;
        memset(&r, 0, sizeof r);
        r.h.unique = in->unique;
        if (got < 0) {
            r.h.len = sizeof r.h;
            r.h.error = (int32_t)got;
        } else {
            r.h.len = sizeof r;
            r.o.size = (uint32_t)got;
        }
        pyfuse3_fl_reply(devfd, &r, r.h.len);
        __atomic_fetch_add(&pyfuse3_fl.n.writes, 1, __ATOMIC_RELAXED);
        return 1;
    }
    case PYFUSE3_FL_IOCTL: {
        struct pyfuse3_fl_out r = {sizeof r, -ENOSYS, in->unique};
        if (n < sizeof *in + sizeof(struct pyfuse3_fl_ioctl_in) ||
            (((const struct pyfuse3_fl_ioctl_in *)arg)->flags & PYFUSE3_FL_IOCTL_DIR))
            return 0;
        pyfuse3_fl_reply(devfd, &r, sizeof r);
        __atomic_fetch_add(&pyfuse3_fl.n.ioctls, 1, __ATOMIC_RELAXED);
        return 1;
    }
    }
    return 0;
}

/* FORGET and BATCH_FORGET have no reply, and a file system that publishes LOOKUP answers
   (lookup.h: a read-only mount, whose inodes live as long as the mount) does nothing with
   them: 1 if this one is dropped here. After drop_caches or memory pressure the kernel
   forgets every inode it dropped, and each batch cost a hand-over (a copy, an eventfd
   wake-up, a trio turn, a Python coroutine) for nothing. They come through /dev/fuse only,
   never over io_uring. */
static int pyfuse3_fl_forget(const char *buf, size_t n) {
    const struct pyfuse3_fl_in *in = (const struct pyfuse3_fl_in *)buf;
    if (in->len != n || (in->opcode != PYFUSE3_FL_FORGET && in->opcode != PYFUSE3_FL_BATCH_FORGET))
        return 0;
    if (!pyfuse3_lk_any())
        return 0;
    __atomic_fetch_add(&pyfuse3_fl.n.forgets, 1, __ATOMIC_RELAXED);
    return 1;
}

static void *pyfuse3_fl_main(void *unused) {
    int devfd = pyfuse3_fl.devfd;
    /* what libfuse reads with before INIT: any request fits */
    size_t cap = (size_t)sysconf(_SC_PAGESIZE) * 256 + 0x1000;
    char *buf = aligned_alloc(4096, cap);
    struct pollfd p[2];
    (void)unused;
    if (buf == NULL) {
        pyfuse3_fl_push_end(ENOMEM);
        return NULL;
    }
    p[0].fd = devfd;
    p[0].events = POLLIN;
    p[1].fd = pyfuse3_fl.stopfd;
    p[1].events = POLLIN;
    while (!__atomic_load_n(&pyfuse3_fl.stop, __ATOMIC_ACQUIRE)) {
        ssize_t n = read(devfd, buf, cap); /* non-blocking (as in _answer_queued, internal.pxi) */
        if (n < 0) {
            int err = errno;
            if (err == EAGAIN) {
                if (poll(p, 2, -1) < 0 && errno != EINTR) {
                    pyfuse3_fl_push_end(errno);
                    break;
                }
                if (p[1].revents)
                    break; /* pyfuse3_fl_stop: the loop is ending, it reads no more */
                continue;
            }
            if (err == EINTR || err == ENOENT) /* ENOENT: interrupted before it was read */
                continue;
            /* ENODEV: unmounted. ECONNABORTED: the connection was torn down while this read
               held a request (6.18 gives it when the last handle of a lazily unmounted mount
               closes as a read is in flight): nothing is left to serve either way. */
            pyfuse3_fl_push_end(pyfuse3_fl_connection_gone(err) ? 0 : err);
            break;
        }
        if (n == 0) {
            pyfuse3_fl_push_end(0);
            break;
        }
        if ((size_t)n < sizeof(struct pyfuse3_fl_in)) {
            pyfuse3_fl_push_end(EIO); /* libfuse: "short read on fuse device" */
            break;
        }
        if (pyfuse3_fl_answer(devfd, buf, (size_t)n) || pyfuse3_fl_forget(buf, (size_t)n))
            continue;
        pyfuse3_ur_note_init(buf, (size_t)n);
        {
            struct pyfuse3_fl_msg *m = malloc(sizeof *m + (size_t)n);
            if (m == NULL) {
                pyfuse3_fl_push_end(ENOMEM);
                break;
            }
            m->size = (size_t)n;
            m->err = 0;
            memcpy(m->data, buf, (size_t)n);
            pyfuse3_fl_push(m);
        }
    }
    free(buf);
    return NULL;
}

/* dispatch.h: threads that run a workspace's handlers themselves, when asked */
static int pyfuse3_fd_wanted(void);
static int pyfuse3_fd_start(void);
static void pyfuse3_fd_join(void);

/* Start the reader for devfd; 0, or -errno (then the old loop serves the session). */
static int pyfuse3_fl_start(int devfd) {
    int err;
    if (!pyfuse3_fl_want)
        return -EOPNOTSUPP; /* passthrough_fastloop(False), or no fast path in this build */
    pyfuse3_fl.head = pyfuse3_fl.tail = NULL;
    pyfuse3_fl.signalled = 0;
    pyfuse3_fl.stop = 0;
    memset(&pyfuse3_fl.n, 0, sizeof pyfuse3_fl.n);
    pyfuse3_fl.devfd = devfd;
    pyfuse3_fl.evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pyfuse3_fl.stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (pyfuse3_fl.evfd < 0 || pyfuse3_fl.stopfd < 0) {
        err = errno;
        goto fail;
    }
    pyfuse3_fl.dispatching = pyfuse3_fd_wanted();
    if (pyfuse3_fl.dispatching) {
        err = pyfuse3_fd_start();
        if (err == 0) {
            pyfuse3_fl.running = 1;
            return 0;
        }
        goto fail;
    }
    err = pthread_create(&pyfuse3_fl.thread, NULL, pyfuse3_fl_main, NULL);
    if (err == 0) {
        pthread_setname_np(pyfuse3_fl.thread, "pyfuse3-loop"); /* seen in /proc/PID/task */
        pyfuse3_fl.running = 1;
        return 0;
    }
fail:
    if (pyfuse3_fl.evfd >= 0)
        close(pyfuse3_fl.evfd);
    if (pyfuse3_fl.stopfd >= 0)
        close(pyfuse3_fl.stopfd);
    pyfuse3_fl.evfd = pyfuse3_fl.stopfd = -1;
    return -err;
}

/* Ask the reader to stop (from any thread; it reads nothing more once it sees this) */
static void pyfuse3_fl_signal_stop(void) {
    uint64_t one = 1;
    if (!pyfuse3_fl.running)
        return;
    __atomic_store_n(&pyfuse3_fl.stop, 1, __ATOMIC_RELEASE);
    while (write(pyfuse3_fl.stopfd, &one, sizeof one) < 0 && errno == EINTR)
        ;
}

/* Stop and join the reader, drop what is queued (call without the GIL) */
static void pyfuse3_fl_stop(void) {
    struct pyfuse3_fl_msg *m, *next;
    if (!pyfuse3_fl.running)
        return;
    pyfuse3_fl_signal_stop();
    if (pyfuse3_fl.dispatching)
        pyfuse3_fd_join();
    else
        pthread_join(pyfuse3_fl.thread, NULL);
    pyfuse3_fl.dispatching = 0;
    pyfuse3_ur_stop(); /* its queue threads push to the queue too */
    pyfuse3_fl.running = 0;
    for (m = pyfuse3_fl.head; m != NULL; m = next) {
        next = m->next;
        if (m != &pyfuse3_fl_end_msg)
            free(m);
    }
    pyfuse3_fl.head = pyfuse3_fl.tail = NULL;
    close(pyfuse3_fl.evfd);
    close(pyfuse3_fl.stopfd);
    pyfuse3_fl.evfd = pyfuse3_fl.stopfd = -1;
}

/* The loop's receive: > 0 a request of that size in *mem (free it with pyfuse3_fl_free once
   its request is done), -EAGAIN none queued (wait for the eventfd), 0 the session ended
   (unmounted), -errno the reader's read failed. The end stays queued for every task. */
static int pyfuse3_fl_pop(void **mem) {
    struct pyfuse3_fl_msg *m;
    uint64_t drain;
    int r;
    pthread_mutex_lock(&pyfuse3_fl.lock);
    m = pyfuse3_fl.head;
    if (m == NULL) {
        pyfuse3_fl.signalled = 0;
        (void)!read(pyfuse3_fl.evfd, &drain, sizeof drain); /* non-blocking */
        r = -EAGAIN;
    } else if (m->size == 0) {
        r = -m->err;
    } else {
        pyfuse3_fl.head = m->next;
        if (pyfuse3_fl.head == NULL) {
            /* the last one: drain now, or the loop's next wait would return at once and
               cost a trio turn only to find the queue empty */
            pyfuse3_fl.tail = NULL;
            pyfuse3_fl.signalled = 0;
            (void)!read(pyfuse3_fl.evfd, &drain, sizeof drain);
        }
        *mem = m->data;
        r = (int)m->size;
    }
    pthread_mutex_unlock(&pyfuse3_fl.lock);
    return r;
}

static int pyfuse3_fl_evfd(void) {
    return pyfuse3_fl.evfd;
}

static void pyfuse3_fl_free(void *mem) {
    if (mem != NULL)
        free((char *)mem - offsetof(struct pyfuse3_fl_msg, data));
}

static void pyfuse3_fl_snapshot(struct pyfuse3_fl_counters *n) {
    pthread_mutex_lock(&pyfuse3_fl.lock);
    *n = pyfuse3_fl.n;
    n->opens = __atomic_load_n(&pyfuse3_fl.n.opens, __ATOMIC_RELAXED);
    n->releases = __atomic_load_n(&pyfuse3_fl.n.releases, __ATOMIC_RELAXED);
    n->ioctls = __atomic_load_n(&pyfuse3_fl.n.ioctls, __ATOMIC_RELAXED);
    n->forgets = __atomic_load_n(&pyfuse3_fl.n.forgets, __ATOMIC_RELAXED);
    n->writes = __atomic_load_n(&pyfuse3_fl.n.writes, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pyfuse3_fl.lock);
}
#include "uring.h"
#include "dispatch.h"
#endif

/*
uring.h -- datahub: FUSE requests over io_uring, one queue per CPU (Linux >= 6.14,
CONFIG_FUSE_IO_URING, module parameter fuse.enable_uring=Y).

Through /dev/fuse, each request of a reader wakes the one thread that reads the device,
wherever it last ran. On a VM whose idle vCPUs halt, that wake-up (and the one back to the
reader) costs more than the answer: a warm open of a passthrough file took 68 us with the
reader thread on another CPU and 28 us with both pinned to one. FUSE over io_uring gives
each CPU its own queue: a request goes to the queue of the CPU its caller runs on, and
that queue's thread, pinned to the CPU, takes it as the caller blocks; no other CPU is
woken.

- The kernel offers FUSE_OVER_IO_URING at INIT when its parameter is on. pyfuse3's libfuse
  (3.17) does not know the flag, so the session's custom writev (pyfuse3_ur_send) adds it
  to libfuse's INIT reply, only after every queue's ring and thread exist: once INIT agreed,
  the kernel holds every request until all queues registered (a missing queue would hang
  the mount). A REGISTER the kernel refuses turns io_uring off for the connection, and
  requests keep coming through /dev/fuse.
- Queue threads ("pyfuse3-ring<cpu>") answer what fastloop.h answers (OPEN of a published
  file, its RELEASE, FUSE_IOCTL) and hand every other request to the trio loop's queue, as
  a /dev/fuse buffer rebuilt from the ring's header, op header and payload.
- Every reply, libfuse's or the threads', goes through pyfuse3_ur_send: a reply whose
  unique is a request taken from a ring is copied into that ring entry and committed
  (COMMIT_AND_FETCH on the entry's queue, under the queue's lock); anything else (INIT,
  notifications, requests read from /dev/fuse) is written to the device as before.
- Only a queue's own thread submits to its ring. Another thread (the trio loop) queues its
  commit and wakes the queue's thread through the queue's eventfd, polled in the ring. The
  kernel copies the next request into an entry as task work of the thread that submitted
  the entry's last command (fuse_uring_dispatch_ent): a commit submitted by the trio loop
  would make the loop's thread, wherever it runs and whatever it waits in, deliver the
  next request of that CPU (entries are reused last-in first-out), and a thread's exit
  cancels the commands it submitted.
- /dev/fuse stays read by fastloop.h's thread: INIT, FORGET, INTERRUPT and requests sent
  before the rings were ready come there.
- pyfuse3_ur_stop (when the loop ends) wakes the threads through an eventfd polled in each
  ring, joins them and closes the rings; the kernel cancels what they still held.
*/
#ifndef PYFUSE3_URING_H
#define PYFUSE3_URING_H
#include <fuse_lowlevel.h>
#include <linux/io_uring.h>
#include <sched.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/syscall.h>

/* kernel ABI (include/uapi/linux/fuse.h >= 6.14) */
struct pyfuse3_ur_ent_in_out {
    uint64_t flags;
    uint64_t commit_id;
    uint32_t payload_sz;
    uint32_t padding;
    uint64_t reserved;
};
struct pyfuse3_ur_header {
    char in_out[128]; /* fuse_in_header of a request, fuse_out_header of its reply */
    char op_in[128];  /* the request's first argument (its op header) */
    struct pyfuse3_ur_ent_in_out ent;
};
struct pyfuse3_ur_cmd {
    uint64_t flags;
    uint64_t commit_id;
    uint16_t qid;
    uint8_t padding[6];
};
#define PYFUSE3_UR_REGISTER 1
#define PYFUSE3_UR_COMMIT_AND_FETCH 2
#define PYFUSE3_UR_FLAG2 (1u << 9) /* FUSE_OVER_IO_URING (1ULL << 41) in flags2 */
#define PYFUSE3_UR_INIT_EXT (1u << 30)
#define PYFUSE3_FL_INIT 26
/* entries per queue (requests of one CPU in flight at once; more wait in the kernel): 16,
   fewer with many CPUs, so that all payloads together stay within 128 of them (each is
   max_write, touched as replies fill it) */
#define PYFUSE3_UR_DEPTH 16
#define PYFUSE3_UR_MIN_DEPTH 4
#define PYFUSE3_UR_PAYLOADS 128
#define PYFUSE3_UR_SQE 128  /* IORING_SETUP_SQE128 */
#define PYFUSE3_UR_STOP_DATA 0
#define PYFUSE3_UR_WAKE_DATA 1 /* not an entry's address */

struct pyfuse3_ur_queue;
struct pyfuse3_ur_ent {
    struct pyfuse3_ur_queue *q;
    struct pyfuse3_ur_header *hdr;
    char *payload;
    uint64_t unique; /* the request it holds, while it is in the table */
    struct pyfuse3_ur_ent *next; /* table chain */
    int cmd; /* last command sent */
    struct iovec iov[2];
};
struct pyfuse3_ur_queue {
    int qid, ringfd, wakefd; /* wakefd: another thread queued a command */
    pthread_t thread;
    pthread_mutex_t lock; /* the submission ring */
    char *sq_ring, *cq_ring, *sqes;
    size_t sq_len, cq_len, sqes_len;
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_array;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_cqe *cqes;
    int depth; /* entries used */
    struct pyfuse3_ur_ent ent[PYFUSE3_UR_DEPTH];
};
struct pyfuse3_ur_counters {
    uint64_t requests; /* requests taken from the rings */
    uint64_t answered; /* of them, answered by the queue threads */
    uint64_t handed;   /* of them, handed to the trio loop */
    uint64_t commits;  /* replies committed by a thread other than the queue's */
};

static struct {
    int want;   /* pyfuse3.passthrough_uring(True) */
    int state;  /* 0 off, 1 INIT offered it, 2 rings made, 3 running, -1 refused */
    int devfd, nq, stopfd, live;
    uint64_t init_unique;
    size_t payload;
    struct pyfuse3_ur_queue *qs;
    pthread_mutex_t tlock; /* the table, state and live */
    pthread_cond_t go;     /* threads wait on it until INIT's reply went out */
    int released;          /* 1: register, -1: give up */
    struct pyfuse3_ur_ent *table[256];
    struct pyfuse3_ur_counters n;
} pyfuse3_ur = {.tlock = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER,
                .devfd = -1, .stopfd = -1};

static int pyfuse3_ur_setup(unsigned entries, struct io_uring_params *p) {
    return (int)syscall(__NR_io_uring_setup, entries, p);
}
static int pyfuse3_ur_enter(int fd, unsigned submit, unsigned wait, unsigned flags) {
    return (int)syscall(__NR_io_uring_enter, fd, submit, wait, flags, NULL, 0);
}

/* number of possible CPUs (the kernel makes one queue for each) */
static int pyfuse3_ur_ncpus(void) {
    int a, b, max = -1;
    char buf[256], *s = buf;
    FILE *f = fopen("/sys/devices/system/cpu/possible", "r");
    if (f == NULL)
        return -1;
    if (fgets(buf, sizeof buf, f) == NULL)
        buf[0] = 0;
    fclose(f);
    while (*s) {
        int used = 0;
        if (sscanf(s, "%d-%d%n", &a, &b, &used) == 2)
            ;
        else if (sscanf(s, "%d%n", &a, &used) == 1)
            b = a;
        else
            break;
        if (b > max)
            max = b;
        s += used;
        if (*s == ',')
            s++;
        else
            break;
    }
    return max + 1;
}

static unsigned pyfuse3_ur_slot(uint64_t unique) {
    return (unsigned)((unique ^ (unique >> 8)) & 255);
}
static void pyfuse3_ur_put(struct pyfuse3_ur_ent *e, uint64_t unique) {
    unsigned s = pyfuse3_ur_slot(unique);
    pthread_mutex_lock(&pyfuse3_ur.tlock);
    e->unique = unique;
    e->next = pyfuse3_ur.table[s];
    pyfuse3_ur.table[s] = e;
    pthread_mutex_unlock(&pyfuse3_ur.tlock);
}
static struct pyfuse3_ur_ent *pyfuse3_ur_take(uint64_t unique) {
    unsigned s = pyfuse3_ur_slot(unique);
    struct pyfuse3_ur_ent **p, *e = NULL;
    pthread_mutex_lock(&pyfuse3_ur.tlock);
    for (p = &pyfuse3_ur.table[s]; *p != NULL; p = &(*p)->next)
        if ((*p)->unique == unique) {
            e = *p;
            *p = e->next;
            e->next = NULL;
            e->unique = 0;
            break;
        }
    pthread_mutex_unlock(&pyfuse3_ur.tlock);
    return e;
}

/* The payload buffer of the ring entry that holds request unique, and its size in *room;
   NULL for a request read from /dev/fuse. Its handler alone writes there until it replies:
   fastread.h reads a READ's bytes straight into it, and pyfuse3_ur_send then copies
   nothing. */
static char *pyfuse3_ur_payload_of(uint64_t unique, size_t *room) {
    unsigned s;
    struct pyfuse3_ur_ent *e;
    char *p = NULL;
    if (unique == 0 || pyfuse3_ur.state != 3)
        return NULL;
    s = pyfuse3_ur_slot(unique);
    pthread_mutex_lock(&pyfuse3_ur.tlock);
    for (e = pyfuse3_ur.table[s]; e != NULL; e = e->next)
        if (e->unique == unique) {
            p = e->payload;
            *room = pyfuse3_ur.payload;
            break;
        }
    pthread_mutex_unlock(&pyfuse3_ur.tlock);
    return p;
}

/* queue one command of entry e on its ring and submit it; with q->lock held */
static void pyfuse3_ur_sqe_l(struct pyfuse3_ur_ent *e, int cmd, uint64_t commit_id) {
    struct pyfuse3_ur_queue *q = e->q;
    unsigned tail = *q->sq_tail, idx = tail & *q->sq_mask;
    struct io_uring_sqe *sqe = (struct io_uring_sqe *)(q->sqes + (size_t)idx * PYFUSE3_UR_SQE);
    struct pyfuse3_ur_cmd *c = (struct pyfuse3_ur_cmd *)sqe->cmd;
    memset(sqe, 0, PYFUSE3_UR_SQE);
    sqe->opcode = IORING_OP_URING_CMD;
    sqe->fd = pyfuse3_ur.devfd;
    sqe->cmd_op = (uint32_t)cmd;
    sqe->user_data = (uint64_t)(uintptr_t)e;
    if (cmd == PYFUSE3_UR_REGISTER) {
        sqe->addr = (uint64_t)(uintptr_t)e->iov;
        sqe->len = 2;
    }
    c->commit_id = commit_id;
    c->qid = (uint16_t)q->qid;
    e->cmd = cmd;
    q->sq_array[idx] = idx;
    __atomic_store_n(q->sq_tail, tail + 1, __ATOMIC_RELEASE);
}

/* SQEs queued and not yet taken by the kernel. io_uring_enter must be given exactly that:
   when it submits fewer than asked it returns without waiting. */
static unsigned pyfuse3_ur_pending(struct pyfuse3_ur_queue *q) {
    return *q->sq_tail - __atomic_load_n(q->sq_head, __ATOMIC_ACQUIRE);
}

/* poll fd in q's ring (its own thread, with q->lock held) */
static void pyfuse3_ur_poll_l(struct pyfuse3_ur_queue *q, int fd, uint64_t data) {
    unsigned tail = *q->sq_tail, idx = tail & *q->sq_mask;
    struct io_uring_sqe *sqe = (struct io_uring_sqe *)(q->sqes + (size_t)idx * PYFUSE3_UR_SQE);
    memset(sqe, 0, PYFUSE3_UR_SQE);
    sqe->opcode = IORING_OP_POLL_ADD;
    sqe->fd = fd;
    sqe->poll32_events = POLLIN;
    sqe->user_data = data;
    q->sq_array[idx] = idx;
    __atomic_store_n(q->sq_tail, tail + 1, __ATOMIC_RELEASE);
}

/* Queue a command; the queue's thread submits it with its next wait (one system call for
   the answer and the wait for the next request), woken for it when another thread queued
   it (see the top: only the queue's thread submits). At most one command per entry is
   queued, so the submission ring (2 x PYFUSE3_UR_DEPTH) never fills. */
static void pyfuse3_ur_submit(struct pyfuse3_ur_ent *e, int cmd, uint64_t commit_id) {
    struct pyfuse3_ur_queue *q = e->q;
    uint64_t one = 1;
    pthread_mutex_lock(&q->lock);
    pyfuse3_ur_sqe_l(e, cmd, commit_id);
    pthread_mutex_unlock(&q->lock);
    if (!pthread_equal(pthread_self(), q->thread))
        while (write(q->wakefd, &one, sizeof one) < 0 && errno == EINTR)
            ;
}

/* INIT's reply: offer the flag when every queue is ready to register (called with the
   reply's init_out; 1 if the flag was added) */
static int pyfuse3_ur_prepare(uint32_t max_write, uint16_t max_pages);

/* The session's writev: replies to ring requests go into their entries, the rest to fd */
static ssize_t pyfuse3_ur_send(int fd, struct iovec *iov, int count) {
    struct pyfuse3_fl_out *out;
    struct pyfuse3_ur_ent *e = NULL;
    size_t total = 0, len = 0;
    ssize_t res;
    int i, added = 0;
    for (i = 0; i < count; i++)
        total += iov[i].iov_len;
    if (count < 1 || iov[0].iov_len < sizeof *out)
        return writev(fd, iov, count);
    out = (struct pyfuse3_fl_out *)iov[0].iov_base;
    if (out->unique != 0 && pyfuse3_ur.state == 3)
        e = pyfuse3_ur_take(out->unique);
    if (e == NULL) {
        if (pyfuse3_ur.state == 1 && out->unique == pyfuse3_ur.init_unique && out->error == 0 &&
            count >= 2 && iov[1].iov_len >= 40) {
            char *o = (char *)iov[1].iov_base; /* fuse_init_out */
            uint32_t flags, flags2, max_write;
            uint16_t max_pages;
            memcpy(&flags, o + 12, 4);
            memcpy(&max_write, o + 20, 4);
            memcpy(&max_pages, o + 28, 2);
            memcpy(&flags2, o + 32, 4);
            if ((flags & PYFUSE3_UR_INIT_EXT) && pyfuse3_ur_prepare(max_write, max_pages) == 0) {
                flags2 |= PYFUSE3_UR_FLAG2;
                memcpy(o + 32, &flags2, 4);
                added = 1;
            } else {
                pyfuse3_ur.state = -1;
            }
        }
        res = writev(fd, iov, count);
        if (added) {
            pthread_mutex_lock(&pyfuse3_ur.tlock);
            pyfuse3_ur.released = res == (ssize_t)total ? 1 : -1;
            if (pyfuse3_ur.released == 1)
                pyfuse3_ur.state = 3;
            pthread_cond_broadcast(&pyfuse3_ur.go);
            pthread_mutex_unlock(&pyfuse3_ur.tlock);
        }
        return res;
    }
    /* the payload: every byte after the out header (the first iovec may hold both) */
    for (i = 0; i < count; i++) {
        size_t skip = i == 0 ? sizeof *out : 0, part = iov[i].iov_len - skip;
        if (len + part > pyfuse3_ur.payload) {
            out->error = -EIO; /* cannot happen: the payload holds max_write */
            len = 0;
            break;
        }
        if ((char *)iov[i].iov_base + skip != e->payload + len) /* fastread.h filled it in place */
            memcpy(e->payload + len, (char *)iov[i].iov_base + skip, part);
        len += part;
    }
    out->len = (uint32_t)(sizeof *out + len);
    memcpy(e->hdr->in_out, out, sizeof *out);
    e->hdr->ent.payload_sz = (uint32_t)len;
    if (!pthread_equal(pthread_self(), e->q->thread))
        __atomic_fetch_add(&pyfuse3_ur.n.commits, 1, __ATOMIC_RELAXED);
    pyfuse3_ur_submit(e, PYFUSE3_UR_COMMIT_AND_FETCH, out->unique);
    return (ssize_t)total;
}

#if PYFUSE3_FASTPATH /* fuse_session_custom_io_317: libfuse >= 3.17 */
static ssize_t pyfuse3_ur_writev_cb(int fd, struct iovec *iov, int count, void *userdata) {
    (void)userdata;
    return pyfuse3_ur_send(fd, iov, count);
}
static ssize_t pyfuse3_ur_read_cb(int fd, void *buf, size_t len, void *userdata) {
    (void)userdata;
    return read(fd, buf, len);
}

/* Route the session's replies through pyfuse3_ur_send (before INIT is answered). 0, or
   -errno: then io_uring stays off. Whether it is used is INIT's to say: the kernel offers
   it only while its module parameter is on (the caller turns that on, fuse_adapter/uring.py),
   and without the offer every reply goes to the device as before. */
static int pyfuse3_ur_install(struct fuse_session *se, int devfd) {
    static const struct fuse_custom_io io = {.writev = pyfuse3_ur_writev_cb,
                                             .read = pyfuse3_ur_read_cb};
    int r;
    pyfuse3_ur.state = 0;
    pyfuse3_ur.devfd = devfd;
    if (!pyfuse3_ur.want)
        return -EOPNOTSUPP;
    r = fuse_session_custom_io_317(se, &io, sizeof io, devfd);
    return r < 0 ? r : 0;
}
#else
static int pyfuse3_ur_install(struct fuse_session *se, int devfd) {
    (void)se;
    pyfuse3_ur.state = 0;
    pyfuse3_ur.devfd = devfd;
    return -EOPNOTSUPP; /* libfuse < 3.17: no custom writev, every reply goes to /dev/fuse */
}
#endif

/* fastloop.h's thread saw INIT: remember it if the kernel offers io_uring */
static void pyfuse3_ur_note_init(const char *buf, size_t n) {
    const struct pyfuse3_fl_in *in = (const struct pyfuse3_fl_in *)buf;
    uint32_t flags, flags2;
    if (!pyfuse3_ur.want || pyfuse3_ur.devfd < 0 || in->opcode != PYFUSE3_FL_INIT ||
        n < sizeof *in + 20)
        return;
    memcpy(&flags, buf + sizeof *in + 12, 4);
    memcpy(&flags2, buf + sizeof *in + 16, 4);
    if ((flags & PYFUSE3_UR_INIT_EXT) && (flags2 & PYFUSE3_UR_FLAG2)) {
        pyfuse3_ur.init_unique = in->unique;
        pyfuse3_ur.state = 1;
    }
}

/* one request in entry e (a completion with result 0) */
static void pyfuse3_ur_request(struct pyfuse3_ur_ent *e, char *scratch, size_t scratch_len) {
    const struct pyfuse3_fl_in *in = (const struct pyfuse3_fl_in *)e->hdr->in_out;
    uint32_t psz = e->hdr->ent.payload_sz;
    uint64_t unique = e->hdr->ent.commit_id;
    size_t n = in->len, head = sizeof *in, oplen;
    struct pyfuse3_fl_msg *m;
    __atomic_fetch_add(&pyfuse3_ur.n.requests, 1, __ATOMIC_RELAXED);
    pyfuse3_ur_put(e, unique);
    if (n < head || psz > pyfuse3_ur.payload || n - head < psz || n - head - psz > sizeof e->hdr->op_in) {
        struct pyfuse3_fl_out r = {sizeof r, -EIO, unique};
        struct iovec iov = {&r, sizeof r};
        pyfuse3_ur_send(pyfuse3_ur.devfd, &iov, 1);
        return;
    }
    oplen = n - head - psz;
    if (n <= scratch_len) { /* a small request (a LOOKUP's name is its payload): C may answer */
        memcpy(scratch, e->hdr->in_out, head);
        memcpy(scratch + head, e->hdr->op_in, oplen);
        memcpy(scratch + head + oplen, e->payload, psz);
        if (pyfuse3_fl_answer(pyfuse3_ur.devfd, scratch, n)) {
            __atomic_fetch_add(&pyfuse3_ur.n.answered, 1, __ATOMIC_RELAXED);
            return;
        }
    }
    m = malloc(sizeof *m + n);
    if (m == NULL) {
        struct pyfuse3_fl_out r = {sizeof r, -ENOMEM, unique};
        struct iovec iov = {&r, sizeof r};
        pyfuse3_ur_send(pyfuse3_ur.devfd, &iov, 1);
        return;
    }
    m->size = n;
    m->err = 0;
    memcpy(m->data, e->hdr->in_out, head);
    memcpy(m->data + head, e->hdr->op_in, oplen);
    memcpy(m->data + head + oplen, e->payload, psz);
    __atomic_fetch_add(&pyfuse3_ur.n.handed, 1, __ATOMIC_RELAXED);
    pyfuse3_fl_push(m);
}

static void *pyfuse3_ur_main(void *arg) {
    struct pyfuse3_ur_queue *q = arg;
    char scratch[512];
    int i, go, live = q->depth, stop = 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET((size_t)q->qid, &set); /* qid: 0 .. nq - 1 */
    (void)sched_setaffinity(0, sizeof set, &set); /* a CPU outside our set: serve it unpinned */
    pthread_mutex_lock(&pyfuse3_ur.tlock);
    while (pyfuse3_ur.released == 0)
        pthread_cond_wait(&pyfuse3_ur.go, &pyfuse3_ur.tlock);
    go = pyfuse3_ur.released == 1;
    pthread_mutex_unlock(&pyfuse3_ur.tlock);
    if (!go)
        return NULL;
    pthread_mutex_lock(&q->lock);
    for (i = 0; i < q->depth; i++)
        pyfuse3_ur_sqe_l(&q->ent[i], PYFUSE3_UR_REGISTER, 0);
    pyfuse3_ur_poll_l(q, pyfuse3_ur.stopfd, PYFUSE3_UR_STOP_DATA);
    pyfuse3_ur_poll_l(q, q->wakefd, PYFUSE3_UR_WAKE_DATA);
    while (pyfuse3_ur_enter(q->ringfd, pyfuse3_ur_pending(q), 0, 0) < 0 && errno == EINTR)
        ;
    pthread_mutex_unlock(&q->lock);
    while (!stop && live > 0) {
        unsigned head, tail;
        unsigned pending;
        pthread_mutex_lock(&q->lock);
        pending = pyfuse3_ur_pending(q); /* this thread's answers of the last round */
        pthread_mutex_unlock(&q->lock);
        if (pyfuse3_ur_enter(q->ringfd, pending, 1, IORING_ENTER_GETEVENTS) < 0) {
            /* EBUSY: completions overflowed, reap them; EAGAIN, ENOMEM: the kernel is short of
               memory for now, so wait a little and submit again. Leaving on a transient error
               would leave this CPU's requests waiting in its queue until unmount. */
            if (errno == EAGAIN || errno == ENOMEM)
                usleep(1000);
            else if (errno != EINTR && errno != EBUSY)
                break;
        }
        head = *q->cq_head;
        tail = __atomic_load_n(q->cq_tail, __ATOMIC_ACQUIRE);
        for (; head != tail; head++) {
            struct io_uring_cqe *cqe = &q->cqes[head & *q->cq_mask];
            struct pyfuse3_ur_ent *e = (struct pyfuse3_ur_ent *)(uintptr_t)cqe->user_data;
            int res = cqe->res;
            if (cqe->user_data == PYFUSE3_UR_STOP_DATA) {
                stop = 1;
                continue;
            }
            if (cqe->user_data == PYFUSE3_UR_WAKE_DATA) {
                /* commands another thread queued: submitted with the next wait; drain
                   before polling again, or the poll would fire at once */
                uint64_t drain;
                (void)!read(q->wakefd, &drain, sizeof drain); /* non-blocking */
                if (res >= 0) {
                    pthread_mutex_lock(&q->lock);
                    pyfuse3_ur_poll_l(q, q->wakefd, PYFUSE3_UR_WAKE_DATA);
                    pthread_mutex_unlock(&q->lock);
                }
                continue;
            }
            if (res == 0) {
                pyfuse3_ur_request(e, scratch, sizeof scratch);
            } else if ((res == -EAGAIN || res == -EINTR) && e->cmd == PYFUSE3_UR_REGISTER) {
                usleep(1000);
                pyfuse3_ur_submit(e, PYFUSE3_UR_REGISTER, 0);
            } else {
                live--; /* unmounted (ENOTCONN), aborted, or refused: the entry is gone */
            }
        }
        __atomic_store_n(q->cq_head, head, __ATOMIC_RELEASE);
    }
    pthread_mutex_lock(&pyfuse3_ur.tlock);
    pyfuse3_ur.live--;
    pthread_mutex_unlock(&pyfuse3_ur.tlock);
    return NULL;
}

/* The ring goes first, the entries' buffers after it. The kernel copies a request into a
   registered entry as task work of the thread that submitted the entry's last command
   (fuse_uring_dispatch_ent); a queue thread's exit cancels its commands, but should any
   command be another thread's (the one running this), that copy runs on its return from
   any system call, until the ring is going away (its last reference dropped: our
   mappings and the fd; io_should_terminate_tw). Buffers unmapped before that could take a
   request's bytes at an address that a new mapping of this process already holds. */
static void pyfuse3_ur_free_queue(struct pyfuse3_ur_queue *q) {
    int i;
    if (q->sqes != NULL)
        munmap(q->sqes, q->sqes_len);
    if (q->cq_ring != NULL && q->cq_ring != q->sq_ring)
        munmap(q->cq_ring, q->cq_len);
    if (q->sq_ring != NULL)
        munmap(q->sq_ring, q->sq_len);
    if (q->ringfd >= 0)
        close(q->ringfd); /* the last reference: the ring is dying when this returns */
    if (q->wakefd >= 0)
        close(q->wakefd);
    for (i = 0; i < PYFUSE3_UR_DEPTH; i++) {
        if (q->ent[i].hdr != NULL)
            munmap(q->ent[i].hdr, 4096);
        if (q->ent[i].payload != NULL)
            munmap(q->ent[i].payload, pyfuse3_ur.payload);
    }
    pthread_mutex_destroy(&q->lock);
}

static int pyfuse3_ur_make_queue(struct pyfuse3_ur_queue *q, int qid, int depth) {
    struct io_uring_params p;
    int i;
    memset(q, 0, sizeof *q);
    q->qid = qid;
    q->depth = depth;
    q->ringfd = q->wakefd = -1;
    pthread_mutex_init(&q->lock, NULL);
    q->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (q->wakefd < 0)
        return -errno;
    memset(&p, 0, sizeof p);
    p.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQSIZE;
    p.cq_entries = 4 * PYFUSE3_UR_DEPTH;
    q->ringfd = pyfuse3_ur_setup(2 * PYFUSE3_UR_DEPTH, &p);
    if (q->ringfd < 0)
        return -errno;
    q->sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    q->cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    if (p.features & IORING_FEAT_SINGLE_MMAP) {
        if (q->cq_len > q->sq_len)
            q->sq_len = q->cq_len;
        q->cq_len = q->sq_len;
    }
    q->sq_ring = mmap(NULL, q->sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                      q->ringfd, IORING_OFF_SQ_RING);
    if (q->sq_ring == MAP_FAILED) {
        q->sq_ring = NULL;
        return -errno;
    }
    if (p.features & IORING_FEAT_SINGLE_MMAP) {
        q->cq_ring = q->sq_ring;
    } else {
        q->cq_ring = mmap(NULL, q->cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                          q->ringfd, IORING_OFF_CQ_RING);
        if (q->cq_ring == MAP_FAILED) {
            q->cq_ring = NULL;
            return -errno;
        }
    }
    q->sqes_len = (size_t)p.sq_entries * PYFUSE3_UR_SQE;
    q->sqes = mmap(NULL, q->sqes_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                   q->ringfd, IORING_OFF_SQES);
    if (q->sqes == MAP_FAILED) {
        q->sqes = NULL;
        return -errno;
    }
    q->sq_head = (unsigned *)(q->sq_ring + p.sq_off.head);
    q->sq_tail = (unsigned *)(q->sq_ring + p.sq_off.tail);
    q->sq_mask = (unsigned *)(q->sq_ring + p.sq_off.ring_mask);
    q->sq_array = (unsigned *)(q->sq_ring + p.sq_off.array);
    q->cq_head = (unsigned *)(q->cq_ring + p.cq_off.head);
    q->cq_tail = (unsigned *)(q->cq_ring + p.cq_off.tail);
    q->cq_mask = (unsigned *)(q->cq_ring + p.cq_off.ring_mask);
    q->cqes = (struct io_uring_cqe *)(q->cq_ring + p.cq_off.cqes);
    for (i = 0; i < depth; i++) {
        struct pyfuse3_ur_ent *e = &q->ent[i];
        void *h = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        void *b = mmap(NULL, pyfuse3_ur.payload, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        e->q = q;
        e->hdr = h == MAP_FAILED ? NULL : h;
        e->payload = b == MAP_FAILED ? NULL : b;
        if (e->hdr == NULL || e->payload == NULL)
            return -ENOMEM;
        e->iov[0].iov_base = e->hdr;
        e->iov[0].iov_len = sizeof *e->hdr;
        e->iov[1].iov_base = e->payload;
        e->iov[1].iov_len = pyfuse3_ur.payload;
    }
    return 0;
}

static void pyfuse3_ur_teardown(void) {
    int i;
    for (i = 0; i < pyfuse3_ur.nq; i++)
        pyfuse3_ur_free_queue(&pyfuse3_ur.qs[i]);
    free(pyfuse3_ur.qs);
    pyfuse3_ur.qs = NULL;
    pyfuse3_ur.nq = 0;
    if (pyfuse3_ur.stopfd >= 0)
        close(pyfuse3_ur.stopfd);
    pyfuse3_ur.stopfd = -1;
}

static int pyfuse3_ur_prepare(uint32_t max_write, uint16_t max_pages) {
    long page = sysconf(_SC_PAGESIZE);
    size_t payload = 8192;
    int i, nq = pyfuse3_ur_ncpus(), made = 0, depth;
    if (nq <= 0 || nq > 4096)
        return -1;
    depth = PYFUSE3_UR_PAYLOADS / nq;
    depth = depth > PYFUSE3_UR_DEPTH ? PYFUSE3_UR_DEPTH : depth < PYFUSE3_UR_MIN_DEPTH ? PYFUSE3_UR_MIN_DEPTH : depth;
    if (max_write > payload)
        payload = max_write;
    if ((size_t)(max_pages ? max_pages : 32) * (size_t)page > payload)
        payload = (size_t)(max_pages ? max_pages : 32) * (size_t)page;
    pyfuse3_ur.payload = (payload + (size_t)page - 1) / (size_t)page * (size_t)page;
    pyfuse3_ur.released = 0;
    memset(pyfuse3_ur.table, 0, sizeof pyfuse3_ur.table);
    memset(&pyfuse3_ur.n, 0, sizeof pyfuse3_ur.n);
    pyfuse3_ur.stopfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pyfuse3_ur.qs = calloc((size_t)nq, sizeof *pyfuse3_ur.qs);
    if (pyfuse3_ur.stopfd < 0 || pyfuse3_ur.qs == NULL)
        goto fail;
    pyfuse3_ur.nq = nq;
    for (i = 0; i < nq; i++)
        pyfuse3_ur.qs[i].ringfd = pyfuse3_ur.qs[i].wakefd = -1;
    for (i = 0; i < nq; i++)
        if (pyfuse3_ur_make_queue(&pyfuse3_ur.qs[i], i, depth) != 0)
            goto fail;
    for (made = 0; made < nq; made++) {
        char name[16];
        if (pthread_create(&pyfuse3_ur.qs[made].thread, NULL, pyfuse3_ur_main, &pyfuse3_ur.qs[made]) != 0)
            goto fail;
        /* a name is at most 15 bytes: one that does not fit is not set (the thread keeps its
           parent's) rather than cut into another queue's */
        if (snprintf(name, sizeof name, "pyfuse3-ring%d", made) < (int)sizeof name)
            pthread_setname_np(pyfuse3_ur.qs[made].thread, name);
    }
    pyfuse3_ur.live = nq;
    pyfuse3_ur.state = 2;
    return 0;
fail:
    pthread_mutex_lock(&pyfuse3_ur.tlock);
    pyfuse3_ur.released = -1; /* threads already started return at once */
    pthread_cond_broadcast(&pyfuse3_ur.go);
    pthread_mutex_unlock(&pyfuse3_ur.tlock);
    for (i = 0; i < made; i++)
        pthread_join(pyfuse3_ur.qs[i].thread, NULL);
    if (pyfuse3_ur.qs == NULL)
        pyfuse3_ur.nq = 0;
    pyfuse3_ur_teardown();
    return -1;
}

/* The loop ended: stop the queue threads and close the rings (call without the GIL) */
static void pyfuse3_ur_stop(void) {
    uint64_t one = 1;
    int i, had = pyfuse3_ur.state >= 2 || pyfuse3_ur.nq > 0;
    if (!had) {
        pyfuse3_ur.state = 0;
        return;
    }
    pthread_mutex_lock(&pyfuse3_ur.tlock);
    if (pyfuse3_ur.released == 0)
        pyfuse3_ur.released = -1;
    pthread_cond_broadcast(&pyfuse3_ur.go);
    pyfuse3_ur.state = 0; /* replies from now on go to the device (and find nothing) */
    memset(pyfuse3_ur.table, 0, sizeof pyfuse3_ur.table);
    pthread_mutex_unlock(&pyfuse3_ur.tlock);
    while (write(pyfuse3_ur.stopfd, &one, sizeof one) < 0 && errno == EINTR)
        ;
    for (i = 0; i < pyfuse3_ur.nq; i++)
        pthread_join(pyfuse3_ur.qs[i].thread, NULL);
    pyfuse3_ur_teardown();
}

static void pyfuse3_ur_snapshot(struct pyfuse3_ur_counters *n, int *queues) {
    n->requests = __atomic_load_n(&pyfuse3_ur.n.requests, __ATOMIC_RELAXED);
    n->answered = __atomic_load_n(&pyfuse3_ur.n.answered, __ATOMIC_RELAXED);
    n->handed = __atomic_load_n(&pyfuse3_ur.n.handed, __ATOMIC_RELAXED);
    n->commits = __atomic_load_n(&pyfuse3_ur.n.commits, __ATOMIC_RELAXED);
    pthread_mutex_lock(&pyfuse3_ur.tlock);
    /* queues whose thread still serves: a REGISTER the kernel refused ends them (and the
       connection keeps /dev/fuse) */
    *queues = pyfuse3_ur.state == 3 ? pyfuse3_ur.live : 0;
    pthread_mutex_unlock(&pyfuse3_ur.tlock);
}
#endif

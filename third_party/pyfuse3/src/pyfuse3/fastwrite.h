/*
fastwrite.h -- datahub: WRITEs of a workspace's staged handles answered in C.

A workspace mount without passthrough carries every WRITE's bytes through the daemon: the
request copied into a Python bytes object, a trio turn, the handler, a pwrite of those bytes
into the staged file (or a copy into OpenFile's buffers). Here the fastloop thread (fastloop.h),
which already holds the request in its read buffer, writes the bytes to the staged file
itself (pwrite straight from that buffer, no GIL) and replies the count, or the errno.

What stays as on the daemon path (docs/writeback.md, "WRITEs answered in C"): every WRITE
still reaches the daemon (after a busy unmount it fails with ENOTCONN: nothing writes the
staged file without the connection), a failed write fails the write(2) that made it, and
it is recorded: the handle's entry keeps the errno, and every other entry naming the same
staged file (the file's other handles: all share one descriptor) gets it too, as does a
handle of that file published later. Python reads
it at each FLUSH, FSYNC and RELEASE (pyfuse3.fastwrite_failed) and makes those handles short,
so a close reverts the file and is refused: a file one of whose writes failed is never
committed torn. A handle with a failure recorded hands its later WRITEs to Python, as does
a WRITE from the kernel's write-back of a shared mapping (FUSE_WRITE_CACHE: Python answers
those as the daemon path does) and any WRITE whose handle is not published.

The table: Python publishes fh -> fd when it answers the OPEN/CREATE of a staged handle
(before the reply: no WRITE of it can come earlier) and retracts it at its first FLUSH (a
close: every C write of the handle is then in that commit, and a later WRITE through a dup of
the descriptor reaches Python, which counts it for the RELEASE: release19), or at its RELEASE
if no FLUSH came. A retract waits for a write in progress, and the descriptor stays Python's:
the table never closes it.
One mutex guards the table; the pwrite runs outside it, on a reference taken under it.
*/
#ifndef PYFUSE3_FASTWRITE_H
#define PYFUSE3_FASTWRITE_H
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define PYFUSE3_FW_MAX 4096   /* published handles at most */
#define PYFUSE3_FW_SLOTS 8192 /* power of two, twice MAX: short probes */
#define PYFUSE3_FW_WRITE_CACHE 1u /* FUSE_WRITE_CACHE: the kernel's write-back of cached pages */

struct pyfuse3_fw_entry {
    uint64_t fh; /* 0: a free slot */
    int fd;
    int err;       /* the first failed write's errno (0: none) */
    unsigned busy; /* writes in progress on fd */
};

struct pyfuse3_fw_counters {
    uint64_t published;
    uint64_t writes;  /* WRITEs answered here, with success */
    uint64_t bytes;   /* their bytes */
    uint64_t failed;  /* WRITEs answered here with an errno */
    uint64_t handed;  /* WRITEs of published handles handed to Python (failed before, cached) */
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t idle; /* a write in progress ended */
    unsigned count;
    struct pyfuse3_fw_entry slot[PYFUSE3_FW_SLOTS];
    struct pyfuse3_fw_counters n;
} pyfuse3_fw = {.lock = PTHREAD_MUTEX_INITIALIZER, .idle = PTHREAD_COND_INITIALIZER};

static unsigned pyfuse3_fw_home(uint64_t fh) {
    return (unsigned)((fh * 0x9E3779B97F4A7C15ull) >> 51) & (PYFUSE3_FW_SLOTS - 1);
}

/* the slot of fh, or of the free slot that ends its probe; call with the lock */
static unsigned pyfuse3_fw_probe(uint64_t fh) {
    unsigned i = pyfuse3_fw_home(fh);
    while (pyfuse3_fw.slot[i].fh != 0 && pyfuse3_fw.slot[i].fh != fh)
        i = (i + 1) & (PYFUSE3_FW_SLOTS - 1);
    return i;
}

/* Publish fd for fh: 0, -EINVAL (fh 0 or fd < 0), -EEXIST, -ENOSPC (table full). */
static int pyfuse3_fw_publish(uint64_t fh, int fd) {
    unsigned i;
    int r = 0;
    if (fh == 0 || fd < 0)
        return -EINVAL;
    pthread_mutex_lock(&pyfuse3_fw.lock);
    i = pyfuse3_fw_probe(fh);
    if (pyfuse3_fw.slot[i].fh == fh) {
        r = -EEXIST;
    } else if (pyfuse3_fw.count >= PYFUSE3_FW_MAX) {
        r = -ENOSPC;
    } else {
        unsigned j;
        pyfuse3_fw.slot[i].fh = fh;
        pyfuse3_fw.slot[i].fd = fd;
        pyfuse3_fw.slot[i].err = 0;
        pyfuse3_fw.slot[i].busy = 0;
        /* a failure recorded for another handle of this staged file is this one's too: the
           file may hold a torn write until a close reverts it (its staged file has no
           reservation that would tell: docs/writeback.md, "WRITEs answered in C") */
        for (j = 0; j < PYFUSE3_FW_SLOTS && pyfuse3_fw.count > 0; j++)
            if (j != i && pyfuse3_fw.slot[j].fh != 0 && pyfuse3_fw.slot[j].fd == fd && pyfuse3_fw.slot[j].err != 0) {
                pyfuse3_fw.slot[i].err = pyfuse3_fw.slot[j].err;
                break;
            }
        pyfuse3_fw.count++;
        pyfuse3_fw.n.published++;
    }
    pthread_mutex_unlock(&pyfuse3_fw.lock);
    return r;
}

/* Remove slot i, moving later entries of its probe run back (linear probing's deletion:
   no tombstones); call with the lock */
static void pyfuse3_fw_remove(unsigned i) {
    unsigned j = i;
    pyfuse3_fw.slot[i].fh = 0;
    for (;;) {
        unsigned home;
        j = (j + 1) & (PYFUSE3_FW_SLOTS - 1);
        if (pyfuse3_fw.slot[j].fh == 0)
            break;
        home = pyfuse3_fw_home(pyfuse3_fw.slot[j].fh);
        /* j's entry may move to i unless its home lies cyclically in (i, j] */
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
            continue;
        pyfuse3_fw.slot[i] = pyfuse3_fw.slot[j];
        pyfuse3_fw.slot[j].fh = 0;
        i = j;
    }
    pyfuse3_fw.count--;
}

/* Retract fh (waiting for a write of it in progress): the errno its writes recorded (0: none,
   -ENOENT: not published). The descriptor stays the caller's. Call without the GIL. */
static int pyfuse3_fw_retract(uint64_t fh) {
    unsigned i;
    int r;
    if (fh == 0)
        return -ENOENT;
    pthread_mutex_lock(&pyfuse3_fw.lock);
    for (;;) {
        i = pyfuse3_fw_probe(fh);
        if (pyfuse3_fw.slot[i].fh != fh || pyfuse3_fw.slot[i].busy == 0)
            break;
        pthread_cond_wait(&pyfuse3_fw.idle, &pyfuse3_fw.lock);
    }
    if (pyfuse3_fw.slot[i].fh == fh) {
        r = pyfuse3_fw.slot[i].err;
        pyfuse3_fw_remove(i);
    } else {
        r = -ENOENT;
    }
    pthread_mutex_unlock(&pyfuse3_fw.lock);
    return r;
}

/* The errno fh's writes recorded (0: none, or not published) */
static int pyfuse3_fw_failed(uint64_t fh) {
    unsigned i;
    int r = 0;
    if (fh == 0)
        return 0;
    pthread_mutex_lock(&pyfuse3_fw.lock);
    i = pyfuse3_fw_probe(fh);
    if (pyfuse3_fw.slot[i].fh == fh)
        r = pyfuse3_fw.slot[i].err;
    pthread_mutex_unlock(&pyfuse3_fw.lock);
    return r;
}

static unsigned pyfuse3_fw_published(void) {
    unsigned r;
    pthread_mutex_lock(&pyfuse3_fw.lock);
    r = pyfuse3_fw.count;
    pthread_mutex_unlock(&pyfuse3_fw.lock);
    return r;
}

static void pyfuse3_fw_snapshot(struct pyfuse3_fw_counters *n, unsigned *count) {
    pthread_mutex_lock(&pyfuse3_fw.lock);
    *n = pyfuse3_fw.n;
    *count = pyfuse3_fw.count;
    pthread_mutex_unlock(&pyfuse3_fw.lock);
}

/* Empty the table (a new session; descriptors stay their owners') */
static void pyfuse3_fw_clear(void) {
    pthread_mutex_lock(&pyfuse3_fw.lock);
    memset(pyfuse3_fw.slot, 0, sizeof pyfuse3_fw.slot);
    pyfuse3_fw.count = 0;
    pthread_mutex_unlock(&pyfuse3_fw.lock);
}

/* Write size bytes of data at off to fh's staged file: the count written (size; less when a
   pwrite failed part-way, EFBIG or ENOSPC after some bytes: a short write, as write(2) answers
   one, nothing recorded: every byte counted is in the file), -errno if a write failed before
   any byte (recorded for fh and every entry of the same file), or PYFUSE3_FW_HAND when the
   WRITE is not to be answered here (hand it to Python). Before (review20a), a WRITE written in
   part was answered with the error, and its close with EIO, though the bytes were there. */
#define PYFUSE3_FW_HAND (INT64_MIN)
static int64_t pyfuse3_fw_write(uint64_t fh, uint64_t off, const char *data, uint32_t size,
                                uint32_t write_flags) {
    unsigned i, j;
    int fd, err = 0;
    size_t done = 0;
    if (fh == 0 || off > (uint64_t)INT64_MAX - size)
        return PYFUSE3_FW_HAND;
    pthread_mutex_lock(&pyfuse3_fw.lock);
    if (pyfuse3_fw.count == 0) {
        pthread_mutex_unlock(&pyfuse3_fw.lock);
        return PYFUSE3_FW_HAND;
    }
    i = pyfuse3_fw_probe(fh);
    if (pyfuse3_fw.slot[i].fh != fh) {
        pthread_mutex_unlock(&pyfuse3_fw.lock);
        return PYFUSE3_FW_HAND;
    }
    if (pyfuse3_fw.slot[i].err != 0 || (write_flags & PYFUSE3_FW_WRITE_CACHE)) {
        pyfuse3_fw.n.handed++;
        pthread_mutex_unlock(&pyfuse3_fw.lock);
        return PYFUSE3_FW_HAND;
    }
    fd = pyfuse3_fw.slot[i].fd;
    pyfuse3_fw.slot[i].busy++;
    pthread_mutex_unlock(&pyfuse3_fw.lock);
    while (done < size) {
        ssize_t w = pwrite(fd, data + done, size - done, (off_t)(off + done));
        if (w < 0) {
            if (errno == EINTR)
                continue;
            err = errno;
            break;
        }
        if (w == 0) { /* no progress: a file size limit, say so as the kernel would */
            err = EFBIG;
            break;
        }
        done += (size_t)w;
    }
    if (err != 0 && done > 0) /* a short write, as POSIX answers it: the count written; the */
        err = 0;              /* next WRITE (the rest) meets the error, writes nothing, fails */
    pthread_mutex_lock(&pyfuse3_fw.lock);
    i = pyfuse3_fw_probe(fh); /* a retract waits for busy == 0: the entry is still there */
    pyfuse3_fw.slot[i].busy--;
    if (err != 0) {
        pyfuse3_fw.n.failed++;
        for (j = 0; j < PYFUSE3_FW_SLOTS; j++) /* every handle of this staged file */
            if (pyfuse3_fw.slot[j].fh != 0 && pyfuse3_fw.slot[j].fd == fd && pyfuse3_fw.slot[j].err == 0)
                pyfuse3_fw.slot[j].err = err;
    } else {
        pyfuse3_fw.n.writes++;
        pyfuse3_fw.n.bytes += done;
    }
    if (pyfuse3_fw.slot[i].busy == 0)
        pthread_cond_broadcast(&pyfuse3_fw.idle);
    pthread_mutex_unlock(&pyfuse3_fw.lock);
    return err != 0 ? -(int64_t)err : (int64_t)done;
}
#endif

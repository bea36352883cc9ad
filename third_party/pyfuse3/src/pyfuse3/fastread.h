/*
fastread.h -- datahub: READs of files the kernel opened by itself, answered in C from their
verified page file.

With zero-message opens (OPEN answered ENOSYS once: the kernel then opens every file itself,
keeps its page cache and sends no OPEN or RELEASE) a warm file costs the daemon nothing, but
a file whose pages the kernel dropped costs a READ, answered in Python (tens to hundreds of
microseconds). A file whose object sits whole in the disk tier has a page file holding
exactly its bytes from offset 0 (a format-3 page file). The file system verifies it once and
publishes it here (pyfuse3.fastread_publish(inode, fd)); from then on a READ of that inode
with the kernel's handle 0 is answered by the C threads (fastloop.h, uring.h): pread from
the descriptor, without the GIL.

Promise kept: a changed page file is never served. The descriptor is fstat()ed after the
pread and compared with the state taken at publish time (device, inode, size, link count,
ctime, mtime: any write, truncation, chmod or unlink moves ctime, and a write moves it
before it copies data, so a write that happened before or raced the pread shows in that
fstat; a check before the pread as well would only spare a useless pread of a file already
changed, at the price of a second fstat per READ). If it differs, nothing is sent: the
entry is retracted and the request handed to Python, which checks the file again.

One copy in RAM: the kernel keeps the bytes in the FUSE inode's page cache (zero-message
opens keep it), so the page file's own pages would be a second copy. A page-aligned READ
(the kernel's page cache reads are) is read with O_DIRECT from a second descriptor of the
same file, straight into the reply buffer (over io_uring the ring entry's payload): no
page of the page file is cached, so nothing needs dropping after the reply, and one copy
fewer is made. What was cached before (the check that published the file read it whole)
is dropped once, at the file's first READ answered here (POSIX_FADV_DONTNEED on the whole
file: clean pages only, nothing is lost). Where the file system refuses O_DIRECT (tmpfs),
or the READ is not aligned, the read is buffered and its range dropped after the reply.

Concurrency: any number of C threads answer READs while Python publishes and retracts. One
mutex guards the table; the pread runs outside it, on a reference taken under it (an entry
retracted meanwhile closes its descriptor when the last reader lets go).
*/
#ifndef PYFUSE3_FASTREAD_H
#define PYFUSE3_FASTREAD_H
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PYFUSE3_FR_MAX 4096   /* published inodes at most (each holds a descriptor) */
#define PYFUSE3_FR_SLOTS 8192 /* power of two, twice MAX: short probes */

struct pyfuse3_fr_file {
    uint64_t ino;
    int fd;
    int dfd;         /* the same file opened O_DIRECT (-1: its file system refused) */
    unsigned refs;   /* 1 for the table while published, + 1 per READ in progress */
    int hit;         /* a READ was answered since the last pyfuse3_fr_drain_hits */
    int dropped;     /* the whole file's cached pages were dropped once (atomic) */
    dev_t dev;
    ino_t st_ino;
    off_t size;
    nlink_t nlink;
    int64_t ctime_ns, mtime_ns;
};

struct pyfuse3_fr_counters {
    uint64_t published; /* files published */
    uint64_t reads;     /* READs answered here */
    uint64_t bytes;     /* bytes sent by them */
    uint64_t direct;    /* of them read with O_DIRECT */
    uint64_t changed;   /* files found changed at a READ (retracted, READ handed to Python) or by the sweep */
    uint64_t handed;    /* READs of published inodes handed over (changed, or an I/O error) */
    uint64_t swept;     /* of them, found by pyfuse3_fr_sweep (changed or removed, no READ came) */
};

static struct {
    pthread_mutex_t lock;
    struct pyfuse3_fr_file *slot[PYFUSE3_FR_SLOTS]; /* open addressing by inode */
    unsigned count;
    int on;       /* 0: every READ goes to Python (pyfuse3.fastread(False)) */
    int dontneed; /* drop the page file's pages after each reply */
    int direct;   /* read page-aligned READs with O_DIRECT: no page cache, one copy fewer */
    unsigned cursor; /* pyfuse3_fr_sweep's next slot */
    struct pyfuse3_fr_counters n;
} pyfuse3_fr = {.lock = PTHREAD_MUTEX_INITIALIZER, .on = 1, .dontneed = 1, .direct = 1};

static inline unsigned pyfuse3_fr_home(uint64_t ino) {
    return (unsigned)((ino * 0x9E3779B97F4A7C15ULL) >> 51) & (PYFUSE3_FR_SLOTS - 1);
}

/* the slot of ino, or -1 (lock held) */
static int pyfuse3_fr_find(uint64_t ino) {
    unsigned i = pyfuse3_fr_home(ino);
    while (pyfuse3_fr.slot[i] != NULL) {
        if (pyfuse3_fr.slot[i]->ino == ino)
            return (int)i;
        i = (i + 1) & (PYFUSE3_FR_SLOTS - 1);
    }
    return -1;
}

static void pyfuse3_fr_unref(struct pyfuse3_fr_file *f) { /* lock held */
    if (--f->refs == 0) {
        if (f->dfd >= 0)
            close(f->dfd);
        close(f->fd);
        free(f);
    }
}

/* remove slot i (lock held): backward-shift deletion keeps every probe chain whole */
static void pyfuse3_fr_remove(unsigned i) {
    unsigned j = i, home;
    struct pyfuse3_fr_file *f = pyfuse3_fr.slot[i];
    pyfuse3_fr.slot[i] = NULL;
    pyfuse3_fr.count--;
    for (;;) {
        j = (j + 1) & (PYFUSE3_FR_SLOTS - 1);
        if (pyfuse3_fr.slot[j] == NULL)
            break;
        home = pyfuse3_fr_home(pyfuse3_fr.slot[j]->ino);
        /* slot j's entry may move to i if its home is not in (i, j] (cyclically) */
        if (((j - home) & (PYFUSE3_FR_SLOTS - 1)) >= ((j - i) & (PYFUSE3_FR_SLOTS - 1))) {
            pyfuse3_fr.slot[i] = pyfuse3_fr.slot[j];
            pyfuse3_fr.slot[j] = NULL;
            i = j;
        }
    }
    pyfuse3_fr_unref(f);
}

static inline int64_t pyfuse3_fr_ns(const struct timespec *t) {
    return (int64_t)t->tv_sec * 1000000000LL + t->tv_nsec;
}

/* whether st is the state f was published in */
static int pyfuse3_fr_same(const struct pyfuse3_fr_file *f, const struct stat *st) {
    return st->st_dev == f->dev && st->st_ino == f->st_ino && st->st_size == f->size &&
           st->st_nlink == f->nlink && pyfuse3_fr_ns(&st->st_ctim) == f->ctime_ns &&
           pyfuse3_fr_ns(&st->st_mtim) == f->mtime_ns;
}

/* Publish fd (verified by the caller) for ino: 0 (the table owns fd from now on), or
   -ENOSPC (full: retract one), -EEXIST (published already), -errno of fstat/malloc.
   Replaces nothing: a caller republishing an inode retracts it first. */
static int pyfuse3_fr_publish(uint64_t ino, int fd) {
    struct stat st;
    struct pyfuse3_fr_file *f;
    unsigned i;
    int r = 0;
    if (ino == 0 || fstat(fd, &st) != 0)
        return ino == 0 ? -EINVAL : -errno;
    if (!S_ISREG(st.st_mode))
        return -EINVAL;
    f = calloc(1, sizeof *f);
    if (f == NULL)
        return -ENOMEM;
    f->ino = ino;
    f->fd = fd;
    f->refs = 1;
    {
        char path[64];
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        f->dfd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC); /* the same inode: compared below */
        if (f->dfd >= 0) {
            struct stat ds;
            if (fstat(f->dfd, &ds) != 0 || ds.st_dev != st.st_dev || ds.st_ino != st.st_ino) {
                close(f->dfd);
                f->dfd = -1;
            }
        }
    }
    f->dev = st.st_dev;
    f->st_ino = st.st_ino;
    f->size = st.st_size;
    f->nlink = st.st_nlink;
    f->ctime_ns = pyfuse3_fr_ns(&st.st_ctim);
    f->mtime_ns = pyfuse3_fr_ns(&st.st_mtim);
    pthread_mutex_lock(&pyfuse3_fr.lock);
    if (pyfuse3_fr_find(ino) >= 0) {
        r = -EEXIST;
    } else if (pyfuse3_fr.count >= PYFUSE3_FR_MAX) {
        r = -ENOSPC;
    } else {
        i = pyfuse3_fr_home(ino);
        while (pyfuse3_fr.slot[i] != NULL)
            i = (i + 1) & (PYFUSE3_FR_SLOTS - 1);
        pyfuse3_fr.slot[i] = f;
        pyfuse3_fr.count++;
        pyfuse3_fr.n.published++;
    }
    pthread_mutex_unlock(&pyfuse3_fr.lock);
    if (r != 0) {
        if (f->dfd >= 0)
            close(f->dfd);
        free(f); /* fd stays the caller's */
    }
    return r;
}

/* No more READs of ino answered here; 1 if it was published */
static int pyfuse3_fr_retract(uint64_t ino) {
    int i;
    pthread_mutex_lock(&pyfuse3_fr.lock);
    i = pyfuse3_fr_find(ino);
    if (i >= 0)
        pyfuse3_fr_remove((unsigned)i);
    pthread_mutex_unlock(&pyfuse3_fr.lock);
    return i >= 0;
}

/* Retract the inode whose published file is (dev, st_ino) (evicted from the tier): that
   inode, or 0 */
static uint64_t pyfuse3_fr_retract_file(uint64_t dev, uint64_t st_ino) {
    uint64_t ino = 0;
    unsigned i;
    pthread_mutex_lock(&pyfuse3_fr.lock);
    for (i = 0; i < PYFUSE3_FR_SLOTS; i++) {
        struct pyfuse3_fr_file *f = pyfuse3_fr.slot[i];
        if (f != NULL && (uint64_t)f->dev == dev && (uint64_t)f->st_ino == st_ino) {
            ino = f->ino;
            pyfuse3_fr_remove(i);
            break;
        }
    }
    pthread_mutex_unlock(&pyfuse3_fr.lock);
    return ino;
}

/* Retract, of the next `slots` slots (a cursor going round the table), the files that no
   longer fstat() as published: their inodes into out (at most max), how many returned.
   Another process sharing the disk directory may remove (evict) or change a page file and
   tells this one nothing (the tier's own evictions come through pyfuse3_fr_retract_file). A
   READ would find it, but a warm file sends none (the kernel keeps its pages), so without
   this sweep its descriptor -- the removed file's disk space with it -- was held until
   unmount. One fstat per occupied slot, under the lock. */
static unsigned pyfuse3_fr_sweep(unsigned slots, uint64_t *out, unsigned max) {
    struct stat st;
    unsigned n = 0;
    pthread_mutex_lock(&pyfuse3_fr.lock);
    while (slots > 0 && n < max) {
        struct pyfuse3_fr_file *f = pyfuse3_fr.slot[pyfuse3_fr.cursor];
        slots--;
        if (f != NULL && (fstat(f->fd, &st) != 0 || !pyfuse3_fr_same(f, &st))) {
            out[n++] = f->ino;
            pyfuse3_fr.n.swept++;
            pyfuse3_fr.n.changed++;
            pyfuse3_fr_remove(pyfuse3_fr.cursor);
            continue; /* a later entry may have moved into this slot: look at it next */
        }
        pyfuse3_fr.cursor = (pyfuse3_fr.cursor + 1) & (PYFUSE3_FR_SLOTS - 1);
    }
    pthread_mutex_unlock(&pyfuse3_fr.lock);
    return n;
}

/* Inodes with a READ answered since the last call (each once), at most max of them */
static unsigned pyfuse3_fr_drain_hits(uint64_t *out, unsigned max) {
    unsigned i, n = 0;
    pthread_mutex_lock(&pyfuse3_fr.lock);
    for (i = 0; i < PYFUSE3_FR_SLOTS && n < max; i++) {
        struct pyfuse3_fr_file *f = pyfuse3_fr.slot[i];
        if (f != NULL && f->hit) {
            f->hit = 0;
            out[n++] = f->ino;
        }
    }
    pthread_mutex_unlock(&pyfuse3_fr.lock);
    return n;
}

/* Empty the table (end of the session): every descriptor is closed with its last reader */
static void pyfuse3_fr_clear(void) {
    unsigned i;
    pthread_mutex_lock(&pyfuse3_fr.lock);
    for (i = 0; i < PYFUSE3_FR_SLOTS; i++) {
        if (pyfuse3_fr.slot[i] != NULL) {
            pyfuse3_fr_unref(pyfuse3_fr.slot[i]);
            pyfuse3_fr.slot[i] = NULL;
        }
    }
    pyfuse3_fr.count = 0;
    pthread_mutex_unlock(&pyfuse3_fr.lock);
}

static void pyfuse3_fr_snapshot(struct pyfuse3_fr_counters *n, unsigned *count) {
    pthread_mutex_lock(&pyfuse3_fr.lock);
    *n = pyfuse3_fr.n;
    n->direct = __atomic_load_n(&pyfuse3_fr.n.direct, __ATOMIC_RELAXED);
    *count = pyfuse3_fr.count;
    pthread_mutex_unlock(&pyfuse3_fr.lock);
}

/* Take a reference to ino's published file for one READ, or NULL */
static struct pyfuse3_fr_file *pyfuse3_fr_get(uint64_t ino) {
    struct pyfuse3_fr_file *f = NULL;
    int i;
    pthread_mutex_lock(&pyfuse3_fr.lock);
    i = pyfuse3_fr_find(ino);
    if (i >= 0) {
        f = pyfuse3_fr.slot[i];
        f->refs++;
    }
    pthread_mutex_unlock(&pyfuse3_fr.lock);
    return f;
}

/* Let go of a READ's reference. ok: the READ was answered (a hit, n bytes); changed: the
   file no longer is what was published (retract it, if it still is the published one). */
static void pyfuse3_fr_put(struct pyfuse3_fr_file *f, int ok, size_t n, int changed) {
    int i;
    pthread_mutex_lock(&pyfuse3_fr.lock);
    if (ok) {
        f->hit = 1;
        pyfuse3_fr.n.reads++;
        pyfuse3_fr.n.bytes += n;
    } else {
        pyfuse3_fr.n.handed++;
    }
    if (changed) {
        i = pyfuse3_fr_find(f->ino);
        if (i >= 0 && pyfuse3_fr.slot[i] == f) {
            pyfuse3_fr_remove((unsigned)i);
            pyfuse3_fr.n.changed++;
        }
    }
    pyfuse3_fr_unref(f);
    pthread_mutex_unlock(&pyfuse3_fr.lock);
}

/* Fill buf (room bytes) with the READ of ino at off, size bytes, from its published file:
   the number of bytes (a short count at the end of the file, as a READ reply says EOF), or
   -1 to hand the request to Python (not published, changed, or an I/O error). *f_out is
   the reference to release with pyfuse3_fr_done after the reply was sent; *direct says
   whether the bytes came with O_DIRECT (then nothing of the page file was cached). */
static ssize_t pyfuse3_fr_read(uint64_t ino, uint64_t off, uint32_t size, char *buf, size_t room,
                               struct pyfuse3_fr_file **f_out, int *direct) {
    struct pyfuse3_fr_file *f;
    struct stat st;
    size_t want = size < room ? size : room;
    ssize_t got = 0, r = 0;
    *direct = 0;
    if (!__atomic_load_n(&pyfuse3_fr.on, __ATOMIC_RELAXED))
        return -1;
    f = pyfuse3_fr_get(ino);
    if (f == NULL)
        return -1;
    if (off < (uint64_t)f->size) {
        size_t whole;
        if ((uint64_t)f->size - off < want)
            want = (size_t)((uint64_t)f->size - off);
        whole = (want + 4095) & ~(size_t)4095;
        /* O_DIRECT: the disk's bytes straight into buf (page-aligned buffer, offset and
           length), no page of the page file cached; refused
           (EINVAL) or short, the buffered read below does it */
        if (f->dfd >= 0 && __atomic_load_n(&pyfuse3_fr.direct, __ATOMIC_RELAXED) && (off & 4095) == 0 &&
            ((uintptr_t)buf & 4095) == 0 && whole <= room) {
            do
                r = pread(f->dfd, buf, whole, (off_t)off);
            while (r < 0 && errno == EINTR);
            if (r >= (ssize_t)want) {
                got = (ssize_t)want;
                *direct = 1;
            }
        }
        while ((size_t)got < want) {
            r = pread(f->fd, buf + got, want - (size_t)got, (off_t)(off + (uint64_t)got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0) { /* an I/O error, or shorter than published: Python decides */
                pyfuse3_fr_put(f, 0, 0, r == 0);
                return -1;
            }
            got += r;
        }
    }
    /* the one check: a write before or during the pread moved ctime before it copied data */
    if (fstat(f->fd, &st) != 0 || !pyfuse3_fr_same(f, &st)) {
        pyfuse3_fr_put(f, 0, 0, 1);
        return -1;
    }
    *f_out = f;
    return got;
}

/* After the reply to a READ from pyfuse3_fr_read: one copy in RAM, the kernel's. A direct
   read cached nothing: only the file's first READ here drops what was cached before it
   (the check that published it read it whole); a buffered read drops its own range. */
static void pyfuse3_fr_done(struct pyfuse3_fr_file *f, uint64_t off, size_t n, int direct) {
    if (n && __atomic_load_n(&pyfuse3_fr.dontneed, __ATOMIC_RELAXED)) {
        if (!__atomic_exchange_n(&f->dropped, 1, __ATOMIC_RELAXED))
            (void)posix_fadvise(f->fd, 0, 0, POSIX_FADV_DONTNEED);
        else if (!direct)
            (void)posix_fadvise(f->fd, (off_t)off, (off_t)n, POSIX_FADV_DONTNEED);
    }
    if (direct)
        __atomic_fetch_add(&pyfuse3_fr.n.direct, 1, __ATOMIC_RELAXED);
    pyfuse3_fr_put(f, 1, n, 0);
}
#endif

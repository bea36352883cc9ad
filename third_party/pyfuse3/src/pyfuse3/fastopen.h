/*
fastopen.h -- datahub: OPEN and RELEASE of published backing files answered in C.

Each request that reaches Python costs tens of microseconds of trio and Cython around a few
microseconds of the file system's own code. A read-only open of a file whose verified
backing file was published here (pyfuse3.passthrough_publish) is answered from this table:
the backing id, FOPEN_PASSTHROUGH and a file handle marked with FASTOPEN_FH; its RELEASE is
answered here too. The table is the single owner of each inode's passthrough state (the
kernel requires every passthrough open of an inode to name the same backing file while any
of its passthrough handles is open): the backing id, the descriptor it was made from, the
descriptor's fstat at publish time and the passthrough handles open (answered here or in
Python).

While pyfuse3.passthrough_sample_cached(True) is on (datahub's automatic read mode), each
open answered here also asks cachestat(2) whether the whole backing file was in the page
cache at that moment, before the reader read a byte: the counters sampled / resident tell
the file system how many opens would have been warm hits with zero-message opens (the mode
it switches to when nearly all are; fuse_adapter/read_mode.py). One system call per open,
under the table's lock; off by default.

Before each answer the descriptor is fstat()ed again: if anything moved (size, ctime,
mtime, link count -- a write, truncation, chmod or unlink of the file), the entry is
retracted and the open goes to Python, which checks the file again. A retracted entry keeps
its backing id until its last handle is released, then closes it and its descriptor.

The functions here take no lock: fastloop.h wraps each in pyfuse3_fo_lock, because its
reader thread answers OPEN and RELEASE without the GIL.
*/
#ifndef PYFUSE3_FASTOPEN_H
#define PYFUSE3_FASTOPEN_H
#include "passthrough.h"
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_cachestat
#define __NR_cachestat 451 /* Linux >= 6.5, the same number on every architecture */
#endif

#define PYFUSE3_FO_MAX 4096   /* entries (inodes with a backing id) at most */
#define PYFUSE3_FO_SLOTS 8192 /* power of two, twice MAX: short probes */
#define PYFUSE3_FO_FH (1ULL << 62) /* fh bit of handles this table owns (NO_OPEN_FH is 1 << 63) */

struct pyfuse3_fo_entry {
    uint64_t ino; /* 0: free slot */
    int32_t backing_id;
    int fd;
    int published; /* 1: opens may be answered here; 0: retracted, waiting for its handles */
    uint32_t handles;
    uint32_t hits; /* opens answered here since the last pyfuse3_fo_drain_hits */
    dev_t dev;
    ino_t st_ino;
    off_t size;
    nlink_t nlink;
    int64_t ctime_ns, mtime_ns;
};

struct pyfuse3_fo_counters {
    uint64_t c_opens;     /* opens answered here */
    uint64_t c_releases;  /* releases answered here */
    uint64_t releases;    /* handles released (answered here or in Python) */
    uint64_t py_handles;  /* passthrough handles Python answered with (pyfuse3_fo_handle) */
    uint64_t changed;     /* entries retracted because their file changed */
    uint64_t ids_opened;
    uint64_t ids_closed;
    uint64_t sampled;       /* opens answered here whose file cachestat(2) measured */
    uint64_t resident;      /* of them, the whole file was in the page cache */
    uint64_t sample_failed; /* cachestat(2) failed (ENOSYS before Linux 6.5) */
    uint64_t swept;         /* of `changed`, found by pyfuse3_fo_sweep (no open came) */
};

static struct pyfuse3_fo_entry pyfuse3_fo_table[PYFUSE3_FO_SLOTS];
static unsigned pyfuse3_fo_count;
static int pyfuse3_fo_answer = 1; /* 0: OPEN and RELEASE go to Python (same table) */
static struct pyfuse3_fo_counters pyfuse3_fo_n;
static int pyfuse3_fo_sample = 0; /* 1: measure each answered open's page-cache residency */
static unsigned pyfuse3_fo_cursor; /* pyfuse3_fo_sweep's next slot */

struct pyfuse3_cachestat_range {
    uint64_t off, len;
};
struct pyfuse3_cachestat {
    uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

/* was the entry's whole file in the page cache (before this open's reader read it)? */
static void pyfuse3_fo_note_cached(const struct pyfuse3_fo_entry *e) {
    static long page;
    struct pyfuse3_cachestat_range r = {0, 0}; /* len 0: to the end of the file */
    struct pyfuse3_cachestat cs;
    if (page <= 0)
        page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
    if (syscall(__NR_cachestat, e->fd, &r, &cs, 0) != 0) {
        pyfuse3_fo_n.sample_failed++;
        return;
    }
    pyfuse3_fo_n.sampled++;
    if (cs.nr_cache >= ((uint64_t)e->size + (uint64_t)page - 1) / (uint64_t)page)
        pyfuse3_fo_n.resident++;
}

static inline unsigned pyfuse3_fo_slot(uint64_t ino) {
    return (unsigned)((ino * 0x9E3779B97F4A7C15ULL) >> 51) & (PYFUSE3_FO_SLOTS - 1);
}

static struct pyfuse3_fo_entry *pyfuse3_fo_find(uint64_t ino) {
    unsigned i = pyfuse3_fo_slot(ino);
    while (pyfuse3_fo_table[i].ino != 0) {
        if (pyfuse3_fo_table[i].ino == ino)
            return &pyfuse3_fo_table[i];
        i = (i + 1) & (PYFUSE3_FO_SLOTS - 1);
    }
    return NULL;
}

/* linear probing: close the gap by moving back later entries whose home slot allows it */
static void pyfuse3_fo_delete(struct pyfuse3_fo_entry *e) {
    unsigned i = (unsigned)(e - pyfuse3_fo_table), j = i, home;
    for (;;) {
        pyfuse3_fo_table[i].ino = 0;
        for (;;) {
            j = (j + 1) & (PYFUSE3_FO_SLOTS - 1);
            if (pyfuse3_fo_table[j].ino == 0) {
                pyfuse3_fo_count--;
                return;
            }
            home = pyfuse3_fo_slot(pyfuse3_fo_table[j].ino);
            /* j may move to i unless its home lies cyclically in (i, j] */
            if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
                continue;
            break;
        }
        pyfuse3_fo_table[i] = pyfuse3_fo_table[j];
        i = j;
    }
}

static void pyfuse3_fo_state(const struct stat *st, struct pyfuse3_fo_entry *e) {
    e->dev = st->st_dev;
    e->st_ino = st->st_ino;
    e->size = st->st_size;
    e->nlink = st->st_nlink;
    e->ctime_ns = (int64_t)st->st_ctim.tv_sec * 1000000000 + st->st_ctim.tv_nsec;
    e->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* 1 if the descriptor's file is as it was at publish time */
static int pyfuse3_fo_unchanged(const struct pyfuse3_fo_entry *e) {
    struct stat st;
    struct pyfuse3_fo_entry now;
    if (fstat(e->fd, &st) != 0)
        return 0;
    pyfuse3_fo_state(&st, &now);
    return now.dev == e->dev && now.st_ino == e->st_ino && now.size == e->size &&
           now.nlink == e->nlink && now.ctime_ns == e->ctime_ns && now.mtime_ns == e->mtime_ns;
}

static inline int pyfuse3_fo_ioc_close(int devfd, int32_t backing_id) {
    uint32_t id = (uint32_t)backing_id;
    return ioctl(devfd, PYFUSE3_DEV_IOC_BACKING_CLOSE, &id);
}

/* free a retracted entry once no handle holds its backing id */
static void pyfuse3_fo_settle(int devfd, struct pyfuse3_fo_entry *e) {
    if (e->published || e->handles > 0)
        return;
    if (devfd >= 0)
        pyfuse3_fo_ioc_close(devfd, e->backing_id); /* fails only if the session is gone */
    close(e->fd);
    pyfuse3_fo_n.ids_closed++;
    pyfuse3_fo_delete(e);
}

/* the entry's file changed since it was published: never hand it to the kernel again */
static void pyfuse3_fo_changed(int devfd, struct pyfuse3_fo_entry *e) {
    e->published = 0;
    pyfuse3_fo_n.changed++;
    pyfuse3_fo_settle(devfd, e);
}

/* OPEN in C: 1 (answered: *fh, *backing_id set) or 0 (Python answers it). */
static int pyfuse3_fo_open(int devfd, uint64_t ino, int flags, uint64_t *fh, int32_t *backing_id) {
    struct pyfuse3_fo_entry *e;
    if (!pyfuse3_fo_answer || (flags & O_ACCMODE) != O_RDONLY || (flags & (O_TRUNC | O_APPEND)))
        return 0;
    e = pyfuse3_fo_find(ino);
    if (e == NULL || !e->published)
        return 0;
    if (!pyfuse3_fo_unchanged(e)) {
        pyfuse3_fo_changed(devfd, e);
        return 0;
    }
    e->handles++;
    e->hits++;
    pyfuse3_fo_n.c_opens++;
    if (pyfuse3_fo_sample)
        pyfuse3_fo_note_cached(e);
    *fh = PYFUSE3_FO_FH | ino;
    *backing_id = e->backing_id;
    return 1;
}

/* A passthrough handle for Python to answer an open with: 1, or 0 (no entry, or its file
   changed: then retracted). Works on retracted entries too (their handles need the id). */
static int pyfuse3_fo_handle(int devfd, uint64_t ino, uint64_t *fh, int32_t *backing_id) {
    struct pyfuse3_fo_entry *e = pyfuse3_fo_find(ino);
    if (e == NULL)
        return 0;
    if (!pyfuse3_fo_unchanged(e)) {
        if (e->published)
            pyfuse3_fo_changed(devfd, e);
        return 0;
    }
    e->handles++;
    pyfuse3_fo_n.py_handles++;
    *fh = PYFUSE3_FO_FH | ino;
    *backing_id = e->backing_id;
    return 1;
}

/* A handle for a direct-I/O open beside this inode's passthrough handles, whose held file
   failed Python's check (datahub, wbfix73): the kernel takes no open of an inode with a
   backing file that does not name that same file (fs/fuse/iomode.c, EIO to the caller), so
   the open names it with FOPEN_DIRECT_IO, and its reads go to the daemon. 1 (*fh for
   pyfuse3_fo_release, *backing_id set), or 0 if the table holds no file for ino. Unlike
   pyfuse3_fo_handle the file's state is not asked: the handle reads nothing from it. */
static int pyfuse3_fo_pin(uint64_t ino, uint64_t *fh, int32_t *backing_id) {
    struct pyfuse3_fo_entry *e = pyfuse3_fo_find(ino);
    if (e == NULL)
        return 0;
    e->handles++;
    pyfuse3_fo_n.py_handles++;
    *fh = PYFUSE3_FO_FH | ino;
    *backing_id = e->backing_id;
    return 1;
}

/* RELEASE of a handle of this table: 1 if it was one */
static int pyfuse3_fo_release(int devfd, uint64_t fh) {
    struct pyfuse3_fo_entry *e;
    if (!(fh & PYFUSE3_FO_FH) || (fh >> 63))
        return 0;
    e = pyfuse3_fo_find(fh & ~PYFUSE3_FO_FH);
    if (e == NULL || e->handles == 0)
        return 0;
    e->handles--;
    pyfuse3_fo_n.releases++;
    pyfuse3_fo_settle(devfd, e);
    return 1;
}

/* Publish fd (a verified backing file) for ino: its backing id (> 0; the table owns fd
   then), or -errno (the caller still owns fd): -EBUSY if ino holds another file's backing
   id for open handles, -ENOSPC if the table is full. */
static int pyfuse3_fo_publish(int devfd, uint64_t ino, int fd) {
    struct pyfuse3_fo_entry *e = pyfuse3_fo_find(ino);
    struct stat st;
    struct pyfuse3_backing_map map = {fd, 0, 0};
    unsigned i;
    int id;
    if (ino == 0)
        return -EINVAL;
    if (e != NULL) {
        if (pyfuse3_fo_unchanged(e)) {
            e->published = 1; /* the same file: keep its id (handles may hold it) */
            close(fd);
            return e->backing_id;
        }
        e->published = 0;
        pyfuse3_fo_settle(devfd, e);
        if (pyfuse3_fo_find(ino) != NULL)
            return -EBUSY;
    }
    if (pyfuse3_fo_count >= PYFUSE3_FO_MAX)
        return -ENOSPC;
    if (fstat(fd, &st) != 0)
        return -errno;
    id = ioctl(devfd, PYFUSE3_DEV_IOC_BACKING_OPEN, &map);
    if (id < 0)
        return -errno;
    if (id == 0) {
        pyfuse3_fo_ioc_close(devfd, id);
        return -EIO;
    }
    i = pyfuse3_fo_slot(ino);
    while (pyfuse3_fo_table[i].ino != 0)
        i = (i + 1) & (PYFUSE3_FO_SLOTS - 1);
    e = &pyfuse3_fo_table[i];
    e->ino = ino;
    e->backing_id = id;
    e->fd = fd;
    e->published = 1;
    e->handles = 0;
    e->hits = 0;
    pyfuse3_fo_state(&st, e);
    pyfuse3_fo_count++;
    pyfuse3_fo_n.ids_opened++;
    return id;
}

/* No more opens of ino answered with its file; 1 if it was published */
static int pyfuse3_fo_retract(int devfd, uint64_t ino) {
    struct pyfuse3_fo_entry *e = pyfuse3_fo_find(ino);
    int was;
    if (e == NULL)
        return 0;
    was = e->published;
    e->published = 0;
    pyfuse3_fo_settle(devfd, e);
    return was;
}

/* Retract the entry whose descriptor is this file (the tier is removing it: its space
   comes back once no handle holds it); its inode, or 0 if none held the file */
static uint64_t pyfuse3_fo_retract_file(int devfd, uint64_t dev, uint64_t st_ino) {
    unsigned i;
    for (i = 0; i < PYFUSE3_FO_SLOTS; i++) {
        struct pyfuse3_fo_entry *e = &pyfuse3_fo_table[i];
        if (e->ino != 0 && (uint64_t)e->dev == dev && (uint64_t)e->st_ino == st_ino) {
            uint64_t ino = e->ino;
            e->published = 0;
            pyfuse3_fo_settle(devfd, e);
            return ino;
        }
    }
    return 0;
}

/* Retract, of the next `slots` slots (a cursor going round the table), the published entries
   whose file no longer fstat()s as published: their inodes into out (at most max), how many
   returned. Another process sharing the disk directory may remove (evict) or change a page
   file and tells this one nothing (the tier's own evictions come through
   pyfuse3_fo_retract_file); an open would find it, but a file not opened again kept its
   descriptor and backing id -- the removed file's disk space -- until unmount. An entry with
   handles open keeps its id until the last is released (the kernel's rule), as on any
   retraction. */
static unsigned pyfuse3_fo_sweep(int devfd, unsigned slots, uint64_t *out, unsigned max) {
    unsigned n = 0;
    while (slots > 0 && n < max) {
        struct pyfuse3_fo_entry *e = &pyfuse3_fo_table[pyfuse3_fo_cursor];
        slots--;
        if (e->ino != 0 && e->published && !pyfuse3_fo_unchanged(e)) {
            out[n++] = e->ino;
            pyfuse3_fo_n.swept++;
            pyfuse3_fo_changed(devfd, e); /* freed now if no handle holds it */
            continue; /* a later entry may have moved into this slot: look at it next */
        }
        pyfuse3_fo_cursor = (pyfuse3_fo_cursor + 1) & (PYFUSE3_FO_SLOTS - 1);
    }
    return n;
}

/* -1: no entry; else the passthrough handles open (a backing id is held for them) */
static long pyfuse3_fo_handles(uint64_t ino) {
    struct pyfuse3_fo_entry *e = pyfuse3_fo_find(ino);
    return e == NULL ? -1 : (long)e->handles;
}

/* a copy of the descriptor held for ino (the caller closes it), or -1 */
static int pyfuse3_fo_held_fd(uint64_t ino) {
    struct pyfuse3_fo_entry *e = pyfuse3_fo_find(ino);
    return e == NULL ? -1 : fcntl(e->fd, F_DUPFD_CLOEXEC, 0);
}

/* Python checked the held file again (through pyfuse3_fo_held_fd) and it passed in this
   state: a handle of it if it is still in that state (1), else 0. The entry keeps its
   published flag: a retracted one is freed with its last handle. */
static int pyfuse3_fo_revalidate(uint64_t ino, int64_t size, int64_t nlink, int64_t ctime_ns,
                                 int64_t mtime_ns, uint64_t *fh, int32_t *backing_id) {
    struct pyfuse3_fo_entry *e = pyfuse3_fo_find(ino);
    struct stat st;
    if (e == NULL || fstat(e->fd, &st) != 0)
        return 0;
    if (st.st_dev != e->dev || st.st_ino != e->st_ino)
        return 0;
    pyfuse3_fo_state(&st, e);
    if ((int64_t)e->size != size || (int64_t)e->nlink != nlink || e->ctime_ns != ctime_ns ||
        e->mtime_ns != mtime_ns)
        return 0;
    e->handles++;
    pyfuse3_fo_n.py_handles++;
    *fh = PYFUSE3_FO_FH | ino;
    *backing_id = e->backing_id;
    return 1;
}

/* unmount (or a new session): close every backing id and descriptor */
static void pyfuse3_fo_close_all(int devfd) {
    unsigned i;
    for (i = 0; i < PYFUSE3_FO_SLOTS; i++) {
        struct pyfuse3_fo_entry *e = &pyfuse3_fo_table[i];
        if (e->ino == 0)
            continue;
        if (devfd >= 0)
            pyfuse3_fo_ioc_close(devfd, e->backing_id);
        close(e->fd);
        pyfuse3_fo_n.ids_closed++;
        e->ino = 0;
    }
    pyfuse3_fo_count = 0;
}

/* the inodes opened here since the last call (at most max, into out): the file system
   counts them as cache hits, which it cannot see otherwise */
static unsigned pyfuse3_fo_drain_hits(uint64_t *out, unsigned max) {
    unsigned i, n = 0;
    for (i = 0; i < PYFUSE3_FO_SLOTS && n < max; i++) {
        struct pyfuse3_fo_entry *e = &pyfuse3_fo_table[i];
        if (e->ino != 0 && e->hits > 0) {
            out[n++] = e->ino;
            e->hits = 0;
        }
    }
    return n;
}

static unsigned pyfuse3_fo_published(void) {
    unsigned i, n = 0;
    for (i = 0; i < PYFUSE3_FO_SLOTS; i++)
        n += pyfuse3_fo_table[i].ino != 0 && pyfuse3_fo_table[i].published;
    return n;
}

/* fuse_open's fast path: 1 if answered here (the reply is sent) */
static int pyfuse3_fo_try_open(int devfd, fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    uint64_t fh;
    int32_t id;
    if (!pyfuse3_fo_open(devfd, ino, fi->flags, &fh, &id))
        return 0;
    fi->fh = fh;
    pyfuse3_fi_set_backing_id(fi, id);
    pyfuse3_fi_set_noflush(fi); /* a read-only handle: nothing for close() to flush */
    fi->keep_cache = 0; /* outside FOPEN_PASSTHROUGH_MASK: the kernel would fail the open */
    fi->direct_io = 0;
    fi->nonseekable = 0;
    if (fuse_reply_open(req, fi) != 0)
        pyfuse3_fo_release(devfd, fh); /* the open did not happen: no RELEASE will come */
    return 1;
}

/* fuse_release's fast path: 1 if answered here */
static int pyfuse3_fo_try_release(int devfd, fuse_req_t req, struct fuse_file_info *fi) {
    if (!pyfuse3_fo_answer || !pyfuse3_fo_release(devfd, fi->fh))
        return 0;
    pyfuse3_fo_n.c_releases++;
    fuse_reply_err(req, 0);
    return 1;
}
#endif

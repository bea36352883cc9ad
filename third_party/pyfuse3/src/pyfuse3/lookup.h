/*
lookup.h -- datahub: LOOKUP of names the file system answered before, answered in C.

A read-only datahub mount's namespace never changes while it is mounted, and its FORGET is
a no-op (its inodes live as long as the mount). So once Python answered a LOOKUP of
(parent, name) with an entry, that answer is right for every later LOOKUP of the name: the
kernel asks again only after it dropped the dentry (memory pressure, drop_caches), and an
SSD-tier hit then cost the daemon a Python LOOKUP, most of its CPU. Python publishes its
positive answers (pyfuse3.lookup_publish, only for such mounts); the fastloop and io_uring
threads answer a LOOKUP of a published name from this table, exactly as libfuse's
fuse_reply_entry would (fill_entry, convert_stat), and hand every other LOOKUP over.

Bounded: at most PYFUSE3_LK_MAX names; publishing more is refused (counted) and those
LOOKUPs keep going to Python. The table is emptied with the session. One mutex: the C
threads never take the GIL, and Python holds the GIL around its calls, so neither waits for
the other while holding the lock.
*/
#ifndef PYFUSE3_LOOKUP_H
#define PYFUSE3_LOOKUP_H
#include <fuse_lowlevel.h> /* struct fuse_entry_param */
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* kernel ABI (include/uapi/linux/fuse.h) */
struct pyfuse3_lk_attr {
    uint64_t ino, size, blocks, atime, mtime, ctime;
    uint32_t atimensec, mtimensec, ctimensec, mode, nlink, uid, gid, rdev, blksize, flags;
};
struct pyfuse3_lk_entry_out {
    uint64_t nodeid, generation, entry_valid, attr_valid;
    uint32_t entry_valid_nsec, attr_valid_nsec;
    struct pyfuse3_lk_attr attr;
};
#define PYFUSE3_FL_LOOKUP 1

#define PYFUSE3_LK_SLOTS (1u << 20) /* open addressing, kept at most half full */
#define PYFUSE3_LK_MAX (PYFUSE3_LK_SLOTS / 2)

struct pyfuse3_lk_ent {
    uint64_t parent, hash;
    struct pyfuse3_lk_entry_out out;
    size_t namelen;
    char name[];
};

struct pyfuse3_lk_counters {
    uint64_t published; /* names in the table */
    uint64_t refused;   /* publications refused: the table was full */
    uint64_t answered;  /* LOOKUPs answered from it */
};

static pthread_mutex_t pyfuse3_lk_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pyfuse3_lk_ent **pyfuse3_lk_slots; /* allocated at the first publication */
static struct pyfuse3_lk_counters pyfuse3_lk_n;

static uint64_t pyfuse3_lk_hash(uint64_t parent, const char *name, size_t len) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    size_t i;
    for (i = 0; i < sizeof parent; i++) {
        h ^= (parent >> (8 * i)) & 0xff;
        h *= 1099511628211ull;
    }
    for (i = 0; i < len; i++) {
        h ^= (unsigned char)name[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* the slot holding (parent, name), or the empty slot where it would go; lock held */
static struct pyfuse3_lk_ent **pyfuse3_lk_find(uint64_t parent, const char *name, size_t len, uint64_t h) {
    uint32_t i = (uint32_t)h & (PYFUSE3_LK_SLOTS - 1);
    for (;;) {
        struct pyfuse3_lk_ent *e = pyfuse3_lk_slots[i];
        if (e == NULL ||
            (e->hash == h && e->parent == parent && e->namelen == len && memcmp(e->name, name, len) == 0))
            return &pyfuse3_lk_slots[i];
        i = (i + 1) & (PYFUSE3_LK_SLOTS - 1);
    }
}

/* libfuse's calc_timeout_sec / calc_timeout_nsec (fuse_lowlevel.c) */
static uint64_t pyfuse3_lk_sec(double t) {
    if (t > (double)ULONG_MAX)
        return ULONG_MAX;
    if (t < 0.0)
        return 0;
    return (uint64_t)t;
}
static uint32_t pyfuse3_lk_nsec(double t) {
    double f = t - (double)pyfuse3_lk_sec(t);
    if (f < 0.0)
        return 0;
    if (f >= 0.999999999)
        return 999999999;
    return (uint32_t)(f * 1.0e9);
}

/* fuse_reply_entry's body for e (libfuse's fill_entry and convert_stat) */
static void pyfuse3_lk_fill(struct pyfuse3_lk_entry_out *o, const struct fuse_entry_param *e) {
    const struct stat *st = &e->attr;
    memset(o, 0, sizeof *o);
    o->nodeid = e->ino;
    o->generation = e->generation;
    o->entry_valid = pyfuse3_lk_sec(e->entry_timeout);
    o->entry_valid_nsec = pyfuse3_lk_nsec(e->entry_timeout);
    o->attr_valid = pyfuse3_lk_sec(e->attr_timeout);
    o->attr_valid_nsec = pyfuse3_lk_nsec(e->attr_timeout);
    /* the kernel ABI's widths (struct fuse_attr), converted as libfuse's convert_stat does */
    o->attr.ino = st->st_ino;
    o->attr.mode = st->st_mode;
    o->attr.nlink = (uint32_t)st->st_nlink;
    o->attr.uid = st->st_uid;
    o->attr.gid = st->st_gid;
    o->attr.rdev = (uint32_t)st->st_rdev;
    o->attr.size = (uint64_t)st->st_size;
    o->attr.blksize = (uint32_t)st->st_blksize;
    o->attr.blocks = (uint64_t)st->st_blocks;
    o->attr.atime = (uint64_t)st->st_atim.tv_sec;
    o->attr.mtime = (uint64_t)st->st_mtim.tv_sec;
    o->attr.ctime = (uint64_t)st->st_ctim.tv_sec;
    o->attr.atimensec = (uint32_t)st->st_atim.tv_nsec; /* 0 .. 999999999 */
    o->attr.mtimensec = (uint32_t)st->st_mtim.tv_nsec;
    o->attr.ctimensec = (uint32_t)st->st_ctim.tv_nsec;
}

/* Publish Python's answer to LOOKUP(parent, name): 1 if the table holds it now, 0 if refused
   (full, no memory, or not an entry: inode 0 is a negative answer, never published) */
static int pyfuse3_lk_publish(uint64_t parent, const char *name, size_t len, const struct fuse_entry_param *e) {
    uint64_t h = pyfuse3_lk_hash(parent, name, len);
    struct pyfuse3_lk_ent **slot, *ent;
    int ok = 0;
    if (e->ino == 0 || len == 0)
        return 0;
    pthread_mutex_lock(&pyfuse3_lk_lock);
    if (pyfuse3_lk_slots == NULL)
        pyfuse3_lk_slots = calloc(PYFUSE3_LK_SLOTS, sizeof *pyfuse3_lk_slots);
    if (pyfuse3_lk_slots == NULL)
        goto out;
    slot = pyfuse3_lk_find(parent, name, len, h);
    if (*slot != NULL) {
        pyfuse3_lk_fill(&(*slot)->out, e);
        ok = 1;
        goto out;
    }
    if (pyfuse3_lk_n.published >= PYFUSE3_LK_MAX) {
        pyfuse3_lk_n.refused++;
        goto out;
    }
    ent = malloc(sizeof *ent + len);
    if (ent == NULL)
        goto out;
    ent->parent = parent;
    ent->hash = h;
    ent->namelen = len;
    memcpy(ent->name, name, len);
    pyfuse3_lk_fill(&ent->out, e);
    *slot = ent;
    pyfuse3_lk_n.published++;
    ok = 1;
out:
    pthread_mutex_unlock(&pyfuse3_lk_lock);
    return ok;
}

/* the published answer to LOOKUP(parent, name) into *o: 1, or 0 (hand the request over) */
static int pyfuse3_lk_get(uint64_t parent, const char *name, size_t len, struct pyfuse3_lk_entry_out *o) {
    uint64_t h = pyfuse3_lk_hash(parent, name, len);
    int ok = 0;
    pthread_mutex_lock(&pyfuse3_lk_lock);
    if (pyfuse3_lk_slots != NULL) {
        struct pyfuse3_lk_ent *e = *pyfuse3_lk_find(parent, name, len, h);
        if (e != NULL) {
            *o = e->out;
            pyfuse3_lk_n.answered++;
            ok = 1;
        }
    }
    pthread_mutex_unlock(&pyfuse3_lk_lock);
    return ok;
}

/* the end of the session: no names any more */
static void pyfuse3_lk_clear(void) {
    uint32_t i;
    pthread_mutex_lock(&pyfuse3_lk_lock);
    if (pyfuse3_lk_slots != NULL) {
        for (i = 0; i < PYFUSE3_LK_SLOTS; i++)
            free(pyfuse3_lk_slots[i]);
        free(pyfuse3_lk_slots);
        pyfuse3_lk_slots = NULL;
    }
    pyfuse3_lk_n.published = 0;
    pthread_mutex_unlock(&pyfuse3_lk_lock);
}

/* 1 if names are published: the file system is one whose FORGET is a no-op (see the top) */
static int pyfuse3_lk_any(void) {
    int any;
    pthread_mutex_lock(&pyfuse3_lk_lock);
    any = pyfuse3_lk_n.published > 0;
    pthread_mutex_unlock(&pyfuse3_lk_lock);
    return any;
}

static void pyfuse3_lk_snapshot(struct pyfuse3_lk_counters *n) {
    pthread_mutex_lock(&pyfuse3_lk_lock);
    *n = pyfuse3_lk_n;
    pthread_mutex_unlock(&pyfuse3_lk_lock);
}
#endif

/*
readdir.h -- datahub: a READDIRPLUS reply packed in C from a directory page's columns.

A paged version mount (fuse_adapter/paged_tree.py) holds each directory as columns: the
names in one blob with their end offsets, and arrays of inodes, kinds, sizes and mtimes.
Answering READDIRPLUS through pyfuse3's readdir_reply cost, per entry, a Stat, an
EntryAttributes, an encoded name and a Python call (~20 us of daemon CPU each: most of a
cold `ls` of 10^4 entries, and of `find`). This packs the same bytes libfuse's
fuse_add_direntry_plus would (struct fuse_direntplus: fill_entry and convert_stat, then
the dirent padded to 8 bytes), straight from the columns, until the kernel's buffer is
full.

Entry i goes out as offset i + 1 (the position after it: what a later READDIRPLUS passes
back as its offset). An entry whose skip byte is non-zero is not listed (a file shadowed by
a directory of its name). Everything the entries share (mode bits, owner, timeouts) comes in
one struct from Python.
*/
#ifndef PYFUSE3_READDIR_H
#define PYFUSE3_READDIR_H
#include "lookup.h" /* struct pyfuse3_lk_entry_out, pyfuse3_lk_sec, pyfuse3_lk_nsec */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

/* kernel ABI (include/uapi/linux/fuse.h): struct fuse_dirent after a fuse_entry_out */
struct pyfuse3_rd_dirent {
    uint64_t ino, off;
    uint32_t namelen, type;
};
#define PYFUSE3_RD_HEAD (sizeof(struct pyfuse3_lk_entry_out) + sizeof(struct pyfuse3_rd_dirent))
/* the longest name the kernel takes in a dirent (FUSE_NAME_MAX; a longer one fails the reply: EIO) */
#define PYFUSE3_RD_NAME_MAX 1024
#define PYFUSE3_RD_ALIGN(x) (((x) + sizeof(uint64_t) - 1) & ~(sizeof(uint64_t) - 1))

/* what every entry of the page shares; kind 0 = file, 1 = directory (fuse_adapter.tree) */
struct pyfuse3_rd_common {
    uint32_t file_mode, dir_mode; /* with their S_IFMT bits */
    uint32_t file_nlink, dir_nlink, uid, gid, blksize;
    double entry_timeout, attr_timeout;
};

/* the columns of one page: n entries */
struct pyfuse3_rd_page {
    const char *names;     /* every name, back to back (a directory's with its trailing '/') */
    const uint64_t *ends;  /* entry i's name ends at ends[i], starts at ends[i - 1] (or 0) */
    const uint8_t *kinds;  /* 0 file, 1 directory */
    const uint8_t *skip;   /* NULL, or non-zero: not listed */
    const uint64_t *inos;
    const int64_t *sizes;
    const int64_t *mtimes; /* ns since the epoch */
    size_t n;
};

static void pyfuse3_rd_time(int64_t ns, uint64_t *sec, uint32_t *nsec) {
    int64_t s = ns / 1000000000, r = ns % 1000000000;
    if (r < 0) { /* floor, as Python's // and % (pyfuse3's st_mtime_ns setter) */
        s -= 1;
        r += 1000000000;
    }
    *sec = (uint64_t)s;
    *nsec = (uint32_t)r;
}

/* Pack entries start, start + 1, ... of page p into buf (size bytes) until one does not fit
   or the page ends. Returns the bytes written; *next is the position of the first entry not
   sent (p->n at the end). A name of more than 255 bytes (NAME_MAX) is listed: a record stored
   before the commit rule refused such segments is one of the version's files, a LOOKUP finds
   it and `.datahub` counts it, so a listing must show it too (the kernel takes names of up to
   PYFUSE3_RD_NAME_MAX bytes, its FUSE_NAME_MAX; a key is at most 1,024 bytes, so none is
   longer, and one that were could not be looked up either: the kernel answers ENAMETOOLONG). */
static size_t pyfuse3_rd_fill(char *buf, size_t size, const struct pyfuse3_rd_page *p, size_t start,
                              const struct pyfuse3_rd_common *c, size_t *next) {
    size_t used = 0, i;
    uint64_t entry_valid = pyfuse3_lk_sec(c->entry_timeout), attr_valid = pyfuse3_lk_sec(c->attr_timeout);
    uint32_t entry_nsec = pyfuse3_lk_nsec(c->entry_timeout), attr_nsec = pyfuse3_lk_nsec(c->attr_timeout);
    for (i = start; i < p->n; i++) {
        size_t from = i ? (size_t)p->ends[i - 1] : 0, namelen = (size_t)p->ends[i] - from, len;
        int dir = p->kinds[i] == 1;
        struct pyfuse3_lk_entry_out *o;
        struct pyfuse3_rd_dirent *d;
        uint64_t sec;
        uint32_t nsec;
        if (p->skip != NULL && p->skip[i])
            continue;
        if (dir && namelen > 0)
            namelen--; /* the trailing '/' of a directory's sort key */
        if (namelen == 0 || namelen > PYFUSE3_RD_NAME_MAX)
            continue;
        len = PYFUSE3_RD_ALIGN(PYFUSE3_RD_HEAD + namelen);
        if (len > size - used)
            break;
        o = (struct pyfuse3_lk_entry_out *)(void *)(buf + used);
        memset(o, 0, len);
        o->nodeid = p->inos[i];
        o->entry_valid = entry_valid;
        o->entry_valid_nsec = entry_nsec;
        o->attr_valid = attr_valid;
        o->attr_valid_nsec = attr_nsec;
        o->attr.ino = p->inos[i];
        o->attr.mode = dir ? c->dir_mode : c->file_mode;
        o->attr.nlink = dir ? c->dir_nlink : c->file_nlink;
        o->attr.uid = c->uid;
        o->attr.gid = c->gid;
        o->attr.size = p->sizes[i] < 0 ? 0 : (uint64_t)p->sizes[i];
        o->attr.blocks = (o->attr.size + 511) / 512;
        o->attr.blksize = c->blksize;
        pyfuse3_rd_time(p->mtimes[i], &sec, &nsec);
        o->attr.atime = o->attr.mtime = o->attr.ctime = sec;
        o->attr.atimensec = o->attr.mtimensec = o->attr.ctimensec = nsec;
        d = (struct pyfuse3_rd_dirent *)(void *)(buf + used + sizeof *o);
        d->ino = p->inos[i];
        d->off = (uint64_t)i + 1;
        d->namelen = (uint32_t)namelen;
        d->type = (o->attr.mode & S_IFMT) >> 12;
        memcpy(buf + used + PYFUSE3_RD_HEAD, p->names + from, namelen);
        used += len;
    }
    *next = i;
    return used;
}
#endif

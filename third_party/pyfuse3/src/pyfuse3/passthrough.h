/*
passthrough.h -- datahub: FUSE passthrough backing files (Linux >= 6.9, libfuse >= 3.16).

libfuse's fuse_passthrough_open(req, fd) and fuse_passthrough_close(req, id) send these two
ioctls on the session's /dev/fuse fd and use the request only to find that fd. A backing id
is released when the last handle of its inode is released, which is not always inside a
request, so pyfuse3 sends the same ioctls on the session fd itself. The kernel header that
defines them (linux/fuse.h >= 6.9) is newer than Debian 12's, hence the definitions here.

PYFUSE3_FASTPATH says whether datahub's C fast path is built: it needs libfuse >= 3.17
(fuse_file_info.backing_id and FUSE_CAP_PASSTHROUGH since 3.16, uring.h's custom writev
fuse_session_custom_io_317 since 3.17). Against an older libfuse (Debian 12's 3.14) it compiles
out: passthrough is never asked for at INIT, no backing file is registered, no C reader thread
and no io_uring queue is started, and pyfuse3.PASSTHROUGH, FASTLOOP and URING are False.
*/
#ifndef PYFUSE3_PASSTHROUGH_H
#define PYFUSE3_PASSTHROUGH_H
#include <errno.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <fuse_lowlevel.h>

#if FUSE_MAJOR_VERSION > 3 || (FUSE_MAJOR_VERSION == 3 && FUSE_MINOR_VERSION >= 17)
#define PYFUSE3_FASTPATH 1
#else
#define PYFUSE3_FASTPATH 0
#ifndef FUSE_CAP_PASSTHROUGH
#define FUSE_CAP_PASSTHROUGH 0 /* never offered, so never asked for */
#endif
#endif

struct pyfuse3_backing_map {
    int32_t fd;
    uint32_t flags;
    uint64_t padding;
};
#define PYFUSE3_DEV_IOC_BACKING_OPEN _IOW(229, 1, struct pyfuse3_backing_map)
#define PYFUSE3_DEV_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)

static inline int pyfuse3_backing_open(int devfd, int fd) {
#if PYFUSE3_FASTPATH
    struct pyfuse3_backing_map map = { fd, 0, 0 };
    return ioctl(devfd, PYFUSE3_DEV_IOC_BACKING_OPEN, &map);
#else
    (void)devfd;
    (void)fd;
    errno = EOPNOTSUPP; /* libfuse could not answer OPEN with a backing id */
    return -1;
#endif
}

static inline int pyfuse3_backing_close(int devfd, int backing_id) {
    uint32_t id = (uint32_t)backing_id;
    return ioctl(devfd, PYFUSE3_DEV_IOC_BACKING_CLOSE, &id);
}

/* An OPEN reply with this backing id (libfuse then sets FOPEN_PASSTHROUGH), or none */
static inline void pyfuse3_fi_set_backing_id(struct fuse_file_info *fi, int32_t id) {
#if PYFUSE3_FASTPATH
    fi->backing_id = id;
#else
    (void)fi;
    (void)id;
#endif
}

/* A read-only passthrough handle of the open table (fastopen.h) is answered with
   FOPEN_NOFLUSH too (allowed with passthrough: FOPEN_PASSTHROUGH_MASK, fs/fuse/iomode.c).
   Without it every close() runs fuse_flush: write_inode_now, the inode's lock around
   fuse_sync_writes and filemap_check_errors, before it even looks at no_flush -- work for
   a file nobody can write through this handle. Only the table's handles: a workspace's
   handles (Python's FileInfo) keep FLUSH, which their close relies on. */
static inline void pyfuse3_fi_set_noflush(struct fuse_file_info *fi) {
#if PYFUSE3_FASTPATH
    fi->noflush = 1;
#else
    (void)fi;
#endif
}
#endif

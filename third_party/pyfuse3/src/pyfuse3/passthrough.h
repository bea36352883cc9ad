/*
passthrough.h -- datahub: FUSE passthrough backing files (Linux >= 6.9, libfuse >= 3.16).

libfuse's fuse_passthrough_open(req, fd) and fuse_passthrough_close(req, id) send these two
ioctls on the session's /dev/fuse fd and use the request only to find that fd. A backing id
is released when the last handle of its inode is released, which is not always inside a
request, so pyfuse3 sends the same ioctls on the session fd itself. The kernel header that
defines them (linux/fuse.h >= 6.9) is newer than Debian 12's, hence the definitions here.
*/
#ifndef PYFUSE3_PASSTHROUGH_H
#define PYFUSE3_PASSTHROUGH_H
#include <stdint.h>
#include <sys/ioctl.h>

struct pyfuse3_backing_map {
    int32_t fd;
    uint32_t flags;
    uint64_t padding;
};
#define PYFUSE3_DEV_IOC_BACKING_OPEN _IOW(229, 1, struct pyfuse3_backing_map)
#define PYFUSE3_DEV_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)

static inline int pyfuse3_backing_open(int devfd, int fd) {
    struct pyfuse3_backing_map map = { fd, 0, 0 };
    return ioctl(devfd, PYFUSE3_DEV_IOC_BACKING_OPEN, &map);
}

static inline int pyfuse3_backing_close(int devfd, int backing_id) {
    uint32_t id = (uint32_t)backing_id;
    return ioctl(devfd, PYFUSE3_DEV_IOC_BACKING_CLOSE, &id);
}
#endif

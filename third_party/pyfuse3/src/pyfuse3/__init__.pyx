'''
__init__.pyx

Copyright © 2013 Nikolaus Rath <Nikolaus.org>

This file is part of pyfuse3. This work may be distributed under
the terms of the GNU LGPL.
'''

cdef extern from "pyfuse3.h":
    int PLATFORM
    enum:
        PLATFORM_LINUX
        PLATFORM_BSD
        PLATFORM_DARWIN

###########
# C IMPORTS
###########

from fuse_lowlevel cimport *
from .macros cimport *
from posix.stat cimport struct_stat, S_IFMT, S_IFDIR, S_IFREG
from posix.types cimport mode_t, dev_t, off_t
from libc.stdint cimport uint32_t, int32_t, uint64_t, int64_t
from libc.stdlib cimport const_char
from libc cimport stdlib, string, errno
from posix cimport unistd
from libc.errno cimport EACCES, ETIMEDOUT, EPROTO, EINVAL, ENOMSG, ENOATTR
from posix.unistd cimport getpid
from posix.time cimport timespec
from cpython.bytes cimport (PyBytes_AsStringAndSize, PyBytes_FromStringAndSize,
                            PyBytes_AsString, PyBytes_FromString, PyBytes_AS_STRING)
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBuffer_FillInfo,
                             PyBUF_CONTIG_RO, PyBUF_CONTIG)
cimport cpython.exc
cimport cython
cimport libc_extra

cdef extern from "Python.h":
    # datahub: dispatch.h's threads keep a thread state for their life
    ctypedef struct PyThreadState:
        pass
    ctypedef enum PyGILState_STATE:
        PyGILState_LOCKED
        PyGILState_UNLOCKED
    PyGILState_STATE PyGILState_Ensure() nogil
    void PyGILState_Release(PyGILState_STATE) nogil
    PyThreadState *PyEval_SaveThread() nogil
    void PyEval_RestoreThread(PyThreadState *) nogil


########################
# EXTERNAL DEFINITIONS #
########################


cdef extern from "passthrough.h" nogil:
    int PYFUSE3_FASTPATH  # datahub: built against libfuse >= 3.17 (else the fast path is out)
    void pyfuse3_fi_set_backing_id(fuse_file_info *fi, int32_t id)
    int pyfuse3_backing_open(int devfd, int fd)
    int pyfuse3_backing_close(int devfd, int backing_id)

cdef extern from "fastloop.h" nogil:
    # datahub: OPEN and RELEASE of published backing files answered in C (fastopen.h);
    # the table is shared with the fastloop reader thread: every call takes its lock (_l)
    struct pyfuse3_fo_counters:
        uint64_t c_opens
        uint64_t c_releases
        uint64_t releases
        uint64_t py_handles
        uint64_t changed
        uint64_t ids_opened
        uint64_t ids_closed
        uint64_t sampled
        uint64_t resident
        uint64_t sample_failed
        uint64_t swept
    pyfuse3_fo_counters pyfuse3_fo_n
    int pyfuse3_fo_sample
    unsigned pyfuse3_fo_count
    int pyfuse3_fo_answer
    int PYFUSE3_FO_MAX
    int pyfuse3_fo_try_open "pyfuse3_fo_try_open_l"(int devfd, fuse_req_t req, fuse_ino_t ino, fuse_file_info *fi)
    int pyfuse3_fo_try_release "pyfuse3_fo_try_release_l"(int devfd, fuse_req_t req, fuse_file_info *fi)
    int pyfuse3_fo_handle "pyfuse3_fo_handle_l"(int devfd, uint64_t ino, uint64_t *fh, int32_t *backing_id)
    int pyfuse3_fo_pin "pyfuse3_fo_pin_l"(uint64_t ino, uint64_t *fh, int32_t *backing_id)
    int pyfuse3_fo_release "pyfuse3_fo_release_l"(int devfd, uint64_t fh)
    int pyfuse3_fo_publish "pyfuse3_fo_publish_l"(int devfd, uint64_t ino, int fd)
    int pyfuse3_fo_retract "pyfuse3_fo_retract_l"(int devfd, uint64_t ino)
    long pyfuse3_fo_handles "pyfuse3_fo_handles_l"(uint64_t ino)
    void pyfuse3_fo_close_all "pyfuse3_fo_close_all_l"(int devfd)
    int pyfuse3_fo_held_fd "pyfuse3_fo_held_fd_l"(uint64_t ino)
    uint64_t pyfuse3_fo_retract_file "pyfuse3_fo_retract_file_l"(int devfd, uint64_t dev, uint64_t st_ino)
    int pyfuse3_fo_revalidate "pyfuse3_fo_revalidate_l"(uint64_t ino, int64_t size, int64_t nlink, int64_t ctime_ns,
                              int64_t mtime_ns, uint64_t *fh, int32_t *backing_id)
    unsigned pyfuse3_fo_published "pyfuse3_fo_published_l"()
    unsigned pyfuse3_fo_drain_hits "pyfuse3_fo_drain_hits_l"(uint64_t *out, unsigned max)
    unsigned pyfuse3_fo_sweep "pyfuse3_fo_sweep_l"(int devfd, unsigned slots, uint64_t *out, unsigned max)
    int PYFUSE3_FO_SLOTS
    void pyfuse3_fo_snapshot(pyfuse3_fo_counters *n, unsigned *count)
    # datahub: a C thread reads /dev/fuse and answers what it can (fastloop.h)
    struct pyfuse3_fl_counters:
        uint64_t opens
        uint64_t releases
        uint64_t ioctls
        uint64_t lookups
        uint64_t handed
        uint64_t wakeups
        uint64_t forgets
        uint64_t writes
    # datahub: WRITEs of a workspace's staged handles answered in C (fastwrite.h)
    struct pyfuse3_fw_counters:
        uint64_t published
        uint64_t writes
        uint64_t bytes
        uint64_t failed
        uint64_t handed
    int PYFUSE3_FW_MAX
    int pyfuse3_fw_publish(uint64_t fh, int fd)
    int pyfuse3_fw_retract(uint64_t fh)
    int pyfuse3_fw_failed(uint64_t fh)
    unsigned pyfuse3_fw_published()
    void pyfuse3_fw_clear()
    void pyfuse3_fw_snapshot(pyfuse3_fw_counters *n, unsigned *count)
    # datahub: LOOKUP of published names answered in C (lookup.h)
    struct pyfuse3_lk_counters:
        uint64_t published
        uint64_t refused
        uint64_t answered
    int pyfuse3_lk_publish(uint64_t parent, const char *name, size_t len, const fuse_entry_param *e)
    void pyfuse3_lk_clear()
    void pyfuse3_lk_snapshot(pyfuse3_lk_counters *n)
    int pyfuse3_fl_want
    int pyfuse3_fl_start(int devfd)
    void pyfuse3_fl_signal_stop()
    void pyfuse3_fl_stop()
    int pyfuse3_fl_pop(void **mem)
    void pyfuse3_fl_free(void *mem)
    void pyfuse3_fl_snapshot(pyfuse3_fl_counters *n)
    int pyfuse3_fl_evfd()
    # datahub: threads that run a workspace's handlers themselves (dispatch.h)
    struct pyfuse3_fd_counters:
        uint64_t dispatched
        uint64_t handoffs
        uint64_t vacant
        uint64_t kept
    ctypedef void (*pyfuse3_fd_fn)(const char *buf, size_t n) noexcept nogil
    ctypedef void *(*pyfuse3_fd_begin_fn)() noexcept nogil
    ctypedef void (*pyfuse3_fd_end_fn)(void *state) noexcept nogil
    int PYFUSE3_FD_MAX_THREADS
    void pyfuse3_fd_set(int max, pyfuse3_fd_fn fn, pyfuse3_fd_begin_fn begin, pyfuse3_fd_end_fn end)
    int pyfuse3_fd_blocking()
    int pyfuse3_fd_here()
    void pyfuse3_fd_end_session(int err)
    void pyfuse3_fd_keep()
    void pyfuse3_fd_snapshot(pyfuse3_fd_counters *n, int *threads, int *running)
    # datahub: READs of zero-message-open files answered from their page file (fastread.h)
    struct pyfuse3_fr_counters:
        uint64_t published
        uint64_t reads
        uint64_t bytes
        uint64_t direct
        uint64_t changed
        uint64_t handed
        uint64_t swept
    int PYFUSE3_FR_MAX
    int PYFUSE3_FR_SLOTS
    int pyfuse3_fr_on "pyfuse3_fr.on"
    int pyfuse3_fr_dontneed "pyfuse3_fr.dontneed"
    int pyfuse3_fr_direct "pyfuse3_fr.direct"
    int pyfuse3_fr_publish(uint64_t ino, int fd)
    int pyfuse3_fr_retract(uint64_t ino)
    uint64_t pyfuse3_fr_retract_file(uint64_t dev, uint64_t st_ino)
    unsigned pyfuse3_fr_drain_hits(uint64_t *out, unsigned max)
    unsigned pyfuse3_fr_sweep(unsigned slots, uint64_t *out, unsigned max)
    void pyfuse3_fr_clear()
    void pyfuse3_fr_snapshot(pyfuse3_fr_counters *n, unsigned *count)

cdef extern from "readdir.h" nogil:
    # datahub: READDIRPLUS replies packed from a directory page's columns (readdir.h)
    struct pyfuse3_rd_common:
        uint32_t file_mode, dir_mode, file_nlink, dir_nlink, uid, gid, blksize
        double entry_timeout, attr_timeout
    struct pyfuse3_rd_page:
        const char *names
        const uint64_t *ends
        const unsigned char *kinds
        const unsigned char *skip
        const uint64_t *inos
        const int64_t *sizes
        const int64_t *mtimes
        size_t n
    size_t pyfuse3_rd_fill(char *buf, size_t size, const pyfuse3_rd_page *p, size_t start,
                           const pyfuse3_rd_common *c, size_t *next)

cdef extern from "uring.h" nogil:
    # datahub: FUSE requests over io_uring, one queue per CPU (uring.h)
    struct pyfuse3_ur_counters:
        uint64_t requests
        uint64_t answered
        uint64_t handed
        uint64_t commits
    int pyfuse3_ur_install(fuse_session *se, int devfd)
    void pyfuse3_ur_snapshot(pyfuse3_ur_counters *n, int *queues)
    int pyfuse3_ur_want "pyfuse3_ur.want"

cdef extern from "<linux/fs.h>" nogil:
  enum:
    RENAME_EXCHANGE
    RENAME_NOREPLACE

cdef extern from "Python.h" nogil:
    int PY_SSIZE_T_MAX

################
# PYTHON IMPORTS
################

from pickle import PicklingError
from queue import Queue
import gc
import logging
import os
import os.path
import sys
import trio
import threading
import typing

from . import _pyfuse3
_pyfuse3.FUSEError = FUSEError

from ._pyfuse3 import (Operations, async_wrapper, _Resumed, FileHandleT, FileNameT,
                       FlagT, InodeT, ModeT, XAttrNameT)


##################
# GLOBAL VARIABLES
##################

log = logging.getLogger("pyfuse3")
fse = sys.getfilesystemencoding()

cdef object operations
cdef object mountpoint_b
cdef fuse_session* session = NULL
cdef fuse_lowlevel_ops fuse_ops
cdef int session_fd
cdef object py_retval

cdef object _notify_queue = None

ROOT_INODE = FUSE_ROOT_ID
#: datahub: read() gets ``ino | NO_OPEN_FH`` as its fh when open() answered ENOSYS
NO_OPEN_FH = 1 << 63
#: datahub: this build can answer open() with a kernel-served backing file (FUSE passthrough)
PASSTHROUGH = bool(PYFUSE3_FASTPATH)
#: datahub: fh bit of passthrough handles owned by the C table (passthrough_publish)
FASTOPEN_FH = 1 << 62
#: datahub: inodes the C table holds a backing id for, at most
FASTOPEN_MAX = 4096
#: datahub: this build can read /dev/fuse on a C thread (passthrough_fastloop)
FASTLOOP = bool(PYFUSE3_FASTPATH)
#: datahub: this build can take requests from io_uring queues (passthrough_uring)
URING = bool(PYFUSE3_FASTPATH)
#: datahub: READs of files the kernel opened itself answered in C from published page files
FASTREAD = bool(PYFUSE3_FASTPATH)
#: datahub: WRITEs of published staged handles answered by the fastloop thread (fastwrite.h)
FASTWRITE = bool(PYFUSE3_FASTPATH)
#: datahub: page files fastread_publish holds at most
FASTREAD_MAX = 4096
#: datahub: write() gets a fourth argument, ``cached`` (the WRITE's FUSE_WRITE_CACHE flag)
WRITE_CACHED = True
#: datahub: write() gets a fifth argument, ``sync`` (the WRITE's flags hold O_DSYNC)
WRITE_SYNC = True
cdef int _O_DSYNC = os.O_DSYNC
#: datahub: a FileInfo with a backing id keeps ``direct_io`` (FOPEN_PASSTHROUGH|FOPEN_DIRECT_IO)
BACKING_DIRECT_IO = True
cdef bint fl_running = False  # the reader thread serves this session's loop
cdef bint fl_allowed = True   # False with allow_root (libfuse checks the caller's uid)
cdef bint passthrough_on = False
__version__ = _pyfuse3.__version__

_NANOS_PER_SEC = 1000000000

# In the Cython source, we want the names to refer to the
# C constants. Therefore, we assign through globals().
g = globals()
g['ENOATTR'] = ENOATTR
g['RENAME_EXCHANGE'] = RENAME_EXCHANGE
g['RENAME_NOREPLACE'] = RENAME_NOREPLACE

trio_token = None


#######################
# FUSE REQUEST HANDLERS
#######################

include "handlers.pxi"


########################################
# INTERNAL FUNCTIONS & DATA STRUCTURES #
########################################

include "internal.pxi"


######################
# EXTERNAL API       #
######################

@cython.freelist(10)
cdef class RequestContext:
    '''
    Instances of this class are passed to some `Operations` methods to
    provide information about the caller of the syscall that initiated
    the request.
    '''

    cdef readonly uid_t uid
    cdef readonly pid_t pid
    cdef readonly gid_t gid
    cdef readonly mode_t umask

    def __getstate__(self):
        raise PicklingError("RequestContext instances can't be pickled")


@cython.freelist(10)
cdef class SetattrFields:
    '''
    `SetattrFields` instances are passed to the `~Operations.setattr` handler
    to specify which attributes should be updated.
    '''

    cdef readonly object update_atime
    cdef readonly object update_mtime
    cdef readonly object update_ctime
    cdef readonly object update_mode
    cdef readonly object update_uid
    cdef readonly object update_gid
    cdef readonly object update_size

    def __cinit__(self):
        self.update_atime = False
        self.update_mtime = False
        self.update_ctime = False
        self.update_mode = False
        self.update_uid = False
        self.update_gid = False
        self.update_size = False

    def __getstate__(self):
        raise PicklingError("SetattrFields instances can't be pickled")


@cython.freelist(30)
cdef class EntryAttributes:
    '''
    Instances of this class store attributes of directory entries.
    Most of the attributes correspond to the elements of the ``stat``
    C struct as returned by e.g. ``fstat`` and should be
    self-explanatory.
    '''

    # Attributes are documented in rst/data.rst

    cdef fuse_entry_param fuse_param
    cdef struct_stat *attr

    def __cinit__(self):
        string.memset(&self.fuse_param, 0, sizeof(fuse_entry_param))
        self.attr = &self.fuse_param.attr
        self.fuse_param.generation = 0
        self.fuse_param.entry_timeout = 300
        self.fuse_param.attr_timeout = 300

        self.attr.st_mode = S_IFREG
        self.attr.st_blksize = 4096
        self.attr.st_nlink = 1

    @property
    def st_ino(self):
        return self.fuse_param.ino
    @st_ino.setter
    def st_ino(self, val):
        self.fuse_param.ino = val
        self.attr.st_ino = val

    @property
    def generation(self):
        '''The inode generation number'''
        return self.fuse_param.generation
    @generation.setter
    def generation(self, val):
        self.fuse_param.generation = val

    @property
    def attr_timeout(self):
        '''Validity timeout for the attributes of the directory entry

        Floating point numbers may be used. Units are seconds.
        '''
        return self.fuse_param.attr_timeout
    @attr_timeout.setter
    def attr_timeout(self, val):
        self.fuse_param.attr_timeout = val

    @property
    def entry_timeout(self):
        '''Validity timeout for the name/existence of the directory entry

        Floating point numbers may be used. Units are seconds.
        '''
        return self.fuse_param.entry_timeout
    @entry_timeout.setter
    def entry_timeout(self, val):
        self.fuse_param.entry_timeout = val

    @property
    def st_mode(self):
        return self.attr.st_mode
    @st_mode.setter
    def st_mode(self, val):
        self.attr.st_mode = val

    @property
    def st_nlink(self):
        return self.attr.st_nlink
    @st_nlink.setter
    def st_nlink(self, val):
        self.attr.st_nlink = val

    @property
    def st_uid(self):
        return self.attr.st_uid
    @st_uid.setter
    def st_uid(self, val):
        self.attr.st_uid = val

    @property
    def st_gid(self):
        return self.attr.st_gid
    @st_gid.setter
    def st_gid(self, val):
        self.attr.st_gid = val

    @property
    def st_rdev(self):
        return self.attr.st_rdev
    @st_rdev.setter
    def st_rdev(self, val):
        self.attr.st_rdev = val

    @property
    def st_size(self):
        return self.attr.st_size
    @st_size.setter
    def st_size(self, val):
        self.attr.st_size = val

    @property
    def st_blocks(self):
        return self.attr.st_blocks
    @st_blocks.setter
    def st_blocks(self, val):
        self.attr.st_blocks = val

    @property
    def st_blksize(self):
        return self.attr.st_blksize
    @st_blksize.setter
    def st_blksize(self, val):
        self.attr.st_blksize = val

    @property
    def st_atime_ns(self):
        '''Time of last access in (integer) nanoseconds'''
        return (int(self.attr.st_atime) * _NANOS_PER_SEC + GET_ATIME_NS(self.attr))
    @st_atime_ns.setter
    def st_atime_ns(self, val):
        self.attr.st_atime = val // _NANOS_PER_SEC
        SET_ATIME_NS(self.attr, val % _NANOS_PER_SEC)

    @property
    def st_mtime_ns(self):
        '''Time of last modification in (integer) nanoseconds'''
        return (int(self.attr.st_mtime) * _NANOS_PER_SEC + GET_MTIME_NS(self.attr))
    @st_mtime_ns.setter
    def st_mtime_ns(self, val):
        self.attr.st_mtime = val // _NANOS_PER_SEC
        SET_MTIME_NS(self.attr, val % _NANOS_PER_SEC)

    @property
    def st_ctime_ns(self):
        '''Time of last inode modification in (integer) nanoseconds'''
        return (int(self.attr.st_ctime) * _NANOS_PER_SEC + GET_CTIME_NS(self.attr))
    @st_ctime_ns.setter
    def st_ctime_ns(self, val):
        self.attr.st_ctime = val // _NANOS_PER_SEC
        SET_CTIME_NS(self.attr, val % _NANOS_PER_SEC)

    @property
    def st_birthtime_ns(self):
        '''Time of inode creation in (integer) nanoseconds.

        Only available under BSD and OS X. Will be zero on Linux.
        '''

        # Use C macro to prevent compiler error on Linux
        # (where st_birthtime does not exist)
        return int(GET_BIRTHTIME(self.attr) * _NANOS_PER_SEC
                    + GET_BIRTHTIME_NS(self.attr))

    @st_birthtime_ns.setter
    def st_birthtime_ns(self, val):
        # Use C macro to prevent compiler error on Linux
        # (where st_birthtime does not exist)
        SET_BIRTHTIME(self.attr, val // _NANOS_PER_SEC)
        SET_BIRTHTIME_NS(self.attr, val % _NANOS_PER_SEC)

    # Pickling and copy support
    def __getstate__(self):
        state = dict()
        for k in ('st_ino', 'generation', 'entry_timeout', 'attr_timeout',
                  'st_mode', 'st_nlink', 'st_uid', 'st_gid', 'st_rdev',
                  'st_size', 'st_blksize', 'st_blocks', 'st_atime_ns',
                  'st_ctime_ns', 'st_mtime_ns', 'st_birthtime_ns'):
            state[k] = getattr(self, k)
        return state

    def __setstate__(self, state):
        for (k,v) in state.items():
            setattr(self, k, v)


@cython.freelist(10)
cdef class FileInfo:
    '''
    Instances of this class store options and data that `Operations.open`
    returns. The attributes correspond to the elements of the ``fuse_file_info``
    struct that are relevant to the `Operations.open` function.
    '''

    cdef public uint64_t fh
    cdef public bint direct_io
    cdef public bint keep_cache
    cdef public bint nonseekable
    cdef public int32_t backing_id

    def __cinit__(self, fh=0, direct_io=0, keep_cache=1, nonseekable=0, backing_id=0):
        self.fh = fh
        # datahub: > 0 (from passthrough_open) makes libfuse answer FOPEN_PASSTHROUGH
        self.backing_id = backing_id
        self.direct_io = direct_io
        self.keep_cache = keep_cache
        self.nonseekable = nonseekable

    cdef _copy_to_fuse(self, fuse_file_info *out):
        out.fh = self.fh
        pyfuse3_fi_set_backing_id(out, self.backing_id if self.backing_id > 0 else 0)
        if self.backing_id > 0 and PYFUSE3_FASTPATH:
            # the kernel refuses (EIO to the caller) a passthrough open with any flag
            # outside FOPEN_PASSTHROUGH_MASK, and FOPEN_KEEP_CACHE is one of them.
            # FOPEN_DIRECT_IO is in the mask and overrides passthrough for reads and writes
            # (fs/fuse/file.c): they come to the daemon, while the handle still names the
            # inode's backing file, as the kernel demands of every open beside passthrough
            # ones (datahub: an O_SYNC handle of a workspace's staged file)
            out.keep_cache = 0
            if self.direct_io:  # a conditional expression into the bitfield warns (-Wconversion)
                out.direct_io = 1
            else:
                out.direct_io = 0
            out.nonseekable = 0
            return

        # Due to how Cython generates its C code, GCC will complain about
        # assigning to the bitfields in the fuse_file_info struct.
        # This is the workaround.
        if self.direct_io:
            out.direct_io = 1
        else:
            out.direct_io = 0

        if self.keep_cache:
            out.keep_cache = 1
        else:
            out.keep_cache = 0

        if self.nonseekable:
            out.nonseekable = 1
        else:
            out.nonseekable = 0


@cython.freelist(1)
cdef class StatvfsData:
    '''
    Instances of this class store information about the file system.
    The attributes correspond to the elements of the ``statvfs``
    struct, see :manpage:`statvfs(2)` for details.
    '''

    cdef statvfs stat

    def __cinit__(self):
        string.memset(&self.stat, 0, sizeof(statvfs))

    @property
    def f_bsize(self):
        return self.stat.f_bsize
    @f_bsize.setter
    def f_bsize(self, val):
        self.stat.f_bsize = val

    @property
    def f_frsize(self):
        return self.stat.f_frsize
    @f_frsize.setter
    def f_frsize(self, val):
        self.stat.f_frsize = val

    @property
    def f_blocks(self):
        return self.stat.f_blocks
    @f_blocks.setter
    def f_blocks(self, val):
        self.stat.f_blocks = val

    @property
    def f_bfree(self):
        return self.stat.f_bfree
    @f_bfree.setter
    def f_bfree(self, val):
        self.stat.f_bfree = val

    @property
    def f_bavail(self):
        return self.stat.f_bavail
    @f_bavail.setter
    def f_bavail(self, val):
        self.stat.f_bavail = val

    @property
    def f_files(self):
        return self.stat.f_files
    @f_files.setter
    def f_files(self, val):
        self.stat.f_files = val

    @property
    def f_ffree(self):
        return self.stat.f_ffree
    @f_ffree.setter
    def f_ffree(self, val):
        self.stat.f_ffree = val

    @property
    def f_favail(self):
        return self.stat.f_favail
    @f_favail.setter
    def f_favail(self, val):
        self.stat.f_favail = val

    @property
    def f_namemax(self):
        return self.stat.f_namemax
    @f_namemax.setter
    def f_namemax(self, val):
        self.stat.f_namemax = val

    # Pickling and copy support
    def __getstate__(self):
        state = dict()
        for k in ('f_bsize', 'f_frsize', 'f_blocks', 'f_bfree',
                  'f_bavail', 'f_files', 'f_ffree', 'f_favail',
                  'f_namemax'):
            state[k] = getattr(self, k)
        return state

    def __setstate__(self, state):
        for (k,v) in state.items():
            setattr(self, k, v)


# As of Cython 0.28.1, @cython.freelist cannot be used for
# classes that derive from a builtin type.
cdef class FUSEError(Exception):
    '''
    This exception may be raised by request handlers to indicate that
    the requested operation could not be carried out. The system call
    that resulted in the request (if any) will then fail with error
    code *errno_*.
    '''

    # If we call this variable "errno", we will get syntax errors
    # during C compilation (maybe something else declares errno as
    # a macro?)
    cdef readonly int errno_

    @property
    def errno(self):
        '''Error code to return to client process'''
        return self.errno_

    def __cinit__(self, errno):
        self.errno_ = errno

    def __str__(self):
        return strerror(self.errno_)


@cython.freelist(10)
cdef class PollHandle:
    '''
    Opaque handle for delivering poll(2) readiness notifications.

    Instances of this class are created by pyfuse3 and passed to
    `Operations.poll`. The filesystem may keep a reference and later
    call `PollHandle.notify` on the handle to wake up any process currently
    blocked in :manpage:`poll(2)`, :manpage:`select(2)` or
    :manpage:`epoll_wait(2)` for the corresponding file descriptor.

    A single notification is sufficient to clear all pending waiters;
    filesystems should normally discard the handle after notifying.

    The underlying ``fuse_pollhandle`` is automatically destroyed when
    the Python object is garbage collected, so filesystems should simply
    drop the reference when the notification is no longer needed.
    '''

    cdef fuse_pollhandle *_ph

    def __cinit__(self):
        self._ph = NULL

    def __init__(self):
        raise TypeError('PollHandle cannot be instantiated directly')

    @staticmethod
    cdef PollHandle from_ptr(fuse_pollhandle *ph):
        cdef PollHandle self

        if ph == NULL:
            raise ValueError('NULL fuse_pollhandle')

        self = PollHandle.__new__(PollHandle)
        self._ph = ph
        return self

    def __dealloc__(self):
        if self._ph is not NULL:
            fuse_pollhandle_destroy(self._ph)
            self._ph = NULL

    def __getstate__(self):
        raise PicklingError("PollHandle instances can't be pickled")

    def notify(self):
        '''
        Notify IO readiness for this poll handle.

        After this returns, any process waiting in :manpage:`poll(2)`,
        :manpage:`select(2)` or :manpage:`epoll_wait(2)` on the
        corresponding file descriptor will be woken so it can re-poll
        the filesystem for the current readiness mask.

        Each `PollHandle` is intended for a single notification. After a
        successful call, the filesystem should discard the handle and not
        call this method again.
        '''

        cdef int ret

        if self._ph == NULL:
            raise RuntimeError('PollHandle is no longer valid')

        with nogil:
            ret = fuse_lowlevel_notify_poll(self._ph)

        if ret != 0:
            raise OSError(-ret, 'fuse_lowlevel_notify_poll returned: ' + strerror(-ret))


def listdir(path):
    '''Like `os.listdir`, but releases the GIL.

    This function returns an iterator over the directory entries in *path*.

    The returned values are of type :ref:`str <python:textseq>`. Surrogate
    escape coding (cf.  `PEP 383 <http://www.python.org/dev/peps/pep-0383/>`_)
    is used for directory names that do not have a string representation.
    '''

    if not isinstance(path, str):
        raise TypeError('*path* argument must be of type str')

    cdef libc_extra.DIR* dirp
    cdef libc_extra.dirent* res
    cdef char* buf

    path_b = str2bytes(path)
    buf = <char*> path_b

    with nogil:
        dirp = libc_extra.opendir(buf)

    if dirp == NULL:
        raise OSError(errno.errno, strerror(errno.errno), path)

    names = list()
    while True:
        errno.errno = 0
        with nogil:
            res = libc_extra.readdir(dirp)

        if res is NULL:
           if errno.errno != 0:
               raise OSError(errno.errno, strerror(errno.errno), path)
           else:
               break
        if string.strcmp(res.d_name, b'.') == 0 or \
           string.strcmp(res.d_name, b'..') == 0:
            continue

        names.append(bytes2str(PyBytes_FromString(res.d_name)))

    with nogil:
        libc_extra.closedir(dirp)

    return names


def syncfs(path):
    '''Sync filesystem mounted at *path*

    This is a Python interface to the syncfs(2) system call. There is no
    particular relation to libfuse, it is provided by pyfuse3 as a convenience.
    '''

    cdef int ret

    fd = os.open(path, flags=os.O_DIRECTORY)
    try:
        ret = libc_extra.syncfs(fd)

        if ret != 0:
            raise OSError(errno.errno, strerror(errno.errno), path)
    finally:
        os.close(fd)


def setxattr(path, name, bytes value, namespace='user'):
    '''Set extended attribute

    *path* and *name* have to be of type `str`. In Python 3.x, they may
    contain surrogates. *value* has to be of type `bytes`.

    Under FreeBSD, the *namespace* parameter may be set to *system* or *user* to
    select the namespace for the extended attribute. For other platforms, this
    parameter is ignored.

    In contrast to the `os.setxattr` function from the standard library, the
    method provided by pyfuse3 is also available for non-Linux systems.
    '''

    if not isinstance(path, str):
        raise TypeError('*path* argument must be of type str')

    if not isinstance(name, str):
        raise TypeError('*name* argument must be of type str')

    if namespace not in ('system', 'user'):
        raise ValueError('*namespace* parameter must be "system" or "user", not %s'
                         % namespace)

    cdef int ret
    cdef Py_ssize_t len_
    cdef char *cvalue
    cdef char *cpath
    cdef char *cname
    cdef int cnamespace

    if namespace == 'system':
        cnamespace = libc_extra.EXTATTR_NAMESPACE_SYSTEM
    else:
        cnamespace = libc_extra.EXTATTR_NAMESPACE_USER

    path_b = str2bytes(path)
    name_b = str2bytes(name)
    PyBytes_AsStringAndSize(value, &cvalue, &len_)
    cpath = <char*> path_b
    cname = <char*> name_b

    with nogil:
        # len_ is guaranteed positive
        ret = libc_extra.setxattr_p(
            cpath, cname, cvalue, <size_t> len_, cnamespace)

    if ret != 0:
        raise OSError(errno.errno, strerror(errno.errno), path)


def getxattr(path, name, size_t size_guess=128, namespace='user'):
    '''Get extended attribute

    *path* and *name* have to be of type `str`. In Python 3.x, they may
    contain surrogates. Returns a value of type `bytes`.

    If the caller knows the approximate size of the attribute value,
    it should be supplied in *size_guess*. If the guess turns out
    to be wrong, the system call has to be carried out three times
    (the first call will fail, the second determines the size and
    the third finally gets the value).

    Under FreeBSD, the *namespace* parameter may be set to *system* or *user* to
    select the namespace for the extended attribute. For other platforms, this
    parameter is ignored.

    In contrast to the `os.getxattr` function from the standard library, the
    method provided by pyfuse3 is also available for non-Linux systems.
    '''

    if not isinstance(path, str):
        raise TypeError('*path* argument must be of type str')

    if not isinstance(name, str):
        raise TypeError('*name* argument must be of type str')

    if namespace not in ('system', 'user'):
        raise ValueError('*namespace* parameter must be "system" or "user", not %s'
                         % namespace)

    cdef ssize_t ret
    cdef char *buf
    cdef char *cpath
    cdef char *cname
    cdef size_t bufsize
    cdef int cnamespace

    if namespace == 'system':
        cnamespace = libc_extra.EXTATTR_NAMESPACE_SYSTEM
    else:
        cnamespace = libc_extra.EXTATTR_NAMESPACE_USER

    path_b = str2bytes(path)
    name_b = str2bytes(name)
    cpath = <char*> path_b
    cname = <char*> name_b

    bufsize = size_guess
    buf = <char*> stdlib.malloc(bufsize * sizeof(char))

    if buf is NULL:
        cpython.exc.PyErr_NoMemory()

    try:
        with nogil:
            ret = libc_extra.getxattr_p(cpath, cname, buf, bufsize, cnamespace)

        if ret < 0 and errno.errno == errno.ERANGE:
            with nogil:
                ret = libc_extra.getxattr_p(cpath, cname, NULL, 0, cnamespace)
            if ret < 0:
                raise OSError(errno.errno, strerror(errno.errno), path)
            bufsize = <size_t> ret
            stdlib.free(buf)
            buf = <char*> stdlib.malloc(bufsize * sizeof(char))
            if buf is NULL:
                cpython.exc.PyErr_NoMemory()

            with nogil:
                ret = libc_extra.getxattr_p(cpath, cname, buf, bufsize, cnamespace)

        if ret < 0:
            raise OSError(errno.errno, strerror(errno.errno), path)

        return PyBytes_FromStringAndSize(buf, ret)

    finally:
        stdlib.free(buf)


default_options = frozenset(('default_permissions',))

def init(ops, mountpoint, options=default_options):
    '''Initialize and mount FUSE file system

    *ops* has to be an instance of the `Operations` class (or another
    class defining the same methods).

    *args* has to be a set of strings. `default_options` provides some
    reasonable defaults. It is recommended to use these options as a basis and
    add or remove options as necessary. For example::

        my_opts = set(pyfuse3.default_options)
        my_opts.add('allow_other')
        my_opts.discard('default_permissions')
        pyfuse3.init(ops, mountpoint, my_opts)

    Valid options are listed under ``struct
    fuse_opt fuse_mount_opts[]``
    (in `mount.c <https://github.com/libfuse/libfuse/blob/fuse-3.2.6/lib/mount.c#L80>`_)
    and ``struct fuse_opt fuse_ll_opts[]``
    (in `fuse_lowlevel_c <https://github.com/libfuse/libfuse/blob/fuse-3.2.6/lib/fuse_lowlevel.c#L2572>`_).
    '''

    log.debug('Initializing pyfuse3')
    cdef fuse_args f_args
    cdef int res

    if not isinstance(mountpoint, str):
        raise TypeError('*mountpoint_* argument must be of type str')

    global operations
    global fuse_ops
    global mountpoint_b
    global session
    global session_fd
    global worker_data

    worker_data = _WorkerData()
    global fl_allowed
    fl_allowed = 'allow_root' not in options  # datahub: libfuse answers EACCES by uid then
    mountpoint_b = str2bytes(os.path.abspath(mountpoint))
    operations = ops

    make_fuse_args(options, &f_args)

    log.debug('Calling fuse_session_new')
    init_fuse_ops()
    session = fuse_session_new(&f_args, &fuse_ops, sizeof(fuse_ops), NULL)
    if not session:
        raise RuntimeError("fuse_session_new() failed")

    log.debug('Calling fuse_session_mount')
    res = fuse_session_mount(session, <char*>mountpoint_b)
    if res != 0:
        raise RuntimeError('fuse_session_mount failed')

    session_fd = fuse_session_fd(session)
    # datahub: non-blocking, so a read after trio said readable never stalls the loop
    os.set_blocking(session_fd, False)


@async_wrapper
async def main(int min_tasks=1, int max_tasks=99):
    '''Run FUSE main loop'''

    if session == NULL:
        raise RuntimeError('Need to call init() before main()')

    global trio_token
    trio_token = trio.lowlevel.current_trio_token()

    # datahub: a C thread reads the session fd and answers what it can (fastloop.h); the
    # loop's tasks then take the rest from its queue. Without it, they read the fd.
    global fl_running
    fl_running = False
    if pyfuse3_fl_want and fl_allowed and not fuse_session_exited(session):
        # datahub: replies go through uring.h's writev, which may offer io_uring at INIT
        if pyfuse3_ur_want:
            ur_res = pyfuse3_ur_install(session, session_fd)
            if ur_res != 0 and ur_res != -errno.EOPNOTSUPP:
                log.warning('pyfuse3: no io_uring queues (custom io: %s)', os.strerror(-ur_res))
        fl_running = pyfuse3_fl_start(session_fd) == 0
        if not fl_running:
            log.warning('pyfuse3: no fastloop thread, reading /dev/fuse from the trio loop')
    try:
        async with trio.open_nursery() as nursery:
            worker_data.task_count = 1
            worker_data.task_serial = 1
            nursery.start_soon(_session_loop, nursery, min_tasks, max_tasks,
                               name=worker_data.get_name())
    finally:
        if fl_running:
            with nogil:
                pyfuse3_fl_stop()
            fl_running = False
        trio_token = None
        if _notify_queue is not None:
            _notify_queue.put(None)


def terminate():
    '''Terminate FUSE main loop.

    This function gracefully terminates the FUSE main loop (resulting in the call to
    main() to return).

    When called by a thread different from the one that runs the main loop, the call must
    be wrapped with `trio.from_thread.run_sync`. The necessary *trio_token* argument can
    (for convenience) be retrieved from the `trio_token` module attribute.
    '''

    fuse_session_exit(session)
    if fl_running:
        # datahub: the loop's tasks wait on the fastloop queue's eventfd, not the fuse fd
        pyfuse3_fl_signal_stop()
        trio.lowlevel.notify_closing(pyfuse3_fl_evfd())
    else:
        trio.lowlevel.notify_closing(session_fd)


def close(unmount=True):
    '''Clean up and ensure filesystem is unmounted

    If *unmount* is False, only clean up operations are performed, but the file
    system is not explicitly unmounted.

    Normally, the filesystem is unmounted by the user calling umount(8) or
    fusermount(1), which then terminates the FUSE main loop. However, the loop
    may also terminate as a result of an exception or a signal. In this case the
    filesystem remains mounted, but any attempt to access it will block (while
    the filesystem process is still running) or (after the filesystem process
    has terminated) return an error. If *unmount* is True, this function will
    ensure that the filesystem is properly unmounted.

    Note: if the connection to the kernel is terminated via the
    ``/sys/fs/fuse/connections/`` interface, this function will *not* unmount
    the filesystem even if *unmount* is True.
    '''

    global mountpoint_b
    global session

    if unmount:
        log.debug('Calling fuse_session_unmount')
        fuse_session_unmount(session)

    # datahub: every backing id and descriptor the fastopen table holds goes with the session
    pyfuse3_fo_close_all(session_fd if session != NULL else -1)
    pyfuse3_lk_clear()
    pyfuse3_fr_clear()
    log.debug('Calling fuse_session_destroy')
    fuse_session_destroy(session)

    mountpoint_b = None
    session = NULL


def invalidate_inode(fuse_ino_t inode, attr_only=False):
    '''Invalidate cache for *inode*

    Instructs the FUSE kernel module to forget cached attributes and
    data (unless *attr_only* is True) for *inode*.

    **This operation may block** if writeback caching is active and there is
    dirty data for the inode that is to be invalidated. Unfortunately there is
    no way to return control to the event loop until writeback is complete
    (leading to a deadlock if the necessary write() requests cannot be processed
    by the filesystem). Unless writeback caching is disabled, this function
    should therefore be called from a separate thread.

    If the operation is not supported by the kernel, raises `OSError`
    with errno ENOSYS.
    '''

    cdef int ret
    if attr_only:
        with nogil:
            ret = fuse_lowlevel_notify_inval_inode(session, inode, -1, 0)
    else:
        with nogil:
            ret = fuse_lowlevel_notify_inval_inode(session, inode, 0, 0)

    if ret != 0:
        raise OSError(-ret, 'fuse_lowlevel_notify_inval_inode returned: ' + strerror(-ret))


def invalidate_entry(fuse_ino_t inode_p, bytes name, fuse_ino_t deleted=0):
    '''Invalidate directory entry

    Instructs the FUSE kernel module to forget about the directory entry *name*
    in the directory with inode *inode_p*.

    If the inode passed as *deleted* matches the inode that is currently
    associated with *name* by the kernel, any inotify watchers of this inode are
    informed that the entry has been deleted.

    If there is a pending filesystem operation that is related to the parent
    directory or directory entry, this function will block until that operation
    has completed. Therefore, to avoid a deadlock this function must not be
    called while handling a related request, nor while holding a lock that could
    be needed for handling such a request.

    As for kernel 4.18, a "related operation" is a `~Operations.lookup`,
    `~Operations.symlink`, `~Operations.mknod`, `~Operations.mkdir`,
    `~Operations.unlink`, `~Operations.rename`, `~Operations.link` or
    `~Operations.create` request for the parent, and a `~Operations.setattr`,
    `~Operations.unlink`, `~Operations.rmdir`, `~Operations.rename`,
    `~Operations.setxattr`, `~Operations.removexattr` or `~Operations.readdir`
    request for the inode itself.

    For technical reasons, this function can also not return control to the main
    event loop but will actually block. To return control to the event loop
    while this function is running, call it in a separate thread using
    `trio.run_sync_in_worker_thread
    <https://trio.readthedocs.io/en/latest/reference-core.html#trio.run_sync_in_worker_thread>`_.
    A less complicated alternative is to use the `invalidate_entry_async` function
    instead.
    '''

    cdef char *cname
    cdef ssize_t slen
    cdef size_t len_
    cdef int ret

    PyBytes_AsStringAndSize(name, &cname, &slen)
    # len_ is guaranteed positive
    len_ = <size_t> slen

    if deleted:
        with nogil: # might block!
            ret = fuse_lowlevel_notify_delete(session, inode_p, deleted, cname, len_)
        if ret != 0:
            raise OSError(-ret, 'fuse_lowlevel_notify_delete returned: '
                          + strerror(-ret))
    else:
        with nogil: # might block!
            ret = fuse_lowlevel_notify_inval_entry(session, inode_p, cname, len_)
        if ret != 0:
            raise OSError(-ret, 'fuse_lowlevel_notify_inval_entry returned: '
                          + strerror(-ret))


def invalidate_entry_async(inode_p, name, deleted=0, ignore_enoent=False):
    '''Asynchronously invalidate directory entry

    This function performs the same operation as `invalidate_entry`, but does so
    asynchronously in a separate thread. This avoids the deadlocks that may
    occur when using `invalidate_entry` from within a request handler, but means
    that the function generally returns before the kernel has actually
    invalidated the entry, and that no errors can be reported (they will be
    logged though).

    The directory entries that are to be invalidated are put in an unbounded
    queue which is processed by a single thread. This means that if the entry at
    the beginning of the queue cannot be invalidated yet because a related file
    system operation is still in progress, none of the other entries will be
    processed and repeated calls to this function will result in continued
    growth of the queue.

    If there are errors, an exception is logged using the `logging` module.

    If *ignore_enoent* is True, ignore ENOENT errors (which occur if the
    kernel doesn't actually have knowledge of the entry that is to be
    removed).
    '''

    global _notify_queue

    if _notify_queue is None:
        log.debug('Starting notify worker.')
        _notify_queue = Queue()
        t = threading.Thread(target=_notify_loop)
        t.daemon = True
        t.start()

    _notify_queue.put((inode_p, name, deleted, ignore_enoent))


def notify_store(inode, offset, data):
    '''Store data in kernel page cache

    Sends *data* for the kernel to store it in the page cache for *inode* at
    *offset*. If this provides data beyond the current file size, the file is
    automatically extended.

    If this function raises an exception, the store may still have completed
    partially.

    If the operation is not supported by the kernel, raises `OSError`
    with errno ENOSYS.
    '''

    # This should not block, but the kernel may need to do some work so release
    # the GIL to give other threads a chance to run.

    cdef int ret
    cdef fuse_ino_t ino
    cdef off_t off
    cdef Py_buffer pybuf
    cdef fuse_bufvec bufvec
    cdef fuse_buf *buf

    PyObject_GetBuffer(data, &pybuf, PyBUF_CONTIG_RO)
    bufvec.count = 1
    bufvec.idx = 0
    bufvec.off = 0

    buf = bufvec.buf
    buf[0].flags = 0
    buf[0].mem = pybuf.buf
    buf[0].size = <size_t> pybuf.len # guaranteed positive

    ino = inode
    off = offset
    with nogil:
        ret = fuse_lowlevel_notify_store(session, ino, off, &bufvec, 0)

    PyBuffer_Release(&pybuf)
    if ret != 0:
        raise OSError(-ret, 'fuse_lowlevel_notify_store returned: ' + strerror(-ret))


def get_sup_groups(pid):
    '''Return supplementary group ids of *pid*

    This function is relatively expensive because it has to read the group ids
    from ``/proc/[pid]/status``. For the same reason, it will also not work on
    systems that do not provide a ``/proc`` file system.

    Returns a set.
    '''

    with open('/proc/%d/status' % pid, 'r') as fh:
        for line in fh:
            if line.startswith('Groups:'):
                break
        else:
            raise RuntimeError("Unable to parse %s" % fh.name)
    gids = set()
    for x in line.split()[1:]:
        gids.add(int(x))

    return gids


def readdir_reply(ReaddirToken token, name, EntryAttributes attr, off_t next_id):
    '''Report a directory entry in response to a `~Operations.readdir` request.

    This function should be called by the `~Operations.readdir` handler to
    provide the list of directory entries. The function should be called
    once for each directory entry, until it returns False.

    *token* must be the token received by the `~Operations.readdir` handler.

    *name* and must be the name of the directory entry and *attr* an
     `EntryAttributes` instance holding its attributes.

    *next_id* must be a 64-bit integer value that uniquely identifies the
    current position in the list of directory entries. It may be passed back
    to a later `~Operations.readdir` call to start another listing at the
    right position. This value should be robust in the presence of file
    removals and creations, i.e. if files are created or removed after a
    call to `~Operations.readdir` and `~Operations.readdir` is called again
    with *start_id* set to any previously supplied *next_id* values, under
    no circumstances must any file be reported twice or skipped over.
    '''

    cdef char *cname

    if token.buf_start == NULL:
        token.buf_start = <char*> calloc_or_raise(token.size, sizeof(char))
        token.buf = token.buf_start

    cname = PyBytes_AsString(name)
    len_ = fuse_add_direntry_plus(token.req, token.buf, token.size,
                                  cname, &attr.fuse_param, next_id)
    if len_ > token.size:
        return False

    token.size -= len_
    token.buf = &token.buf[len_]
    return True


# --- datahub: READDIRPLUS from a directory page's columns (readdir.h) ---------------------
cdef const void *_column(object obj, Py_buffer *view, size_t n, size_t itemsize, what) except NULL:
    """A read-only, contiguous buffer of n items of itemsize bytes (view is released by the caller)."""
    PyObject_GetBuffer(obj, view, PyBUF_CONTIG_RO)
    if <size_t>view.len != n * itemsize or (view.itemsize != <Py_ssize_t>itemsize and n):
        PyBuffer_Release(view)
        raise ValueError(f"readdir_fill: {what} holds {view.len} bytes, not {n} items of {itemsize}")
    return view.buf if view.len else <const void *>""


def readdir_fill(ReaddirToken token not None, names, ends, bytes kinds not None, skip, inos, sizes, mtimes, size_t start,
                 uint32_t file_mode, uint32_t dir_mode, uint32_t uid, uint32_t gid,
                 uint32_t blksize, double timeout):
    '''datahub: answer a `~Operations.readdir` request with the entries of one directory page
    from position *start* on, packed in C (readdir.h) as `readdir_reply` would pack each.

    The columns hold one value per entry: *names* (bytes, back to back; a directory's name
    with a trailing ``/``) ending at *ends* (``array("Q")``), *kinds* (bytes: 0 file,
    1 directory), *inos* (``array("Q")``), *sizes* and *mtimes* (``array("q")``, mtimes in
    ns); *skip* is None or bytes (non-zero: not listed). Entry i's offset is i + 1. Files
    get *file_mode* and one link, directories *dir_mode* and two; entry and attribute
    timeouts are *timeout*. Returns the position of the first entry not sent (the number of
    entries at the end of the page). Call it once per request, instead of `readdir_reply`.'''
    cdef pyfuse3_rd_page p
    cdef pyfuse3_rd_common c
    cdef size_t n = len(kinds), nxt = start, used, i
    cdef Py_buffer bn, be, bi, bs, bm, bk
    cdef int held = 0
    p.skip = NULL
    try:
        p.names = <const char *>_column(names, &bn, len(names), 1, "names"); held = 1
        p.ends = <const uint64_t *>_column(ends, &be, n, 8, "ends"); held = 2
        p.inos = <const uint64_t *>_column(inos, &bi, n, 8, "inos"); held = 3
        p.sizes = <const int64_t *>_column(sizes, &bs, n, 8, "sizes"); held = 4
        p.mtimes = <const int64_t *>_column(mtimes, &bm, n, 8, "mtimes"); held = 5
        if skip is not None:
            p.skip = <const unsigned char *>_column(skip, &bk, n, 1, "skip"); held = 6
        p.kinds = <const unsigned char *>PyBytes_AS_STRING(kinds)
        p.n = n
        for i in range(n):
            if p.ends[i] > <uint64_t>bn.len or (i and p.ends[i] < p.ends[i - 1]):
                raise ValueError("readdir_fill: name ends out of order or past the names")
        if start >= n or token.size == 0:
            return start
        c.file_mode, c.dir_mode, c.file_nlink, c.dir_nlink = file_mode, dir_mode, 1, 2
        c.uid, c.gid, c.blksize = uid, gid, blksize
        c.entry_timeout = c.attr_timeout = timeout
        if token.buf_start == NULL:
            token.buf_start = <char*> calloc_or_raise(token.size, sizeof(char))
            token.buf = token.buf_start
        used = pyfuse3_rd_fill(token.buf, token.size, &p, start, &c, &nxt)
        token.size -= used
        token.buf = &token.buf[used]
        return nxt
    finally:
        if held >= 6: PyBuffer_Release(&bk)
        if held >= 5: PyBuffer_Release(&bm)
        if held >= 4: PyBuffer_Release(&bs)
        if held >= 3: PyBuffer_Release(&bi)
        if held >= 2: PyBuffer_Release(&be)
        if held >= 1: PyBuffer_Release(&bn)


# --- datahub: FUSE passthrough (passthrough.h) ---------------------------------------------
def passthrough_enabled():
    '''True once INIT negotiated FUSE passthrough (the file system asked for it with
    ``Operations.enable_passthrough`` and the kernel offered it).'''
    return bool(passthrough_on)


def passthrough_open(int fd):
    '''Register *fd* as a backing file; returns its backing id (> 0) for `FileInfo.backing_id`.

    Raises OSError (EPERM without CAP_SYS_ADMIN, EINVAL if the file's file system cannot
    back a FUSE file, EOPNOTSUPP if passthrough was not negotiated).'''
    cdef int ret
    if session == NULL or not passthrough_on:
        raise OSError(errno.EOPNOTSUPP, 'FUSE passthrough is not enabled on this mount')
    with nogil:
        ret = pyfuse3_backing_open(session_fd, fd)
    if ret < 0:
        raise OSError(errno.errno, strerror(errno.errno))
    return ret


def passthrough_close(int backing_id):
    '''Release a backing id. Files opened with it keep their backing file.'''
    cdef int ret
    if session == NULL:
        return
    with nogil:
        ret = pyfuse3_backing_close(session_fd, backing_id)
    if ret < 0:
        raise OSError(errno.errno, strerror(errno.errno))


# --- datahub: opens answered in C (fastopen.h) -----------------------------------------------
cdef int _devfd():
    return session_fd if session != NULL else -1


def passthrough_publish(uint64_t inode, int fd):
    '''Publish the verified backing file *fd* of *inode*: from now on, read-only opens of
    the inode are answered in C while the descriptor still fstat()s as now. Returns the
    backing id; the table owns *fd* then (on error the caller still does).

    Raises OSError: EBUSY (the inode's handles hold another file), ENOSPC (the table holds
    FASTOPEN_MAX inodes: retract one), or what FUSE_DEV_IOC_BACKING_OPEN said.'''
    cdef int ret
    if session == NULL or not passthrough_on:
        raise OSError(errno.EOPNOTSUPP, 'FUSE passthrough is not enabled on this mount')
    ret = pyfuse3_fo_publish(session_fd, inode, fd)
    if ret < 0:
        raise OSError(-ret, strerror(-ret))
    return ret


def passthrough_handle(uint64_t inode):
    '''``(fh, backing_id)`` of a new passthrough handle of *inode* for Python to answer an
    open with (its RELEASE goes to C), or None: no backing id is held for the inode, or its
    file changed (then retracted).'''
    cdef uint64_t fh = 0
    cdef int32_t backing_id = 0
    if not pyfuse3_fo_handle(_devfd(), inode, &fh, &backing_id):
        return None
    return (fh, backing_id)


def passthrough_pin(uint64_t inode):
    '''``(fh, backing_id)`` naming the file the table holds for *inode*, whatever its state,
    for an open answered with that backing id and direct I/O (its reads come to the daemon):
    the kernel takes no other open of an inode whose passthrough handles are open. Release
    *fh* with passthrough_release when that open is released. None if no file is held.'''
    cdef uint64_t fh = 0
    cdef int32_t backing_id = 0
    if not pyfuse3_fo_pin(inode, &fh, &backing_id):
        return None
    return (fh, backing_id)


def passthrough_release(uint64_t fh):
    '''Release a handle from passthrough_handle (when C does not answer RELEASE itself);
    True if it was one.'''
    return bool(pyfuse3_fo_release(_devfd(), fh))


def passthrough_retract(uint64_t inode):
    '''No more opens of *inode* answered with its published file (eviction, a changed
    object); its backing id is closed with its last handle. True if it was published.'''
    return bool(pyfuse3_fo_retract(_devfd(), inode))


def passthrough_retract_file(uint64_t st_dev, uint64_t st_ino):
    '''Retract the inode whose published file is this one (st_dev, st_ino of the backing
    file, e.g. evicted from the tier); returns that inode, or 0.'''
    return pyfuse3_fo_retract_file(_devfd(), st_dev, st_ino)


def passthrough_handles(uint64_t inode):
    '''-1 if the table holds no backing id for *inode*, else its open passthrough handles.'''
    return pyfuse3_fo_handles(inode)


def passthrough_held_fd(uint64_t inode):
    '''A copy of the descriptor the table holds for *inode* (the caller closes it), or -1.'''
    return pyfuse3_fo_held_fd(inode)


def passthrough_revalidate(uint64_t inode, int64_t size, int64_t nlink, int64_t ctime_ns,
                           int64_t mtime_ns):
    '''The held file of *inode* (passthrough_held_fd) was checked again and passed in this
    fstat state: ``(fh, backing_id)`` of a new handle of it if it is still in that state,
    else None. For an inode whose handles hold a file that changed (e.g. was evicted): the
    kernel accepts no other backing file for it until they are released.'''
    cdef uint64_t fh = 0
    cdef int32_t backing_id = 0
    if not pyfuse3_fo_revalidate(inode, size, nlink, ctime_ns, mtime_ns, &fh, &backing_id):
        return None
    return (fh, backing_id)


def passthrough_drain_hits():
    '''The inodes whose opens C answered since the last call (each once): C answers them
    without Python, so the file system counts them as cache hits from here. Like every
    table call it runs with the GIL held, which is what orders it with the loop thread.'''
    cdef uint64_t* out = <uint64_t*> stdlib.malloc(PYFUSE3_FO_SLOTS * sizeof(uint64_t))
    cdef unsigned n, i
    if out == NULL:
        raise MemoryError()
    try:
        n = pyfuse3_fo_drain_hits(out, PYFUSE3_FO_SLOTS)
        return [out[i] for i in range(n)]
    finally:
        stdlib.free(out)


def passthrough_sweep(unsigned slots):
    '''datahub: fstat the held files of the next *slots* slots of the table (a cursor going
    round it) and retract the published ones that changed or were removed since (another
    process sharing the disk directory evicted them): their inodes. Their backing ids and
    descriptors are closed now, or with their last handle.'''
    cdef uint64_t* out = <uint64_t*> stdlib.malloc(slots * sizeof(uint64_t) + 1)
    cdef unsigned n, i
    if out == NULL:
        raise MemoryError()
    try:
        n = pyfuse3_fo_sweep(_devfd(), slots, out, slots)
        return [out[i] for i in range(n)]
    finally:
        stdlib.free(out)


def passthrough_fastopen(bint on):
    '''Answer OPEN and RELEASE of published files in C (default) or send them to Python
    (same table; a baseline for benchmarks).'''
    global pyfuse3_fo_answer
    pyfuse3_fo_answer = 1 if on else 0


def passthrough_sample_cached(bint on):
    '''datahub: while on, each open answered in C also asks cachestat(2) whether its whole
    backing file was in the page cache (counted in passthrough_stats()'s opens_sampled and
    opens_resident): what an automatic read mode decides on. Off by default.'''
    global pyfuse3_fo_sample
    pyfuse3_fo_sample = 1 if on else 0


def lookup_publish(uint64_t parent, bytes name, EntryAttributes entry):
    '''datahub: the file system's answer to LOOKUP(*parent*, *name*) is *entry* for as long
    as it is mounted (a read-only namespace whose FORGET is a no-op): the C threads answer
    later LOOKUPs of that name with it (lookup.h), as fuse_reply_entry would. Only positive
    entries are taken; False if refused (the table is full). Emptied with the session.'''
    return bool(pyfuse3_lk_publish(parent, <const char *>name, len(name), &entry.fuse_param))


def passthrough_fastloop(bint on):
    '''Read /dev/fuse on a C thread that answers OPEN and RELEASE of published files and
    FUSE_IOCTL itself (default), or from the trio loop as pyfuse3 does (a baseline for
    benchmarks). Takes effect at the next main().'''
    global pyfuse3_fl_want
    pyfuse3_fl_want = 1 if on and PYFUSE3_FASTPATH else 0


def dispatch(int threads):
    '''datahub: with the fastloop thread (``passthrough_fastloop(True)``), at most *threads*
    C threads (0: none, the trio loop runs every handler) take turns reading /dev/fuse and run
    each request's handler themselves, with the GIL, to its end (dispatch.h). For a file
    system whose handlers never wait on trio (a workspace's: they block). A handler about to
    block calls ``dispatch_blocking()`` first. Takes effect at the next main().'''
    if threads < 0 or threads > PYFUSE3_FD_MAX_THREADS:
        raise ValueError(f'dispatch: 0 to {PYFUSE3_FD_MAX_THREADS} threads, not {threads}')
    pyfuse3_fd_set(threads, _fd_run, _fd_begin, _fd_end)


def dispatch_blocking():
    '''datahub: True in a dispatching thread (``dispatch``): the caller may block, another
    thread reads /dev/fuse meanwhile (this one gave the reader role up). False elsewhere (the
    trio loop): the caller must not block there.'''
    return bool(pyfuse3_fd_blocking())


cdef void* _fd_begin() noexcept nogil:
    # datahub: a thread state kept for the thread's life, so each request's GIL is a cheap take
    PyGILState_Ensure()
    return <void*>PyEval_SaveThread()


cdef void _fd_end(void *state) noexcept nogil:
    PyEval_RestoreThread(<PyThreadState*>state)
    PyGILState_Release(PyGILState_UNLOCKED)


cdef void _fd_run(const char *data, size_t n) noexcept nogil:
    # datahub: one request in a dispatching thread: libfuse calls the handler, whose
    # coroutine save_retval steps to its end right there (_fd_step)
    cdef fuse_buf buf
    buf.mem = <void*>data
    buf.size = n
    buf.pos = 0
    buf.flags = 0
    with gil:
        fuse_session_process_buf(session, &buf)


cdef void _fd_step(object coro) noexcept:
    """datahub: run a handler's coroutine to its end in this dispatching thread. What the
    trio loop did with an exception a handler let out (it ended main(), so the session and
    every request in flight ended with it, nobody left waiting), happens here too: the
    session ends (main() raises OSError EIO). So does it for a coroutine that suspends
    (nothing here answers trio's traps; a bug of the file system): its request would never
    be answered."""
    try:
        coro.send(None)
    except StopIteration:
        return
    except BaseException:
        log.exception('pyfuse3: a handler failed in a dispatching thread: the session ends')
        pyfuse3_fd_end_session(errno.EIO)
        return
    log.error('pyfuse3: a handler suspended in a dispatching thread (%r): handlers run by '
              'dispatch() must not wait on the event loop; the session ends', coro)
    coro.close()
    pyfuse3_fd_end_session(errno.EIO)


def passthrough_uring(bint on):
    '''With the fastloop thread: take requests from one io_uring queue per CPU, each
    served by a thread pinned to its CPU, when the kernel offers it at INIT (Linux >= 6.14
    with /sys/module/fuse/parameters/enable_uring = Y). Takes effect at the next main().'''
    global pyfuse3_ur_want
    pyfuse3_ur_want = 1 if on and PYFUSE3_FASTPATH else 0


def passthrough_stats():
    '''Counters of the C table and of the fastloop reader thread.'''
    cdef pyfuse3_fo_counters n
    cdef pyfuse3_fl_counters f
    cdef unsigned count = 0
    pyfuse3_fo_snapshot(&n, &count)
    pyfuse3_fl_snapshot(&f)
    cdef pyfuse3_ur_counters u
    cdef int ur_queues = 0
    pyfuse3_ur_snapshot(&u, &ur_queues)
    cdef pyfuse3_lk_counters k
    pyfuse3_lk_snapshot(&k)
    cdef pyfuse3_fd_counters d
    cdef int fd_threads = 0
    cdef int fd_running = 0
    pyfuse3_fd_snapshot(&d, &fd_threads, &fd_running)
    return {
        'c_opens': n.c_opens,  # the thread's opens too (loop_opens of them)
        'c_releases': n.c_releases,
        'releases': n.releases,
        'py_handles': n.py_handles,
        'changed': n.changed,
        'ids_opened': n.ids_opened,
        'ids_closed': n.ids_closed,
        'opens_sampled': n.sampled,
        'opens_resident': n.resident,
        'opens_sample_failed': n.sample_failed,
        'swept': n.swept,
        'entries': count,
        'published': pyfuse3_fo_published(),
        'fastopen': bool(pyfuse3_fo_answer),
        'fastloop': bool(fl_running),
        'loop_opens': f.opens,
        'loop_releases': f.releases,
        'loop_ioctls': f.ioctls,
        'loop_lookups': f.lookups,
        'lookup_names': k.published,
        'lookup_refused': k.refused,
        'lookup_answered': k.answered,
        'loop_handed': f.handed,
        'loop_wakeups': f.wakeups,
        'loop_forgets': f.forgets,  # FORGETs of a mount that publishes LOOKUPs, dropped in C
        'loop_writes': f.writes,  # WRITEs of published staged handles answered in C (fastwrite.h)
        'dispatch': bool(fl_running and fd_running),
        'dispatch_threads': fd_threads,
        'dispatched': d.dispatched,  # requests run by the dispatching threads (dispatch.h)
        'dispatch_handoffs': d.handoffs,
        'dispatch_vacant': d.vacant,
        'dispatch_kept': d.kept,  # buffers left to a view a WRITE's handler kept (perf41d)
        'uring': ur_queues > 0,
        'uring_queues': ur_queues,
        'uring_requests': u.requests,
        'uring_answered': u.answered,
        'uring_handed': u.handed,
        'uring_commits_from_loop': u.commits,
    }


# --- datahub: WRITEs of staged handles answered in C (fastwrite.h) ---------------------------
def fastwrite_publish(uint64_t fh, int fd):
    '''Publish the staged file *fd* of the workspace handle *fh*: the fastloop thread then
    answers that handle's WRITEs with pwrite to *fd* (fastwrite.h). Call before replying to
    the OPEN/CREATE. *fd* stays the caller's (keep it open until fastwrite_retract). Raises
    OSError: EEXIST (published), ENOSPC (PYFUSE3_FW_MAX handles), EINVAL.'''
    cdef int ret = pyfuse3_fw_publish(fh, fd)
    if ret < 0:
        raise OSError(-ret, os.strerror(-ret))


def fastwrite_retract(uint64_t fh):
    '''Take *fh* out of the table (waits for a write of it in progress): the errno its
    writes recorded (0: none), or None if it was not published.'''
    cdef int ret
    with nogil:
        ret = pyfuse3_fw_retract(fh)
    return None if ret == -errno.ENOENT else ret


def fastwrite_failed(uint64_t fh):
    '''The errno a write of *fh* (or of another handle of its staged file) answered in C
    failed with, 0 if none (or *fh* is not published).'''
    return pyfuse3_fw_failed(fh)


def fastwrite_stats():
    '''Counters of the WRITEs answered in C.'''
    cdef pyfuse3_fw_counters n
    cdef unsigned count = 0
    pyfuse3_fw_snapshot(&n, &count)
    return {
        'published': n.published,
        'handles': count,
        'writes': n.writes,
        'bytes': n.bytes,
        'failed': n.failed,
        'handed': n.handed,
    }


# --- datahub: READs answered in C from page files (fastread.h) ------------------------------
def fastread_publish(uint64_t inode, int fd):
    '''Publish the verified page file *fd* of *inode* (its bytes from offset 0): from now on
    READs of the inode with the kernel's handle 0 (zero-message opens) are answered by the C
    threads from it, while it fstat()s as now, before and after each pread. The table owns
    *fd* then (on error the caller still does). Raises OSError: ENOSPC (FASTREAD_MAX files
    published: retract one), EEXIST (published already), EINVAL (not a regular file).'''
    cdef int ret = pyfuse3_fr_publish(inode, fd)
    if ret < 0:
        raise OSError(-ret, strerror(-ret))


def fastread_retract(uint64_t inode):
    '''No more READs of *inode* answered in C; True if it was published. Its descriptor is
    closed once no C thread reads from it.'''
    return bool(pyfuse3_fr_retract(inode))


def fastread_retract_file(uint64_t st_dev, uint64_t st_ino):
    '''Retract the inode whose published page file is this one (evicted from the tier);
    returns that inode, or 0.'''
    return pyfuse3_fr_retract_file(st_dev, st_ino)


def fastread_drain_hits():
    '''The inodes with a READ answered in C since the last call (each once): the file
    system counts them as cache hits.'''
    cdef uint64_t* out = <uint64_t*> stdlib.malloc(PYFUSE3_FR_SLOTS * sizeof(uint64_t))
    cdef unsigned n, i
    if out == NULL:
        raise MemoryError()
    try:
        with nogil:
            n = pyfuse3_fr_drain_hits(out, PYFUSE3_FR_SLOTS)
        return [out[i] for i in range(n)]
    finally:
        stdlib.free(out)


def fastread_sweep(unsigned slots):
    '''datahub: fstat the published page files of the next *slots* slots of the table (a
    cursor going round it) and retract those that changed or were removed since (another
    process sharing the disk directory evicted them): their inodes. Each descriptor is
    closed once no C thread reads from it.'''
    cdef uint64_t* out = <uint64_t*> stdlib.malloc(slots * sizeof(uint64_t) + 1)
    cdef unsigned n, i
    if out == NULL:
        raise MemoryError()
    try:
        with nogil:
            n = pyfuse3_fr_sweep(slots, out, slots)
        return [out[i] for i in range(n)]
    finally:
        stdlib.free(out)


def fastread(bint on, bint dontneed=True, bint direct=True):
    '''Answer READs of published page files in C (default) or send them to Python (a
    benchmark baseline). *direct*: read page-aligned READs with O_DIRECT where the file
    system allows it; *dontneed*: drop the page file's pages after each buffered read. Both
    keep the bytes in RAM once (the FUSE inode's page cache).'''
    global pyfuse3_fr_on, pyfuse3_fr_dontneed, pyfuse3_fr_direct
    pyfuse3_fr_on = 1 if on else 0
    pyfuse3_fr_dontneed = 1 if dontneed else 0
    pyfuse3_fr_direct = 1 if direct else 0


def fastread_stats():
    '''Counters of READs answered in C.'''
    cdef pyfuse3_fr_counters n
    cdef unsigned count = 0
    pyfuse3_fr_snapshot(&n, &count)
    return {
        'on': bool(pyfuse3_fr_on),
        'dontneed': bool(pyfuse3_fr_dontneed),
        'direct_on': bool(pyfuse3_fr_direct),  # the setting; 'direct' below counts the O_DIRECT reads
        'files': count,
        'published': n.published,
        'reads': n.reads,
        'bytes': n.bytes,
        'direct': n.direct,
        'changed': n.changed,
        'handed': n.handed,
        'swept': n.swept,
    }

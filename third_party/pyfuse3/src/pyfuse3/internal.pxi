'''
internal.pxi

This file defines functions and data structures that are used internally by
pyfuse3. It is included by __init__.pyx.

Copyright © 2013 Nikolaus Rath <Nikolaus.org>

This file is part of pyfuse3. This work may be distributed under
the terms of the GNU LGPL.
'''

cdef void save_retval(object val):
    global py_retval
    if val is not None and pyfuse3_fd_here():
        _fd_step(val)  # datahub: a dispatching thread runs the handler where libfuse calls it
        return
    if py_retval is not None and val is not None:
        log.error('py_retval was not awaited - please report a bug at '
                  'https://github.com/libfuse/pyfuse3/issues!')
    py_retval = val

cdef object get_request_context(fuse_req_t req):
    '''Get RequestContext() object'''

    cdef const_fuse_ctx* context
    cdef RequestContext ctx

    context = fuse_req_ctx(req)
    ctx = RequestContext.__new__(RequestContext)
    ctx.pid = context.pid
    ctx.uid = context.uid
    ctx.gid = context.gid
    ctx.umask = context.umask

    return ctx

cdef void init_fuse_ops():
    '''Initialize fuse_lowlevel_ops structure'''

    string.memset(&fuse_ops, 0, sizeof(fuse_lowlevel_ops))

    fuse_ops.init = fuse_init
    fuse_ops.lookup = fuse_lookup
    fuse_ops.forget = fuse_forget
    fuse_ops.getattr = fuse_getattr
    fuse_ops.setattr = fuse_setattr
    fuse_ops.readlink = fuse_readlink
    fuse_ops.mknod = fuse_mknod
    fuse_ops.mkdir = fuse_mkdir
    fuse_ops.unlink = fuse_unlink
    fuse_ops.rmdir = fuse_rmdir
    fuse_ops.symlink = fuse_symlink
    fuse_ops.rename = fuse_rename
    fuse_ops.link = fuse_link
    fuse_ops.open = fuse_open
    fuse_ops.read = fuse_read
    fuse_ops.write = fuse_write
    fuse_ops.flush = fuse_flush
    fuse_ops.release = fuse_release
    fuse_ops.fsync = fuse_fsync
    fuse_ops.opendir = fuse_opendir
    fuse_ops.readdirplus = fuse_readdirplus
    fuse_ops.releasedir = fuse_releasedir
    fuse_ops.fsyncdir = fuse_fsyncdir
    fuse_ops.statfs = fuse_statfs
    ASSIGN_NOT_DARWIN(fuse_ops.setxattr, &fuse_setxattr)
    ASSIGN_NOT_DARWIN(fuse_ops.getxattr, &fuse_getxattr)
    fuse_ops.listxattr = fuse_listxattr
    fuse_ops.removexattr = fuse_removexattr
    fuse_ops.access = fuse_access
    fuse_ops.create = fuse_create
    fuse_ops.forget_multi = fuse_forget_multi
    fuse_ops.write_buf = fuse_write_buf
    fuse_ops.poll = fuse_poll

cdef make_fuse_args(args, fuse_args* f_args):
    cdef char* arg
    cdef int i
    cdef ssize_t size_s
    cdef size_t size

    args_new = [ b'pyfuse3' ]
    for el in args:
        args_new.append(b'-o')
        args_new.append(el.encode('us-ascii'))
    args = args_new

    f_args.argc = <int> len(args)
    if f_args.argc == 0:
        f_args.argv = NULL
        return

    f_args.allocated = 1
    f_args.argv = <char**> stdlib.calloc(<size_t> f_args.argc, sizeof(char*))

    if f_args.argv is NULL:
        cpython.exc.PyErr_NoMemory()

    try:
        for (i, el) in enumerate(args):
            PyBytes_AsStringAndSize(el, &arg, &size_s)
            size = <size_t> size_s # guaranteed positive
            f_args.argv[i] = <char*> stdlib.malloc((size+1)*sizeof(char))

            if f_args.argv[i] is NULL:
                cpython.exc.PyErr_NoMemory()

            string.strncpy(f_args.argv[i], arg, size+1)
    except:
        for i in range(f_args.argc):
            # Freeing a NULL pointer (if this element has not been allocated
            # yet) is fine.
            stdlib.free(f_args.argv[i])
        stdlib.free(f_args.argv)
        raise

def _notify_loop():
    '''Process async invalidate_entry calls.'''

    while True:
        req = _notify_queue.get()
        if req is None:
            log.debug('terminating notify thread')
            break

        (inode_p, name, deleted, ignore_enoent) = req
        try:
            invalidate_entry(inode_p, name, deleted)
        except Exception as exc:
            if ignore_enoent and isinstance(exc, FileNotFoundError):
                pass
            else:
                log.exception('Failed to submit invalidate_entry request for '
                              'parent inode %d, name %s', req[0], req[1])

cdef str2bytes(s):
    '''Convert *s* to bytes'''

    return s.encode(fse, 'surrogateescape')

cdef bytes2str(s):
    '''Convert *s* to str'''

    return s.decode(fse, 'surrogateescape')

cdef strerror(int errno):
    try:
        return os.strerror(errno)
    except ValueError:
        return 'errno: %d' % errno

cdef PyBytes_from_bufvec(fuse_bufvec *src):
    cdef fuse_bufvec dst
    cdef size_t len_
    cdef ssize_t res

    len_ = fuse_buf_size(src) - src.off
    if len_ > PY_SSIZE_T_MAX:
        raise OverflowError('Value too long to convert to Python')
    buf = PyBytes_FromStringAndSize(NULL, <ssize_t> len_)
    dst.count = 1
    dst.idx = 0
    dst.off = 0
    dst.buf[0].mem = PyBytes_AS_STRING(buf)
    dst.buf[0].size = len_
    dst.buf[0].flags = 0
    res = fuse_buf_copy(&dst, src, 0)
    if res < 0:
        raise OSError(errno.errno, 'fuse_buf_copy failed with '
                      + strerror(errno.errno))
    elif <size_t> res < len_:
        # This is expected to be rare
        return buf[:res]
    else:
        return buf

@cython.final
cdef class _RequestBuffer:
    """datahub (perf41d): a dispatching thread's WRITE payload, exported read-only to the
    memoryview the handler gets (``_write_from_view``). ``exports`` counts the buffers taken
    from it: the memoryview's managed buffer takes one and keeps it while the view, or any
    slice of it, is alive, so a count above 0 after the view was released means the handler
    kept something that still names the request's bytes."""

    cdef const char *mem
    cdef Py_ssize_t size
    cdef Py_ssize_t exports

    def __getbuffer__(self, Py_buffer *view, int flags):
        if self.mem == NULL:
            raise BufferError('pyfuse3: a WRITE request buffer after its handler returned')
        PyBuffer_FillInfo(view, self, <void*> self.mem, self.size, 1, flags)
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *view):
        self.exports -= 1


cdef void* calloc_or_raise(size_t nmemb, size_t size) except NULL:
    cdef void* mem
    mem = stdlib.calloc(nmemb, size)
    if mem is NULL:
        raise MemoryError()
    return mem

cdef class _WorkerData:
    """For internal use by pyfuse3 only.

    datahub: the session's tasks take turns at one *reader* role (``_session_loop``). The
    reader reads a request and runs its handler's coroutine in the same task until the
    coroutine first suspends; a handler that answers without waiting costs no hand-off
    between tasks. Only a handler that must wait hands the role to a spare task (parked in
    ``spares``), or to a new one, before it suspends."""

    cdef int task_count
    cdef int task_serial
    cdef list spares         # parked tasks, each waiting to become the reader
    cdef bint reader_vacant  # max_tasks reached: the next task whose handler ends reads
    cdef bint ending         # the session ended: parked tasks and finished handlers end

    def __init__(self):
        self.spares = []
        self.reader_vacant = False
        self.ending = False

    cdef get_name(self):
        self.task_serial += 1
        return 'pyfuse-%02d' % self.task_serial

# Delay initialization so that pyfuse3.asyncio can replace
# the trio module.
cdef _WorkerData worker_data


def _abort_spare(raise_cancel):
    """datahub: a parked spare task is cancelled (its nursery is going): it leaves the spares."""
    task = trio.lowlevel.current_task()
    if task in worker_data.spares:
        worker_data.spares.remove(task)
    return trio.lowlevel.Abort.SUCCEEDED


async def _take_reader_role(int min_tasks):
    """datahub: this task's handler is done; may it read again? Yes when the role is vacant,
    or once a reader hands the role to it parked as a spare; no (the task ends) when the
    session ended or min_tasks spares are parked already."""
    if worker_data.ending:
        return False
    if worker_data.reader_vacant:
        worker_data.reader_vacant = False
        return True
    if len(worker_data.spares) >= min_tasks:
        return False
    worker_data.spares.append(trio.lowlevel.current_task())
    await trio.lowlevel.wait_task_rescheduled(_abort_spare)
    return not worker_data.ending


cdef _hand_over_reader_role(nursery, int min_tasks, int max_tasks):
    """datahub: the reader's handler is about to wait, so another task reads meanwhile: a
    parked spare, else a new task, else (max_tasks reached) the first task whose handler
    ends."""
    if worker_data.spares:
        trio.lowlevel.reschedule(worker_data.spares.pop())
    elif worker_data.task_count < max_tasks:
        worker_data.task_count += 1
        nursery.start_soon(_session_loop, nursery, min_tasks, max_tasks, True,
                           name=worker_data.get_name())
    else:
        worker_data.reader_vacant = True


cdef _end_session_tasks():
    """datahub: the reader saw the session end: every parked spare ends, and so does every
    task whose handler ends later."""
    worker_data.ending = True
    while worker_data.spares:
        trio.lowlevel.reschedule(worker_data.spares.pop())


@async_wrapper
async def _session_loop(nursery, int min_tasks, int max_tasks, bint reader=True):
    """datahub: one task of the session loop. pyfuse3's had each task wait its turn at a
    trio Lock, then in wait_readable, so every request cost a hand-off between tasks and an
    epoll re-arm (a fifth of a negative LOOKUP's daemon CPU: docs/benchmarks.md, writes6).

    While it is the reader, the task reads the next request without waiting (the fd is
    non-blocking; with the fastloop thread its queue is popped) and goes back to trio only
    to wait for the fd when nothing is queued, or after _BURST requests so that other tasks
    get their turn. A request answered in C (no coroutine) or by a handler that never
    suspends is done before the next read. A handler that suspends (a worker thread, a
    lock, a sleep) first hands the reader role over (``_hand_over_reader_role``), then
    finishes in this task, which reads again if the role is vacant, else parks as a spare
    or ends. Each task keeps its own receive buffer until its request is done, as before."""
    global py_retval
    cdef int res
    cdef int burst = 0
    cdef fuse_buf buf
    cdef int fd

    name = trio.lowlevel.current_task().name
    buf.mem = NULL
    buf.size = 0
    buf.pos = 0
    buf.flags = 0
    try:
        while True:
            if not reader:
                reader = await _take_reader_role(min_tasks)
                if not reader:
                    break
            if fuse_session_exited(session):
                _end_session_tasks()
                break
            res = _receive(&buf)
            if res == -errno.EINTR or res == -errno.EAGAIN:
                burst = 0
                # with the fastloop thread, its queue's eventfd says a request waits
                fd = pyfuse3_fl_evfd() if fl_running else session_fd
                try:
                    await trio.lowlevel.wait_readable(fd)
                except trio.ClosedResourceError:
                    log.debug('%s: FUSE fd about to be closed.', name)
                    _end_session_tasks()
                    break
                continue
            elif res < 0:
                _end_session_tasks()
                raise OSError(-res, 'fuse_session_receive_buf failed with '
                              + strerror(-res))
            elif res == 0:
                _end_session_tasks()
                break

            # When fuse_session_process_buf() calls back into one of our handler
            # methods, the handler will start a co-routine and store it in
            # py_retval.
            py_retval = None
            fuse_session_process_buf(session, &buf)
            coro = py_retval
            py_retval = None
            if coro is not None:
                try:
                    trap = coro.send(None)
                except StopIteration:
                    coro = None  # answered without waiting
            if coro is None:
                burst += 1
                if burst >= _BURST:
                    burst = 0
                    await trio.lowlevel.cancel_shielded_checkpoint()
                continue
            # the handler waits: someone else reads meanwhile; it finishes in this task
            _hand_over_reader_role(nursery, min_tasks, max_tasks)
            reader = False
            burst = 0
            await _Resumed(coro, trap)
    finally:
        log.debug('%s: terminated', name)
        if fl_running:
            pyfuse3_fl_free(buf.mem)
        else:
            stdlib.free(buf.mem)
        worker_data.task_count -= 1


cdef int _receive(fuse_buf* buf):
    """datahub: the next request, as fuse_session_receive_buf returns it: from the fastloop
    thread's queue when it runs (the buffer of the previous request, whose coroutine is
    done, is freed then), else from the fd."""
    cdef int res
    cdef void* mem = NULL
    if not fl_running:
        res = fuse_session_receive_buf(session, buf)
        if res == -errno.ECONNABORTED:  # torn down under the read (libfuse knows only ENODEV)
            fuse_session_exit(session)
            return 0
        return res
    pyfuse3_fl_free(buf.mem)
    buf.mem = NULL
    buf.size = 0
    res = pyfuse3_fl_pop(&mem)
    if res > 0:
        buf.mem = mem
        buf.size = <size_t>res
        buf.pos = 0
        buf.flags = 0
    elif res == 0:
        fuse_session_exit(session)  # unmounted: what libfuse does on ENODEV
    return res


cdef int _BURST = 64  # datahub: at most this many requests per trio turn

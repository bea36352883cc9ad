"""bench/mount/kernel_profile.py's split of a whole-machine profile (issue 36, warm20).

The figures of docs/fuse.md "Where a cached pass's time goes in the kernel" are samples of
``perf record -a`` split by whose they are: the readers' (their kernel part, by leaf symbol
and by every kernel function on the stack), the daemon's (its C threads apart from its
Python threads), idle, everyone else. perf report's own ``--pid`` and ``--time`` filters gave
sums that disagreed by 2.6x on perf 6.1, so the tool parses ``perf script``; this checks that
parse and split on perf's own text, no perf needed.
"""

from __future__ import annotations

from bench.mount.kernel_profile import Pass, parse_script

READER, DAEMON = 4242, 777

# perf 6.1's ``perf script -F comm,pid,tid,time,ip,sym,dso``: a header per sample, then its
# call chain, leaf first, then a blank line; thread names may hold spaces
SCRIPT = f"""python {READER}/{READER}  20981.245806:
\tffffffff815e2030 _copy_to_iter ([kernel.kallsyms])
\tffffffff81591409 filemap_read ([kernel.kallsyms])
\tffffffff816badaa vfs_read ([kernel.kallsyms])
\t          101a07 __read (/usr/lib/x86_64-linux-gnu/libc.so.6)

python {READER}/{READER + 1}  20981.245900:
\tffffffff81111111 fuse_dentry_revalidate ([kernel.kallsyms])
\tffffffff81222222 link_path_walk ([kernel.kallsyms])
\tffffffff81333333 path_openat ([kernel.kallsyms])
\tffffffff81444444 do_sys_openat2 ([kernel.kallsyms])

python {READER}/{READER}  20981.246000:
\t          1b987f _PyEval_EvalFrameDefault (/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0)
\t    7f377245e380 [unknown] ([unknown])

pyfuse3-ring0 {DAEMON}/{DAEMON + 3}  20981.246101:
\tffffffff81555555 io_uring_enter ([kernel.kallsyms])

Trio thread 0 {DAEMON}/{DAEMON + 9}  20981.246142:
\t          19d609 _PyObject_GetInstanceAttribute (/root/.pyenv/versions/3.11.7/lib/libpython3.11.so.1.0)

swapper     0/0     20981.246200:
\tffffffff82203249 default_idle ([kernel.kallsyms])

cc1 19892/19892  20981.246300:
\t          4242aa htab_find_slot_with_hash (/usr/lib/gcc/x86_64-linux-gnu/12/cc1)
"""


def test_samples_split_by_whose_they_are() -> None:
    p = Pass()
    p.count(parse_script(SCRIPT), READER, DAEMON)
    assert (p.total, p.reader, p.reader_kernel, p.daemon, p.idle) == (7, 3, 2, 2, 1)
    assert dict(p.daemon_by_thread) == {"C threads": 1, "Python threads": 1}
    # self: the leaf of the readers' kernel samples only (a user-space leaf is not kernel time)
    assert dict(p.own) == {"_copy_to_iter": 1, "fuse_dentry_revalidate": 1}
    # inclusive: every kernel function on a reader's stack, once per sample
    assert p.inclusive["vfs_read"] == 1 and p.inclusive["do_sys_openat2"] == 1
    assert p.inclusive["link_path_walk"] == 1 and "__read" not in p.inclusive
    assert "io_uring_enter" not in p.inclusive  # the daemon's stacks are not the readers'


def test_passes_add_up() -> None:
    a, b = Pass(), Pass()
    a.count(parse_script(SCRIPT), READER, DAEMON)
    b.count(parse_script(SCRIPT), READER, None)  # local disk: no daemon, its samples are others'
    a.add(b)
    assert (a.total, a.reader, a.daemon, a.idle) == (14, 6, 2, 2)
    assert a.own["_copy_to_iter"] == 2

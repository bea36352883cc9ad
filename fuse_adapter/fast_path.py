"""A read-only mount's fast path as one value: what was asked for, what the installed
pyfuse3 can do, and what is in effect (docs/fuse.md; docs/architecture.md, "The C layer").

Why one value: each mode depends on others (READs in C need zero-message opens and the C
reader thread; passthrough replaces zero-message opens; io_uring and LOOKUPs in C need the
C reader thread) and on what the build of pyfuse3 has. Decided in one place, once per
mount, the shim only reads the answer, and the tests check the decision without FUSE.

No pyfuse3 here: ``fuse_ops`` (the C layer's only Python caller) probes the module once at
import (:meth:`Build.probe`) and hands the result in. What the kernel agrees to is learnt
at INIT, later: a kernel without FUSE passthrough, or a mount whose requests no C thread
reads, turns the policy objects' modes off then (``PassthroughOpens.mode``,
``FastReads.mode``), which the mount's stats show.

The modes, in short (each flag is a ``datahub mount`` option):

* automatic (the default, :data:`AUTO_DEFAULT`; ``--auto-read-mode`` says so explicitly):
  passthrough and READs in C both armed, passthrough first, then one switch to zero-message
  opens when the working set is in the page cache (``fuse_adapter.read_mode``).
* zero-message opens (``--no-passthrough`` keeps them from the start): the first OPEN is
  answered ENOSYS, so the kernel opens files itself with their page cache kept; needs a
  build whose READs name the inode.
* ``fastread`` (``--no-fastread``): pyfuse3's C threads answer READs of files whose verified
  page file was published (``fuse_adapter.fastread``).
* ``passthrough`` (``--passthrough`` for good; the automatic mode's start; the default when
  READs in C are impossible): OPEN of a file wholly in the disk tier is answered with its
  page file as a FUSE passthrough backing file (``fuse_adapter.passthrough``); it needs
  OPEN, so it replaces zero-message opens. ``fastopen`` (``--no-fastopen``): later opens and
  releases answered in C.
* ``fastloop`` (``--no-fastloop``): a C thread reads the requests and answers what it can
  (opens, releases, ``isatty()``, published LOOKUPs and READs); the rest reaches Python.
* ``lookup_in_c`` (``--no-lookup-in-c``): positive LOOKUP answers are published to C.
* ``io_uring`` (``--no-io-uring``): requests from one io_uring queue per CPU when the kernel
  offers it at INIT (``fuse_adapter.uring.mount_transport`` says whether to ask).
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Build:
    """What the installed pyfuse3 can do: the build's capability probes, read once."""

    #: reads name the inode (``inode | NO_OPEN_FH``) of files opened without an OPEN
    no_open_fh: int | None = None
    #: FUSE passthrough (built against libfuse >= 3.17)
    passthrough: bool = False
    #: the open table: OPEN and RELEASE of published files answered in C (fastopen.h)
    fastopen: bool = False
    #: the C /dev/fuse reader thread (fastloop.h)
    fastloop: bool = False
    #: io_uring queues, one per CPU (uring.h)
    uring: bool = False
    #: the lookup table: LOOKUPs of published names answered in C (lookup.h; needs fastloop)
    lookup_in_c: bool = False
    #: the page-file table: READs answered in C (fastread.h; needs fastloop)
    fastread: bool = False
    #: the open table measures page-cache residency at each open (the automatic read mode)
    sample_cached: bool = False
    #: write() is told whether the WRITE comes from the kernel's write-back cache (workspaces)
    write_cached: bool = False
    #: write() gets a fifth argument, ``sync``: the WRITE's flags hold O_DSYNC (RWF_DSYNC too)
    write_sync: bool = False
    #: the write table: WRITEs of a workspace's staged handles answered in C (fastwrite.h)
    fastwrite: bool = False
    #: a handle answered with a backing id may keep direct I/O (a workspace's O_SYNC handle
    #: of a staged file: its WRITEs reach the daemon, docs/writeback.md "O_SYNC and O_DSYNC")
    backing_direct_io: bool = False

    @classmethod
    def probe(cls, pyfuse3: object) -> Build:
        """The capabilities of a pyfuse3 module (the caller imports it: ``fuse_ops``)."""
        fastloop = bool(getattr(pyfuse3, "FASTLOOP", False))
        return cls(
            no_open_fh=getattr(pyfuse3, "NO_OPEN_FH", None),
            passthrough=bool(getattr(pyfuse3, "PASSTHROUGH", False)),
            fastopen=hasattr(pyfuse3, "passthrough_publish"),
            fastloop=fastloop,
            uring=bool(getattr(pyfuse3, "URING", False)),
            lookup_in_c=fastloop and hasattr(pyfuse3, "lookup_publish"),
            fastread=fastloop and bool(getattr(pyfuse3, "FASTREAD", False)),
            sample_cached=hasattr(pyfuse3, "passthrough_sample_cached"),
            write_cached=bool(getattr(pyfuse3, "WRITE_CACHED", False)),
            write_sync=bool(getattr(pyfuse3, "WRITE_SYNC", False)),
            fastwrite=fastloop and bool(getattr(pyfuse3, "FASTWRITE", False)),
            backing_direct_io=bool(getattr(pyfuse3, "BACKING_DIRECT_IO", False)),
        )


@dataclass(frozen=True)
class Asked:
    """What a read-only mount's flags ask for (``datahub mount``; all on by default)."""

    #: True: ``--passthrough``; False: ``--no-passthrough``; None: the default (see :func:`decide`)
    passthrough: bool | None = None
    #: ``--auto-read-mode``: passthrough first, zero-message opens once the working set is in
    #: the page cache (``fuse_adapter.read_mode``); None: the default (:data:`AUTO_DEFAULT`)
    auto: bool | None = None
    fastread: bool = True
    fastopen: bool = True
    fastloop: bool = True
    io_uring: bool = True
    lookup_in_c: bool = True
    zero_message_open: bool = True


@dataclass(frozen=True)
class FastPath:
    """What is in effect when the mount starts (the kernel may still refuse at INIT)."""

    asked: Asked
    build: Build
    #: zero-message opens possible and asked for (used when passthrough is off or refused)
    zero_message_wanted: bool
    #: zero-message opens, unless passthrough takes the OPENs
    zero_message_open: bool
    #: publish page files to the C open table and answer OPENs with them
    passthrough: bool
    #: why not, when off ("zero-message opens", "pyfuse3 built without ...")
    passthrough_off: str
    #: published opens and releases answered in C (told to the C table at INIT)
    fastopen: bool
    fastloop: bool
    lookup_in_c: bool
    #: ask the kernel for io_uring at INIT; ``transport``: what the stats say otherwise
    io_uring: bool
    transport: str
    #: READs answered in C from published page files
    fastread: bool
    #: why not, when off
    fastread_off: str
    #: the automatic read mode: ``passthrough`` and ``fastread`` both on, zero-message opens
    #: from the switch on (``fuse_adapter.read_mode``)
    auto: bool = False

    def fastread_possible(self) -> bool:
        """Whether this build's C threads could answer READs with these flags."""
        return fastread_possible(self.asked, self.build)

    def summary(self) -> str:
        """One line for the mount's log: what is in effect at start (INIT may still turn
        passthrough or READs in C off; the mount's stats say so)."""
        opens = "zero-message" if self.zero_message_open else "through the daemon"
        if self.passthrough:
            opens = "passthrough" + (", answered in C" if self.fastopen else "")
        if self.auto:
            opens = f"automatic ({opens} until the working set is in the page cache, then zero-message)"
        on = {True: "on", False: "off"}
        return (
            f"opens: {opens}; READs in C: {on[self.fastread]}"
            + ("" if self.fastread else f" ({self.fastread_off})")
            + f"; C loop: {on[self.fastloop]}; LOOKUPs in C: {on[self.lookup_in_c]}; requests: {self.transport}"
        )


#: whether a mount without ``--passthrough``, ``--no-passthrough`` or ``--auto-read-mode``
#: chooses its read mode automatically (docs/fuse.md, "The automatic choice": it serves
#: SSD-tier hits with no READ and warm epochs with no OPEN, which neither fixed mode does)
AUTO_DEFAULT = True


def fastread_possible(asked: Asked, build: Build) -> bool:
    """Whether pyfuse3's C threads can answer READs here (its build has fastread.h and a C
    thread reads the requests); if not, the mount keeps passthrough, the next best for
    SSD-tier hits (a READ through Python costs ten times the daemon CPU)."""
    return build.fastread and asked.fastloop


def decide(
    asked: Asked,
    build: Build,
    *,
    backs_files: bool = False,
    transport: tuple[bool, str] = (False, "/dev/fuse"),
) -> FastPath:
    """The fast path of a mount: ``backs_files``, whether its cache writes page files the C
    tables can be handed (a disk tier of format-3 page files: the object's bytes from
    offset 0; False with ``--no-cache``); ``transport``: ``uring.mount_transport``'s answer.

    The default is the automatic mode (:data:`AUTO_DEFAULT`): passthrough alone needs an OPEN
    and a RELEASE per open, which halves a warm epoch; zero-message opens alone make the
    daemon read every SSD-tier hit (a READ each, 2-3x passthrough's daemon CPU). Where the
    automatic mode cannot run (no page files, a build without the open table's sampling),
    the default is zero-message opens with READs in C; without a build that can answer READs
    in C (or with ``--no-fastloop``), passthrough."""
    possible = fastread_possible(asked, build)
    auto = (
        (asked.auto if asked.auto is not None else asked.passthrough is None and AUTO_DEFAULT)
        and asked.fastread
        and possible
        and backs_files
        and build.fastopen
        and build.sample_cached
        and asked.zero_message_open
        and build.no_open_fh is not None
    )
    if auto:  # passthrough first (both tables armed); read_mode switches to zero-message opens
        asked = replace(asked, passthrough=True)
    if asked.passthrough is False or not backs_files:
        pt_asked = False
    elif asked.passthrough is None and (not asked.fastread or possible):
        pt_asked = False  # the default: zero-message opens, READs in C
    else:
        pt_asked = True
    fr_asked = (asked.passthrough is not True or auto) and asked.fastread and possible and backs_files

    zero_message_wanted = asked.zero_message_open and build.no_open_fh is not None
    passthrough = pt_asked and build.fastopen
    if pt_asked and not build.fastopen:
        why = (
            "its open table (fastopen.h)"
            if build.passthrough
            else "libfuse 3.17 (scripts/build_libfuse.sh did not run)"
        )
        passthrough_off = f"pyfuse3 built without {why}"
    else:
        passthrough_off = "zero-message opens"
    fastloop = asked.fastloop and build.fastloop
    zero_message_open = zero_message_wanted and not passthrough
    if passthrough and not auto:
        fastread_off = "FUSE passthrough"
    elif not fr_asked:  # also without page files (--no-cache): as the mount has always said
        fastread_off = "--no-fastread"
    elif not build.fastread:
        fastread_off = "pyfuse3 built without fastread"
    elif not fastloop:
        fastread_off = "--no-fastloop"
    else:
        fastread_off = "no zero-message opens"
    fastread = fr_asked and fastloop and (zero_message_open or auto)
    return FastPath(
        asked=asked,
        build=build,
        zero_message_wanted=zero_message_wanted,
        zero_message_open=zero_message_open,
        passthrough=passthrough,
        passthrough_off=passthrough_off,
        fastopen=asked.fastopen,
        fastloop=fastloop,
        lookup_in_c=asked.lookup_in_c and fastloop and build.lookup_in_c,
        io_uring=transport[0] and fastloop and build.uring,
        transport=transport[1],
        fastread=fastread,
        fastread_off="" if fastread else fastread_off,
        auto=auto and passthrough and fastread,
    )


def c_writes_off(*, asked: bool, passthrough: bool, writeback_cache: bool, quota: bool, build: Build) -> str:
    """Why a workspace mount does not answer its staged handles' WRITEs in C (fastwrite.h;
    docs/writeback.md, "WRITEs answered in C"), or "" when it does. Passthrough writes need
    no WRITE at all; the kernel's write-back cache sends cached pages whose failure is
    answered differently (Python's ``_short_file``); a quota is charged per WRITE in Python,
    at the write(2) that passes it, which the C table does not do (yet)."""
    if passthrough:
        return "--passthrough: the kernel writes staged files itself"
    if not asked:
        return "the default; --writes-in-c stages new files and answers their WRITEs in C"
    if writeback_cache:
        return "--writeback-cache: the kernel's cached WRITEs are answered in Python"
    if quota:
        return "--quota: each WRITE is charged in Python, at the write(2) that passes the quota"
    if not build.fastwrite:
        return "pyfuse3 built without its C fast path (libfuse >= 3.17; scripts/build_libfuse.sh)"
    return ""


def write_passthrough_off(asked: bool, build: Build) -> str:
    """Why a workspace mount does not ask the kernel for passthrough writes at INIT
    (``fuse_adapter/workspace.py``; ``--passthrough``), or "" when it does."""
    if not asked:
        return "the default; --passthrough stages written files"
    if not build.passthrough:
        return "pyfuse3 built without libfuse >= 3.16 (scripts/build_libfuse.sh did not run)"
    if not build.backing_direct_io:  # an O_SYNC write beside a staged file would not be durable
        return (
            "the installed pyfuse3 predates direct I/O beside a backing file: rebuild it with `make install`"
        )
    return ""

"""The one way mlxfit writes a file: the chart, ``cluster --write``'s files, ``calibrate
--write``, the Hub metadata cache, measurement records and the staged Hub headers.

A file is written whole or not at all: into a temporary file beside the target (created with
``O_EXCL | O_NOFOLLOW``, so nobody else's file or link is opened), flushed, checked by the
caller's ``validate`` and by its length, then moved over the target with ``os.replace``, which
readers see as the old file or the new one, never half of one (an interrupted ``calibrate
--write`` used to leave calibration.toml empty). A target that is a symbolic link is refused,
never written through nor replaced (a link planted in a ``--write`` directory made mlxfit chmod
its target 755), and so is one that is a FIFO, a device or a directory (``--chart`` to a FIFO
hung). A file replaced keeps its permission bits unless the caller names new ones.

Every module writes through here; ``tests/test_layout.py`` fails on any other ``open`` for
writing under ``src/``."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from mlxfit.localfile import file_kind

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class NotWritable(OSError):
    """The target is a symbolic link, a FIFO, a device or a directory: mlxfit does not write
    there. ``strerror`` says which."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.strerror = why


def _existing_mode(path: Path) -> int | None:
    """The permission bits of the regular file at ``path``, None if nothing is there;
    NotWritable for a link or anything that is not a regular file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise NotWritable("a symbolic link: mlxfit never writes through one")
    if not stat.S_ISREG(st.st_mode):
        raise NotWritable(f"{file_kind(st.st_mode)}, not a regular file")
    return stat.S_IMODE(st.st_mode)


def check_target(path: str | os.PathLike[str]) -> None:
    """NotWritable when ``write_file`` would refuse ``path`` (a link, FIFO, device, directory):
    a verb writing several files checks them all before it writes any."""
    _existing_mode(Path(path))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def write_file(path: str | os.PathLike[str], data: bytes | str, *, mode: int | None = None,
               validate: Callable[[bytes], None] | None = None,
               make_parents: bool = False) -> Path:
    """Replace ``path`` with ``data`` (str: UTF-8) atomically; return the path.

    ``mode``: the permission bits of the new file (default: those of the file it replaces,
    else 0o644 less the umask). ``validate`` is called with the bytes before anything is
    written and may raise to keep the old file. Raises OSError (NotWritable for a link or a
    file that is not regular); the target is then unchanged and no temporary file is left."""
    p = Path(path)
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if validate is not None:
        validate(raw)
    if make_parents:
        p.parent.mkdir(parents=True, exist_ok=True)
    old_mode = _existing_mode(p)
    if mode is None:
        if old_mode is not None:
            mode = old_mode
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o644 & ~umask
    # mkstemp opens with O_CREAT | O_EXCL | O_NOFOLLOW and mode 0600: nobody's link, nobody's file
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name[:80]}.", suffix=".tmp")
    try:
        try:
            _write_all(fd, raw)
            os.fsync(fd)
            os.fchmod(fd, mode)
            if os.fstat(fd).st_size != len(raw):  # a file system that lost bytes: keep the old
                raise OSError(f"wrote {len(raw):,} bytes but the file holds fewer")
        finally:
            os.close(fd)
        _existing_mode(p)  # still no link or FIFO put there while we wrote
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return p


def append_line(path: str | os.PathLike[str], line: str, *, make_parents: bool = False) -> Path:
    """Append ``line`` (a newline added) to the regular file ``path`` in one ``write`` with
    ``O_APPEND``, creating it (0o644 less the umask) if absent. A link, a FIFO or a device is
    refused (NotWritable) without blocking: the open is non-blocking and never follows a link."""
    p = Path(path)
    if make_parents:
        p.parent.mkdir(parents=True, exist_ok=True)
    _existing_mode(p)
    flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _CLOEXEC
             | getattr(os, "O_NONBLOCK", 0))
    try:
        fd = os.open(p, flags, 0o644)
    except OSError:
        if os.path.islink(p):  # ELOOP from O_NOFOLLOW
            raise NotWritable("a symbolic link: mlxfit never writes through one") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotWritable(f"{file_kind(st.st_mode)}, not a regular file")
        _write_all(fd, (line.rstrip("\n") + "\n").encode("utf-8"))
    finally:
        os.close(fd)
    return p


def create_sparse(path: str | os.PathLike[str], head: bytes, size: int) -> Path:
    """A new file (never an existing one, never through a link) holding ``head`` and then a
    hole up to ``size`` bytes: how a Hub shard's header is staged for the folder reader without
    its tensor data (a hole costs no disk on APFS, ext4 or tmpfs)."""
    p = Path(path)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o600)
    try:
        _write_all(fd, head)
        os.ftruncate(fd, max(size, len(head)))
    finally:
        os.close(fd)
    return p

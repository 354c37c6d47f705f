"""Reading a small local file that mlxfit did not write (config.json, a shard index, a cache
entry) without trusting its type or size: opened non-blocking, so a FIFO or a device cannot
hang the open; regular files only (``fstat``), so /dev/zero or a FIFO is refused before a byte
is read; and at most ``limit`` bytes, so a 2 GB sparse file costs one ``fstat``."""

from __future__ import annotations

import os
import stat

# O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class NotRegular(OSError):
    """The path is a FIFO, a device, a socket or a directory: nothing mlxfit reads."""


class TooLarge(OSError):
    """The file is over the caller's limit: refused unread."""


def file_kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a character device" if stat.S_ISCHR(mode) else "a block device"
            if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file")


def open_regular(path: str | os.PathLike[str]) -> int:
    """A file descriptor of ``path`` (symlinks followed), which is a regular file; NotRegular
    naming what it is otherwise. The caller closes it."""
    fd = os.open(path, _FLAGS)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegular(f"{file_kind(mode)}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file ``path``, which must be at most ``limit`` bytes long
    (checked before reading and while reading, in case it grows). Raises OSError:
    FileNotFoundError, NotRegular, TooLarge (with ``strerror`` saying why) and the rest."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise TooLarge(f"{size:,} bytes, over the {limit:,}-byte limit for it")
        chunks = []
        got = 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            if got > limit:
                raise TooLarge(f"grew past the {limit:,}-byte limit for it while being read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def why(e: OSError) -> str:
    """The reason of an OSError as one phrase: NotRegular / TooLarge carry theirs."""
    if isinstance(e, (NotRegular, TooLarge)):
        return str(e)
    return e.strerror or str(e)

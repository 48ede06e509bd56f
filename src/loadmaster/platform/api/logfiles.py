"""Reading learners' log files: the last N lines of a file, and new complete lines as a file grows."""

from __future__ import annotations

import os
from pathlib import Path

MAX_LOG_BYTES = 8 << 20  # the most of one rank's log one answer carries
_BLOCK = 64 << 10


def _split(data: bytes) -> list[str]:
    return [line.decode("utf-8", "replace").removesuffix("\r") for line in data.split(b"\n")]


def tail(path: Path, n: int | None, max_bytes: int = MAX_LOG_BYTES) -> tuple[list[str], bool, int]:
    """The last n lines (all when n is None) of at most max_bytes, whether earlier lines were left out, and
    the file size read up to (where following it should continue). A missing file is empty."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return [], False, 0
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - max_bytes)
        if n is not None:
            # Read backwards block by block until n line ends are seen (one more: the line before them).
            pos, newlines = size, 0
            while pos > start and newlines <= n:
                step = min(_BLOCK, pos - start)
                pos -= step
                newlines += os.pread(fd, step, pos).count(b"\n")
            start = pos
        data = os.pread(fd, size - start, start)
    finally:
        os.close(fd)
    truncated = start > 0
    lines = _split(data)
    if lines and lines[-1] == "":
        lines.pop()  # the file ends with a newline
    if truncated and lines:
        lines = lines[1:]  # the first one is a fragment
    if n is not None and len(lines) > n:
        lines, truncated = lines[len(lines) - n:] if n else [], True
    return lines, truncated, size


class Follower:
    """New complete lines of one file since the last read; a trailing fragment waits for its newline."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self.at_eof = False  # the last read reached the end of the file
        self._partial = b""

    def read(self, final: bool = False) -> list[str]:
        """New lines (at most MAX_LOG_BYTES of the file per call); with final=True (the writer has exited),
        also the fragment after the last newline once the end of the file is reached."""
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read(MAX_LOG_BYTES)
        except FileNotFoundError:
            data = b""
        self.at_eof = len(data) < MAX_LOG_BYTES
        self.offset += len(data)
        data = self._partial + data
        if final and self.at_eof:
            self._partial = b""
            return _split(data[:-1] if data.endswith(b"\n") else data) if data else []
        cut = data.rfind(b"\n")
        if cut < 0:
            self._partial = data
            return []
        self._partial = data[cut + 1:]
        return _split(data[:cut])

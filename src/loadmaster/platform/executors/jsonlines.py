"""Decode JSON lines that arrive in arbitrary chunks (a report file read while a learner appends to it)."""

from __future__ import annotations

import json
import logging
from typing import Any

log = logging.getLogger(__name__)


class JsonLines:
    """Feed bytes, get the JSON objects of the lines completed so far.

    A last line without its newline may still be being written, so it waits for the next feed; flush()
    takes it once the writer is known to be done. Lines that are not JSON objects are skipped (counted in
    `skipped`): one bad line must not hide the progress after it.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.skipped = 0
        self._partial = b""

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        if not data:
            return []
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        return [obj for line in lines if (obj := self._decode(line)) is not None]

    def flush(self) -> list[dict[str, Any]]:
        rest, self._partial = self._partial, b""
        obj = self._decode(rest)
        return [] if obj is None else [obj]

    def _decode(self, line: bytes) -> dict[str, Any] | None:
        if not line.strip():
            return None
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            self.skipped += 1
            log.warning("%s: skipped a line that is not a JSON object: %.80r", self.source, line)
            return None
        return obj

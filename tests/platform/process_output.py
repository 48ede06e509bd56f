"""A child process's output read line by line on a thread, so that a test can wait for a line without
blocking on a pipe (the server tests and the isolation matrix start `loadmaster server` this way)."""

from __future__ import annotations

import queue
import subprocess
import threading
import time


class ProcessOutput:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: queue.Queue[str] = queue.Queue()
        self.out: list[str] = []  # the lines seen so far
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def until(self, text: str, timeout_s: float = 60.0) -> str:
        """The first line from now on that holds `text` (AssertionError with the output if none comes)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None and self.lines.empty():
                    break
                continue
            self.out.append(line)
            if text in line:
                return line
        raise AssertionError(f"{text!r} not seen; output:\n" + "\n".join(self.out))

    def rest(self) -> str:
        """Everything printed so far."""
        while not self.lines.empty():
            self.out.append(self.lines.get())
        return "\n".join(self.out)

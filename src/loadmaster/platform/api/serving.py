"""Serving the API with uvicorn: in the main thread (the server, with clean SIGINT/SIGTERM handling) or in a
background thread (tests, benchmarks). The listening socket is bound before uvicorn starts, so port 0
picks a free port and the caller knows it at once."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from collections.abc import Callable, Generator
from types import FrameType
from typing import Any

import uvicorn

HANDLED = (signal.SIGINT, signal.SIGTERM)


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, told about shutdown (so that log streams end) and not re-raising the signal after a
    clean stop (uvicorn's default would turn SIGTERM into death by signal before our cleanup runs)."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None]) -> None:
        super().__init__(config)
        self.on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.on_exit()
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in HANDLED}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port} ({err.strerror}); choose another --port or stop the "
                      "process using it") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


class ApiServer:
    """The listening socket is bound at construction (a port in use fails at once, before anything else is
    made); the app may be attached after (attach()), once the rest of the server exists."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, *,
                 on_exit: Callable[[], None] = lambda: None, access_log: bool = False) -> None:
        self.sock = bind(host, port)
        self.host = host
        self.port = int(self.sock.getsockname()[1])
        self._on_exit = on_exit
        self._access_log = access_log
        self._thread: threading.Thread | None = None
        if app is not None:
            self.attach(app)

    def attach(self, app: Any) -> None:
        config = uvicorn.Config(app, log_level="warning", access_log=self._access_log, lifespan="off",
                                timeout_graceful_shutdown=3, timeout_keep_alive=30, backlog=2048)
        self.server = _Uvicorn(config, self._on_exit)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def run(self) -> None:
        """Serve until SIGINT/SIGTERM (or stop() from another thread)."""
        try:
            self.server.run(sockets=[self.sock])
        finally:
            self.sock.close()

    def start_in_thread(self, timeout_s: float = 20.0) -> None:
        self._thread = threading.Thread(target=self.run, name="loadmaster-api", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the API server did not start on {self.url}")
            time.sleep(0.01)

    @property
    def in_thread(self) -> bool:
        return self._thread is not None

    def close(self) -> None:
        """Release the listening socket (run() does it when it ends; this is for a server never run)."""
        self.sock.close()

    def stop(self) -> None:
        self.server.on_exit()
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)

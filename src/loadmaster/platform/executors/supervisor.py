"""The shim supervisor of a node: `python -m loadmaster.platform.executors.supervisor`, one per local executor.

Starting a shim as a fresh `python -m ...shim` costs tens of milliseconds of CPU in imports per learner;
this process has imported the shim once and forks one per learner instead (a millisecond or two). A forked
shim is the same shim: the child leaves the supervisor's session for one of its own and runs shim.run(),
so it keeps every property of shim.py (subreaper, pid and exit files, lock and fence, the user switch and
the sandbox, the watch list) and outlives both the server and the supervisor.

Its standard input is one end of a SOCK_SEQPACKET socket pair from the executor (forked.py). Each message
is a ShimRequest (JSON) with two descriptors: the learner's log (the shim's stderr) and the write end of
a status pipe, on which the child writes its pid first, then STARTED once the learner runs and its pid file
is written, then its return code just before it exits; the executor waits on that pipe for the start (no
polling of the pid file) and reads its end as the shim's exit, as it would wait for a child of its own. A child
that cannot write its pid (the executor gave up on this launch and closed the pipe) runs nothing.

Once the executor is gone (the socket reads empty: the server closed it or died), the supervisor takes no
more requests, waits for the shims it forked (so they never linger as zombies) and exits. It runs in a
session of its own, so a kill of the server's process group leaves it, and its shims, alone.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import socket
import sys
import traceback
from types import FrameType

from loadmaster.platform.executors import shim

MAX_MESSAGE = 1 << 20  # a request is a few kilobytes (the learner's environment); the executor falls back above
NOT_RUN = 125  # the child's code when its launch was given up before it began
STARTED = b"started"  # on the status pipe once the learner runs (its pid file written)


def _reap(signum: int, frame: FrameType | None) -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def _child(sock: socket.socket, text: bytes, log_fd: int, status_fd: int) -> int:
    """The forked shim: its own session, stdin and stdout from /dev/null, stderr on the log."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the shim waits for its own children
    os.setsid()
    sock.close()
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.dup2(log_fd, 2)
    os.close(devnull)
    os.close(log_fd)
    try:
        os.write(status_fd, f"{os.getpid()}\n".encode())
    except OSError:
        return NOT_RUN

    def started() -> None:
        with contextlib.suppress(OSError):
            os.write(status_fd, STARTED + b"\n")

    code = shim.run(shim.ShimRequest.from_json(text.decode()), started)
    with contextlib.suppress(OSError):
        os.write(status_fd, f"{code}\n".encode())
    return code


def serve(sock: socket.socket) -> None:
    signal.signal(signal.SIGCHLD, _reap)
    # Everything imported so far is kept out of the collector's reach: a collection in a forked shim would
    # otherwise touch every object's header and copy most of the interpreter's pages on write.
    gc.freeze()
    while True:
        text, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, 2, socket.MSG_CMSG_CLOEXEC)
        if not text:
            break
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            continue
        log_fd, status_fd = fds
        try:
            pid = os.fork()
        except OSError:
            pid = -1  # the executor reads the status pipe's end without a pid: it starts the shim itself
        if pid == 0:
            code = 1
            try:
                code = _child(sock, text, log_fd, status_fd)
            except BaseException:
                traceback.print_exc()  # on the learner's log, as a shim of its own would
            finally:
                os._exit(code)
        os.close(log_fd)
        os.close(status_fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    with contextlib.suppress(ChildProcessError):
        while True:
            os.wait()


def main() -> int:
    sock = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    serve(sock)
    return 0


if __name__ == "__main__":
    sys.exit(main())

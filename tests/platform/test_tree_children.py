"""tree.children(): a process's children from /proc without a scan of every process (the shim's clean-up
skips its scan when its learner, the leader, is its only child)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from loadmaster.platform.executors.tree import children

pytestmark = pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux /proc only")


def test_children_are_the_live_and_exited_children_not_the_grandchildren() -> None:
    if children(os.getpid()) is None:
        pytest.skip("this kernel offers no /proc children lists")
    before = set(children(os.getpid()) or [])
    # The parent starts a grandchild and waits; the exited one stays a zombie until we wait for it.
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess; subprocess.run(['sleep', '30'])"],
                              process_group=0)
    exited = subprocess.Popen(["true"])
    try:
        os.waitid(os.P_PID, exited.pid, os.WEXITED | os.WNOWAIT)  # a zombie, not collected yet
        found = set(children(os.getpid()) or []) - before
        assert found == {parent.pid, exited.pid}
    finally:
        os.killpg(parent.pid, signal.SIGKILL)  # the grandchild too
        parent.wait()
        exited.wait()
    assert children(os.getpid()) is not None and not ({parent.pid, exited.pid} & set(children(os.getpid()) or []))


def test_a_process_that_does_not_exist_has_no_list() -> None:
    assert children(2**22 + 12345) is None

"""Failure classification from exit codes and log tails, and the retry decision per policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadmaster.core.job import FailureCategory as C
from loadmaster.platform.executors.base import AttemptEnded, LearnerExit
from loadmaster.platform.failures import RULES, classify, classify_exit, classify_log, decide_retry, read_tail
from loadmaster.platform.manifest import RetryPolicy


def _tb(last: str, *frames: str) -> str:
    body = "".join(f'  File "train.py", line {i + 1}, in {f}\n    {f}()\n' for i, f in enumerate(frames or ("main",)))
    return f"epoch 1 loss 0.5\nTraceback (most recent call last):\n{body}{last}\n"


LOGS = [
    (_tb("ModuleNotFoundError: No module named 'torchvisionx'"), C.IMPORT_ERROR),
    (_tb("ImportError: cannot import name 'foo' from 'bar'"), C.IMPORT_ERROR),
    ('  File "train.py", line 3\n    def f(:\n          ^\nSyntaxError: invalid syntax\n', C.SYNTAX_ERROR),
    (_tb("IndentationError: unexpected indent"), C.SYNTAX_ERROR),
    (_tb("FileNotFoundError: [Errno 2] No such file or directory: '/data/train.csv'"), C.INCORRECT_INPUT),
    (_tb("json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)"), C.INCORRECT_INPUT),
    (_tb("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"), C.GPU_OOM),
    (_tb("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB"), C.GPU_OOM),
    (_tb("MemoryError"), C.CPU_OOM),
    ("terminate called after throwing an instance of 'std::bad_alloc'\n  what():  std::bad_alloc\n", C.CPU_OOM),
    (_tb("RuntimeError: CUDA error: an illegal memory access was encountered"), C.INVALID_MEMORY_ACCESS),
    (_tb("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error"), C.MPI_RUNTIME),
    (_tb("RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection reset by peer"),
     C.MPI_RUNTIME),
    (_tb("RuntimeError: The server socket has failed to listen on any local network address. "
         "[Errno 98] Address already in use"), C.MPI_RUNTIME),
    (_tb("torch.distributed.DistNetworkError: Connection refused"), C.MPI_RUNTIME),
    (_tb("RuntimeError: Error(s) in loading state_dict for Net: Missing key(s)"), C.CHECKPOINT_ERROR),
    (_tb("RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory"),
     C.CHECKPOINT_ERROR),
    (_tb("FileNotFoundError: [Errno 2] No such file or directory: '/x/checkpoints/step-000000000010.ckpt'"),
     C.CHECKPOINT_ERROR),
    (_tb("_pickle.UnpicklingError: invalid load key, '\\x00'."), C.CHECKPOINT_ERROR),
    (_tb("RuntimeError: CUDA error: no CUDA-capable device is detected"), C.CUDA_FAILURE),
    (_tb("AttributeError: module 'torch' has no attribute 'foo'"), C.SEMANTIC_ERROR),
    (_tb("TypeError: forward() takes 2 positional arguments but 3 were given"), C.SEMANTIC_ERROR),
    (_tb("RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x10 and 20x5)"), C.SEMANTIC_ERROR),
    (_tb("PermissionError: [Errno 13] Permission denied: '/results'"), C.PERMISSION_ERROR),
    (_tb("ValueError: learning rate must be positive"), C.TRACEBACK),
    (_tb("ZeroDivisionError: division by zero"), C.TRACEBACK),
    ("Fatal Python error: Aborted\n\nAborted (core dumped)\n", C.CORE_DUMP),
]


@pytest.mark.parametrize(("log", "category"), LOGS, ids=[c.value + f"-{i}" for i, (_, c) in enumerate(LOGS)])
def test_log_patterns_name_the_failure_class(log: str, category: C) -> None:
    found = classify_log(log)
    assert found is not None and found.category is category, found


def test_the_last_exception_wins_over_earlier_noise() -> None:
    # gloo's rendezvous logs "Connection refused" while it retries; the learner died of a KeyError.
    log = "[W socket.cpp:663] [c10d] connect to 127.0.0.1:29500 failed: Connection refused\n" + \
          _tb("KeyError: 'label'")
    found = classify_log(log)
    assert found is not None and found.category is C.TRACEBACK and "KeyError" in found.evidence


def test_a_log_without_a_traceback_is_searched_whole() -> None:
    found = classify_log("NCCL WARN Call to connect returned Connection refused, retrying\n")
    assert found is not None and found.category is C.MPI_RUNTIME
    assert classify_log("all good\nbye\n") is None


@pytest.mark.parametrize(("code", "tail", "category"), [
    (-11, "", C.INVALID_MEMORY_ACCESS),
    (139, "", C.INVALID_MEMORY_ACCESS),
    (-9, "", C.INFRASTRUCTURE),
    (137, "Killed\n", C.INFRASTRUCTURE),
    (-9, "Memory cgroup out of memory: Killed process 1234 (python)\n", C.CPU_OOM),
    (137, "oom-kill:constraint=CONSTRAINT_MEMCG\n", C.CPU_OOM),
    (127, "sh: 1: trainn: not found\n", C.INCORRECT_INPUT),
    (126, "", C.PERMISSION_ERROR),
    (-6, "", C.CORE_DUMP),
    (-15, "", C.INFRASTRUCTURE),
    (1, "", C.TRACEBACK),
])
def test_exit_codes_decide_what_the_log_does_not(code: int, tail: str, category: C) -> None:
    assert classify_exit(code, tail).category is category


def _ended(*codes: int, first: int | None = None) -> AttemptEnded:
    exits = tuple(LearnerExit(r, c) for r, c in enumerate(codes))
    failure = None if first is None else exits[first]
    return AttemptEnded("j-1", 1, exits, stopped=False, first_failure=failure)


def test_a_segfault_is_invalid_memory_access_whatever_the_log_says() -> None:
    found = classify(_ended(0, -11, first=1), _tb("ValueError: unrelated earlier output"))
    assert found.category is C.INVALID_MEMORY_ACCESS and "segmentation fault" in found.evidence


def test_the_failing_rank_and_its_evidence_are_named() -> None:
    found = classify(_ended(-15, 1, first=1), _tb("ModuleNotFoundError: No module named 'apex'"))
    assert found.category is C.IMPORT_ERROR
    assert "rank 1 exit 1" in found.evidence and "apex" in found.evidence


def test_sigkill_without_oom_evidence_is_infrastructure_not_the_users_fault() -> None:
    assert classify(_ended(-9, first=0), "step 10\nstep 11\n").category is C.INFRASTRUCTURE
    assert not C.INFRASTRUCTURE.deterministic


def test_every_rule_has_a_distinct_evidence_text() -> None:
    assert len({r.what for r in RULES}) == len(RULES)


@pytest.mark.parametrize(("policy", "category", "failures", "retry"), [
    (RetryPolicy.NEVER, C.MPI_RUNTIME, 1, False),
    (RetryPolicy.ALWAYS, C.IMPORT_ERROR, 1, True),
    (RetryPolicy.ALWAYS, C.IMPORT_ERROR, 3, False),
    (RetryPolicy.CLASSIFIED, C.IMPORT_ERROR, 1, False),
    (RetryPolicy.CLASSIFIED, C.GPU_OOM, 1, False),
    (RetryPolicy.CLASSIFIED, C.MPI_RUNTIME, 1, True),
    (RetryPolicy.CLASSIFIED, C.INFRASTRUCTURE, 2, True),
    (RetryPolicy.CLASSIFIED, C.MPI_RUNTIME, 3, False),
    (RetryPolicy.CLASSIFIED, C.CHECKPOINT_ERROR, 1, True),
])
def test_retry_decision_follows_the_policy(policy: RetryPolicy, category: C, failures: int, retry: bool) -> None:
    decision = decide_retry(policy, category, failures, max_attempts=3)
    assert decision.retry is retry
    assert decision.reason


def test_read_tail_reads_only_the_end(tmp_path: Path) -> None:
    log = tmp_path / "rank-0.log"
    log.write_bytes(b"x" * 100_000 + b"\nTraceback (most recent call last):\nMemoryError\n")
    tail = read_tail(log, 1000)
    assert len(tail) <= 1000 and tail.endswith("MemoryError\n")
    assert read_tail(tmp_path / "missing.log") == ""


# --------------------------------------------------------------------------- torch 2.x, torchrun and Lightning


def _ranked(rank: int, text: str) -> str:
    """A traceback as torch 2.x prints it once a process group exists: every line prefixed `[rankN]: `."""
    return "".join(f"[rank{rank}]: {line}\n" if line else "\n" for line in text.splitlines())


_CHILD_FAILED = """Traceback (most recent call last):
  File "/venv/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-01-01_10:00:00
  host      : node-a
  rank      : 1 (local_rank: 1)
  exitcode  : {code} (pid: 4242) {signal}
  error_file: <N/A>
  traceback : {message}
============================================================
"""


def _child_failed(code: int) -> str:
    signal = "SIGKILL" if code == -9 else ("SIGSEGV" if code == -11 else "")
    message = f"Signal {-code} ({signal}) received by PID 4242" if code < 0 else "To enable traceback see: ..."
    return _CHILD_FAILED.format(code=code, signal=signal, message=message)


_LIGHTNING_WORLD = ("ValueError: You set `devices=2` and `num_nodes=2` in Lightning, but the product (2 * 2) does "
                    "not match the world size (2).")
_RENDEZVOUS_NOISE = ("[W socket.cpp:663] [c10d] The client socket has failed to connect to [node-a]:29500: "
                     "Connection refused\n")

TORCH2 = [
    # torch 2.x prefixes a distributed process's traceback with its rank
    (_ranked(1, _tb("ModuleNotFoundError: No module named 'apex'")), C.IMPORT_ERROR),
    (_ranked(0, _tb("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")), C.GPU_OOM),
    (_ranked(3, _tb("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error")), C.MPI_RUNTIME),
    (_ranked(2, _tb("KeyError: 'label'")), C.TRACEBACK),
    ("[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation timeout\n", C.MPI_RUNTIME),
    # torchrun --tee 3: each worker line prefixed with role and local rank
    ("".join(f"[default1]:{line}\n" for line in _tb("SyntaxError: invalid syntax").splitlines()), C.SYNTAX_ERROR),
    # Lightning's check of devices x num_nodes against the world the platform gave: the script's setup, not the
    # network, even where the rendezvous' retries logged "Connection refused" before it
    (_RENDEZVOUS_NOISE + _ranked(0, _tb(_LIGHTNING_WORLD)), C.INCORRECT_INPUT),
    (_tb(_LIGHTNING_WORLD), C.INCORRECT_INPUT),
    (_tb("lightning.fabric.utilities.exceptions.MisconfigurationException: `Trainer(strategy='ddp')` needs "
         "num_nodes > 0"), C.INCORRECT_INPUT),
    (_tb("ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable RANK "
         "expected, but not set"), C.INCORRECT_INPUT),
    # torchrun's ChildFailedError only says a worker failed: the worker's own error (earlier) is the cause
    (_ranked(1, _tb("FileNotFoundError: [Errno 2] No such file or directory: 'data.csv'")) + _child_failed(1),
     C.INCORRECT_INPUT),
    (_RENDEZVOUS_NOISE + _ranked(1, _tb(_LIGHTNING_WORLD)) + _child_failed(1), C.INCORRECT_INPUT),
    # a worker killed by a signal leaves no traceback of its own: torchrun's root-cause exit code tells
    (_child_failed(-11), C.INVALID_MEMORY_ACCESS),
    (_child_failed(-9), C.INFRASTRUCTURE),
    (_child_failed(-6), C.CORE_DUMP),
]


@pytest.mark.parametrize(("log", "category"), TORCH2, ids=[c.value + f"-{i}" for i, (_, c) in enumerate(TORCH2)])
def test_torch2_torchrun_and_lightning_failures(log: str, category: C) -> None:
    found = classify(_ended(1, first=0), log)
    assert found.category is category, found


def test_a_lightning_world_mismatch_is_not_retried() -> None:
    found = classify(_ended(1, -15, first=0), _RENDEZVOUS_NOISE + _ranked(0, _tb(_LIGHTNING_WORLD)))
    assert found.category.deterministic
    assert not decide_retry(RetryPolicy.CLASSIFIED, found.category, 1, 3).retry
    assert "world size" in found.evidence and "[rank0]" not in found.evidence


def test_a_workers_line_prefix_is_not_taken_for_a_real_message() -> None:
    # only launchers' prefixes are taken off: a line that merely starts with a bracket keeps its words
    found = classify_log("[config] lr=0.1\n[data] ok\nSegmentation fault\n")
    assert found is not None and found.category is C.INVALID_MEMORY_ACCESS

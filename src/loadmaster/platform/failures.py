"""Why an attempt failed, and whether to try again.

An ended attempt is classified into one of Philly's failure classes (core FailureCategory; Jeon et al.,
USENIX ATC'19, Table 2) from two kinds of evidence: the failing learner's exit code and the tail of its
log. Log patterns come first, in the order of the RULES table (the most specific evidence first: a CUDA
out-of-memory error is also a RuntimeError traceback, but the OOM is what a user must act on); exit codes
decide what the log does not explain (a segfault leaves no traceback, a command that was not found leaves
only the shell's message).

The retry decision follows the manifest's retry policy, with sim/failures.py's vocabulary: never, always
(every failure, up to max_attempts), classified (only failures a retry can help: not
FailureCategory.deterministic ones).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from loadmaster.core.job import FailureCategory
from loadmaster.platform.executors.base import AttemptEnded
from loadmaster.platform.manifest import RetryPolicy

C = FailureCategory
TAIL_BYTES = 16384  # enough for a long Python traceback; the classifier never reads a whole log


@dataclass(frozen=True, slots=True)
class Rule:
    category: FailureCategory
    pattern: re.Pattern[str]
    what: str  # the evidence, in words, for the attempt's record


def _rule(category: FailureCategory, regex: str, what: str) -> Rule:
    return Rule(category, re.compile(regex, re.MULTILINE), what)


# Ordered: the first rule whose pattern occurs in the log tail wins.
RULES: tuple[Rule, ...] = (
    # Memory first: an OOM surfaces as a RuntimeError/Traceback too, and it is what the user must fix.
    _rule(C.GPU_OOM, r"CUDA out of memory|torch\.(cuda\.)?OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED"
          r"|cudaErrorMemoryAllocation|HIP out of memory", "GPU out of memory"),
    _rule(C.CPU_OOM, r"^\s*MemoryError\b|std::bad_alloc|Cannot allocate memory|can't allocate memory"
          r"|DefaultCPUAllocator: not enough memory", "host (CPU) out of memory"),
    _rule(C.INVALID_MEMORY_ACCESS, r"illegal memory access was encountered|cudaErrorIllegalAddress"
          r"|Segmentation fault|SIGSEGV|misaligned address", "invalid memory access"),
    # Checkpoints: a failure while reading or writing one (by message or file name in the last error).
    _rule(C.CHECKPOINT_ERROR, r"Error\(s\) in loading state_dict|PytorchStreamReader failed"
          r"|failed finding central directory|UnpicklingError|^\w*(Error|Exception):.*(checkpoint|\.ckpt\b|state_dict)",
          "error reading or writing a checkpoint"),
    # The script's distributed setup disagrees with the job's shape (Lightning's devices x num_nodes against the
    # world size, a launcher told of more nodes than the job has): the same script fails the same way again, so
    # it comes before the network errors that such a mismatch often causes on the other ranks.
    _rule(C.INCORRECT_INPUT, r"does not match the world size|MisconfigurationException|world[ _]size mismatch"
          r"|environment variable \w+ expected, but not set|[Ii]nvalid (rank|world[ _]size|node[ _]rank)"
          r"|rank \d+ (is )?(out of range|not (less|smaller) than)",
          "the script's distributed setup does not match the job (learners, nodes, devices)"),
    # Distributed runtime: collective libraries, rendezvous and sockets between learners.
    _rule(C.MPI_RUNTIME, r"NCCL (error|WARN)|nccl\w*Error|ProcessGroupNCCL|[Gg]loo\b.*(error|Error|failed)"
          r"|Connection reset by peer|Connection refused|Address already in use|EADDRINUSE"
          r"|RendezvousTimeoutError|DistNetworkError|DistStoreError|Socket Timeout|Broken pipe"
          r"|MPI_ABORT|ORTE|PMIx|mpirun noticed", "network / distributed runtime error"),
    _rule(C.CUDA_FAILURE, r"CUDA error|cudaError\w*|CUDA driver version is insufficient"
          r"|no CUDA-capable device|CUDA initialization|NVML", "CUDA failure"),
    _rule(C.CORE_DUMP, r"core dumped|Aborted \(core", "the process dumped core"),
    _rule(C.SYNTAX_ERROR, r"^\s*(SyntaxError|IndentationError|TabError)\b", "syntax error in the code"),
    _rule(C.IMPORT_ERROR, r"^\s*(ModuleNotFoundError|ImportError)\b|undefined symbol:",
          "a module or library could not be imported"),
    _rule(C.PERMISSION_ERROR, r"^\s*PermissionError\b|Permission denied", "permission denied"),
    # Input: files that are not there or not what the code expects.
    _rule(C.INCORRECT_INPUT, r"^\s*(FileNotFoundError|IsADirectoryError|NotADirectoryError|UnicodeDecodeError"
          r"|json\.decoder\.JSONDecodeError|\w*ParserError|EmptyDataError)\b|No such file or directory"
          r"|command not found|error: unrecognized arguments|error: the following arguments are required",
          "incorrect input (a missing or malformed file or argument)"),
    # Library and API misuse (Philly's "semantic error": wrong API use, incompatible library versions).
    _rule(C.SEMANTIC_ERROR, r"^\s*(AttributeError|TypeError|NameError|NotImplementedError|UnboundLocalError)\b"
          r"|size mismatch|shape mismatch|mat1 and mat2 shapes", "semantic or library error"),
    _rule(C.TRACEBACK, r"^Traceback \(most recent call last\)", "error in the user's code (traceback)"),
)

_KILL = (-9, 137)  # SIGKILL, as subprocess reports it and as a shell reports it
_OOM_EVIDENCE = re.compile(r"(?i)\boom\b|oom-kill|out of memory|OOMKilled|memory cgroup")


@dataclass(frozen=True, slots=True)
class Classification:
    category: FailureCategory
    evidence: str  # what gave it away, for Attempt.retry_decision and the job's status reason


_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit)\b.*$",
                             re.MULTILINE)
# What launchers put in front of their workers' lines: torch 2.x's "[rank3]: " on a distributed process's
# traceback and C++ warnings, torchrun's --tee/--log-line-prefix "[default0]:" (role name and local rank).
_LINE_PREFIX = re.compile(r"^(?:\[(?:rank|[A-Za-z_]\w*?)\d+\]:[ ]?)+", re.MULTILINE)
# Launchers' own exceptions that only say a worker failed: the worker's error, earlier in the log, is the cause.
_WRAPPERS = re.compile(r"\bChildFailedError\b|\bCalledProcessError\b|\bProcessExitedException\b")
# torchrun's summary of the first failed worker ("Root Cause ... exitcode  : -9 (pid: 123)").
_ROOT_CAUSE_EXIT = re.compile(r"Root Cause[^\n]*\n(?:.*\n){0,6}?\s*exitcode\s*:\s*(-?\d+)")


def strip_prefixes(text: str) -> str:
    """The log without launchers' per-line prefixes, so each line reads as the worker wrote it."""
    return _LINE_PREFIX.sub("", text)


def classify_log(tail: str) -> Classification | None:
    """The first rule of RULES that the log tail matches, with the matching line as evidence.

    Launchers' line prefixes (`[rank1]: `) are taken off first. The last exception a Python traceback
    printed is asked first: earlier lines of a log may hold harmless noise (a rendezvous retry's
    "Connection refused", a printed file name), the last error is what ended the learner; an error no rule
    knows is the user's code (TRACEBACK). A launcher's own "a worker failed" exception (torchrun's
    ChildFailedError) is passed over for its worker's, and a worker that a signal killed is classified by
    torchrun's root-cause exit code. Only a log without a Python exception (a C++ library's message, a
    shell's) is searched whole.
    """
    tail = strip_prefixes(tail)
    exceptions = [line for line in _EXCEPTION_LINE.findall(tail) if not _WRAPPERS.search(line)]
    if exceptions:
        line = exceptions[-1]
        for rule in RULES:
            if rule.pattern.search(line):
                return Classification(rule.category, f"{rule.what}: {_clip(line)}")
        return Classification(C.TRACEBACK, f"error in the user's code: {_clip(line)}")
    root = _ROOT_CAUSE_EXIT.search(tail)
    if root is not None and int(root.group(1)) < 0:  # a worker killed by a signal leaves no traceback
        worker = classify_exit(int(root.group(1)), tail)
        return Classification(worker.category, f"a worker of the launcher: {worker.evidence}")
    for rule in RULES:
        match = rule.pattern.search(tail)
        if match is not None:
            return Classification(rule.category, f"{rule.what}: {_line_of(tail, match.start())}")
    return None


def classify_exit(code: int, tail: str = "") -> Classification:
    """What an exit code alone says (used when the log explains nothing)."""
    if code in _KILL:
        if _OOM_EVIDENCE.search(tail):
            return Classification(C.CPU_OOM, f"killed (exit {code}) by the out-of-memory killer")
        return Classification(C.INFRASTRUCTURE, f"killed by SIGKILL (exit {code}) from outside the job")
    if code in (-11, 139):
        return Classification(C.INVALID_MEMORY_ACCESS, f"segmentation fault (exit {code})")
    if code in (-7, 135):
        return Classification(C.INVALID_MEMORY_ACCESS, f"bus error (exit {code})")
    if code in (-6, 134):
        return Classification(C.CORE_DUMP, f"aborted (exit {code})")
    if code in (-4, 132, -8, 136):
        return Classification(C.CORE_DUMP, f"illegal instruction or arithmetic fault (exit {code})")
    if code == 127:
        return Classification(C.INCORRECT_INPUT, "command not found (exit 127): check the manifest's command")
    if code == 126:
        return Classification(C.PERMISSION_ERROR, "command not executable (exit 126)")
    if code in (-15, 143, -1, 129, -2, 130):
        return Classification(C.INFRASTRUCTURE, f"terminated by a signal from outside the job (exit {code})")
    if code < 0:
        return Classification(C.INFRASTRUCTURE, f"killed by signal {-code}")
    return Classification(C.TRACEBACK, f"the program exited with code {code} and no recognised error in its log")


# Exit codes whose meaning beats anything a log may say (a segfault's log is whatever ran before it).
_SIGNAL_FIRST = frozenset({-11, 139, -7, 135})


def classify(ended: AttemptEnded, tail: str) -> Classification:
    """The failure class of an attempt that ended without success and was not stopped by the platform.

    `tail` is the end of the log of the learner whose exit ended the gang (first_failure).
    """
    failing = ended.first_failure or next((e for e in ended.exits if e.exit_code != 0), None)
    if failing is None:
        return Classification(C.INFRASTRUCTURE, "the attempt ended without a failing learner")
    code = failing.exit_code
    if code in _SIGNAL_FIRST:
        return classify_exit(code, tail)
    if code in _KILL:
        # A learner the OOM killer took leaves no traceback; one killed otherwise is not its own fault.
        return classify_exit(code, tail)
    found = classify_log(tail)
    if found is not None:
        return Classification(found.category, f"rank {failing.rank} exit {code}: {found.evidence}")
    exit_says = classify_exit(code, tail)
    return Classification(exit_says.category, f"rank {failing.rank}: {exit_says.evidence}")


def read_tail(path: Path, max_bytes: int = TAIL_BYTES) -> str:
    """The last `max_bytes` of a log ("" if it does not exist), decoded leniently."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


@dataclass(frozen=True, slots=True)
class RetryDecision:
    retry: bool
    reason: str


def decide_retry(policy: RetryPolicy, category: FailureCategory, failures: int, max_attempts: int) -> RetryDecision:
    """Retry after the `failures`-th failed attempt (counting this one)?"""
    if policy is RetryPolicy.NEVER:
        return RetryDecision(False, "not retried: retry policy 'never'")
    if failures >= max_attempts:
        return RetryDecision(False, f"not retried: {failures} of max_attempts {max_attempts} attempts failed")
    if policy is RetryPolicy.CLASSIFIED and category.deterministic:
        return RetryDecision(False, f"not retried: {category.value} is deterministic (the same code on the same "
                                    "input fails the same way again)")
    return RetryDecision(True, f"retried ({failures} of max_attempts {max_attempts} failed so far): "
                               f"{category.value} may not recur")


def _line_of(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return _clip(text[start:] if end < 0 else text[start:end])


def _clip(line: str) -> str:
    line = line.strip()
    return line if len(line) <= 200 else line[:197] + "..."

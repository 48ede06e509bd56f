"""Which loader reads a file: format detection from the content, and the one dispatch point."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loadmaster.core.lazy import Lazy
from loadmaster.core.workload import Workload
from loadmaster.traces import samples
from loadmaster.traces.errors import TraceFormatError

if TYPE_CHECKING:
    from loadmaster.traces.history import History

FORMATS: tuple[str, ...] = ("canonical", "philly", "gavel", "gavel-vc", "alibaba")


# Each loader's module is imported when a trace of its format is read (a run reads one format; Philly's and
# Alibaba's loaders with their history types were a tenth of the trace package's import).
def _loader(module: str, name: str, **kwargs: str) -> Lazy[Any]:
    return Lazy(f"loadmaster.traces.{module}", name, **kwargs)


_LOADERS: dict[str, Callable[[Path], Workload]] = {
    "canonical": _loader("canonical", "read_csv"),
    "philly": _loader("philly", "load"),
    "gavel": _loader("gavel", "load", variant="gavel"),
    "gavel-vc": _loader("gavel", "load", variant="gavel-vc"),
    "alibaba": _loader("alibaba", "load"),
}
# Formats that record when each job ran (the others give a History without times).
_HISTORY_LOADERS: dict[str, Callable[[Path], History]] = {"philly": _loader("philly", "load_history"),
                                                          "alibaba": _loader("alibaba", "load_history")}
_SNIFF_BYTES = 4096


def load_workload(path: str, fmt: str = "auto") -> Workload:
    """Load a trace as a Workload. `path` is a file, a folder of Gavel per-VC traces, or sample:NAME;
    fmt is one of FORMATS or 'auto' (decided from the content)."""
    file, fmt = resolve(path, fmt)
    return _LOADERS[fmt](file)


def load_history(path: str, fmt: str = "auto") -> History:
    """Like load_workload, plus when each job ran where the format records it (Philly: every attempt's
    times and machines; Alibaba: each pod's run); other formats give a History without times."""
    file, fmt = resolve(path, fmt)
    loader = _HISTORY_LOADERS.get(fmt)
    if loader is not None:
        return loader(file)
    from loadmaster.traces.history import History

    return History.untimed(_LOADERS[fmt](file))


def resolve(path: str, fmt: str = "auto") -> tuple[Path, str]:
    """The file to read and its format: a bundled sample's, the one asked for, or the detected one."""
    if fmt != "auto" and fmt not in FORMATS:
        raise TraceFormatError(path, None, None, f"unknown format {fmt!r}; {_choices()}")
    if samples.is_sample(path):
        try:
            return samples.resolve(path)
        except ValueError as exc:
            raise TraceFormatError(path, None, None, str(exc)) from None
    p = Path(path)
    if not p.exists():
        raise TraceFormatError(path, None, None, "no such file or folder")
    return p, detect_format(p) if fmt == "auto" else fmt


def _choices() -> str:
    return f"known formats: {', '.join(FORMATS)}; pass --format FORMAT to choose one"


def detect_format(path: str | Path) -> str:
    """Name the format of a file or folder from what it holds (the extension alone is not trusted)."""
    p = Path(path)
    if p.is_dir():
        return _detect_folder(p)
    with open(p, "rb") as f:
        head = f.read(_SNIFF_BYTES).decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    if head.lower().startswith(("machineid", "sn,")):
        raise TraceFormatError(str(p), 1, None, "this is a machine/node list, not jobs: pass it as a cluster "
                               "spec (--cluster PATH, load_cluster)")
    fmt = _detect_text(head)
    if fmt is None:
        first = head.split("\n", 1)[0][:80]
        problem = f"cannot tell the trace format from its start ({first!r}); {_choices()}"
        raise TraceFormatError(str(p), 1, None, problem)
    return fmt


def _detect_folder(folder: Path) -> str:
    traces = sorted(folder.glob("*.trace"))
    if not traces:
        raise TraceFormatError(str(folder), None, None,
                               "a folder is read as Gavel per-VC traces, but it holds no *.trace files; "
                               + _choices())
    return detect_format(traces[0])


def _detect_text(head: str) -> str | None:
    first = head.split("\n", 1)[0].rstrip("\r")
    if head.startswith(("[", "{")):
        return "philly" if any(k in head for k in ('"jobid"', '"attempts"', '"submitted_time"')) else None
    if "\t" in first:
        return {10: "gavel", 7: "gavel-vc"}.get(len(first.split("\t")))
    header = {c.strip().lower() for c in first.split(",")}
    if {"job_id", "submit_time_s", "duration_s"} <= header:
        return "canonical"
    if {"pod_phase", "creation_time", "num_gpu"} <= header:
        return "alibaba"
    return None

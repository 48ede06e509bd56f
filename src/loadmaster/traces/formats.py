"""Which loader reads a file: format detection from the content, and the one dispatch point."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from loadmaster.core.workload import Workload
from loadmaster.traces import alibaba, canonical, gavel, philly, samples
from loadmaster.traces.errors import TraceFormatError

FORMATS: tuple[str, ...] = ("canonical", "philly", "gavel", "gavel-vc", "alibaba")

_LOADERS: dict[str, Callable[[Path], Workload]] = {
    "canonical": canonical.read_csv,
    "philly": philly.load,
    "gavel": lambda p: gavel.load(p, variant="gavel"),
    "gavel-vc": lambda p: gavel.load(p, variant="gavel-vc"),
    "alibaba": alibaba.load,
}
_SNIFF_BYTES = 4096


def load_workload(path: str, fmt: str = "auto") -> Workload:
    """Load a trace as a Workload. `path` is a file, a folder of Gavel per-VC traces, or sample:NAME;
    fmt is one of FORMATS or 'auto' (decided from the content)."""
    if fmt != "auto" and fmt not in FORMATS:  # checked first: a bundled sample must not hide a typo
        raise TraceFormatError(path, None, None, f"unknown format {fmt!r}; {_choices()}")
    if samples.is_sample(path):
        try:
            file, sample_fmt = samples.resolve(path)
        except ValueError as exc:
            raise TraceFormatError(path, None, None, str(exc)) from None
        return _LOADERS[sample_fmt](file)
    p = Path(path)
    if not p.exists():
        raise TraceFormatError(path, None, None, "no such file or folder")
    return _LOADERS[detect_format(p) if fmt == "auto" else fmt](p)


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

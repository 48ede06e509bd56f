"""Bundled samples and data files, so that a fresh clone can replay real traces without ../shared.

`sample:NAME` in load_workload names one of SAMPLES. Each folder under traces/data/ has a README.md with
the source, the licence and what was trimmed.
"""

from __future__ import annotations

from pathlib import Path

# The package ships traces/data/ as plain files (pyproject package-data); a zipped install is not
# supported, so a path beside this module is enough.
DATA_DIR = Path(__file__).with_name("data")

# name -> (file under DATA_DIR, format)
_SAMPLES: dict[str, tuple[tuple[str, ...], str]] = {
    "gavel": (("gavel", "generated_1000jobs_lam240_seed0.trace"), "gavel"),
    "philly": (("philly", "philly_sample_first600_jobs.json"), "philly"),
}
SAMPLES: tuple[str, ...] = tuple(_SAMPLES)
PREFIX = "sample:"


def data_path(*parts: str) -> Path:
    return DATA_DIR.joinpath(*parts)


def is_sample(spec: str) -> bool:
    return spec.startswith(PREFIX)


def resolve(spec: str) -> tuple[Path, str]:
    """'sample:gavel' -> (bundled file, its format). Unknown names raise ValueError listing SAMPLES."""
    name = spec[len(PREFIX):] if is_sample(spec) else spec
    if name not in _SAMPLES:
        known = ", ".join(PREFIX + s for s in SAMPLES)
        raise ValueError(f"unknown sample {spec!r}; bundled samples: {known}")
    parts, fmt = _SAMPLES[name]
    return data_path(*parts), fmt

"""Imports point one way: core <- traces, core <- scheduling <- sim <- cli. The core knows no shell."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).parents[1] / "src" / "loadmaster"

# package -> packages of loadmaster it must not import
FORBIDDEN = {
    "core": {"traces", "scheduling", "sim", "cli", "platform", "runtime"},
    "scheduling": {"traces", "sim", "cli", "platform", "runtime"},
    "traces": {"scheduling", "sim", "cli", "platform", "runtime"},
    "sim": {"cli", "platform", "runtime"},
    # a learner installs loadmaster for the runtime alone: it may import nothing of the rest
    "runtime": {"core", "traces", "scheduling", "sim", "cli", "platform", "web"},
    "platform": {"cli"},
}
# what the pure core may never touch: clocks, databases, processes
IMPURE_MODULES = {"time", "datetime", "sqlite3", "sqlalchemy", "subprocess", "os", "random", "socket"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_one_way(package: str) -> None:
    for path in (SRC / package).rglob("*.py"):
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == "loadmaster" and len(parts) > 1:
                assert parts[1] not in FORBIDDEN[package], f"{path.relative_to(SRC)} imports {name}"


def test_scheduling_core_is_pure() -> None:
    for path in (SRC / "scheduling").rglob("*.py"):
        for name in _imports(path):
            assert name.split(".")[0] not in IMPURE_MODULES, f"{path.relative_to(SRC)} imports {name}"

"""`loadmaster queue --all`'s plain columns (cli/queue.py), without a server."""

from __future__ import annotations

from typing import Any

from loadmaster.cli.queue import COLUMNS, _cells, _columns

NOW = 1_700_000_000.0


def entry(position: int, name: str, **fields: Any) -> dict[str, Any]:
    return {"position": position, "job_id": f"j-{position:012x}", "name": name, "tenant": "vision",
            "wait_reason": "quota", "estimated_start_at": None, "expected_duration_s": 90.0,
            "duration_guessed": False, **fields}


def test_every_line_starts_each_column_where_the_header_does() -> None:
    rows = [_cells(entry(1, "a-rather-long-job-name", estimated_start_at=NOW + 300), NOW),
            _cells(entry(2, "b", wait_reason="dependency", duration_guessed=True, expected_duration_s=3600.0), NOW),
            _cells(entry(10, "c", estimated_start_at=NOW - 5), NOW)]
    lines = _columns(rows).split("\n")
    assert len(lines) == 4 and lines[0].split() == [w for c in COLUMNS for w in c.split()]
    starts = [lines[0].index(c) for c in COLUMNS]
    for line, row in zip(lines[1:], rows, strict=True):
        assert [line.index(cell, start) for cell, start in zip(row, starts, strict=True)] == starts
        assert line == line.rstrip()
    assert "in 5m00s (" in lines[1] and "1h00m (guess)" in lines[2] and "once its dependencies allow" in lines[2]
    assert lines[3].endswith("now") and lines[1].startswith("1 ") and lines[3].startswith("10")


def test_no_rows_is_the_header_alone() -> None:
    assert _columns([]) == "  ".join(COLUMNS)

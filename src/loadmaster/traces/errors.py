"""The one error a loader raises for bad input: it names the file, the line and the field."""

from __future__ import annotations


class TraceFormatError(ValueError):
    def __init__(self, path: str, line: int | None, field: str | None, problem: str) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.problem = problem
        where = path
        if line is not None:
            where += f", line {line}"
        if field:
            where += f", field '{field}'"
        super().__init__(f"{where}: {problem}")

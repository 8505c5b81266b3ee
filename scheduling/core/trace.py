"""Loading openb-format node and pod CSV files, all or nothing.

A file is read and validated completely before anything is returned, so a replay never runs on
part of a file. The first problem raises TraceError naming the file, the line (1 is the header)
and the column.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Collection, Iterator
from pathlib import Path

from .model import MILLI, Node, TaskRequest

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
TIME_COLUMNS = ("creation_time", "deletion_time")
_NO_MODEL = ("", "nan", "none")


class TraceError(ValueError):
    """A trace file problem, located by file, line and column."""

    def __init__(self, path: str | Path, line: int, column: str | None, message: str) -> None:
        self.path, self.line, self.column, self.message = str(path), line, column, message
        where = f"{self.path}, line {line}" + (f", column {column!r}" if column else "")
        super().__init__(f"{where}: {message}")


def load_nodes(path: str | Path) -> list[Node]:
    nodes: list[Node] = []
    seen: set[str] = set()
    for line, row in _rows(path, NODE_COLUMNS):
        name = _text(path, line, row, "sn")
        if name in seen:
            raise TraceError(path, line, "sn", f"duplicate node name {name!r}")
        seen.add(name)
        gpus = _count(path, line, row, "gpu")
        model = row["model"].strip()
        if model.lower() in _NO_MODEL:
            model = ""
        if gpus and not model:
            raise TraceError(path, line, "model", f"{gpus} GPUs but no GPU model")
        nodes.append(
            Node(
                name=name,
                cpu_milli=_count(path, line, row, "cpu_milli"),
                memory_mib=_count(path, line, row, "memory_mib"),
                gpu_count=gpus,
                gpu_model=model if gpus else "",
            )
        )
    return nodes


def load_tasks(
    path: str | Path,
    known_models: Collection[str] | None = None,
    require_times: bool = False,
) -> list[TaskRequest]:
    """Pods as tasks. known_models, when given, is the set a gpu_spec may name."""
    required = POD_COLUMNS + (TIME_COLUMNS if require_times else ())
    tasks: list[TaskRequest] = []
    for line, row in _rows(path, required):
        num_gpu = _count(path, line, row, "num_gpu")
        gpu_milli = _count(path, line, row, "gpu_milli")
        if num_gpu and not 0 < gpu_milli <= MILLI:
            raise TraceError(path, line, "gpu_milli", f"must be 1..{MILLI} when num_gpu > 0")
        if not num_gpu and gpu_milli:
            raise TraceError(path, line, "gpu_milli", "must be 0 when num_gpu is 0")
        models = _models(path, line, row.get("gpu_spec"), known_models)
        creation = _time(path, line, row, "creation_time", require_times)
        deletion = _time(path, line, row, "deletion_time", require_times)
        if creation is not None and deletion is not None and deletion < creation:
            raise TraceError(path, line, "deletion_time", "before creation_time")
        tasks.append(
            TaskRequest(
                name=_text(path, line, row, "name"),
                cpu_milli=_count(path, line, row, "cpu_milli"),
                memory_mib=_count(path, line, row, "memory_mib"),
                num_gpu=num_gpu,
                gpu_milli=gpu_milli if num_gpu else 0,
                gpu_models=models,
                creation_time=creation,
                deletion_time=deletion,
                scheduled_time=_time(path, line, row, "scheduled_time", False),
            )
        )
    return tasks


def _rows(path: str | Path, required: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    try:
        handle = open(path, newline="", encoding="utf-8-sig")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise TraceError(path, 0, None, f"cannot read: {exc.strerror}") from exc
    with handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None or not any(cell.strip() for cell in header):
            raise TraceError(path, 1, None, "empty file: no header")
        header = [cell.strip() for cell in header]
        for column in required:
            if column not in header:
                raise TraceError(path, 1, column, "required column missing from the header")
        rows = 0
        for cells in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in cells):
                continue
            if len(cells) > len(header):
                raise TraceError(path, line, None, f"{len(cells)} fields, header has {len(header)}")
            rows += 1
            yield line, dict(zip(header, cells + [""] * (len(header) - len(cells)), strict=True))
        if not rows:
            raise TraceError(path, 2, None, "no data rows")


def _text(path: str | Path, line: int, row: dict[str, str], column: str) -> str:
    value = row[column].strip()
    if not value:
        raise TraceError(path, line, column, "empty value")
    return value


def _count(path: str | Path, line: int, row: dict[str, str], column: str) -> int:
    raw = _text(path, line, row, column)
    try:
        value = float(raw)
    except ValueError:
        raise TraceError(path, line, column, f"not a number: {raw!r}") from None
    if not math.isfinite(value) or value != int(value):
        raise TraceError(path, line, column, f"not a whole number: {raw!r}")
    if value < 0:
        raise TraceError(path, line, column, f"negative: {raw!r}")
    return int(value)


def _time(
    path: str | Path, line: int, row: dict[str, str], column: str, required: bool
) -> float | None:
    raw = (row.get(column) or "").strip()
    if not raw or raw.lower() == "nan":
        if required:
            raise TraceError(path, line, column, "empty value (time mode needs it)")
        return None
    try:
        value = float(raw)
    except ValueError:
        raise TraceError(path, line, column, f"not a number: {raw!r}") from None
    if not math.isfinite(value) or value < 0:
        raise TraceError(path, line, column, f"not a time: {raw!r}")
    return value


def _models(
    path: str | Path, line: int, raw: str | None, known: Collection[str] | None
) -> frozenset[str]:
    text = (raw or "").strip()
    if text.lower() in _NO_MODEL:
        return frozenset()
    models = frozenset(m.strip() for m in text.split("|") if m.strip())
    if known is not None:
        unknown = sorted(models - set(known))
        if unknown:
            raise TraceError(
                path, line, "gpu_spec", f"unknown GPU model {', '.join(unknown)} in {text!r}"
            )
    return models

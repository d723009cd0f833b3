"""Tuning records in AutoTVM's JSON-lines layout: encode, decode, load, pick the best."""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Iterable, Iterator

import tvm

from .env import AutoTVMError
from .measure.measure import MeasureInput, MeasureResult

AUTOTVM_LOG_VERSION = 0.2
FAILED_COST = 1e9
logger = logging.getLogger("autotvm")


class RecordConfig:
    """A config as stored in a record: its index and entity list, not yet bound to a space."""

    def __init__(self, json_dict: dict) -> None:
        self.index = int(json_dict["index"])
        self.code_hash = json_dict.get("code_hash")
        self.entity = json_dict["entity"]
        self.json_dict = json_dict

    def to_json_dict(self) -> dict:
        return self.json_dict

    def bind(self, task: Any) -> Any:
        """The ``ConfigEntity`` of ``task``'s space that this record names."""
        return task.config_space.from_json_dict(self.json_dict)


class RecordTask:
    """The task part of a loaded record: its target, name and args (enough to match a workload)."""

    def __init__(self, target: str, name: str, args: list) -> None:
        self.target = target
        self.name = name
        self.args = tuple(args)

    @property
    def workload(self) -> tuple:
        return (self.name, *_freeze(self.args))


def _freeze(value: Any) -> Any:
    return tuple(_freeze(v) for v in value) if isinstance(value, (list, tuple)) else value


def workload_key(task: Any) -> tuple:
    """A hashable key for a task's (name, args)."""
    return (task.name, *_freeze(list(task.args)))


def _row(target: Any, name: str, args: Any, config: dict, result: MeasureResult) -> str:
    costs = list(result.costs) if result.ok else [FAILED_COST]
    row = {
        "input": [str(target), name, list(args), {}],
        "config": config,
        "result": [costs, int(result.error_no), float(result.all_cost), float(result.timestamp)],
        "version": AUTOTVM_LOG_VERSION,
        "tvm_version": tvm.__version__,
    }
    if not result.ok:  # an extra key: AutoTVM readers ignore it, people debugging need it
        row["error_msg"] = result.error_message
    return json.dumps(row)


def encode(inp: MeasureInput, result: MeasureResult) -> str:
    """One JSON line: input (target, task name, args), config, result, version."""
    return _row(inp.target, inp.task.name, inp.task.args, inp.config.to_json_dict(), result)


def decode(line: str) -> tuple[MeasureInput, MeasureResult]:
    """Inverse of ``encode``; raises ``ValueError`` on a malformed line."""
    row = json.loads(line)
    target, name, args, _ = row["input"]
    costs, error_no, all_cost, timestamp = row["result"]
    task = RecordTask(target, name, args)
    inp = MeasureInput(target, task, RecordConfig(row["config"]))
    if int(error_no) != 0:
        costs = [row.get("error_msg", "failed")]
    return inp, MeasureResult(tuple(costs), int(error_no), float(all_cost), float(timestamp))


def load_from_file(path: str | os.PathLike) -> Iterator[tuple[MeasureInput, MeasureResult]]:
    """Yield the records of a log; comment lines are skipped, corrupt ones skipped with a warning."""
    if not os.path.isfile(path):
        raise AutoTVMError(f"log file {str(path)!r} does not exist; pass the path written by log_to_file")
    with open(path, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                yield decode(line)
            except (ValueError, KeyError, TypeError, IndexError) as err:
                logger.warning("skipping corrupt record at %s:%d (%s)", path, lineno, type(err).__name__)


def load_records(records: Any) -> list[tuple[MeasureInput, MeasureResult]]:
    """Accept a path, a list of paths or an iterable of (input, result) pairs."""
    if isinstance(records, (str, os.PathLike)):
        return list(load_from_file(records))
    records = list(records)
    if records and isinstance(records[0], (str, os.PathLike)):
        return [r for path in records for r in load_from_file(path)]
    return records


def pick_best(records: Iterable[tuple[MeasureInput, MeasureResult]]) -> dict[tuple, tuple[MeasureInput, MeasureResult]]:
    """The fastest successful record of each (target kind, workload)."""
    best: dict[tuple, tuple[MeasureInput, MeasureResult]] = {}
    for inp, res in records:
        if not res.ok:
            continue
        key = (_target_kind(inp.target), workload_key(inp.task))
        if key not in best or res.mean_cost < best[key][1].mean_cost:
            best[key] = (inp, res)
    return best


def _target_kind(target: Any) -> str:
    if hasattr(target, "kind"):
        return target.kind.name
    text = str(target)
    try:
        return json.loads(text)["kind"]
    except (ValueError, KeyError, TypeError):
        return text.split()[0] if text else ""


def pick_best_to_file(in_path: str, out_path: str) -> None:
    """Write only the best record of each workload to ``out_path``."""
    with open(out_path, "w", encoding="utf-8") as out:
        for inp, res in pick_best(load_from_file(in_path)).values():
            out.write(encode(inp, res) + "\n")

"""``apply_history_best``: a context in which each task builds with its best recorded config."""

from __future__ import annotations

import os
import threading
from typing import Any

from .record import StaleRecords, best_by_workload, bind_record, load_records, lookup_key, workload_key

_local = threading.local()


class DispatchContext:
    """The stack of active ``ApplyHistoryBest`` contexts (innermost wins)."""

    @staticmethod
    def stack() -> list:
        if not hasattr(_local, "stack"):
            _local.stack = []
        return _local.stack

    @staticmethod
    def current_config(task: Any, function: str | None = None) -> Any:
        """The best ``ConfigEntity`` recorded for ``task`` in the innermost context, or ``None``.
        ``function``: the name of the program's function that a build makes with it, noted with
        its record in the context that answered (``ApplyHistoryBest.built``)."""
        for ctx in reversed(DispatchContext.stack()):
            found = ctx.record_of(task)
            if found is not None:
                if function is not None:
                    ctx.built[function] = found[1]
                return found[0]
        return None


class ApplyHistoryBest:
    """The fastest record per (target kind, workload) of the given logs or records.

    Records that do not fit their task's space (stale: written for an older knob space), and
    records whose cost is faster than the task's target could run, are skipped, and the fastest
    record that fits is used; each log with such records gets one warning, when the context exits
    or ``build_program`` has looked up all its tasks. ``built``: the record each function of a
    ``build_program`` inside it was built with, by the function's name (a template's functions
    are named by the build, not by their template).
    """

    def __init__(self, records: Any) -> None:
        if not isinstance(records, (str, os.PathLike)) and not hasattr(records, "__iter__"):
            raise TypeError(f"apply_history_best takes a log path, a list of paths or (input, result) pairs, "
                            f"got {records!r}")
        self.best = best_by_workload(load_records(records))
        self.stale = StaleRecords()
        self.built: dict[str, Any] = {}  # function name -> the MeasureResult of the record it was built with
        self.found: dict[Any, tuple[Any, Any] | None] = {}  # (target, task's workload) -> ``record_of``'s answer

    def record_of(self, task: Any) -> tuple[Any, Any] | None:
        """(config bound to the task's space, its MeasureResult) of the fastest record of ``task``
        that fits, or ``None``. A task's records are bound once: a build that looks a task up
        again (a template's function: counted, then scheduled) neither binds nor counts its stale
        records twice."""
        workload = workload_key(task)
        key = (str(task.target), workload)  # they set the space, and what a plausible cost is
        if key not in self.found:
            self.found[key] = None
            for inp, res in self.best.get(lookup_key(task.target, workload), []):
                cfg = bind_record(inp.config, task, self.stale, res)
                if cfg is not None:
                    self.found[key] = cfg, res
                    break
        return self.found[key]

    def query(self, target: Any, workload: Any = None) -> Any:
        """The best config of ``query(task)``, bound to the task's space (``None`` if no record
        fits), or, as AutoTVM's ``query(target, workload)``, the fastest record's config of that
        workload (``(name, *args)``), unbound."""
        if workload is None:
            found = self.record_of(target)
            return None if found is None else found[0]
        hits = self.best.get(lookup_key(target, workload), [])
        return hits[0][0].config if hits else None

    def __enter__(self) -> "ApplyHistoryBest":
        DispatchContext.stack().append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        DispatchContext.stack().remove(self)
        self.stale.warn()


def apply_history_best(records: Any) -> ApplyHistoryBest:
    """Context manager: inside it, templates, ``Task.instantiate_best`` and
    ``autotvm.task.relax_integration.build_program`` use the best recorded configs."""
    return ApplyHistoryBest(records)


def warn_stale_records() -> None:
    """Warn now (once per log) about the stale records the active contexts have skipped so far."""
    for ctx in DispatchContext.stack():
        ctx.stale.warn()


__all__ = ["ApplyHistoryBest", "DispatchContext", "apply_history_best", "warn_stale_records"]

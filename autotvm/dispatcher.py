"""``apply_history_best``: a context in which each task builds with its best recorded config."""

from __future__ import annotations

import threading
from typing import Any

from .record import load_records, pick_best, workload_key

_local = threading.local()


class DispatchContext:
    """The stack of active ``ApplyHistoryBest`` contexts (innermost wins)."""

    @staticmethod
    def stack() -> list:
        if not hasattr(_local, "stack"):
            _local.stack = []
        return _local.stack

    @staticmethod
    def current_config(task: Any) -> Any:
        """The best ``ConfigEntity`` recorded for ``task`` in the innermost context, or ``None``."""
        for ctx in reversed(DispatchContext.stack()):
            cfg = ctx.query(task)
            if cfg is not None:
                return cfg
        return None


class ApplyHistoryBest:
    """Keep the lowest-mean-cost record per (target kind, workload) of the given records."""

    def __init__(self, records: Any) -> None:
        self.best = pick_best(load_records(records))

    def query(self, task: Any) -> Any:
        hit = self.best.get((task.target.kind.name, workload_key(task)))
        if hit is None:
            return None
        return hit[0].config.bind(task) if hasattr(hit[0].config, "bind") else hit[0].config

    def __enter__(self) -> "ApplyHistoryBest":
        DispatchContext.stack().append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        DispatchContext.stack().remove(self)


def apply_history_best(records: Any) -> ApplyHistoryBest:
    """Context manager: inside it, templates, ``Task.instantiate_best`` and
    ``autotvm.task.relax_integration.build_program`` use the best recorded configs."""
    return ApplyHistoryBest(records)


__all__ = ["ApplyHistoryBest", "DispatchContext", "apply_history_best"]

"""Measurement data types and the batch that builds then runs a list of configs."""

from __future__ import annotations

import time
from enum import IntEnum
from typing import Any, NamedTuple, Sequence


class MeasureErrorNo(IntEnum):
    """Why a trial failed (0 means it did not)."""

    NO_ERROR = 0
    INSTANTIATION_ERROR = 1
    COMPILE_HOST = 2
    COMPILE_DEVICE = 3
    RUNTIME_DEVICE = 4
    WRONG_ANSWER = 5
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7
    UNKNOWN_ERROR = 8


class MeasureInput(NamedTuple):
    """What to measure: a config of a task on a target."""

    target: Any
    task: Any
    config: Any


class MeasureResult(NamedTuple):
    """Seconds per run (``costs``), or ``(message,)`` with a non-zero ``error_no`` on failure.

    ``all_cost`` is the wall time of build plus run; ``timestamp`` when the result was taken.
    """

    costs: tuple
    error_no: int
    all_cost: float
    timestamp: float

    @property
    def ok(self) -> bool:
        return self.error_no == MeasureErrorNo.NO_ERROR

    @property
    def mean_cost(self) -> float:
        return sum(self.costs) / len(self.costs) if self.ok else float("inf")

    @property
    def error_message(self) -> str:
        return "" if self.ok else str(self.costs[0])


class BuildResult(NamedTuple):
    """A built artifact (a shared library path and its argument shapes) or an error."""

    filename: str | None
    arg_info: list | None
    error_no: int
    error_msg: str
    time_cost: float
    check_filename: str | None = None


def failed(error_no: MeasureErrorNo, message: str, all_cost: float = 0.0) -> MeasureResult:
    """A failed trial's result with a readable, one-paragraph message."""
    return MeasureResult((message.strip()[-2000:],), int(error_no), float(all_cost), time.time())


class MeasureBatch:
    """Build a batch of configs in parallel, then run each on the device, one at a time.

    Runs never overlap builds, so builds cannot disturb the timings.
    """

    def __init__(self, task: Any, option: dict) -> None:
        self.task = task
        self.builder = option["builder"]
        self.runner = option["runner"]
        self.n_parallel = self.builder.n_parallel
        self.runner.set_task(task, self.builder)

    def __call__(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        builds = self.builder.build(inputs, check=self.runner.check_correctness)
        return self.runner.run(inputs, builds)


def create_measure_batch(task: Any, option: dict) -> MeasureBatch:
    """The callable that ``Tuner.tune`` measures with; its ``n_parallel`` is the builder's."""
    return MeasureBatch(task, option)

"""Measurement data types and the batch that builds then runs a list of configs."""

from __future__ import annotations

import logging
import time
from enum import IntEnum
from typing import Any, NamedTuple, Sequence

from ..checks import AutoTVMError


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


logger = logging.getLogger("autotvm")

# a trial lost to the machinery (a worker killed, the RPC server gone) is measured again this many
# times; a config that kills its worker every time is then recorded as the crash it is
REMEASURE_ATTEMPTS = 2


class MeasureBatch:
    """Build a batch of configs in parallel, then run each on the device, one at a time.

    A batch's runs never overlap its builds, so on a CPU builds cannot disturb the timings (on a
    GPU a task scheduler may measure rounds of other tasks meanwhile: ``TaskScheduler.tune``'s
    ``in_flight``; their builds run at a lower priority). A trial lost to the measuring
    machinery (``infrastructure_failure``: a build or run worker that died, killed from outside
    or out of memory; or what the runner reports, such as an RPC server gone) is not a result of
    its config: the disk is checked (a full one stops the tune before anything fake is logged),
    the runner waits until it can measure again, and the trial is measured again. A config that
    kills its worker every time is then recorded as the crash it is.
    """

    def __init__(self, task: Any, option: dict) -> None:
        self.task = task
        self.builder = option["builder"]
        self.runner = option["runner"]
        self.n_parallel = self.builder.n_parallel
        self.runner.set_task(task, self.builder)

    def _lost(self, result: MeasureResult) -> bool:
        return infrastructure_failure(result) or self.runner.infrastructure_fault(result)

    def __call__(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        self.last_seconds = {"build": 0.0, "run": 0.0}  # this batch's wall time in each phase
        results = list(self._measure(inputs))
        for _ in range(REMEASURE_ATTEMPTS):
            _stop_on_a_full_disk(results)
            lost = [i for i, result in enumerate(results) if self._lost(result)]
            if not lost:
                return results
            if hasattr(self.builder, "check_disk"):
                self.builder.check_disk()  # a worker killed by a file-size limit or a full disk: stop here
            logger.warning("%d trial%s of %s lost to the measuring machinery, not to the config (%s); measuring "
                           "again", len(lost), "" if len(lost) == 1 else "s", self.task.name,
                           results[lost[0]].error_message[:120])
            self.runner.wait_until_ready()
            for i, result in zip(lost, self._measure([inputs[i] for i in lost])):
                results[i] = result
        _stop_on_a_full_disk(results)
        for i, result in enumerate(results):  # lost every time: the config's own doing
            if self._lost(result):
                results[i] = failed(MeasureErrorNo(result.error_no), f"measuring failed {REMEASURE_ATTEMPTS + 1} times "
                                    f"in a row (last: {result.error_message})", result.all_cost)
        return results

    def _measure(self, inputs: Sequence[MeasureInput]) -> list[MeasureResult]:
        start = time.perf_counter()
        builds = self.builder.build(inputs, check=self.runner.check_correctness)
        built = time.perf_counter()
        results = self.runner.run(inputs, builds)
        self.last_seconds["build"] += built - start
        self.last_seconds["run"] += time.perf_counter() - built
        return results


DISK_FULL = ("No space left on device", "File too large", "Disk quota exceeded")
# how a failure of the machinery reads: a worker process that died (PopenPoolExecutor's words)
WORKER_DIED = "ChildProcessError"


def infrastructure_failure(result: MeasureResult) -> bool:
    """Whether a failed result says nothing of its config: the build or run worker died, or the
    disk was full. Such records, from older logs, are measured again on resume."""
    message = result.error_message
    return not result.ok and (message.startswith(WORKER_DIED) or any(words in message for words in DISK_FULL))


def full_disk_error() -> AutoTVMError:
    return AutoTVMError("the disk is full (a build or run could not write its files): every trial measured so far "
                        "is in the log; free space and run the same command again to resume")


def _stop_on_a_full_disk(results: Sequence[MeasureResult]) -> None:
    """A build or run that failed because the disk is full says nothing of its config: stop
    before such failures reach the log and the tuner."""
    for result in results:
        if not result.ok and any(words in result.error_message for words in DISK_FULL):
            raise full_disk_error()


def create_measure_batch(task: Any, option: dict) -> MeasureBatch:
    """The callable that ``Tuner.tune`` measures with; its ``n_parallel`` is the builder's."""
    if not isinstance(option, dict) or "builder" not in option or "runner" not in option:
        raise AutoTVMError(f"measure_option must come from autotvm.measure_option(builder, runner), got {option!r}")
    return MeasureBatch(task, option)

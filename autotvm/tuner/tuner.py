"""The base ``Tuner``: AutoTVM's contract for proposing, measuring and learning from configs."""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import threading
import time
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..checks import AutoTVMError, check, check_options, check_seed, integer
from ..env import host_cores
from ..measure.measure import (MeasureErrorNo, MeasureInput, MeasureResult, create_measure_batch, failed,
                               infrastructure_failure)
from ..record import StaleRecords, bind_record, load_records, workload_key

logger = logging.getLogger("autotvm")

# checked before building (``task.checks_before_build``), at most this many rejected configs per
# config a batch needs before the tuning stops: a space that is all but invalid for the target
MAX_REJECTED_PER_TRIAL = 200
_CHECKER: list = []
_CHECKER_LOCK = threading.Lock()


def _checker() -> Any:
    """Threads that check a batch's configs at once, one per core (TVM releases the GIL while it
    replays a config and runs the postprocessors; on a GPU they reject most of a space); one pool
    for the process, shared by tuners whose rounds run at once."""
    with _CHECKER_LOCK:
        if not _CHECKER:
            from concurrent.futures import ThreadPoolExecutor

            _CHECKER.append(ThreadPoolExecutor(max_workers=host_cores(), thread_name_prefix="autotvm-check"))
        return _CHECKER[0]


@contextlib.contextmanager
def _interrupt_between_batches():
    """Turn the first SIGINT into a flag checked between batches (main thread only)."""
    state = {"count": 0}
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return

    def handler(signum: int, frame: Any) -> None:
        state["count"] += 1
        if state["count"] > 1:
            raise KeyboardInterrupt
        logger.warning("interrupted: finishing the batch in flight, then stopping (Ctrl-C again to stop now)")

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield lambda: state["count"] > 0
    finally:
        signal.signal(signal.SIGINT, previous)


class Tuner:
    """Propose configs of ``task`` in batches, learn from their measurements.

    Subclasses implement ``next_batch`` (taking ``enqueue``d configs first, ``_take_queued``)
    and ``has_next`` and may override ``update``. The base class keeps ``visited`` (every index
    proposed or loaded), so no config is measured twice, and the best so far (``best_config``,
    ``best_flops``, ``best_measure_pair``, ``best_iter``). ``seed`` makes proposals deterministic
    for the same measurements. ``OPTIONS`` holds the rule (``autotvm.checks``) of each keyword a
    tuner takes besides ``task`` and ``seed``: its constructor and the driver's config check them.
    """

    OPTIONS: dict[str, dict] = {}

    def __init__(self, task: Any, seed: int | None = None, **kwargs: Any) -> None:
        if not hasattr(task, "config_space"):
            raise AutoTVMError(f"task must be an autotvm task (with a config_space), got {type(task).__name__}")
        self.task = task
        self.space = task.config_space
        self.seed = check_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.visited: set[int] = set()
        self.error_ct_threshold = 150
        self.reset_best()
        self.ttl = None
        self.n_trial = None
        self.early_stopping = None
        self.tuner_seconds = 0.0  # time spent in next_batch + update: the tuner's overhead
        # where the measuring time went: the target's check before building, the builds, the runs
        self.phase_seconds = {"check": 0.0, "build": 0.0, "run": 0.0}
        self.history: list[dict] = []  # one row per trial: index, flops, best_flops, error_no
        self.rejected = 0  # configs the target rejected before building (not trials; see ``reject``)
        self.queued: list[int] = []  # indices to propose before the tuner's own (``enqueue``)

    def check_options(self, **values: Any) -> None:
        """Check keyword arguments by their rules in ``OPTIONS`` (an ``AutoTVMError`` naming the first bad one)."""
        check_options({name: type(self).OPTIONS[name] for name in values}, values)

    def reset_best(self) -> None:
        self.best_config = None
        self.best_flops = 0.0
        self.best_measure_pair = None
        self.best_iter = 0

    # -- to implement
    def has_next(self) -> bool:
        raise NotImplementedError

    def next_batch(self, batch_size: int) -> list:
        raise NotImplementedError

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Learn from a measured batch (no-op by default)."""

    def reject(self, configs: Sequence[Any], reasons: Sequence[str]) -> None:
        """Configs the target rejected before any build (``task.check``). They are not trials:
        not measured, logged or counted against ``n_trial``. By default the tuner learns them as
        failed measurements; a tuner that gave one a place (a population slot) frees it here."""
        inputs = [MeasureInput(self.task.target, self.task, c) for c in configs]
        self.update(inputs, [failed(MeasureErrorNo.INSTANTIATION_ERROR, why) for why in reasons])

    def reset(self) -> None:
        """Forget everything learned and visited."""
        self.visited.clear()
        self.queued.clear()
        self.reset_best()
        self.history.clear()
        self.rng = np.random.default_rng(self.seed)

    def enqueue(self, configs: Iterable[Any]) -> None:
        """Propose these configs of this task's space next, before the tuner's own choices, as
        Optuna's ``enqueue_trial`` does: a warm start from what is known elsewhere (the task
        scheduler offers the best configs of sibling tasks). Configs visited by then are skipped;
        once measured, a config counts as the tuner's own (a GA breeds from it)."""
        self.queued.extend(c.index for c in configs)

    # -- shared helpers
    def _take_queued(self, taken: set[int]) -> int | None:
        """The next enqueued index not in ``taken`` (subclasses call it before proposing their own)."""
        while self.queued:
            index = self.queued.pop(0)
            if index not in taken:
                return index
        return None

    def flops_of(self, result: MeasureResult) -> float:
        """FLOP/s of a result; a failed trial counts as 0."""
        return self.task.flop / result.mean_cost if result.ok and result.mean_cost > 0 else 0.0

    def load_history(self, records: Any, min_seed_records: int = 500) -> int:
        """Take this task's past records: mark them visited, keep the best, learn from them.

        Returns how many configs they measured. Tuning afterwards never re-measures them, except
        those whose record is a failure of the measuring machinery (a worker killed, a full disk:
        ``infrastructure_failure``), which are measured again. A record whose cost is faster than
        the target could run is skipped with one warning per log, and so is a second record of a
        config (the first is kept).
        """
        inputs, results = [], []
        key = workload_key(self.task)
        stale = StaleRecords()
        for inp, res in load_records(records):
            if workload_key(inp.task) != key or infrastructure_failure(res):
                continue
            cfg = bind_record(inp.config, self.task, stale, res)
            if cfg is None or cfg.index in self.visited:
                continue
            self.visited.add(cfg.index)
            inputs.append(MeasureInput(self.task.target, self.task, cfg))
            results.append(res)
            flops = self.flops_of(res)
            if flops > self.best_flops:
                self.best_flops, self.best_config, self.best_measure_pair = flops, cfg, (inputs[-1], res)
        stale.warn()
        if inputs:
            self.learn_history(inputs, results)
        return len(inputs)

    def learn_history(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Hook for tuners that learn from loaded records (the model-based ones)."""

    def _timed(self, func: Callable, *args: Any) -> Any:
        start = time.perf_counter()
        try:
            return func(*args)
        finally:
            self.tuner_seconds += time.perf_counter() - start

    # -- the loop
    def tune(self, n_trial: int, measure_option: dict, early_stopping: int | None = None,
             callbacks: Iterable[Callable] = (), si_prefix: str = "G") -> None:
        """Measure up to ``n_trial`` new configs in batches of the builder's parallelism.

        Stops early after ``early_stopping`` trials without improvement. Every callback is
        called once per batch as ``callback(tuner, inputs, results)``.
        """
        check("n_trial", n_trial, integer(1))
        check("early_stopping", early_stopping, integer(1, none=True))
        measure_batch = create_measure_batch(self.task, measure_option)
        self.run_loop(measure_batch, measure_batch.n_parallel, n_trial, early_stopping, callbacks)

    def run_loop(self, measure_batch: Callable, n_parallel: int, n_trial: int, early_stopping: int | None = None,
                 callbacks: Iterable[Callable] = ()) -> None:
        """The loop of ``tune`` with any measure function (``inputs -> results``), e.g. a synthetic one.

        Ctrl-C lets the batch in flight finish and reach the callbacks (so its measurements are
        logged), then raises ``KeyboardInterrupt``; a second Ctrl-C stops at once. Without this, a
        signal landing inside a TVM call could surface as a TVM error and be mistaken for a failed config.
        """
        with _interrupt_between_batches() as interrupted:
            self._loop(measure_batch, n_parallel, n_trial, early_stopping, callbacks, interrupted)

    def _next_valid_batch(self, size: int) -> list:
        """The next batch; where the task checks configs before building (GPU targets), without
        the ones it rejects, which go to ``reject`` while more are proposed in their place."""
        configs = self._timed(self.next_batch, size)
        if not getattr(self.task, "checks_before_build", False):
            return configs
        valid: list = []
        rejected_here = 0
        while configs:
            t0 = time.perf_counter()
            verdicts = list(zip(configs, _checker().map(self.task.check, configs)))
            # the builder's first step, run here too (rejected configs never reach the builder)
            self.phase_seconds["check"] += time.perf_counter() - t0
            valid += [c for c, why in verdicts if why is None]
            rejected = [(c, why) for c, why in verdicts if why is not None]
            if rejected:
                self.visited.update(c.index for c, _ in rejected)
                self.rejected += len(rejected)
                rejected_here += len(rejected)
                self._timed(self.reject, [c for c, _ in rejected], [why for _, why in rejected])
            if len(valid) >= size or not rejected or not self._timed(self.has_next):
                break
            if rejected_here >= MAX_REJECTED_PER_TRIAL * size:
                if not valid:
                    logger.warning("stopping: the last %d configs proposed for %s were all rejected by the target (%s)",
                                   rejected_here, self.task.name, rejected[-1][1])
                break
            configs = self._timed(self.next_batch, size - len(valid))
        return valid

    def _loop(self, measure_batch: Callable, n_parallel: int, n_trial: int, early_stopping: int | None,
              callbacks: Iterable[Callable], interrupted: Callable[[], bool]) -> None:
        self.n_trial = n_trial
        self.early_stopping = early_stopping if early_stopping is not None else math.inf
        callbacks = list(callbacks)
        start = time.perf_counter()
        i = error_ct = 0
        offset = len(self.history)  # trials of earlier tune() calls: numbering and early stopping go on from them
        while i < n_trial and self._timed(self.has_next):
            configs = self._next_valid_batch(min(n_parallel, n_trial - i))
            if not configs:
                break
            configs = configs[: n_trial - i]
            self.visited.update(c.index for c in configs)
            inputs = [MeasureInput(self.task.target, self.task, c) for c in configs]
            results = measure_batch(inputs)
            for phase, seconds in getattr(measure_batch, "last_seconds", {}).items():
                self.phase_seconds[phase] += seconds
            for k, (inp, res) in enumerate(zip(inputs, results)):
                flops = self.flops_of(res)
                if flops > self.best_flops:
                    self.best_flops, self.best_config = flops, inp.config
                    self.best_measure_pair, self.best_iter = (inp, res), offset + i + k
                error_ct = 0 if res.ok else error_ct + 1
                self.history.append({"trial": offset + i + k, "index": inp.config.index, "flops": flops,
                                     "best_flops": self.best_flops, "error_no": int(res.error_no),
                                     "elapsed": time.perf_counter() - start})
                # AutoTVM's per-trial line at DEBUG level
                logger.debug("No: %d\tGFLOPS: %.2f/%.2f\tresult: %s\t%s", offset + i + k + 1, flops / 1e9,
                             self.best_flops / 1e9, res, inp.config)
            i += len(results)
            self.ttl = min(self.best_iter + self.early_stopping - offset - i, n_trial - i)
            self._timed(self.update, inputs, results)
            for callback in callbacks:
                callback(self, inputs, results)
            if interrupted():
                raise KeyboardInterrupt
            if offset + i >= self.best_iter + self.early_stopping:
                logger.info("early stopped at trial %d: no improvement in %d trials", offset + i, self.early_stopping)
                break
            if error_ct > self.error_ct_threshold:
                logger.warning("%d consecutive failed trials; last error: %s", error_ct, results[-1].error_message)
                error_ct = 0
        self.wall_seconds = time.perf_counter() - start
        if self.history and all(row["error_no"] for row in self.history[-i:]):
            logger.warning("every trial of %s failed; first error: %s", self.task.name,
                           next((r.error_message for r in results if not r.ok), "?"))

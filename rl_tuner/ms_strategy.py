"""``GADQNSearchStrategy``: GA-DQN as a MetaSchedule search strategy.

``ms.tune_tir(..., strategy=GADQNSearchStrategy())`` and ``tune_relax`` use it like their own
strategies. The genes are the decisions of the task's design space (the same knobs as
``autotvm.task.create_from_primfunc``); each iteration proposes ``num_trials_per_iter``
candidates, and the runner's results are fed back as the tuner's measurements.
"""

from __future__ import annotations

import time
from typing import Any

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.arg_info import ArgInfo
from tvm.s_tir.meta_schedule.search_strategy import MeasureCandidate, PySearchStrategy

from autotvm.measure.measure import MeasureErrorNo, MeasureInput, MeasureResult, failed
from autotvm.task.space import InstantiationError
from autotvm.task.trace_task import TraceTask

from .gadqn_tuner import GADQNTuner


@derived_object
class GADQNSearchStrategy(PySearchStrategy):
    """GA-DQN behind MetaSchedule's ``PySearchStrategy`` interface; options go to ``GADQNTuner``."""

    def __init__(self, seed: int | None = None, **tuner_options: Any) -> None:
        self.seed = seed
        self.tuner_options = tuner_options
        self.context = None
        self.tuner: GADQNTuner | None = None

    def _initialize_with_tune_context(self, context: Any) -> None:
        self.context = context

    def pre_tuning(self, max_trials: int, num_trials_per_iter: int, design_spaces: Any, database: Any = None,
                   cost_model: Any = None) -> None:
        task = TraceTask(str(self.context.task_name or "main"), self.context.mod, self.context.target)
        self.tuner = GADQNTuner(task, seed=self.seed, **self.tuner_options)
        self.max_trials, self.per_iter, self.done = int(max_trials), int(num_trials_per_iter), 0
        self.pending: list = []

    def post_tuning(self) -> None:
        self.pending = []

    def generate_measure_candidates(self) -> list | None:
        """Up to ``num_trials_per_iter`` new candidates; ``None`` when the budget is spent."""
        tuner = self.tuner
        while self.done < self.max_trials and tuner.has_next():
            configs = tuner.next_batch(min(self.per_iter, self.max_trials - self.done))
            if not configs:
                return None
            tuner.visited.update(c.index for c in configs)
            candidates, self.pending, rejected = [], [], []
            for cfg in configs:
                try:
                    sch = tuner.task.schedule_of(cfg)
                except InstantiationError as err:
                    rejected.append((cfg, failed(MeasureErrorNo.INSTANTIATION_ERROR, str(err))))
                    continue
                candidates.append(MeasureCandidate(sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True)))
                self.pending.append(cfg)
            if rejected:
                self._feed([c for c, _ in rejected], [r for _, r in rejected])
            if candidates:
                return candidates
        return None

    def notify_runner_results(self, measure_candidates: list, results: list) -> None:
        converted = []
        for res in results:
            secs = [float(s) for s in (res.run_secs or [])]
            if res.error_msg or not secs:
                converted.append(failed(MeasureErrorNo.RUNTIME_DEVICE, str(res.error_msg or "no run time")))
            else:
                converted.append(MeasureResult(tuple(secs), 0, sum(secs), time.time()))
        self._feed(self.pending, converted)
        self.pending = []

    def _feed(self, configs: list, results: list) -> None:
        tuner = self.tuner
        inputs = [MeasureInput(tuner.task.target, tuner.task, c) for c in configs]
        for inp, res in zip(inputs, results):
            flops = tuner.flops_of(res)
            if flops > tuner.best_flops:
                tuner.best_flops, tuner.best_config = flops, inp.config
            tuner.history.append({"trial": self.done, "index": inp.config.index, "flops": flops,
                                  "best_flops": tuner.best_flops, "error_no": int(res.error_no)})
            self.done += 1
        tuner.update(inputs, results)

    def clone(self) -> "GADQNSearchStrategy":
        return GADQNSearchStrategy(seed=self.seed, **self.tuner_options)

"""``XGBTuner``: an XGBoost cost model, refit every ``plan_size`` trials, explored by simulated annealing.

The model ranks configs (pairwise rank loss by default) from knob features, or from
MetaSchedule's per-store program features (``feature_type="program"``, trace tasks only).
AutoTVM's ``"itervar"`` and ``"curve"`` features, which describe the lowered loop nest, map to the
nearest ones here: ``"program"`` on tasks that have a program to read features from (from
``create_from_primfunc`` or a Relax program), ``"knob"`` on template tasks.
Simulated annealing walks the knob space (one knob changed per step) to find the configs the
model ranks highest; the last ``eps_greedy`` share of each plan is random, as in AutoTVM.
"""

from __future__ import annotations

import heapq
from typing import Any, Sequence

import numpy as np

from ..checks import AutoTVMError, choice, integer, number
from ..measure.measure import MeasureInput, MeasureResult
from .cost_model import LOSSES, XGBCostModel
from .tuner import Tuner


FEATURE_TYPES = ("knob", "program", "itervar", "curve")


class XGBTuner(Tuner):
    OPTIONS = {"plan_size": integer(1), "feature_type": choice(FEATURE_TYPES), "loss_type": choice(LOSSES),
               "num_threads": integer(1, none=True), "n_iter": integer(1), "parallel_size": integer(1),
               "early_stop": integer(1), "eps_greedy": number(0, 1)}

    def __init__(self, task: Any, plan_size: int = 64, feature_type: str = "knob", loss_type: str = "rank",
                 num_threads: int | None = None, n_iter: int = 500, parallel_size: int = 128,
                 early_stop: int = 50, eps_greedy: float = 0.05, seed: int | None = None) -> None:
        super().__init__(task, seed=seed)
        self.check_options(plan_size=plan_size, feature_type=feature_type, loss_type=loss_type, num_threads=num_threads,
                           n_iter=n_iter, parallel_size=parallel_size, early_stop=early_stop, eps_greedy=eps_greedy)
        if feature_type in ("itervar", "curve"):  # AutoTVM's loop-nest features
            feature_type = "program" if hasattr(task, "schedule_of") else "knob"
        if feature_type == "program" and not hasattr(task, "schedule_of"):
            raise AutoTVMError("feature_type='program' needs a task from create_from_primfunc or a Relax program")
        self.plan_size, self.feature_type, self.loss_type = plan_size, feature_type, loss_type
        self.num_threads = num_threads or 1
        self.n_iter, self.parallel_size, self.early_stop, self.eps_greedy = n_iter, parallel_size, early_stop, eps_greedy
        self.dims = np.array(self.space.dims, dtype=np.int64)
        self.xs: list[np.ndarray] = []
        self.ys: list[float] = []
        self.model = None
        self.plan: list[int] = []
        self.since_fit = 0
        self._sa_points: np.ndarray | None = None
        self._program_features: dict[int, np.ndarray] = {}

    # -- features
    def _features(self, knobs: np.ndarray) -> np.ndarray:
        if self.feature_type == "knob":
            return self.space.feature_matrix(knobs)
        return np.stack([self._program_feature(self.space.knob2point(k)) for k in knobs])

    def _program_feature(self, index: int) -> np.ndarray:
        """Mean and max over stores of MetaSchedule's per-store features (zeros for invalid configs)."""
        if index not in self._program_features:
            from tvm.s_tir import meta_schedule as ms

            if not hasattr(self, "_extractor"):
                self._extractor = ms.feature_extractor.PerStoreFeature()
            try:
                sch = self.task.schedule_of(self.space.get(index))
                cand = ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_entry_func(sch.mod, remove_preproc=True))
                feats = self._extractor.extract_from(self.task._ctx, [cand])[0].numpy()
                vec = np.concatenate([feats.mean(axis=0), feats.max(axis=0)])
            except Exception:
                vec = None
            self._program_features[index] = vec
        vec = self._program_features[index]
        return vec if vec is not None else np.zeros(2 * 164, dtype=np.float32)

    # -- model
    def _fit(self) -> None:
        model = XGBCostModel(self.loss_type, self.num_threads, seed=int(self.rng.integers(2**31)))
        model.fit(np.stack(self.xs), np.asarray(self.ys))
        if model.fitted:
            self.model = model

    def _predict(self, knobs: np.ndarray) -> np.ndarray:
        return self.model.predict(self._features(knobs))

    def _strides(self) -> np.ndarray | None:
        """Mixed-radix strides turning knob rows into indices with one matrix product (small spaces)."""
        if self.space.range_length >= 2**62:
            return None
        return np.concatenate([[1], np.cumprod(self.dims[:-1])]).astype(np.int64)

    # -- simulated annealing over the model
    def _random_knobs(self, n: int) -> np.ndarray:
        return np.stack([self.rng.integers(0, d, size=n) for d in self.dims], axis=1)

    def _walk(self, knobs: np.ndarray) -> np.ndarray:
        """Change one movable knob of every row to a different value."""
        out = knobs.copy()
        movable = np.flatnonzero(self.dims > 1)
        if movable.size == 0:
            return out
        cols = movable[self.rng.integers(0, movable.size, size=len(out))]
        shift = self.rng.integers(1, np.maximum(self.dims[cols], 2))
        out[np.arange(len(out)), cols] = (out[np.arange(len(out)), cols] + shift) % self.dims[cols]
        return out

    def _anneal(self, num: int) -> list[int]:
        """The ``num`` unvisited points the model ranks highest, found by simulated annealing."""
        n_par = self.parallel_size if self.feature_type == "knob" else min(self.parallel_size, 16)
        n_iter = self.n_iter if self.feature_type == "knob" else min(self.n_iter, 20)
        points = self._sa_points if self._sa_points is not None else self._random_knobs(n_par)
        scores = self._predict(points)
        heap: list[tuple[float, int]] = []
        in_heap: set[int] = set()
        strides = self._strides()

        def offer(knobs: np.ndarray, values: np.ndarray) -> bool:
            """Push the candidates that beat the heap's worst; vectorised filter first."""
            if len(heap) >= num:
                keep = values > heap[0][0]
                knobs, values = knobs[keep], values[keep]
            if len(values) == 0:
                return False
            points = (knobs @ strides).tolist() if strides is not None else [self.space.knob2point(k) for k in knobs]
            changed = False
            for p, v in zip(points, values.tolist()):
                if p in self.visited or p in in_heap:
                    continue
                if len(heap) < num:
                    heapq.heappush(heap, (v, p)); in_heap.add(p); changed = True
                elif v > heap[0][0]:
                    _, old = heapq.heapreplace(heap, (v, p)); in_heap.discard(old); in_heap.add(p)
                    changed = True
            return changed

        offer(points, scores)
        temp, last_change = 1.0, 0
        for it in range(n_iter):
            new_points = self._walk(points)
            new_scores = self._predict(new_points)
            accept = self.rng.random(len(points)) < np.exp(np.minimum((new_scores - scores) / (temp + 1e-5), 0))
            points[accept], scores[accept] = new_points[accept], new_scores[accept]
            if offer(new_points, new_scores):
                last_change = it
            if it - last_change > self.early_stop:
                break
            temp = max(0.0, 1.0 - (it + 1) / n_iter)
        self._sa_points = points
        return [p for _, p in sorted(heap, reverse=True)]

    # -- tuner interface
    def has_next(self) -> bool:
        return len(self.visited) < self.space.range_length

    def next_batch(self, batch_size: int) -> list:
        batch, chosen = [], set()
        while len(batch) < batch_size and len(self.visited) + len(chosen) < self.space.range_length:
            index = self._take_queued(self.visited | chosen)
            while index is None and self.plan:
                cand = self.plan.pop(0)
                if cand not in self.visited and cand not in chosen:
                    index = cand
                    break
            if index is None:
                index = self.space.get_rand_index(self.rng, to_exclude=self.visited | chosen)
            chosen.add(index)
            batch.append(self.space.get(index))
        return batch

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        self._add(inputs, results)
        self.since_fit += len(inputs)
        if self.since_fit >= self.plan_size or (self.model is None and len(self.ys) >= self.plan_size):
            self._replan()

    def learn_history(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        self._add(inputs, results)
        if len(self.ys) >= min(self.plan_size, 16):
            self._replan()

    def _add(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        knobs = np.array([inp.config.knob for inp in inputs], dtype=np.int64)
        for row, res in zip(self._features(knobs), results):
            self.xs.append(row)
            self.ys.append(self.flops_of(res))

    def _replan(self) -> None:
        self.since_fit = 0
        self._fit()
        if self.model is None:
            return
        n_model = int(self.plan_size * (1 - self.eps_greedy))
        self.plan = self._anneal(n_model)
        # the rest of the plan is random (epsilon-greedy), drawn when the plan runs out

    def reset(self) -> None:
        super().reset()
        self.xs.clear(); self.ys.clear()
        self.model, self.plan, self.since_fit, self._sa_points = None, [], 0, None

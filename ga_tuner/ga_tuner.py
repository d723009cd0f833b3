"""``GATuner``: AutoTVM's genetic algorithm on the shared population plumbing.

Fitness-proportional parents, single-point crossover at a random point, each knob re-drawn with
probability ``mutation_prob``, ``elite_num`` elites kept, no config measured twice.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autotvm.tuner.population import Member, PopulationTuner


class GATuner(PopulationTuner):
    def __init__(self, task: Any, pop_size: int = 100, elite_num: int = 3, mutation_prob: float = 0.1,
                 screen: int = 1, restart_after: int | None = None, immigrants: int = 0,
                 immigrant_pool: int = 512, screen_scope: str = "slot", screen_model: str = "rank",
                 seed: int | None = None) -> None:
        if not 0 <= mutation_prob <= 1:
            raise ValueError(f"mutation_prob must be in [0, 1], got {mutation_prob}")
        super().__init__(task, pop_size=pop_size, elite_num=elite_num, screen=screen, restart_after=restart_after,
                         immigrants=immigrants, immigrant_pool=immigrant_pool, screen_scope=screen_scope,
                         screen_model=screen_model, seed=seed)
        self.mutation_prob = mutation_prob

    def breed(self, parents: list[Member], probs: np.ndarray, taken: set[int]) -> tuple[list[int], Any]:
        p1, p2 = self.select_parents(parents, probs)
        n = len(self.dims)
        point = int(self.rng.integers(n)) if n > 1 else 0
        child = p1.knob[:point] + p2.knob[point:]
        for i, dim in enumerate(self.dims):
            if dim > 1 and self.rng.random() < self.mutation_prob:
                child[i] = int(self.rng.integers(dim))
        return child, None

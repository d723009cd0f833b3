"""``GATuner``: AutoTVM's genetic algorithm on the shared population plumbing.

Fitness-proportional parents, single-point crossover at a random point, each knob re-drawn with
probability ``mutation_prob``, ``elite_num`` elites kept, no config measured twice.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from autotvm.tuner.population import Member, PopulationTuner


class GATuner(PopulationTuner):
    """AutoTVM's genetic algorithm.

    Parameters
    ----------
    task : Task
        The task to tune.
    pop_size : int
        Members per generation (100, AutoTVM's default).
    elite_num : int
        Best members carried unchanged into the next generation (3).
    mutation_prob : float
        Probability that each knob of a child is redrawn (0.1).
    screen : int
        Candidates bred per measured child, the screen model's pick measured (1: AutoTVM's GA,
        every child measured). GA-DQN's screen given to the GA, to compare like with like.
    immigrants : int
        Slots per generation given to the screen model's pick of 512 random unvisited configs
        (0; needs ``screen > 1``).
    seed : int, optional
        Makes every proposal deterministic for the same measurements.
    """

    def __init__(self, task: Any, pop_size: int = 100, elite_num: int = 3, mutation_prob: float = 0.1,
                 screen: int = 1, immigrants: int = 0, seed: int | None = None) -> None:
        if isinstance(mutation_prob, bool) or not isinstance(mutation_prob, (int, float)) or not 0 <= mutation_prob <= 1:
            raise ValueError(f"mutation_prob must be a number in [0, 1], got {mutation_prob!r}")
        super().__init__(task, pop_size=pop_size, elite_num=elite_num, screen=screen, immigrants=immigrants,
                         seed=seed)
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

"""``GATuner``: AutoTVM's genetic algorithm as a breeder on the shared population plumbing.

Fitness-proportional parents, single-point crossover at a random point, each knob re-drawn with
probability ``mutation_prob``, ``elite_num`` elites kept, no config measured twice.
"""

from __future__ import annotations

from typing import Any

from autotvm.checks import number
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

    OPTIONS = {**PopulationTuner.OPTIONS, "mutation_prob": number(0, 1)}

    def __init__(self, task: Any, pop_size: int = 100, elite_num: int = 3, mutation_prob: float = 0.1,
                 screen: int = 1, immigrants: int = 0, seed: int | None = None) -> None:
        super().__init__(task, pop_size=pop_size, elite_num=elite_num, screen=screen, immigrants=immigrants,
                         seed=seed)
        self.check_options(mutation_prob=mutation_prob)
        self.mutation_prob = mutation_prob

    def crossover(self, pairs: list[tuple[Member, Member]]) -> list[Member]:
        """A cut at a random point: the first parent's knobs before it, the second's after."""
        children = []
        for p1, p2 in pairs:
            point = int(self.rng.integers(len(self.dims))) if len(self.dims) > 1 else 0
            children.append(Member(p1.knob[:point] + p2.knob[point:], -1))
        return children

    def mutate(self, children: list[Member], taken: set[int]) -> None:
        """Each knob redrawn with probability ``mutation_prob``."""
        for child in children:
            for i, dim in enumerate(self.dims):
                if dim > 1 and self.rng.random() < self.mutation_prob:
                    child.knob[i] = int(self.rng.integers(dim))

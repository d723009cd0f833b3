"""Plumbing shared by genetic tuners: a fixed-size population bred one batch at a time.

A generation is ``pop_size`` members: the ``elite_num`` best of the previous population (kept,
never re-measured) plus children bred from it. Children are bred lazily, ``batch_size`` at a
time, so every batch is full and the trial budget is exact. When a batch straddles two
generations, the first children of the new generation are bred from the members already
measured (the few still in flight are left out of the parent pool). No config is proposed twice:
a child that lands on a visited config is redrawn by ``repair``, and when fewer unvisited
configs remain than a generation needs, the rest of the space is enumerated.

``screen=k`` (k > 1) makes breeding model-guided, as MetaSchedule's evolutionary search is: once
a generation has been measured, an XGBoost ranking model is refit on every measurement at the
start of each generation, ``k`` distinct children are bred for each slot, and only the one the
model ranks highest is measured. Measurements are the expensive part (about a second each, a
build and a run), so breeding and ranking k candidates is cheap by comparison.

``immigrants=m`` keeps a global search going beside the breeding: in every generation after the
first, ``m`` slots go to the screen model's favourite among ``IMMIGRANT_POOL`` (512) unvisited random
configs (so it needs ``screen > 1``). Breeding only searches near the parents, and a
population of 16 screened by a model that favours children near the best converges within a few
generations; when that basin is poor the run would stay there, while the XGB tuner, whose model
searches the whole space, does not.

"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..checks import AutoTVMError, check_options, integer
from ..measure.measure import MeasureInput, MeasureResult
from .cost_model import XGBCostModel
from .tuner import Tuner

IMMIGRANT_POOL = 512  # random unvisited configs the screen model picks an immigrant from


@dataclass
class Member:
    knob: list[int]
    index: int
    score: float | None = None  # FLOP/s once measured (0 for a failed config)
    info: Any = None  # what the breeder wants to remember about how the child was made


class PopulationTuner(Tuner):
    """A generational GA bred one batch at a time (``_next_member`` reads as one generation).

    Subclasses are the breeder: ``crossover`` and ``mutate``, and where they differ from the
    defaults ``repair`` (move a child that is already visited) and ``learn`` (from a measured child).
    """

    OPTIONS = {"pop_size": integer(2), "elite_num": integer(0), "screen": integer(1), "immigrants": integer(0)}

    def __init__(self, task: Any, pop_size: int = 100, elite_num: int = 3, screen: int = 1, immigrants: int = 0,
                 seed: int | None = None) -> None:
        super().__init__(task, seed=seed)
        check_options(PopulationTuner.OPTIONS, {"pop_size": pop_size, "elite_num": elite_num, "screen": screen,
                                                "immigrants": immigrants})
        if elite_num >= pop_size:
            raise AutoTVMError(f"elite_num must be in [0, pop_size), got {elite_num}")
        if immigrants and screen == 1:
            raise AutoTVMError(f"immigrants are the screen model's picks: they need screen > 1, got "
                               f"immigrants={immigrants} with screen=1")
        if immigrants > pop_size - elite_num - 1:
            raise AutoTVMError(f"immigrants must leave at least one bred slot: at most pop_size - elite_num - 1 = "
                               f"{pop_size - elite_num - 1}, got {immigrants}")
        self.pop_size, self.elite_num, self.screen = int(pop_size), int(elite_num), int(screen)
        self.immigrants = int(immigrants)
        self.dims = self.space.dims
        self._reset_population()

    def _reset_population(self) -> None:
        self.generation = 0
        self.population: list[Member] = []
        self.parents: list[Member] = []
        self.parent_probs = np.zeros(0)
        self.generation_means: list[float] = []  # the mean score of each generation's parents
        self.to_breed = self.pop_size
        self.by_index: dict[int, Member] = {}
        self.scores: dict[int, float] = {}
        self.best_seen = 0.0  # the best score measured so far (updated after each batch is learned from)
        self.screen_model: XGBCostModel | None = None
        self.immigrants_left = 0  # model-picked random slots still to fill in this generation
        self.immigrant_indices: list[int] = []  # every config proposed as an immigrant

    def reset(self) -> None:
        super().reset()
        self._reset_population()

    # -- the breeder: what GA and GA-DQN implement
    def crossover(self, pairs: list[tuple[Member, Member]]) -> list[Member]:
        """One child per pair of parents (its ``knob`` and ``info``; its index is set later)."""
        raise NotImplementedError

    def mutate(self, children: list[Member], taken: set[int]) -> None:
        """Mutate ``children`` in place (``taken``: the configs visited or already proposed)."""
        raise NotImplementedError

    def repair(self, child: Member, taken: set[int]) -> Member | None:
        """Move a child that is already taken to an untaken config (``None`` to give up): by
        default a random walk, one knob at a time."""
        for _ in range(32):
            point = self.space.random_walk(self.space.knob2point(child.knob), self.rng)
            if point not in taken:
                return Member(self.space.point2knob(point), point, None, child.info)
        return None

    def learn(self, child: Member, flops: float, best_before: float) -> None:
        """Learn from a measured child of this tuner (``best_before``: the best score measured
        before its batch). Nothing by default."""

    # -- one generation
    def next_batch(self, batch_size: int) -> list:
        taken = set(self.visited)
        batch = []
        while len(batch) < batch_size and self._unvisited_left(taken) > 0:
            member = self._next_member(taken)
            taken.add(member.index)
            self.population.append(member)
            self.by_index[member.index] = member
            self.to_breed -= 1
            batch.append(self.space.get(member.index))
        return batch

    def _next_member(self, taken: set[int]) -> Member:
        """The next member of the current generation, its steps in order. Members are made one
        batch at a time (so the budget is exact); a generation is ``pop_size`` of them."""
        # elites: a new generation keeps the best of the last one (not measured again), draws its
        # parents by fitness from the last one and refits the screen model on every measurement
        if self.to_breed == 0:
            self._start_generation()
        # configs offered from outside (``enqueue``: a sibling task's best) come first
        queued = self._take_queued(taken)
        if queued is not None:
            return Member(self.space.point2knob(queued), queued)
        # the first generation is random, as are the last configs of a space nearly spent
        if self.generation == 0 or not self.parents or self._unvisited_left(taken) <= self.pop_size:
            return self._random_member(taken)
        # immigrants: a few slots a generation go to the screen model's pick of random configs,
        # a global search beside the breeding (which stays near the parents)
        if self.immigrants_left > 0:
            self.immigrants_left -= 1
            member = self._screened_random_member(taken, IMMIGRANT_POOL)
            self.immigrant_indices.append(member.index)
            return member
        # breed: ``screen`` children (one until the model exists), each from two parents drawn by
        # fitness, crossed over, then mutated
        count = 1 if self.screen_model is None else self.screen
        children = self.crossover(self.select_parent_pairs(self.parents, self.parent_probs, count))
        self.mutate(children, taken)
        # repair: a child already visited, or bred twice for this slot, is moved to a new config
        candidates: dict[int, Member] = {}
        for child in children:
            child.index = self.space.knob2point(child.knob)
            if child.index in taken or child.index in candidates:
                child = self.repair(child, taken | candidates.keys())
            if child is not None:
                candidates[child.index] = child
        # screen: measure the child the ranking model predicts fastest (the breeder learns from
        # its measurement in ``update``)
        return self._model_pick(list(candidates.values())) if candidates else self._random_member(taken)

    def _start_generation(self) -> None:
        scored = sorted((m for m in self.population if m.score is not None), key=lambda m: m.score, reverse=True)
        self.parents = scored
        scores = np.array([m.score for m in scored], dtype=np.float64)
        self.generation_means.append(float(np.mean(scores)) if scored else 0.0)
        self.parent_probs = (scores + 1e-8) / (scores + 1e-8).sum()
        self.population = [Member(list(m.knob), m.index, m.score) for m in scored[: self.elite_num]]
        self.to_breed = self.pop_size - len(self.population)
        self.immigrants_left = min(self.immigrants, self.to_breed - 1)
        self.generation += 1
        if self.screen > 1:
            self._fit_screen_model()

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Learn from a measured batch: every score is kept (the screen model's data), and each
        child of this tuner takes its score in its generation and is learned from by the breeder,
        against the best score measured before the batch."""
        best_before = self.best_seen
        for inp, res in zip(inputs, results):
            flops = self.flops_of(res)
            self.scores[inp.config.index] = flops
            member = self.by_index.pop(inp.config.index, None)
            if member is not None:
                member.score = flops
                self.learn(member, flops, best_before)
        self.best_seen = max([best_before] + [self.flops_of(res) for res in results])

    # -- helpers of the steps above
    def _fit_screen_model(self) -> None:
        """Refit the screen model on every measurement so far."""
        if len(self.scores) < 2:
            return
        indices = list(self.scores)
        knobs = np.array([self.space.point2knob(i) for i in indices], dtype=np.int64)
        model = XGBCostModel("rank", seed=int(self.rng.integers(2**31)))
        model.fit(self._screen_features(knobs), np.array([self.scores[i] for i in indices]))
        if model.fitted:
            self.screen_model = model

    def _unvisited_left(self, taken: set[int]) -> int:
        return self.space.range_length - len(taken)

    def has_next(self) -> bool:
        return len(self.visited) < self.space.range_length

    def _model_pick(self, members: list[Member]) -> Member:
        """The member the screen model ranks highest (the only one, without a model)."""
        if len(members) == 1 or self.screen_model is None:
            return members[0]
        return members[int(np.argmax(self._predicted(members)))]

    def _predicted(self, members: list[Member]) -> np.ndarray:
        """The screen model's scores of the members' configs (higher: predicted faster)."""
        return self.screen_model.predict(self._screen_features(np.array([m.knob for m in members])))

    def _screen_features(self, knobs: np.ndarray) -> np.ndarray:
        """The screen model's inputs: AutoTVM's knob features."""
        return self.space.feature_matrix(knobs)

    def _screened_random_member(self, taken: set[int], count: int) -> Member:
        """A newcomer: the model's pick of up to ``count`` distinct unvisited random configs (one
        random config when there is no model to pick with)."""
        if self.screen_model is None or count == 1:
            return self._random_member(taken)
        if self._unvisited_left(taken) <= count and self.space.range_length < 10**7:
            points = [i for i in range(self.space.range_length) if i not in taken]
        else:  # drawn together, not one at a time: a pool is drawn for every immigrant
            rows = self.rng.integers(0, self.dims, size=(count, len(self.dims)))
            points = list(dict.fromkeys(p for p in map(self.space.knob2point, rows.tolist()) if p not in taken))
            if not points:
                return self._random_member(taken)
        return self._model_pick([Member(self.space.point2knob(p), p) for p in points])

    def _random_member(self, taken: set[int]) -> Member:
        if self._unvisited_left(taken) <= self.pop_size and self.space.range_length < 10**7:
            index = next(i for i in range(self.space.range_length) if i not in taken)  # enumerate the rest
        else:
            index = self.space.get_rand_index(self.rng, to_exclude=taken)
        return Member(self.space.point2knob(index), index)

    def reject(self, configs: Sequence[Any], reasons: Sequence[str]) -> None:
        """A rejected child is learned as a failure (the screen model and the agents see it) and
        gives its slot back, so it is bred again: on a GPU most children can be invalid, and a
        generation of rejected members would leave the GA almost nothing to breed from."""
        members = [self.by_index.get(c.index) for c in configs]
        super().reject(configs, reasons)
        for member in members:
            if member is not None and any(m is member for m in self.population):
                self.population = [m for m in self.population if m is not member]
                self.to_breed += 1

    def learn_history(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        """Resume from loaded records: the best of them become the population to breed from."""
        scored = sorted(((inp.config, self.flops_of(res)) for inp, res in zip(inputs, results)),
                        key=lambda pair: pair[1], reverse=True)[: self.pop_size]
        for cfg, flops in scored:
            self.scores[cfg.index] = flops
        self.best_seen = max([self.best_seen] + [self.flops_of(res) for res in results])
        if len(scored) >= 2:
            self.population = [Member(list(cfg.knob), cfg.index, flops) for cfg, flops in scored]
            self.to_breed = 0  # the next batch starts a generation bred from them

    def select_parent_pairs(self, parents: list[Member], probs: np.ndarray,
                            count: int) -> list[tuple[Member, Member]]:
        """``count`` pairs of parents, each drawn by fitness (with replacement, as AutoTVM's GA)."""
        picks = self.rng.choice(len(parents), size=(count, 2), p=probs)
        return [(parents[int(i)], parents[int(j)]) for i, j in picks]

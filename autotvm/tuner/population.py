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

from ..measure.measure import MeasureInput, MeasureResult
from .cost_model import XGBCostModel
from .tuner import Tuner

IMMIGRANT_POOL = 512  # random unvisited configs the screen model picks an immigrant from


def _check_count(name: str, value: Any, low: int, meaning: str = "") -> None:
    """Refuse anything but an integer >= ``low`` (``True`` is not a count) in one line."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}{meaning}, got {value!r}")


@dataclass
class Member:
    knob: list[int]
    index: int
    score: float | None = None  # FLOP/s once measured (0 for a failed config)
    info: Any = None  # what the breeder wants to remember about how the child was made


class PopulationTuner(Tuner):
    """Subclasses implement ``breed(parents, probs, taken) -> (knob, info)`` (``taken``: indices
    visited or already proposed) and may override ``breed_batch``, ``repair``, ``on_measured``
    and ``on_generation``."""

    def __init__(self, task: Any, pop_size: int = 100, elite_num: int = 3, screen: int = 1, immigrants: int = 0,
                 seed: int | None = None) -> None:
        super().__init__(task, seed=seed)
        _check_count("pop_size", pop_size, 2)
        _check_count("elite_num", elite_num, 0)
        if elite_num >= pop_size:
            raise ValueError(f"elite_num must be in [0, pop_size), got {elite_num}")
        _check_count("screen", screen, 1, " (1: no model screening)")
        _check_count("immigrants", immigrants, 0)
        if immigrants and screen == 1:
            raise ValueError(f"immigrants are the screen model's picks: they need screen > 1, got immigrants={immigrants} "
                             f"with screen=1")
        if immigrants > pop_size - elite_num - 1:
            raise ValueError(f"immigrants must leave at least one bred slot: at most pop_size - elite_num - 1 = "
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
        self.to_breed = self.pop_size
        self.by_index: dict[int, Member] = {}
        self.scores: dict[int, float] = {}
        self.screen_model: XGBCostModel | None = None
        self.immigrants_left = 0  # model-picked random slots still to fill in this generation
        self.immigrant_indices: list[int] = []  # every config proposed as an immigrant

    def reset(self) -> None:
        super().reset()
        self._reset_population()

    # -- what subclasses provide
    def breed(self, parents: list[Member], probs: np.ndarray, taken: set[int]) -> tuple[list[int], Any]:
        raise NotImplementedError

    def repair(self, knob: list[int], info: Any, taken: set[int]) -> tuple[list[int], Any] | None:
        """Turn a child that is already visited into an unvisited one (``None`` to give up)."""
        for _ in range(32):
            point = self.space.random_walk(self.space.knob2point(knob), self.rng)
            if point not in taken:
                return self.space.point2knob(point), info
        return None

    def on_measured(self, member: Member, flops: float) -> None:
        """Hook: a child of this tuner has been measured."""

    def on_generation(self) -> None:
        """Hook: a new generation starts (``self.parents`` and ``self.parent_probs`` are set)."""

    # -- generations
    def _start_generation(self) -> None:
        scored = [m for m in self.population if m.score is not None]
        scored.sort(key=lambda m: m.score, reverse=True)
        elites = scored[: self.elite_num]
        self.parents = scored
        scores = np.array([m.score for m in scored], dtype=np.float64) + 1e-8
        self.parent_probs = scores / scores.sum()
        self.population = [Member(list(m.knob), m.index, m.score) for m in elites]
        self.to_breed = self.pop_size - len(elites)
        self.immigrants_left = min(self.immigrants, self.to_breed - 1)
        self.generation += 1
        if self.screen > 1:
            self._fit_screen_model()
        self.on_generation()

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

    def next_batch(self, batch_size: int) -> list:
        taken = set(self.visited)
        batch = []
        while len(batch) < batch_size and self._unvisited_left(taken) > 0:
            if self.to_breed == 0:
                self._start_generation()
            member = self._propose(taken)
            taken.add(member.index)
            self.population.append(member)
            self.by_index[member.index] = member
            self.to_breed -= 1
            batch.append(self.space.get(member.index))
        return batch

    def _propose(self, taken: set[int]) -> Member:
        queued = self._take_queued(taken)
        if queued is not None:
            return Member(self.space.point2knob(queued), queued)
        if self.generation == 0 or len(self.parents) == 0 or self._unvisited_left(taken) <= self.pop_size:
            return self._random_member(taken)
        count = 1 if self.screen_model is None else self.screen
        if self.immigrants_left > 0:
            self.immigrants_left -= 1
            member = self._screened_random_member(taken, IMMIGRANT_POOL)
            self.immigrant_indices.append(member.index)
            return member
        candidates = self._bred_candidates(taken, count)
        return self._model_pick(candidates) if candidates else self._random_member(taken)

    def _bred_candidates(self, taken: set[int], count: int) -> list[Member]:
        """Up to ``count`` distinct unvisited children, bred together and repaired."""
        candidates: dict[int, Member] = {}
        for knob, info in self.breed_batch(self.parents, self.parent_probs, taken, count):
            member = self._repaired(knob, info, taken | candidates.keys())
            if member is not None:
                candidates[member.index] = member
        return list(candidates.values())

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
        else:  # drawn together: a pool of 512 one at a time cost 18 ms, a visible share of C1's tuning
            rows = self.rng.integers(0, self.dims, size=(count, len(self.dims)))
            points = list(dict.fromkeys(p for p in map(self.space.knob2point, rows.tolist()) if p not in taken))
            if not points:
                return self._random_member(taken)
        return self._model_pick([Member(self.space.point2knob(p), p) for p in points])

    def breed_batch(self, parents: list[Member], probs: np.ndarray, taken: set[int],
                    count: int) -> list[tuple[list[int], Any]]:
        """``count`` children for one slot (the screen's candidates). Override to breed them
        together, e.g. to score all their choices in one forward pass of a network."""
        return [self.breed(parents, probs, taken) for _ in range(count)]

    def _repaired(self, knob: list[int], info: Any, taken: set[int]) -> Member | None:
        """The bred child, repaired until unvisited (``None`` if repair gives up)."""
        if self.space.knob2point(knob) in taken:
            repaired = self.repair(knob, info, taken)
            if repaired is None:
                return None
            knob, info = repaired
        return Member(list(knob), self.space.knob2point(knob), None, info)

    def _random_member(self, taken: set[int]) -> Member:
        if self._unvisited_left(taken) <= self.pop_size and self.space.range_length < 10**7:
            index = next(i for i in range(self.space.range_length) if i not in taken)  # enumerate the rest
        else:
            index = self.space.get_rand_index(self.rng, to_exclude=taken)
        return Member(self.space.point2knob(index), index)

    def update(self, inputs: Sequence[MeasureInput], results: Sequence[MeasureResult]) -> None:
        for inp, res in zip(inputs, results):
            flops = self.flops_of(res)
            self.scores[inp.config.index] = flops
            member = self.by_index.pop(inp.config.index, None)
            if member is None:
                continue
            member.score = flops
            self.on_measured(member, flops)

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
        if len(scored) >= 2:
            self.population = [Member(list(cfg.knob), cfg.index, flops) for cfg, flops in scored]
            self.to_breed = 0  # the next batch starts a generation bred from them

    def select_parents(self, parents: list[Member], probs: np.ndarray) -> tuple[Member, Member]:
        """Two parents, fitness-proportional (with replacement, as AutoTVM's GA)."""
        return self.select_parent_pairs(parents, probs, 1)[0]

    def select_parent_pairs(self, parents: list[Member], probs: np.ndarray,
                            count: int) -> list[tuple[Member, Member]]:
        """``count`` pairs of parents, drawn as ``select_parents`` draws one."""
        picks = self.rng.choice(len(parents), size=(count, 2), p=probs)
        return [(parents[int(i)], parents[int(j)]) for i, j in picks]

"""Baselines that walk the index space: uniform random and grid search."""

from __future__ import annotations

from typing import Any

from ..checks import AutoTVMError, integer
from .tuner import Tuner

# (start, end), inclusive: a slice of the index space
RANGE_IDX = {"anyOf": [{"type": "null"}, {"type": "array", "items": integer(0), "minItems": 2, "maxItems": 2}]}


def _index_range(tuner: Tuner, range_idx: tuple[int, int] | None) -> tuple[int, int]:
    """The inclusive slice of the index space a tuner walks (all of it by default)."""
    tuner.check_options(range_idx=range_idx)
    length = tuner.space.range_length
    start, end = range_idx if range_idx is not None else (0, length - 1)
    if not 0 <= start <= end < length:
        raise AutoTVMError(f"range_idx {range_idx} is outside [0, {length - 1}]")
    return int(start), int(end)


class RandomTuner(Tuner):
    """Uniform random configs, never one already visited.

    ``range_idx=(start, end)`` (inclusive) restricts the search to a slice of the index space.
    """

    OPTIONS = {"range_idx": RANGE_IDX}

    def __init__(self, task: Any, range_idx: tuple[int, int] | None = None, seed: int | None = None) -> None:
        super().__init__(task, seed=seed)
        self.range = _index_range(self, range_idx)

    def _in_range(self) -> int:
        start, end = self.range
        return sum(1 for v in self.visited if start <= v <= end) if (start, end) != (0, self.space.range_length - 1) \
            else len(self.visited)

    def has_next(self) -> bool:
        return self._in_range() < self.range[1] - self.range[0] + 1

    def next_batch(self, batch_size: int) -> list:
        start, end = self.range
        full = (start, end) == (0, self.space.range_length - 1)
        batch, chosen = [], set()
        while len(batch) < batch_size and self._in_range() + len(batch) < end - start + 1:
            index = self._take_queued(self.visited | chosen)
            if index is None or not start <= index <= end:
                if full:
                    index = self.space.get_rand_index(self.rng, to_exclude=self.visited | chosen)
                else:
                    index = int(self.rng.integers(start, end + 1))
                    if index in self.visited or index in chosen:
                        continue
            chosen.add(index)
            batch.append(self.space.get(index))
        return batch


class GridSearchTuner(Tuner):
    """Configs in index order, skipping visited ones."""

    OPTIONS = {"range_idx": RANGE_IDX}

    def __init__(self, task: Any, range_idx: tuple[int, int] | None = None, seed: int | None = None) -> None:
        super().__init__(task, seed=seed)
        self.range = _index_range(self, range_idx)
        self.counter = self.range[0]

    def has_next(self) -> bool:
        while self.counter <= self.range[1] and self.counter in self.visited:
            self.counter += 1
        return self.counter <= self.range[1]

    def next_batch(self, batch_size: int) -> list:
        batch, chosen = [], set()
        while len(batch) < batch_size:
            index = self._take_queued(self.visited | chosen)
            if index is None or not self.range[0] <= index <= self.range[1]:
                while self.has_next() and self.counter in chosen:
                    self.counter += 1
                if not self.has_next():
                    break
                index = self.counter
                self.counter += 1
            chosen.add(index)
            batch.append(self.space.get(index))
        return batch

    def reset(self) -> None:
        super().reset()
        self.counter = self.range[0]

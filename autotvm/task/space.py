"""Knob spaces with AutoTVM's semantics.

A ``ConfigSpace`` is an ordered list of knobs, each a finite list of entities. A config is one
entity per knob, identified by a mixed-radix index whose least significant digit is the first
knob (``point2knob`` / ``knob2point``), exactly as in AutoTVM. Spaces are defined either by a
template calling ``define_*`` or from the sampling decisions of a MetaSchedule design space.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np


class InstantiationError(RuntimeError):
    """A config that cannot be turned into a valid program (rejected, not a crash)."""


# ----------------------------------------------------------------------------- entities
@dataclass(frozen=True)
class SplitEntity:
    """Factors of one loop, outermost first; their product is the loop extent."""

    size: tuple[int, ...]

    def apply(self, sch: Any, *args: Any) -> list:
        """Split a loop of a ``tvm.s_tir.Schedule`` into ``len(size)`` loops: ``apply(sch, loop)``,
        or AutoTVM's ``apply(sch, op, loop)`` (the op or block in the middle is not needed)."""
        return list(sch.split(args[-1], factors=list(self.size)))

    def to_json(self) -> list[int]:
        return [-1, *self.size[1:]]

    def features(self) -> list[float]:
        return [math.log2(f) for f in self.size]


@dataclass(frozen=True)
class ReorderEntity:
    """A permutation of loops."""

    perm: tuple[int, ...]

    def apply(self, sch: Any, *args: Any) -> list:
        """Reorder loops: ``apply(sch, loops)`` or AutoTVM's ``apply(sch, op, loops)``."""
        loops = args[-1]
        ordered = [loops[i] for i in self.perm]
        sch.reorder(*ordered)
        return ordered

    def to_json(self) -> list[int]:
        return list(self.perm)

    def features(self) -> list[float]:
        return [float(p) for p in self.perm]


ANNOTATIONS = ("none", "unroll", "vec")


@dataclass(frozen=True)
class AnnotateEntity:
    """One annotation per loop: "none", "unroll" or "vec"."""

    anns: tuple[str, ...]

    def apply(self, sch: Any, *args: Any, **_autotvm_options: Any) -> None:
        """Annotate loops: ``apply(sch, loops)`` or AutoTVM's ``apply(sch, op, loops, ...)`` (its
        ``axis_lens``, ``max_unroll`` and ``cfg`` keywords are accepted and not needed)."""
        loops = args[1] if len(args) > 1 and isinstance(args[1], (list, tuple)) else args[0]
        for loop, ann in zip(loops, self.anns):
            if ann == "unroll":
                sch.unroll(loop)
            elif ann == "vec":
                sch.vectorize(loop)

    def to_json(self) -> list[str]:
        return list(self.anns)

    def features(self) -> list[float]:
        return [float(ANNOTATIONS.index(a)) for a in self.anns]


@dataclass(frozen=True)
class OtherOptionEntity:
    """A value chosen from a list of candidates."""

    val: Any

    def to_json(self) -> Any:
        return self.val

    def features(self) -> list[float]:
        return [float(self.val)] if isinstance(self.val, (int, float)) and not isinstance(self.val, bool) else []


_KIND_CODE = {SplitEntity: "sp", ReorderEntity: "re", AnnotateEntity: "an", OtherOptionEntity: "ot"}


def _hashable(value: Any) -> Any:
    return tuple(_hashable(v) for v in value) if isinstance(value, (list, tuple)) else value


@dataclass
class Knob:
    """One dimension of a space: a name and its candidate entities."""

    name: str
    entities: list
    meta: dict = field(default_factory=dict)  # e.g. the MetaSchedule instruction it drives

    def __post_init__(self) -> None:
        if not self.entities:
            raise InstantiationError(f"knob {self.name!r} has no candidate")
        self._lookup = {_hashable(e.to_json()): i for i, e in enumerate(self.entities)}
        self._directions: dict[int, tuple[list[list[int]], np.ndarray]] = {}  # value -> (steps, valid)

    def __len__(self) -> int:
        return len(self.entities)

    @property
    def kind(self) -> str:
        return _KIND_CODE[type(self.entities[0])]

    def _adjacent_values(self, value: int) -> list[int]:
        """The values next to ``value`` in value order, for numeric options (none otherwise)."""
        vals = [e.val if isinstance(e, OtherOptionEntity) else None for e in self.entities]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
            return []
        order = sorted(range(len(vals)), key=lambda i: vals[i])
        at = order.index(value)
        return sorted(order[j] for j in (at - 1, at + 1) if 0 <= j < len(order))

    def direction_steps(self, value: int, direction: int) -> list[int]:
        """The values one step from ``value`` in a named direction (``DIRECTIONS[direction]``):
        for a split, ``(a, b)`` moves one prime factor from level ``a`` to level ``b`` (one value
        per prime of level a's factor); for numeric options, "down" and "up" are the adjacent
        values in value order. Empty where the direction does not apply (level a is 1, level b
        does not exist, the result is not a candidate). A direction means the same on every task,
        so an agent can learn which way to move a tile."""
        return self._direction_table(value)[0][direction]

    def valid_directions(self, value: int) -> np.ndarray:
        """One bool per direction of ``DIRECTIONS``: whether it has a step from ``value``."""
        return self._direction_table(value)[1]

    def _direction_table(self, value: int) -> tuple[list[list[int]], np.ndarray]:
        if value not in self._directions:
            steps = [self._steps_towards(value, d) for d in DIRECTIONS]
            self._directions[value] = steps, np.array([bool(s) for s in steps])
        return self._directions[value]

    def _steps_towards(self, value: int, direction: Any) -> list[int]:
        entity = self.entities[value]
        if isinstance(entity, SplitEntity) and isinstance(direction, tuple):
            a, b = direction
            if max(a, b) >= len(entity.size):
                return []
            steps = []
            for p in _prime_factors(entity.size[a]):
                size = list(entity.size)
                size[a], size[b] = size[a] // p, size[b] * p
                step = self._lookup.get(_hashable(SplitEntity(tuple(size)).to_json()))
                if step is not None:
                    steps.append(step)
            return steps
        if direction in ("down", "up") and not isinstance(entity, SplitEntity):
            return [v for v in self._adjacent_values(value) if (self.entities[v].val < entity.val) == (direction == "down")]
        return []

    def nearest_index(self, entity: Any) -> int | None:
        """The index of the candidate nearest to ``entity`` of a knob of the same name and kind on
        another shape (``ConfigSpace.translate``): the same value if it is a candidate; for a split,
        the closest inner factors in log scale; for a numeric option, the closest value; else None."""
        exact = self._lookup.get(_hashable(entity.to_json()))
        if exact is not None:
            return exact
        if isinstance(entity, SplitEntity):
            inner = np.log2(entity.size[1:])
            return int(np.argmin([np.abs(np.log2(c.size[1:]) - inner).sum() for c in self.entities]))
        values = [getattr(c, "val", None) for c in self.entities] + [getattr(entity, "val", None)]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            return int(np.argmin([abs(v - entity.val) for v in values[:-1]]))
        return None

    def index_of_json(self, value: Any) -> int:
        try:
            return self._lookup[_hashable(value)]
        except KeyError:
            raise InstantiationError(f"value {value!r} is not a candidate of knob {self.name!r}") from None


# ----------------------------------------------------------------------------- helpers
MAX_LEVELS = 5  # split levels an agent's directions cover (CPU tiles have 4, GPU tiles up to 5)
# Every named small step, the same list on every task: moving a prime factor from level a to
# level b of a split (outermost level 0), then one value down or up for numeric options.
DIRECTIONS: tuple = (*itertools.permutations(range(MAX_LEVELS), 2), "down", "up")


def _prime_factors(n: int) -> list[int]:
    primes, d = [], 2
    while d * d <= n:
        if n % d == 0:
            primes.append(d)
            while n % d == 0:
                n //= d
        d += 1
    return primes + ([n] if n > 1 else [])


def factorizations(extent: int, parts: int, max_innermost: int | None = None, power2: bool = False) -> list[tuple]:
    """Every ordered tuple of ``parts`` positive ints whose product is ``extent``."""
    divisors = [d for d in range(1, extent + 1) if extent % d == 0]
    if power2:
        divisors = [d for d in divisors if d & (d - 1) == 0]

    def rec(rest: int, k: int) -> Iterable[tuple]:
        if k == 1:
            if not power2 or rest & (rest - 1) == 0:
                yield (rest,)
            return
        for d in divisors:
            if d > rest:
                break
            if rest % d == 0:
                for tail in rec(rest // d, k - 1):
                    yield (d, *tail)

    out = list(rec(extent, parts))
    if max_innermost is not None:
        out = [f for f in out if f[-1] <= max_innermost]
    return out


def _extent_of(axis: Any, sch: Any = None) -> int:
    """The extent of an int, a TE IterVar, a TIR loop or a loop (LoopRV) of a schedule: ``sch``,
    or else the ``tvm.s_tir.Schedule`` the calling template is building (as AutoTVM read a TE
    axis's extent, a template passes its loop alone)."""
    if isinstance(axis, (int, np.integer)):
        return int(axis)
    if hasattr(axis, "dom"):
        return int(axis.dom.extent)
    if hasattr(axis, "extent"):
        return int(axis.extent)
    for candidate in [sch] if sch is not None else _schedules_of_callers():
        try:
            return int(candidate.get(axis).extent)
        except Exception:  # a loop of another schedule
            continue
    raise InstantiationError(f"cannot find the extent of axis {axis!r}: pass an int, an IterVar, a TIR loop, or "
                             "a loop of the tvm.s_tir.Schedule the template is building")


def _schedules_of_callers(depth: int = 6) -> list:
    """The ``tvm.s_tir.Schedule`` objects held by the callers' local variables, nearest first."""
    import tvm

    found, frame = [], sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            break
        found += [v for v in frame.f_locals.values()
                  if isinstance(v, tvm.s_tir.Schedule) and all(v is not f for f in found)]
        frame = frame.f_back
    return found


# ----------------------------------------------------------------------------- the space
class ConfigSpace:
    """The knobs of a task, in definition order, with AutoTVM's index algebra."""

    def __init__(self) -> None:
        self.knobs: list[Knob] = []
        self._by_name: dict[str, Knob] = {}
        self._dims: list[int] | None = None
        self._digest: str | None = None  # kept until a knob is added
        self._signature: tuple | None = None
        self.flop = 0.0
        self.errors: list[str] = []

    # -- definition (template mode)
    def _add(self, knob: Knob) -> Knob:
        if knob.name in self._by_name:
            raise InstantiationError(f"knob {knob.name!r} is defined twice")
        self.knobs.append(knob)
        self._by_name[knob.name] = knob
        self._dims = None
        self._digest = self._signature = None
        return knob

    def define_split(self, name: str, axis: Any, policy: str = "factors", num_outputs: int = 2,
                     max_factor: int | None = None, filter: Callable | None = None, sch: Any = None) -> SplitEntity:
        """Split knob over the ordered factorizations of ``axis``'s extent.

        ``policy``: "factors" (every factorization) or "power2" (factors that are powers of two).
        ``max_factor`` bounds the innermost factor; ``filter`` drops entities it returns False for.
        """
        if policy not in ("factors", "power2"):
            raise InstantiationError(f"unknown split policy {policy!r}; allowed: factors, power2")
        extent = _extent_of(axis, sch)
        cands = [SplitEntity(f) for f in factorizations(extent, num_outputs, max_factor, policy == "power2")]
        if filter is not None:
            cands = [c for c in cands if filter(c)]
        return self._add(Knob(name, cands, {"extent": extent})).entities[0]

    def define_reorder(self, name: str, axes: Sequence[Any], policy: str = "all",
                       candidate: Sequence[Sequence[int]] | None = None) -> ReorderEntity:
        """Reorder knob: "identity", "all" permutations, or explicit "candidate" permutations."""
        n = len(axes)
        if policy == "identity":
            perms = [tuple(range(n))]
        elif policy == "all":
            perms = list(itertools.permutations(range(n)))
        elif policy == "candidate":
            if not candidate:
                raise InstantiationError("define_reorder(policy='candidate') needs candidate=[...]")
            perms = [tuple(p) for p in candidate]
        else:
            raise InstantiationError(f"unknown reorder policy {policy!r}; allowed: identity, all, candidate")
        return self._add(Knob(name, [ReorderEntity(p) for p in perms])).entities[0]

    def define_annotate(self, name: str, axes: Sequence[Any], policy: str = "try_unroll_vec") -> AnnotateEntity:
        """Annotation knob: "none", "unroll", "vec" (last axis) or "try_unroll_vec" (each loop)."""
        n = len(axes)
        if policy == "none":
            options = [("none",) * n]
        elif policy == "unroll":
            options = [("none",) * n, ("unroll",) * n]
        elif policy == "vec":
            options = [("none",) * n, ("none",) * (n - 1) + ("vec",)]
        elif policy == "try_unroll_vec":
            options = [tuple(p) for p in itertools.product(("none", "unroll"), repeat=n - 1)]
            options = [o + (last,) for o in options for last in ("none", "unroll", "vec")]
        else:
            raise InstantiationError(f"unknown annotate policy {policy!r}; allowed: none, unroll, vec, try_unroll_vec")
        return self._add(Knob(name, [AnnotateEntity(o) for o in options])).entities[0]

    def define_knob(self, name: str, candidate: Sequence[Any]) -> OtherOptionEntity:
        """A knob over arbitrary candidate values."""
        return self._add(Knob(name, [OtherOptionEntity(v) for v in candidate])).entities[0]

    def add_flop(self, flop: float) -> None:
        self.flop += float(flop)

    def raise_error(self, msg: str) -> None:
        raise InstantiationError(msg)

    def __getitem__(self, name: str) -> Any:
        """In template (definition) mode a knob reads as its first candidate."""
        return self._by_name[name].entities[0]

    # -- index algebra
    @property
    def dims(self) -> list[int]:
        """Each knob's number of values (kept, not rebuilt: ``knob2point`` and ``point2knob`` read
        it on every call, tens of thousands of times in a screened GA run; do not modify it)."""
        if self._dims is None:
            self._dims = [len(k) for k in self.knobs]
        return self._dims

    @property
    def range_length(self) -> int:
        return math.prod(self.dims)

    def __len__(self) -> int:
        """``range_length``, capped at ``sys.maxsize`` (Python's limit; such a space is never exhausted)."""
        return min(self.range_length, sys.maxsize)

    def point2knob(self, point: int) -> list[int]:
        """Index -> knob vector, first knob least significant."""
        knob = []
        for dim in self.dims:
            knob.append(int(point % dim))
            point //= dim
        return knob

    def knob2point(self, knob: Sequence[int]) -> int:
        """Knob vector -> index; inverse of ``point2knob``."""
        point, stride = 0, 1
        for k, dim in zip(knob, self.dims):
            point += int(k) * stride
            stride *= dim
        return point

    def is_index_valid(self, index: int) -> bool:
        return 0 <= index < self.range_length

    def get(self, index: int) -> "ConfigEntity":
        if not self.is_index_valid(index):
            raise IndexError(f"config index {index} is out of range [0, {self.range_length})")
        knob = self.point2knob(index)
        return ConfigEntity(self, index, knob)

    def sample_ints(self, m: int, rng: np.random.Generator) -> list[int]:
        """``m`` distinct random indices (all of them if the space is smaller)."""
        total = self.range_length
        if m >= total:
            return [int(i) for i in rng.permutation(total)]
        if total < 2**62:
            seen: set[int] = set()
            while len(seen) < m:
                seen.update(int(i) for i in rng.integers(0, total, size=m - len(seen)))
            return list(seen)[:m] if len(seen) == m else list(seen)
        out: list[int] = []
        seen = set()
        while len(out) < m:
            point = self.knob2point([int(rng.integers(d)) for d in self.dims])
            if point not in seen:
                seen.add(point)
                out.append(point)
        return out

    def get_rand_index(self, rng: np.random.Generator, to_exclude: set | None = None) -> int:
        """A random index not in ``to_exclude`` (the caller ensures one exists)."""
        to_exclude = to_exclude or set()
        total = self.range_length
        if len(to_exclude) >= total:
            raise IndexError("every config of the space is excluded")
        if len(to_exclude) > total * 0.9 and total < 1_000_000:
            rest = [i for i in range(total) if i not in to_exclude]
            return int(rest[int(rng.integers(len(rest)))])
        while True:
            point = self.knob2point([int(rng.integers(d)) for d in self.dims])
            if point not in to_exclude:
                return point

    def random_walk(self, point: int, rng: np.random.Generator) -> int:
        """A neighbour of ``point`` that differs in exactly one knob (if any knob has choices)."""
        knob = self.point2knob(point)
        movable = [i for i, d in enumerate(self.dims) if d > 1]
        if not movable:
            return point
        i = movable[int(rng.integers(len(movable)))]
        new = int(rng.integers(self.dims[i] - 1))
        knob[i] = new if new < knob[i] else new + 1
        return self.knob2point(knob)

    def knob_features(self, knob: Sequence[int]) -> list[float]:
        """Numeric features of a knob vector: each knob's normalised index plus its entity's values."""
        out: list[float] = []
        for k, kn in zip(knob, self.knobs):
            out.append(k / max(len(kn) - 1, 1))
            out.extend(kn.entities[k].features())
        return out

    def feature_matrix(self, knobs: np.ndarray) -> np.ndarray:
        """``knob_features`` of many knob vectors (rows) at once, through per-knob lookup tables."""
        if not hasattr(self, "_feature_tables"):
            self._feature_tables = []
            for kn in self.knobs:
                rows = [[k / max(len(kn) - 1, 1), *e.features()] for k, e in enumerate(kn.entities)]
                width = max(len(r) for r in rows)
                self._feature_tables.append(np.array([r + [0.0] * (width - len(r)) for r in rows], dtype=np.float32))
        knobs = np.asarray(knobs, dtype=np.int64).reshape(-1, len(self.knobs))
        return np.concatenate([table[knobs[:, i]] for i, table in enumerate(self._feature_tables)], axis=1)

    @property
    def digest(self) -> str:
        """A short hash of the knobs and their candidates. Records carry the digest of the space
        they were measured in: a record of another space (a knob renamed, candidates changed,
        another design space) is stale, even where its knob values happen to exist here."""
        if self._digest is None:
            text = json.dumps([[kn.name, [e.to_json() for e in kn.entities]] for kn in self.knobs], default=str)
            self._digest = hashlib.sha1(text.encode()).hexdigest()[:16]
        return self._digest

    @property
    def signature(self) -> tuple:
        """The knobs' names, kinds and widths (a split's levels): spaces with the same signature
        come from the same template (or MetaSchedule design space) on different shapes, so a
        config of one has a counterpart in the other (``translate``). Kept, as ``digest`` is."""
        if self._signature is None:
            widths = [len(j) if isinstance(j, list) else 0 for j in (kn.entities[0].to_json() for kn in self.knobs)]
            self._signature = tuple((kn.name, kn.kind, w) for kn, w in zip(self.knobs, widths))
        return self._signature

    def translate(self, config: "ConfigEntity") -> "ConfigEntity | None":
        """The config of this space nearest to ``config`` of a space with the same ``signature``:
        each split takes the candidate whose inner factors are closest in log scale (the outer
        factor follows from the extent), a numeric option the nearest value, any other knob the
        same value. ``None`` when the signatures differ or a non-numeric value has no counterpart.
        Used to start a task's search from the best configs of its sibling tasks."""
        if config.space.signature != self.signature:
            return None
        knob = [kn.nearest_index(entity) for kn, entity in zip(self.knobs, config.entity_map.values())]
        return None if None in knob else self.get(self.knob2point(knob))

    def from_json_dict(self, json_dict: dict) -> "ConfigEntity":
        """Rebuild a config from ``ConfigEntity.to_json_dict``; the entities must match this space."""
        entity = json_dict.get("entity")
        if not isinstance(entity, list) or len(entity) != len(self.knobs):
            raise InstantiationError("record's config does not match this task's space")
        knob = []
        for (name, _kind, value), kn in zip(entity, self.knobs):
            if name != kn.name:
                raise InstantiationError(f"record's knob {name!r} is not this space's {kn.name!r}")
            knob.append(kn.index_of_json(value))
        return ConfigEntity(self, self.knob2point(knob), knob)

    def __repr__(self) -> str:
        lines = [f"ConfigSpace (len={self.range_length}, {len(self.knobs)} knobs):"]
        lines += [f"  {i:2d} {k.name}: {k.kind} x{len(k)}" for i, k in enumerate(self.knobs)]
        return "\n".join(lines)


class ConfigEntity:
    """One point of a ``ConfigSpace``: read knobs with ``cfg["name"]``."""

    def __init__(self, space: ConfigSpace, index: int, knob: Sequence[int]) -> None:
        self.space = space
        self.index = int(index)
        self.knob = list(knob)
        self.code_hash = None
        self.flop = space.flop

    def __getitem__(self, name: str) -> Any:
        kn = self.space._by_name[name]
        return kn.entities[self.knob[self.space.knobs.index(kn)]]

    # templates call these in instantiation mode too; they must not redefine anything
    def define_split(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return self[name]

    define_reorder = define_annotate = define_knob = define_split

    def add_flop(self, flop: float) -> None:
        """Ignored here: the FLOP count was taken when the space was defined."""

    def raise_error(self, msg: str) -> None:
        raise InstantiationError(msg)

    @property
    def entity_map(self) -> dict[str, Any]:
        return {kn.name: kn.entities[k] for kn, k in zip(self.space.knobs, self.knob)}

    def get_flatten_feature(self) -> np.ndarray:
        return np.asarray(self.space.knob_features(self.knob), dtype=np.float32)

    def to_json_dict(self) -> dict:
        return {
            "index": self.index,
            "code_hash": self.code_hash,
            "entity": [[kn.name, kn.kind, kn.entities[k].to_json()] for kn, k in zip(self.space.knobs, self.knob)],
        }

    def __repr__(self) -> str:
        body = ", ".join(f"{n}={e.to_json()}" for n, e in self.entity_map.items())
        return f"[{body}],None,{self.index}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigEntity) and other.space is self.space and other.index == self.index

    def __hash__(self) -> int:
        return hash(self.index)

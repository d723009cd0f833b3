"""ConfigSpace semantics: index algebra, sampling, JSON round-trips, knob definitions."""

import numpy as np
import pytest

from autotvm.task.space import DIRECTIONS, ConfigSpace, InstantiationError, factorizations


def _space():
    space = ConfigSpace()
    space.define_split("tile", 16, num_outputs=3)
    space.define_reorder("order", [0, 1, 2], policy="all")
    space.define_annotate("ann", [0, 1], policy="try_unroll_vec")
    space.define_knob("unroll", [0, 16, 64])
    return space


def test_dims_and_length():
    space = _space()
    assert space.dims == [15, 6, 6, 3]
    assert len(space) == 15 * 6 * 6 * 3


def test_point2knob_knob2point_roundtrip_first_knob_least_significant():
    space = _space()
    for point in range(len(space)):
        knob = space.point2knob(point)
        assert space.knob2point(knob) == point
        assert all(0 <= k < d for k, d in zip(knob, space.dims))
    assert space.point2knob(1) == [1, 0, 0, 0]
    assert space.point2knob(15) == [0, 1, 0, 0]


def test_get_and_entities():
    space = _space()
    cfg = space.get(15 * 6 * 6 * 2 + 1)
    assert cfg["unroll"].val == 64
    assert np.prod(cfg["tile"].size) == 16
    with pytest.raises(IndexError):
        space.get(len(space))


def test_json_roundtrip():
    space = _space()
    for index in (0, 7, 500, len(space) - 1):
        cfg = space.get(index)
        back = space.from_json_dict(cfg.to_json_dict())
        assert back.index == index and back.knob == cfg.knob
    entity = space.get(3).to_json_dict()["entity"]
    assert entity[0][0] == "tile" and entity[0][1] == "sp" and entity[0][2][0] == -1


def test_from_json_rejects_a_foreign_config():
    space = _space()
    bad = space.get(0).to_json_dict()
    bad["entity"][3][2] = 7
    with pytest.raises(InstantiationError):
        space.from_json_dict(bad)


def test_sample_ints_distinct_and_in_range():
    space = _space()
    rng = np.random.default_rng(0)
    sample = space.sample_ints(100, rng)
    assert len(sample) == len(set(sample)) == 100
    assert all(space.is_index_valid(i) for i in sample)
    assert sorted(space.sample_ints(len(space) + 5, rng)) == list(range(len(space)))


def test_random_walk_changes_exactly_one_knob():
    space = _space()
    rng = np.random.default_rng(1)
    for point in space.sample_ints(50, rng):
        new = space.random_walk(point, rng)
        diff = [a != b for a, b in zip(space.point2knob(point), space.point2knob(new))]
        assert sum(diff) == 1


def test_get_rand_index_excludes():
    space = ConfigSpace()
    space.define_knob("x", list(range(10)))
    rng = np.random.default_rng(0)
    exclude = set(range(9))
    assert space.get_rand_index(rng, to_exclude=exclude) == 9


def test_factorizations_and_power2():
    facts = factorizations(12, 2)
    assert facts == [(1, 12), (2, 6), (3, 4), (4, 3), (6, 2), (12, 1)]
    assert factorizations(16, 2, max_innermost=4) == [(4, 4), (8, 2), (16, 1)]
    assert all(a & (a - 1) == 0 and b & (b - 1) == 0 for a, b in factorizations(24, 2, power2=True))


def test_knob_features_match_feature_matrix():
    space = _space()
    rng = np.random.default_rng(2)
    knobs = np.array([space.point2knob(p) for p in space.sample_ints(20, rng)])
    matrix = space.feature_matrix(knobs)
    for row, knob in zip(matrix, knobs):
        np.testing.assert_allclose(row, space.get(space.knob2point(knob)).get_flatten_feature())


def test_large_space_is_exact():
    space = ConfigSpace()
    for i in range(12):
        space.define_knob(f"k{i}", list(range(97)))
    assert space.range_length == 97**12
    big = space.range_length - 1
    assert space.knob2point(space.point2knob(big)) == big
    rng = np.random.default_rng(0)
    assert len(set(space.sample_ints(50, rng))) == 50


def _split_numeric_and_unordered_knobs():
    """A split of 12 in three levels, numeric options out of order, options with no order."""
    space = ConfigSpace()
    space.define_split("tile", 12, num_outputs=3)
    space.define_knob("unroll", [0, 64, 16])
    space.define_knob("mode", ["a", "b", "c"])
    return space.knobs


def test_directions_name_the_same_step_on_every_knob():
    tile, unroll, mode = _split_numeric_and_unordered_knobs()
    at = [e.size for e in tile.entities].index((2, 3, 2))
    step = {d: {tile.entities[v].size for v in tile.direction_steps(at, i)} for i, d in enumerate(DIRECTIONS)}
    assert step[(0, 2)] == {(1, 3, 4)}  # the factor 2 of the outermost level moved innermost
    assert step[(1, 0)] == {(6, 1, 2)}
    assert step[(0, 3)] == set()  # no fourth level
    one = [e.size for e in tile.entities].index((1, 12, 1))
    middle_to_inner = DIRECTIONS.index((1, 2))
    assert {tile.entities[v].size for v in tile.direction_steps(one, middle_to_inner)} == {(1, 6, 2), (1, 4, 3)}
    assert not tile.valid_directions(one)[DIRECTIONS.index((0, 1))]  # level 0 holds no factor to move
    down, up = DIRECTIONS.index("down"), DIRECTIONS.index("up")
    assert unroll.direction_steps(2, down) == [0] and unroll.direction_steps(2, up) == [1]  # 16: down 0, up 64
    assert unroll.direction_steps(1, up) == [] and mode.direction_steps(1, down) == []  # no order: no direction
    # the directions from (2, 3, 2) are every move of one prime factor between two levels
    steps = {tile.entities[v].size for d in range(len(DIRECTIONS)) for v in tile.direction_steps(at, d)}
    assert steps == {(1, 6, 2), (1, 3, 4), (6, 1, 2), (2, 1, 6), (4, 3, 1), (2, 6, 1)}


def _tiled(extent, unroll_steps=(0, 16, 64)):
    space = ConfigSpace()
    space.define_split("tile", extent, num_outputs=3)
    space.define_knob("unroll", list(unroll_steps))
    return space


def test_translate_takes_the_nearest_tiling_and_option_of_a_sibling_space():
    small, large = _tiled(48), _tiled(64, (0, 32, 128))
    source = next(c for c in map(small.get, range(small.range_length))
                  if c["tile"].size == (3, 4, 4) and c["unroll"].val == 64)
    mapped = large.translate(source)
    assert mapped["tile"].size == (4, 4, 4)  # the same inner factors, the outer one from the extent
    assert mapped["unroll"].val == 32  # nearest to 64 of (0, 32, 128) (ties: the first)
    source = next(c for c in map(small.get, range(small.range_length)) if c["tile"].size == (1, 3, 16))
    assert large.translate(source)["tile"].size[1:] in ((2, 16), (4, 16))  # 3 is no factor of 64: a neighbour


def test_translate_refuses_a_space_of_other_knobs():
    other = ConfigSpace()
    other.define_split("tile", 48, num_outputs=2)
    other.define_knob("unroll", [0, 16])
    assert _tiled(48).signature != other.signature
    assert _tiled(64).translate(other.get(0)) is None

"""The summary statistics that the tuner comparisons report."""

import pytest

from tools.compare import geomean_ratio, geomean_ratio_interval, summarise


def _runs(tuner: str, op: str, bests: list[float]) -> list[dict]:
    return [{"op": op, "tuner": tuner, "seed": s, "best_gflops": b, "trials_to_90": None, "overhead": None,
             "wall_seconds": 1.0} for s, b in enumerate(bests)]


def test_interval_is_a_point_when_every_seed_agrees():
    runs = _runs("a", "x", [20, 20, 20]) + _runs("b", "x", [10, 10, 10]) + \
        _runs("a", "y", [30, 30, 30]) + _runs("b", "y", [10, 10, 10])
    low, high = geomean_ratio_interval(runs, "a", "b")
    assert low == pytest.approx(6 ** 0.5) and high == pytest.approx(6 ** 0.5)


def test_interval_holds_the_estimate_and_narrows_with_more_seeds():
    few = _runs("a", "x", [12, 9, 15]) + _runs("b", "x", [10, 11, 8])
    many = _runs("a", "x", [12, 9, 15] * 5) + _runs("b", "x", [10, 11, 8] * 5)
    ratio = geomean_ratio(summarise(few), "a", "b")
    low, high = geomean_ratio_interval(few, "a", "b")
    assert low < ratio < high
    low_many, high_many = geomean_ratio_interval(many, "a", "b")
    assert high_many - low_many < high - low
    assert geomean_ratio_interval(few, "a", "missing") is None

"""The statistics the tuner comparisons report (``tools.stats``), and bests measured again."""

import numpy as np
import pytest

from tools.stats import MIN_SEEDS, format_table, geomean_ratio, geomean_ratio_interval, per_seed_ratios, ratio_line


def _runs(tuner: str, op: str, bests: list[float]) -> list[dict]:
    return [{"op": op, "tuner": tuner, "seed": s, "best_gflops": b, "trials_to_90": None, "overhead": None,
             "wall_seconds": 1.0} for s, b in enumerate(bests)]


def test_interval_is_a_point_when_every_seed_agrees():
    runs = _runs("a", "x", [20] * 5) + _runs("b", "x", [10] * 5) + _runs("a", "y", [30] * 5) + _runs("b", "y", [10] * 5)
    low, high = geomean_ratio_interval(runs, "a", "b")
    assert low == pytest.approx(6 ** 0.5) and high == pytest.approx(6 ** 0.5)


def test_interval_holds_the_estimate_and_narrows_with_more_seeds():
    few = _runs("a", "x", [12, 9, 15, 11, 13]) + _runs("b", "x", [10, 11, 8, 9, 10])
    many = _runs("a", "x", [12, 9, 15, 11, 13] * 4) + _runs("b", "x", [10, 11, 8, 9, 10] * 4)  # 20 seeds
    ratio = geomean_ratio(few, "a", "b")
    low, high = geomean_ratio_interval(few, "a", "b")
    assert low < ratio < high
    low_many, high_many = geomean_ratio_interval(many, "a", "b")
    assert high_many - low_many < high - low
    assert geomean_ratio_interval(few, "a", "missing") is None


def test_with_fewer_than_five_seeds_there_is_no_interval_but_the_per_seed_ratios():
    """Two seeds give a bootstrap nothing to redraw: the line shows each seed's ratio instead."""
    runs = _runs("a", "x", [12, 18]) + _runs("b", "x", [10, 10]) + _runs("a", "y", [20, 20]) + _runs("b", "y", [10, 10])
    assert MIN_SEEDS == 5 and geomean_ratio_interval(runs, "a", "b") is None
    assert per_seed_ratios(runs, "a", "b") == pytest.approx([np.sqrt(1.2 * 2), np.sqrt(1.8 * 2)])
    line = ratio_line(runs, "a", "b")
    assert line.startswith("a / b: geometric mean") and "per seed 1.549, 1.897" in line
    assert "too few seeds for an interval, 5 needed" in line and "bootstrap" not in line
    five = _runs("a", "x", [12, 18, 15, 14, 16]) + _runs("b", "x", [10] * 5)
    assert "90% bootstrap interval over seeds" in ratio_line(five, "a", "b")


def test_table_columns_stay_aligned_with_long_tuner_names():
    rows = [{"op": "mm64", "tuner": name, "seeds": 3, "median_best_gflops": 95.3, "median_trials_to_90": 2,
             "median_overhead": 0.001, "median_wall_seconds": 4.2} for name in ("ga", "ga-dqn-random-actions")]
    lines = format_table(rows).splitlines()
    assert len({len(line) for line in lines}) == 1  # every row as wide as the header
    assert {line.index("95.30") for line in lines[2:]} == {lines[0].index("best GFLOPS") + 6}


def test_remeasure_bests_measures_each_ops_configs_together_once():
    """Each run's best config measured again for real (a tiny matmul); a pass that holds every
    config is kept, one that lacks some is measured again whole."""
    import autotvm
    from tools.stats import best_index_at
    from tools.tuning import remeasure_bests, run_tuner

    option = autotvm.measure_option(autotvm.LocalBuilder(n_parallel=1), autotvm.LocalRunner(number=1, repeat=1))
    runs = [run_tuner("mm64", "ga", 0, 4, option, {"pop_size": 4}), dict(_runs("random", "mm64", [1.0])[0], curve=[1.0])]
    assert runs[0]["trials"] == 4 and len(runs[0]["elapsed"]) == 4 and runs[0]["best_gflops"] > 0
    saved = []
    again = remeasure_bests(runs, 2, option, None, saved.append)
    assert list(again) == ["mm64"] and list(again["mm64"]) == [str(best_index_at(runs[0]))]
    assert len(again["mm64"][str(best_index_at(runs[0]))]) == 2 and saved == [again]
    assert remeasure_bests(runs, 2, option, again, saved.append) == again and len(saved) == 1  # nothing missing
    stale = {"mm64": {"0": [1.0, 1.0]}}  # an earlier pass that lacks this config: the op is measured again whole
    assert set(remeasure_bests(runs, 1, option, stale, saved.append)["mm64"]) == {str(best_index_at(runs[0]))}

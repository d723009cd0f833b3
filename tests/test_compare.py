"""The summary statistics that the tuner comparisons report."""

import json
import os

import numpy as np
import pytest

from tools.compare import format_table, geomean_ratio, geomean_ratio_interval, machine_description, summarise

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


def test_table_columns_stay_aligned_with_long_tuner_names():
    rows = [{"op": "mm64", "tuner": name, "seeds": 3, "median_best_gflops": 95.3, "median_trials_to_90": 2,
             "median_overhead": 0.001, "median_wall_seconds": 4.2} for name in ("ga", "ga-dqn-random-actions")]
    lines = format_table(rows).splitlines()
    assert len({len(line) for line in lines}) == 1  # every row as wide as the header
    assert {line.index("95.30") for line in lines[2:]} == {lines[0].index("best GFLOPS") + 6}


def test_run_grid_resumes_and_measures_only_the_missing_runs(tmp_path):
    """A stopped comparison is started again with the same ``--out``: the runs already there are
    kept as they are, the missing ones are measured (for real, on a tiny matmul) with the options
    of their NAME@LABEL, and a file timed on another machine is refused rather than mixed in.
    Each run's best config is then measured again; a pass that holds every config is kept."""
    import autotvm
    from tools.compare import best_index_at, remeasure_bests, run_grid

    out = tmp_path / "grid.json"
    kept = dict(_runs("random", "mm64", [1.0])[0], curve=[1.0])
    out.write_text(json.dumps({"machine": machine_description(), "runs": [kept]}))
    asked = []

    def options_for(op, name):
        asked.append((op, name))
        return {"pop_size": 4} if name == "ga@small" else {}

    option = autotvm.measure_option(autotvm.LocalBuilder(n_parallel=1), autotvm.LocalRunner(number=1, repeat=1))
    runs = run_grid(str(out), [0], ["mm64"], ["random", "ga@small"], 4, option, options_for, {}, {"args": {}})
    assert asked == [("mm64", "ga@small")]
    assert runs[0] == kept and len(runs) == 2
    assert runs[1]["tuner"] == "ga@small" and runs[1]["trials"] == 4 and runs[1]["best_gflops"] > 0
    assert json.loads(out.read_text())["runs"] == runs

    # the new run's best config, measured again for real; the kept run recorded no configs
    saved = []
    again = remeasure_bests(runs, 2, None, saved.append, option)
    assert list(again) == ["mm64"] and list(again["mm64"]) == [str(best_index_at(runs[1]))]
    assert len(again["mm64"][str(best_index_at(runs[1]))]) == 2 and saved == [again]
    assert remeasure_bests(runs, 2, again, saved.append, option) == again and len(saved) == 1  # nothing missing
    stale = {"mm64": {"0": [1.0, 1.0]}}  # an earlier pass that lacks this config: the op is measured again whole
    assert set(remeasure_bests(runs, 1, stale, saved.append, option)["mm64"]) == {str(best_index_at(runs[1]))}

    other = tmp_path / "other.json"
    other.write_text(json.dumps({"machine": dict(machine_description(), cpu="Another CPU"), "runs": [kept]}))
    with pytest.raises(ValueError, match="cannot resume"):
        run_grid(str(other), [0], ["mm64"], ["random"], 4, option, options_for, {}, {})

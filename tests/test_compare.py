"""The summary statistics that the tuner comparisons report."""

import json
import os
import sys

import numpy as np
import pytest

from tools.compare import format_table, geomean_ratio, geomean_ratio_interval, machine_description, summarise

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
from pool_runs import (ceiling_lines, ceiling_ratios, cut_at, held_out_splits, last_bests,  # noqa: E402
                       on_bests_measured_again, pooled_runs, settled_lines, steadiness_lines, stuck_lines,
                       validation_lines, validation_ratios)


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


def test_pooled_runs_rename_filter_and_let_later_files_win(tmp_path):
    """``benchmarks/pool_runs.py`` adds result files together: a variant can count as another
    tuner, other tuners are left out, and a run repeated in a later file replaces the earlier."""
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps({"runs": _runs("ga-dqn", "x", [10, 11]) + _runs("xgb", "x", [5])}))
    second.write_text(json.dumps({"runs": _runs("ga-dqn@imm2", "x", [20]) + _runs("ga", "x", [7])}))
    runs = pooled_runs([str(first), str(second)], {"ga-dqn@imm2": "ga-dqn"}, {"ga-dqn", "ga"})
    bests = sorted((r["tuner"], r["seed"], r["best_gflops"]) for r in runs)
    assert bests == [("ga", 0, 7), ("ga-dqn", 0, 20), ("ga-dqn", 1, 11)]


def test_pooled_runs_compared_on_their_bests_measured_again_by_their_own_file(tmp_path):
    """``pool_runs.py --remeasured``: a run counts with the median (``--statistic fastest``: the
    largest) of its own file's measurements again of the config that was its best (after
    ``--trials`` trials when cut); the same config index measured in another file is not used,
    and a run whose best was not measured again is left out."""
    run = {"op": "x", "tuner": "ga", "seed": 0, "curve": [1.0, 4.0, 4.0, 6.0], "indices": [7, 8, 9, 10],
           "trials_to_90": 4, "overhead": 0.0, "wall_seconds": 1.0}
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps({"runs": [run], "remeasured": {"x": {"8": [3.0, 2.0, 9.0], "10": [5.0, 5.0, 4.0]}}}))
    second.write_text(json.dumps({"runs": [run | {"tuner": "xgb", "indices": [7, 8, 9, 11]}, run | {"tuner": "rl"}]}))
    runs = pooled_runs([str(first), str(second)], {}, None)
    assert [(r["tuner"], r["best_gflops"]) for r in on_bests_measured_again(runs)] == [("ga", 5.0)]
    assert [r["best_gflops"] for r in on_bests_measured_again([cut_at(r, 3) for r in runs])] == [3.0]
    assert [r["best_gflops"] for r in on_bests_measured_again([cut_at(r, 3) for r in runs], "fastest")] == [9.0]
    with pytest.raises(ValueError, match="unknown statistic 'mean'; allowed: median, fastest"):
        on_bests_measured_again(runs, "mean")
    # how high the run's own timing of its best read (6 over 5), and the best's unsteadiness (5 over 5)
    assert steadiness_lines(runs) == ["x        ga                 1 runs; over the median of the best's timings "
                                      "again: its own timing 1.200, the fastest of them 1.000"]


def test_ceiling_is_picked_on_some_timings_again_and_read_on_the_others(tmp_path):
    """``pool_runs.py --remeasured`` says how much each run left to find: the fastest config any
    run of its file found over the run's best. Config 8 is steady at 10; config 9 read 12 twice
    and 4 once. Picked and read on the same timings, 9 would be the ceiling (median 12), and run
    "a" would seem to leave 20%. Held out (pick on two rounds, read on the third), 9 is picked
    only on rounds 0 and 1 and then reads 4: run "a" leaves nothing (median of 0.4, 1, 1), and
    run "b" is read below the config picked on the other rounds (median of 1, 10/12, 10/12). A
    run of another file, whose configs were not timed together with these, does not count."""
    def run(tuner: str, index: int) -> dict:
        return {"op": "x", "tuner": tuner, "seed": 0, "curve": [5.0], "indices": [index], "trials_to_90": 1,
                "overhead": 0.0, "wall_seconds": 1.0}

    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps({"runs": [run("a", 8), run("b", 9)],
                                 "remeasured": {"x": {"8": [10.0, 10.0, 10.0], "9": [12.0, 12.0, 4.0]}}}))
    second.write_text(json.dumps({"runs": [run("c", 5) | {"seed": 1}], "remeasured": {"x": {"5": [99.0, 99.0]}}}))
    assert held_out_splits(3) == [([0, 1], [2]), ([0, 2], [1]), ([1, 2], [0])]
    runs = pooled_runs([str(first), str(second)], {}, None)
    ratios = {r["tuner"]: r["ceiling_ratio"] for r in ceiling_ratios(runs)}
    assert ratios == pytest.approx({"a": 1.0, "b": 10 / 12, "c": 1.0})
    assert ceiling_lines(runs)[-3:] == ["a leaves 1.000 x its best to find (geometric mean over the ops)",
                                        "b leaves 0.833 x its best to find (geometric mean over the ops)",
                                        "c leaves 1.000 x its best to find (geometric mean over the ops)"]
    # a file that measured its configs again only once cannot hold any timing out
    first.write_text(json.dumps({"runs": [run("a", 8)], "remeasured": {"x": {"8": [10.0]}}}))
    assert ceiling_ratios(pooled_runs([str(first)], {}, None)) == []


def test_validation_keeps_the_fastest_of_a_runs_last_bests_on_held_out_timings():
    """``pool_runs.py --last-bests K``: what timing a run's last K bests-so-far again, and keeping
    the fastest, gains over its final best. Config 11 was beaten while tuning (3 against 5) but
    is steadily faster when timed again: keeping it gains 20%. Config 21 read fast twice and slow
    once, so held out it is picked only where it then reads slow: no gain (median of 0.4, 1, 1).
    A run whose last bests were not all measured again is left out."""
    def run(tuner: str, indices: list[int]) -> dict:
        return {"op": "x", "tuner": tuner, "seed": 0, "curve": [1.0, 3.0, 3.0, 5.0, 5.0], "indices": indices,
                "again": {"11": [12.0] * 3, "13": [10.0] * 3, "21": [12.0, 12.0, 4.0], "23": [10.0] * 3}}

    steady, lucky, unmeasured = run("a", [10, 11, 12, 13, 14]), run("b", [20, 21, 22, 23, 24]), run("c", [5] * 5)
    assert last_bests(steady, 2) == [11, 13] and last_bests(steady, 5) == [10, 11, 13]
    assert last_bests({"curve": [1.0, 2.0]}, 5) == []  # a run that recorded no configs (MetaSchedule's)
    ratios = {r["tuner"]: r["validation_ratio"] for r in validation_ratios([steady, lucky, unmeasured], 2)}
    assert ratios == pytest.approx({"a": 1.2, "b": 1.0})
    assert validation_ratios([steady], 3) == []  # config 10 was not measured again
    assert validation_lines([steady, lucky], 2)[-2:] == [
        "a: timing its last 2 bests again and keeping the fastest gains 1.200 (geometric mean over the ops)",
        "b: timing its last 2 bests again and keeping the fastest gains 1.000 (geometric mean over the ops)"]


def test_runs_cut_at_a_trial_and_stuck_runs_counted():
    """``--trials`` reads a longer run as it stood after that many trials; ``--stuck`` counts the
    runs below a fraction of the op's median over every pooled run."""
    run = {"op": "x", "tuner": "a", "seed": 0, "curve": [1.0, 5.0, 5.0, 10.0], "best_gflops": 10.0,
           "trials_to_90": 4, "overhead": 0.01, "wall_seconds": 4.0}
    cut = cut_at(run, 2)
    assert (cut["best_gflops"], cut["trials"], cut["trials_to_90"]) == (5.0, 2, 2) and run["best_gflops"] == 10.0
    assert cut_at(run, 10)["best_gflops"] == 10.0
    runs = _runs("a", "x", [100, 100, 50]) + _runs("b", "x", [100, 100, 100])
    lines = stuck_lines(runs, 0.8)  # the median of all six is 100: only a's 50 is below 80
    assert [line.split()[2] for line in lines] == ["1", "0"] and "80.0 GFLOPS" in lines[0]


def test_settled_share_of_the_final_best_per_checkpoint():
    """``--settled`` reads each run's curve: the share of its final best it had after N trials,
    median and lowest over the runs of a tuner (a run shorter than N counts as finished)."""
    curves = [[1.0, 5.0, 5.0, 10.0], [8.0, 8.0, 8.0, 10.0], [2.0, 4.0]]
    runs = [{"op": "x", "tuner": "a", "seed": s, "curve": c} for s, c in enumerate(curves)]
    (line,) = settled_lines(runs, [1, 2, 9])
    assert line.split()[:3] == ["x", "a", "3"]
    assert line.endswith("1: 0.500 (0.100), 2: 0.800 (0.500), 9: 1.000 (1.000)")


def test_pooled_runs_refuse_files_from_different_machines(tmp_path):
    """GFLOPS timed on two CPUs differ by several times, so pooling them would compare machines,
    not tuners: ``pooled_runs`` names both machines and refuses."""
    here = machine_description()
    other = dict(here, cpu="Another CPU", vector="sse")  # unlike any machine this runs on
    old, new, same = tmp_path / "old.json", tmp_path / "new.json", tmp_path / "same.json"
    old.write_text(json.dumps({"machine": other, "runs": _runs("ga", "x", [50])}))
    new.write_text(json.dumps({"machine": here, "runs": _runs("ga", "x", [180])}))
    same.write_text(json.dumps({"machine": here, "runs": _runs("ga-dqn", "x", [190])}))
    with pytest.raises(ValueError, match="different machines.*Another CPU.*sse"):
        pooled_runs([str(old), str(new)], {}, None)
    assert len(pooled_runs([str(new), str(same)], {}, None)) == 2


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


def test_pooled_runs_are_measured_again_together_and_resume(tmp_path):
    """``pool_runs.py --measure-again N --out F``: the bests of runs from files taken on different
    days are timed again in one pass (for real, on a tiny matmul), written with the runs to one
    file that ``--remeasured`` reads, and a pass that holds every config is kept, not repeated.
    A file timed on another machine is refused: its configs would be timed on this one."""
    from pool_runs import measure_together

    def run(seed, index):
        return {"op": "mm64", "tuner": "ga", "seed": seed, "curve": [1.0, 2.0], "indices": [0, index],
                "best_gflops": 2.0, "trials_to_90": 2, "overhead": None, "wall_seconds": 1.0}

    paths = []
    for seed, index in [(0, 1), (1, 2)]:
        paths.append(str(tmp_path / f"day{seed}.json"))
        with open(paths[-1], "w") as handle:
            json.dump({"machine": machine_description(), "runs": [run(seed, index)], "remeasured": {}}, handle)
    out = str(tmp_path / "together.json")
    runs = measure_together(pooled_runs(paths, {}, None), paths, 2, out)
    saved = json.load(open(out))
    assert [r["seed"] for r in saved["runs"]] == [0, 1] and "again" not in saved["runs"][0]
    timings = saved["remeasured"]["mm64"]
    assert set(timings) == {"1", "2"} and all(len(v) == 2 and min(v) > 0 for v in timings.values())
    assert all(r["again"] == timings and r["source"] == out for r in runs)
    assert [r["best_gflops"] for r in on_bests_measured_again(runs)] == [np.median(timings["1"]),
                                                                         np.median(timings["2"])]
    assert measure_together(pooled_runs(paths, {}, None), paths, 2, out)[0]["again"] == timings  # kept

    elsewhere = str(tmp_path / "elsewhere.json")
    with open(elsewhere, "w") as handle:
        json.dump({"machine": dict(machine_description(), cpu="Another CPU"), "runs": []}, handle)
    with pytest.raises(ValueError, match="different machines"):
        measure_together([], [elsewhere], 2, str(tmp_path / "never.json"))


def test_held_out_move_ranking_finds_a_move_that_pays_and_nothing_where_none_does(tmp_path):
    """``move_values.py``: moves ranked on some ablation runs are scored on the others; a move
    that always pays is found, and where every move pays alike the top moves are worth x1. The
    runs' transitions are read per mutation move or per crossover cut point."""
    from move_values import ablation_transitions, held_out_gain, spread_test

    def run(good: float, seed: int) -> list:
        moves = [(k, "(0, 3)") for k in range(10)]
        return [(m, (good if m[0] == 0 else 0.01) * (1 + 0.1 * ((i * 7 + seed) % 3))) for i, m in enumerate(moves * 3)]

    assert held_out_gain([run(1.0, s) for s in range(8)], 2, top=1, splits=20) > 5
    assert held_out_gain([run(0.01, s) for s in range(8)], 2, top=1, splits=20) == pytest.approx(1.0, abs=0.15)
    monitor = [{"mutated_knob": 1, "mutation_move": "(0, 3)", "crossover_action": 2, "reward": 0.5},
               {"mutated_knob": None, "mutation_move": None, "crossover_action": 0, "reward": 0.0}]
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"machine": machine_description(), "runs": [
        {"op": "c1", "tuner": "ga-dqn-random", "seed": 0, "monitor": monitor},
        {"op": "c1", "tuner": "ga-dqn", "seed": 0, "monitor": monitor}]}))
    assert ablation_transitions([str(path)]) == {"c1": [[((1, "(0, 3)"), 0.5), ((None, None), 0.0)]]}
    assert ablation_transitions([str(path)], "crossover") == {"c1": [[(2, 0.5), (0, 0.0)]]}
    assert ablation_transitions([str(path)], machine="Another CPU") == {}
    assert spread_test({0: [0.0] * 20 + [1.0] * 5, 1: [0.0] * 5 + [1.0] * 20}) < 0.01
    assert spread_test({0: [0.0, 1.0] * 10, 1: [1.0, 0.0] * 10}) > 0.5


def test_state_policy_estimate_finds_value_only_where_the_state_decides():
    """``state_policy.py``'s off-policy estimate: where the paying action depends on the state,
    the state-reading policy is worth x2 of uniform choices and a state-free one x1; where no
    action pays more than another, both are worth x1."""
    from state_policy import policy_values

    rng = np.random.default_rng(0)

    def runs(reward_of) -> list:
        out = []
        for _ in range(8):
            run = []
            for _ in range(150):
                state, action = int(rng.integers(2)), int(rng.integers(2))
                features = np.array([[state, a, rng.random()] for a in range(2)])
                run.append({"features": features, "actions": [0, 1], "action": action,
                            "reward": reward_of(state, action) + 0.05 * rng.random()})
            out.append(run)
        return out

    decided = policy_values(runs(lambda state, action: float(state == action)))
    assert decided["state"][0] == pytest.approx(2.0, abs=0.15) and decided["state"][1] > 1.5
    assert decided["state-free"][0] == pytest.approx(1.0, abs=0.15)
    level = policy_values(runs(lambda state, action: float(rng.random() < 0.5)))
    for value, low, high in level.values():
        assert value == pytest.approx(1.0, abs=0.2) and low < 1.0 < high


def test_headroom_reads_each_runs_best_config_and_sets_the_ceiling_against_ga():
    """``headroom.py``: the config a run had as its best at a trial is the one that set the
    best-so-far then; the ceiling is the fastest config measured again, over GA's median. A run
    compared on its best measured again takes the median of those measurements; a run whose
    configs were not recorded, or whose op was not measured again, is left out."""
    from headroom import headroom, run_bests
    from tools.compare import best_index_at, remeasured_runs

    long_run = {"op": "c1", "tuner": "ga-dqn", "seed": 0, "trials": 6, "curve": [0.0, 5.0, 5.0, 7.0, 7.0, 9.0],
                "indices": [10, 11, 12, 13, 14, 15]}
    assert best_index_at(long_run, 1) is None and best_index_at(long_run, 3) == 11 and best_index_at(long_run, 6) == 15
    assert run_bests(long_run, 4) == {"ga-dqn@4": 13, "ga-dqn@6": 15}
    ga_runs = [{"op": "c1", "tuner": "ga", "seed": s, "trials": 4, "curve": [1.0, 2.0, 2.0, best],
                "indices": [20 + s, 30 + s, 40 + s, 50 + s]} for s, best in enumerate([3.0, 4.0, 8.0])]
    again = {"c1": {"13": [7.0, 6.0, 8.0], "15": [9.0, 10.0, 11.0], "50": [2.0, 3.0, 3.0], "51": [4.0, 4.0, 5.0],
                    "52": [5.0, 5.0, 5.0]}}
    row = headroom([long_run] + ga_runs, again, 4)["c1"]
    assert row == {"ga-dqn@4": 7.0, "ga-dqn@6": 10.0, "ga@4": 4.0, "ceiling": 10.0, "ceiling / ga": 2.5}
    assert [r["best_gflops"] for r in remeasured_runs([long_run] + ga_runs, again)] == [10.0, 3.0, 4.0, 5.0]
    assert remeasured_runs([long_run | {"op": "mm512"}, {k: v for k, v in long_run.items() if k != "indices"}],
                           again) == []


def test_timing_noise_reports_the_spread_and_which_way_the_outliers_go():
    """``timing_noise.py``: a config's coefficient of variation over its rounds, and the share of
    readings more than 10% below and above their config's median; a config with a failed
    reading is left out; a malformed setting is refused with what a setting is."""
    from timing_noise import parse_setting, spread

    figures = spread({1: [10.0, 10.0, 10.0, 10.0], 2: [10.0, 10.0, 5.0, 10.0], 3: [10.0, 0.0, 10.0, 10.0],
                      4: [10.0, 10.0, 12.0, 10.0]})
    assert figures["configs"] == 3
    assert figures["slow_outliers"] == pytest.approx(1 / 12) and figures["fast_outliers"] == pytest.approx(1 / 12)
    assert figures["median_cv"] == pytest.approx(np.std([10, 10, 12, 10]) / np.mean([10, 10, 12, 10]))
    assert spread({1: [0.0, 1.0]}) == {"configs": 0}
    assert parse_setting("1,5,20") == (1, 5, 20)
    for bad in ("3,3", "3,x,0", "0,3,0"):
        with pytest.raises(ValueError, match="setting"):
            parse_setting(bad)

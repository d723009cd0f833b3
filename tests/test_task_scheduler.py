"""The task scheduler: a model's budget spread over its tasks (gradient-based, round-robin)."""

import json
import math

import pytest

from autotvm.env import AutoTVMError
from autotvm.tuner import RandomTuner
from autotvm.tuner.task_scheduler import TaskScheduler
from synthetic import SyntheticTask, run, synthetic_measure
from test_driver import driver, tiny_config
from tools.tuners import TUNERS, make_tuner


class SyntheticRandomTuner(RandomTuner):
    """A random tuner measuring a synthetic objective: the scheduler's choices, without builds."""

    def tune(self, n_trial, measure_option, early_stopping=None, callbacks=()):
        self.run_loop(synthetic_measure(self.task), 2, n_trial, early_stopping, callbacks)


def _task(name, weight, dims=(8, 8, 8), peak=10.0):
    task = SyntheticTask(dims, lambda knob: 1.0 + peak * (knob[0] / 7.0) * (knob[1] / 7.0), name=name)
    task.weight = weight
    return task


def test_gradient_gives_the_trials_to_the_task_that_costs_the_model_most():
    heavy, light, fixed = _task("heavy", 20), _task("light", 1), _task("fixed", 5, dims=(1,))
    tuners = [SyntheticRandomTuner(t, seed=0) for t in (heavy, light, fixed)]
    scheduler = TaskScheduler([heavy, light, fixed], tuners, model_trials=160, per_task_trials=120,
                              strategy="gradient", round_trials=8)
    scheduler.tune(measure_option={})
    trials = {s.task.name: s.trials for s in scheduler.states}
    assert sum(trials.values()) == 160
    assert trials["fixed"] == 0  # one config: nothing to tune
    assert trials["heavy"] > 2 * trials["light"] >= 16  # both warmed up; the heavy one takes most
    assert trials["heavy"] <= 120
    assert math.isfinite(scheduler.estimated_latency())


def test_round_robin_spreads_evenly_and_respects_the_caps():
    tasks = [_task(f"t{i}", 1 + 10 * i) for i in range(3)]
    tuners = [SyntheticRandomTuner(t, seed=0) for t in tasks]
    scheduler = TaskScheduler(tasks, tuners, model_trials=1000, per_task_trials=24, strategy="round-robin",
                              round_trials=8)
    scheduler.tune(measure_option={})
    assert [s.trials for s in scheduler.states] == [24, 24, 24]  # capped: the model budget is not all spent


def test_loaded_trials_count_against_both_budgets():
    tasks = [_task("a", 1), _task("b", 1)]
    tuners = [SyntheticRandomTuner(t, seed=0) for t in tasks]
    scheduler = TaskScheduler(tasks, tuners, model_trials=40, per_task_trials=30, round_trials=8, loaded=[30, 0])
    scheduler.tune(measure_option={})
    assert [s.trials for s in scheduler.states] == [30, 10]


def test_bad_arguments_are_named():
    tasks = [_task("a", 1)]
    with pytest.raises(AutoTVMError, match="task scheduler must be one of: gradient, round-robin"):
        TaskScheduler(tasks, [RandomTuner(tasks[0])], 10, 10, strategy="fastest")
    with pytest.raises(AutoTVMError, match="model_trials must be an integer >= 1"):
        TaskScheduler(tasks, [RandomTuner(tasks[0])], 0, 10)


def test_driver_spreads_model_trials_and_resumes(tmp_path):
    path, config = tiny_config(tmp_path, models=[{"name": "mlp", "type": "torch", "model": "mlp", "width": 64,
                                                  "batch": 4}])
    config["autotuner_settings"].update(trials=16, model_trials=20)
    with open(path, "w") as handle:
        json.dump(config, handle)
    result = driver("-m=tune", f"-c={path}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "20 trials for the model (gradient task scheduler" in result.stdout
    log = tmp_path / "out" / "t-mlp.json"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    per_task = {}
    for record in records:
        per_task[record["input"][1]] = per_task.get(record["input"][1], 0) + 1
    assert len(records) == 20 and len(per_task) == 2 and max(per_task.values()) <= 16
    # the log resumes as any other: a rerun with the same budget measures nothing
    before = log.read_text()
    result = driver("-m=tune", f"-c={path}")
    assert result.returncode == 0 and log.read_text() == before, result.stderr[-2000:]


def test_a_task_starts_from_its_siblings_best_config():
    """Siblings (the same knobs) share their best config before each round; transfer=0 turns it off."""
    for transfer in (2, 0):
        tasks = [_task("a", 1), _task("b", 1)]
        tuners = [SyntheticRandomTuner(t, seed=seed) for seed, t in enumerate(tasks)]
        scheduler = TaskScheduler(tasks, tuners, model_trials=16, per_task_trials=8, round_trials=8,
                                  strategy="round-robin", transfer=transfer)
        best_of_a = []
        scheduler.tune(measure_option={}, on_round=lambda s, n: best_of_a.append(tuners[0].best_config.index))
        first_of_b = tuners[1].history[0]["index"]
        assert (first_of_b == best_of_a[0]) == bool(transfer)


@pytest.mark.parametrize("name", list(TUNERS))
def test_every_tuner_proposes_enqueued_configs_first(name):
    task = _task("a", 1)
    tuner = make_tuner(name, task, seed=0)
    run(tuner, task, 20)  # past its first generation or plan
    fresh = [i for i in (511, 300, 77) if i not in tuner.visited]
    tuner.enqueue([task.config_space.get(i) for i in [fresh[0], next(iter(tuner.visited)), fresh[1]]])
    assert [c.index for c in tuner.next_batch(3)][:2] == fresh[:2]  # the visited one is passed over


def test_a_time_budget_ends_the_tuning_after_the_round_in_flight():
    import time

    class SlowTuner(SyntheticRandomTuner):
        def tune(self, n_trial, measure_option, early_stopping=None, callbacks=()):
            time.sleep(0.2)  # a round that takes 0.2 s
            super().tune(n_trial, measure_option, early_stopping, callbacks)

    tasks = [_task("a", 1), _task("b", 1)]
    scheduler = TaskScheduler(tasks, [SlowTuner(t, seed=0) for t in tasks], model_trials=200, per_task_trials=100,
                              round_trials=8)
    start = time.perf_counter()
    scheduler.tune(measure_option={}, time_budget=0.5)
    assert 0.5 <= time.perf_counter() - start < 0.5 + 0.3  # the round begun before 0.5 s ends, no other
    assert scheduler.used == 8 * 3


def test_the_first_rounds_go_to_the_costliest_tasks_first():
    """A budget (of trials or time) may end before every task has had a round: the rounds before
    any gradient is known go in order of weight x FLOPs, not in the order the tasks were extracted."""
    tasks = [_task("light", 1), _task("heavy", 30), _task("middle", 5)]
    scheduler = TaskScheduler(tasks, [SyntheticRandomTuner(t, seed=0) for t in tasks], model_trials=16,
                              per_task_trials=100, round_trials=8)
    scheduler.tune(measure_option={})
    assert {s.task.name: s.trials for s in scheduler.states} == {"light": 0, "heavy": 8, "middle": 8}


class SleepyTuner(SyntheticRandomTuner):
    """A round that takes 0.2 s and notes which rounds were in flight with it."""

    active: list = []
    overlaps: list = []

    def tune(self, n_trial, measure_option, early_stopping=None, callbacks=()):
        import time

        SleepyTuner.active.append(self.task.name)
        SleepyTuner.overlaps.append(list(SleepyTuner.active))
        try:
            time.sleep(0.2)
            super().tune(n_trial, measure_option, early_stopping, callbacks)
        finally:
            SleepyTuner.active.remove(self.task.name)


def test_rounds_in_flight_overlap_never_share_a_task_and_keep_the_budget():
    """With ``in_flight=2`` two rounds, of two different tasks, are measured at once; the model's
    budget counts the rounds in flight, and every trial is logged once."""
    import time

    SleepyTuner.active, SleepyTuner.overlaps = [], []
    tasks = [_task(name, weight) for name, weight in (("a", 1), ("b", 10), ("c", 3))]
    scheduler = TaskScheduler(tasks, [SleepyTuner(t, seed=0) for t in tasks], model_trials=44, per_task_trials=100,
                              round_trials=8)
    logged = []
    start = time.perf_counter()
    scheduler.tune(measure_option={}, callbacks=[lambda tuner, inputs, results: logged.extend(
        (tuner.task.name, i.config.index) for i in inputs)], in_flight=2)
    wall = time.perf_counter() - start
    assert scheduler.used == 44 and len(logged) == 44 == len(set(logged))  # 5 rounds of 8 and one of 4
    assert wall < 6 * 0.2 - 0.1  # not one round after another
    assert max(len(names) for names in SleepyTuner.overlaps) == 2
    assert all(len(set(names)) == len(names) for names in SleepyTuner.overlaps)  # never one task twice


def test_a_failing_round_in_flight_stops_the_schedule_with_its_error():
    class Failing(SyntheticRandomTuner):
        def tune(self, n_trial, measure_option, early_stopping=None, callbacks=()):
            raise AutoTVMError("the disk is full")

    tasks = [_task("a", 1), _task("b", 5)]
    scheduler = TaskScheduler(tasks, [SyntheticRandomTuner(tasks[0], seed=0), Failing(tasks[1], seed=0)],
                              model_trials=100, per_task_trials=100, round_trials=8)
    with pytest.raises(AutoTVMError, match="the disk is full"):
        scheduler.tune(measure_option={}, in_flight=2)
    assert scheduler.states[0].trials == 8  # the other round, begun with it, ended and was counted


def test_two_rounds_in_flight_build_and_run_real_kernels(measure_opt, tmp_path):
    """Two tasks' rounds share one builder and one runner, as they do on a GPU (on LLVM here: the
    machinery is the same): every trial is measured, each with its own task's reference, and the
    log holds each once."""
    import autotvm
    from conftest import matmul_primfunc

    runner = autotvm.LocalRunner(number=1, repeat=1, timeout=10, check_correctness=True)
    option = autotvm.measure_option(measure_opt["builder"], runner)
    tasks = [autotvm.task.create_from_primfunc(matmul_primfunc(n, n, n), "llvm", name=f"mm{n}") for n in (32, 48)]
    tuners = [RandomTuner(t, seed=0) for t in tasks]
    log = str(tmp_path / "log.json")
    scheduler = TaskScheduler(tasks, tuners, model_trials=16, per_task_trials=8, round_trials=4)
    try:
        scheduler.tune(option, callbacks=[autotvm.callback.log_to_file(log)], in_flight=2)
    finally:
        runner.close()
    assert [s.trials for s in scheduler.states] == [8, 8]
    assert all(row["error_no"] == 0 for tuner in tuners for row in tuner.history)  # right answers, both shapes
    records = [json.loads(line) for line in open(log)]
    assert len(records) == 16 and len({(r["input"][1], json.dumps(r["config"])) for r in records}) == 16

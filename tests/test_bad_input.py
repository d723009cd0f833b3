"""Bad input gets one clear line naming what is wrong and what is allowed."""

import pytest
from tvm import te
from tvm.s_tir import Schedule

import autotvm
from autotvm import AutoTVMError
from autotvm.tuner import RandomTuner


def _one_line(err):
    message = str(err.value)
    assert "\n" not in message
    return message


def test_unknown_target_kind():
    with pytest.raises(AutoTVMError) as err:
        autotvm.make_target("opencl")
    assert "opencl" in _one_line(err) and "llvm" in str(err.value) and "cuda" in str(err.value)


def test_cli_target_string_is_refused_clearly():
    with pytest.raises(AutoTVMError) as err:
        autotvm.make_target("llvm -mcpu=znver3")
    assert "allowed" in _one_line(err)


def test_template_without_knob():
    @autotvm.template("test/noknob")
    def noknob(n):
        a = te.placeholder((n,), name="a")
        b = te.compute((n,), lambda i: a[i] + 1.0, name="b")
        return Schedule(te.create_prim_func([a, b])), [a, b]

    with pytest.raises(AutoTVMError) as err:
        autotvm.task.create("test/noknob", (8,), "llvm")
    assert "defines no knob" in _one_line(err)


def test_unknown_template():
    with pytest.raises(AutoTVMError) as err:
        autotvm.task.create("test/nope", (8,), "llvm")
    assert "registered templates" in _one_line(err)


@pytest.mark.parametrize("n_trial", [0, -3, 2.5])
def test_non_positive_trials(n_trial, template_task, measure_opt):
    with pytest.raises(AutoTVMError) as err:
        RandomTuner(template_task).tune(n_trial, measure_opt)
    assert "n_trial" in _one_line(err)


def test_missing_log_file(tmp_path):
    with pytest.raises(AutoTVMError) as err:
        autotvm.apply_history_best(str(tmp_path / "missing.json"))
    assert "does not exist" in _one_line(err)


def test_unwritable_log(tmp_path):
    with pytest.raises(AutoTVMError) as err:
        autotvm.callback.log_to_file(str(tmp_path / "no" / "such" / "dir" / "log.json"))
    assert "not writable" in _one_line(err)


def test_unknown_mcpu_is_an_error_not_a_generic_cpu():
    with pytest.raises(AutoTVMError) as err:
        autotvm.make_target({"kind": "llvm", "mcpu": "notacpu"})
    assert "mcpu 'notacpu'" in _one_line(err) and "leave mcpu out" in str(err.value)
    assert autotvm.make_target({"kind": "llvm", "mcpu": "znver3"}).attrs["mcpu"] == "znver3"


@pytest.mark.parametrize("make, words", [
    (lambda task: RandomTuner(task, seed="abc"), "seed must be an integer >= 0 or None, got 'abc'"),
    (lambda task: autotvm.tuner.GADQNTuner(task, pop_size="16"), "pop_size must be an integer >= 2, got '16'"),
    (lambda task: autotvm.tuner.GADQNTuner(task, dqn={"lr": "fast"}), "DQN option lr must be a number >= 0, got 'fast'"),
    (lambda task: autotvm.tuner.GADQNTuner(task, dqn={"hidden": [64, "x"]}), "DQN option hidden must be a list of integers >= 1"),
    (lambda task: autotvm.tuner.XGBTuner(task, plan_size="a"), "plan_size must be an integer >= 1, got 'a'"),
    (lambda task: autotvm.LocalRunner(number="3"), "runner number must be an integer >= 1, got '3'"),
    (lambda task: autotvm.LocalRunner(timeout=0), "runner timeout must be a number > 0"),
    (lambda task: autotvm.LocalBuilder(n_parallel=0), "builder n_parallel must be an integer >= 1, got 0"),
    (lambda task: autotvm.RPCRunner("k", "localhost", "9190"), "RPCRunner port must be an integer in 1..65535, got '9190'"),
    (lambda task: RandomTuner(task).tune(4, {}), "measure_option must come from autotvm.measure_option"),
    (lambda task: RandomTuner("not a task"), "task must be an autotvm task"),
])
def test_python_api_arguments_are_checked_where_they_enter(make, words, template_task):
    with pytest.raises(ValueError) as err:
        make(template_task)
    assert words in _one_line(err)


@pytest.mark.parametrize("make, words", [
    (lambda: autotvm.task.create_from_primfunc("not a func", "llvm"), "func must be a TIR PrimFunc"),
    (lambda: autotvm.task.create_from_primfunc(te.create_prim_func([te.placeholder((4,), name="a")]), "llvm",
                                               name=""), "name must be a non-empty string"),
    (lambda: autotvm.task.create("test/nope", 3, "llvm"), "unknown template 'test/nope'"),
    (lambda: autotvm.task.extract_from_program("not a module", "llvm"), "mod must be a Relax IRModule"),
])
def test_the_task_entry_points_check_their_arguments(make, words):
    with pytest.raises(AutoTVMError) as err:
        make()
    assert words in _one_line(err)


@pytest.mark.parametrize("runner,flush", [("LocalRunner", "l2"), ("LocalRunner", 1), ("RPCRunner", "private")])
def test_a_cache_flush_the_runner_cannot_do(runner, flush):
    args = ("key", "127.0.0.1", 9190) if runner == "RPCRunner" else ()
    with pytest.raises(AutoTVMError) as err:
        getattr(autotvm, runner)(*args, enable_cpu_cache_flush=flush)
    message = _one_line(err)
    assert "enable_cpu_cache_flush" in message and ("private" in message or "true or false" in message), message

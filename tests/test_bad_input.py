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

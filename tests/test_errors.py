"""Every failure becomes a result with its error number, and tuning goes on."""

import json

import pytest
import tvm
from tvm import te
from tvm.s_tir import Schedule

import autotvm
from autotvm import MeasureErrorNo
from autotvm.tuner import GridSearchTuner


@autotvm.template("test/faulty")
def faulty(n, fault):
    """Config 0 is a correct doubling kernel; config 1 has the requested fault."""
    cfg = autotvm.get_config()
    cfg.define_knob("fault", [False, True])
    broken = cfg["fault"].val
    a = te.placeholder((n,), name="a")
    if broken and fault == "crash":
        b = te.compute((n,), lambda i: a[i] + tvm.tirx.call_extern("float32", "abort"), name="b")
    elif broken and fault == "hang":
        b = te.compute((n,), lambda i: a[i] + tvm.tirx.Cast("float32", tvm.tirx.call_extern("int32", "sleep", 100)),
                       name="b")
    elif broken and fault == "wrong":
        b = te.compute((n,), lambda i: a[i] * 2.0 + 1.0, name="b")
    else:
        b = te.compute((n,), lambda i: a[i] * 2.0, name="b")
    sch = Schedule(te.create_prim_func([a, b]))
    if broken and fault == "build":
        (loop,) = sch.get_loops(sch.get_sblock("b"))
        sch.bind(loop, "threadIdx.x")  # schedules fine, but LLVM cannot compile a GPU thread binding
    if broken and fault == "instantiate":
        cfg.raise_error("this config is invalid by design")
    return sch, [a, b]


CASES = [("instantiate", MeasureErrorNo.INSTANTIATION_ERROR), ("build", MeasureErrorNo.COMPILE_HOST),
         ("crash", MeasureErrorNo.RUNTIME_DEVICE), ("hang", MeasureErrorNo.RUN_TIMEOUT),
         ("wrong", MeasureErrorNo.WRONG_ANSWER)]


@pytest.fixture(scope="module")
def checking_opt(builder):
    runner = autotvm.LocalRunner(number=1, repeat=1, timeout=3, check_correctness=True)
    yield autotvm.measure_option(builder, runner)
    runner.close()


@pytest.mark.parametrize("fault,error_no", CASES)
def test_fault_is_recorded_and_tuning_goes_on(fault, error_no, checking_opt, tmp_path):
    task = autotvm.task.create("test/faulty", (64, fault), "llvm")
    log = tmp_path / "log.json"
    tuner = GridSearchTuner(task)
    # index 1 (the faulty config) first, then the good one: tuning must go on after the failure
    tuner.next_batch = lambda size, order=[1, 0]: [task.config_space.get(order.pop(0)) for _ in range(min(size, len(order)))]
    tuner.has_next = lambda: len(tuner.history) < 2
    tuner.tune(2, checking_opt, callbacks=[autotvm.callback.log_to_file(str(log))])
    rows = [json.loads(line) for line in open(log)]
    assert [r["result"][1] for r in rows] == [int(error_no), 0], rows
    assert rows[0]["result"][0] == [1e9]
    assert tuner.best_config.index == 0 and tuner.best_flops > 0
    assert [h["flops"] for h in tuner.history][0] == 0


def test_error_message_is_readable(checking_opt):
    task = autotvm.task.create("test/faulty", (64, "hang"), "llvm")
    inp = autotvm.MeasureInput(task.target, task, task.config_space.get(1))
    batch = autotvm.measure.create_measure_batch(task, checking_opt)
    (res,) = batch([inp])
    assert res.error_no == MeasureErrorNo.RUN_TIMEOUT
    assert "timed out" in res.error_message


def test_build_timeout(matmul_task):
    builder = autotvm.LocalBuilder(n_parallel=1, timeout=0.001)
    try:
        builder.executor  # start the worker before timing anything
        (res,) = builder.build([autotvm.MeasureInput(matmul_task.target, matmul_task, matmul_task.config_space.get(0))])
        assert res.error_no == MeasureErrorNo.BUILD_TIMEOUT
    finally:
        builder.close()

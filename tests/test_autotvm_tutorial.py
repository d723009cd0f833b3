"""AutoTVM 0.14's matmul tutorial (gallery/tutorial/autotvm_matmul_x86.py) run as a user ports it.

Only what TVM 0.27 forces is changed, each marked ``# 0.27:``: no TE schedules (a
``tvm.s_tir.Schedule`` of the TE function), its loops from the schedule, ``tvm.compile`` for
``tvm.build`` and ``tvm.runtime.tensor`` for ``tvm.nd``. The rest is the tutorial's code:
``define_split`` on a loop, ``cfg[...].apply(s, C, y)``, ``task.create`` and the target of the
enclosing scope, ``measure_option(builder="local")``, ``autotvm.tuner.<Tuner>(task)``, the
DEBUG log, ``apply_history_best`` around a direct call of the template, and ``pick_best``.
"""

import logging
import sys

import numpy as np
import pytest
import tvm
from tvm import te

import autotvm

N, L, M = 64, 64, 64  # the tutorial's 512 takes longer to time; the code is the same


@autotvm.template("tutorial/matmul")
def matmul(N, L, M, dtype):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)

    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = tvm.s_tir.Schedule(te.create_prim_func([A, B, C]))  # 0.27: no te.create_schedule

    # schedule
    y, x, k = s.get_loops(s.get_sblock("C"))  # 0.27: s[C].op.axis, s[C].op.reduce_axis

    ##### define space begin #####
    cfg = autotvm.get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    ##### define space end #####

    # schedule according to config
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)

    s.reorder(yo, xo, k, yi, xi)  # 0.27: s[C].reorder

    return s, [A, B, C]


@pytest.mark.parametrize("tuner_name", ["RandomTuner", "GridSearchTuner", "GATuner", "XGBTuner", "GADQNTuner"])
def test_the_autotvm_matmul_tutorial(tuner_name, tmp_path, caplog):
    log_file = str(tmp_path / "matmul.log")
    task = autotvm.task.create("tutorial/matmul", args=(N, L, M, "float32"), target="llvm")
    print(task.config_space)
    assert len(task.config_space) == 7 * 7

    logging.getLogger("autotvm").setLevel(logging.DEBUG)
    handler = logging.StreamHandler(sys.stdout)
    logging.getLogger("autotvm").addHandler(handler)

    measure_option = autotvm.measure_option(builder="local", runner=autotvm.LocalRunner(number=5))
    tuner = getattr(autotvm.tuner, tuner_name)(task)
    with caplog.at_level(logging.DEBUG, logger="autotvm"):
        tuner.tune(n_trial=10, measure_option=measure_option, callbacks=[autotvm.callback.log_to_file(log_file)])
    logging.getLogger("autotvm").removeHandler(handler)  # (not the tutorial's: other tests share the logger)
    logging.getLogger("autotvm").setLevel(logging.NOTSET)
    trial_lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("No: ")]
    assert len(trial_lines) == 10 and "GFLOPS: " in trial_lines[0]

    with autotvm.apply_history_best(log_file) as history:
        with tvm.target.Target("llvm"):
            s, arg_bufs = matmul(N, L, M, "float32")
            func = tvm.compile(s.mod, target="llvm")  # 0.27: tvm.build(s, arg_bufs)
        best = history.query(tvm.target.Target("llvm"), ("tutorial/matmul", N, L, M, "float32"))
    assert best.index == tuner.best_config.index
    assert s.mod.script() == task.instantiate(tuner.best_config).script()

    a_np = np.random.uniform(size=(N, L)).astype(np.float32)
    b_np = np.random.uniform(size=(L, M)).astype(np.float32)
    c_np = a_np.dot(b_np)
    c_tvm = tvm.runtime.tensor(np.zeros(c_np.shape, np.float32))  # 0.27: tvm.nd.empty
    func(tvm.runtime.tensor(a_np), tvm.runtime.tensor(b_np), c_tvm)  # 0.27: tvm.nd.array
    np.testing.assert_allclose(c_np, c_tvm.numpy(), rtol=1e-4)

    autotvm.record.pick_best(log_file, log_file + ".best")
    assert len(open(log_file + ".best").readlines()) == 1

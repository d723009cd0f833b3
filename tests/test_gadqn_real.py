"""GA and GA-DQN on real operators: budget, no duplicates, every trial logged, best config valid."""

import json

import numpy as np
import pytest
from tvm import te
from tvm.s_tir import Schedule

import autotvm
from ga_tuner import GATuner
from rl_tuner import GADQNTuner

from conftest import random_matmul_inputs, run_module


@pytest.mark.parametrize("make", [lambda t: GATuner(t, pop_size=6, seed=0),
                                  lambda t: GADQNTuner(t, pop_size=6, seed=0, dqn={"learning_starts": 4}),
                                  lambda t: GADQNTuner(t, pop_size=6, seed=0, action_policy="random"),
                                  lambda t: GADQNTuner(t, pop_size=6, seed=0, mutation="redraw",
                                                       dqn={"learning_starts": 4}),
                                  lambda t: GADQNTuner(t, pop_size=6, seed=0, screen=1)])
def test_tunes_a_real_operator(make, matmul_task, measure_opt, tmp_path):
    log = tmp_path / "log.json"
    tuner = make(matmul_task)
    tuner.tune(17, measure_opt, callbacks=[autotvm.callback.log_to_file(str(log))])
    rows = [json.loads(line) for line in open(log)]
    indices = [r["config"]["index"] for r in rows]
    assert len(rows) == 17 and len(set(indices)) == 17
    assert tuner.best_flops > 0
    a, b, c = random_matmul_inputs(64, 64, 64)
    out = run_module(matmul_task.instantiate(tuner.best_config), matmul_task.target, [a, b, c])[2]
    np.testing.assert_allclose(out, a @ b, rtol=1e-4)


def _vector_add_template(knobs):
    def template(n):
        cfg = autotvm.get_config()
        for name, values in knobs:
            cfg.define_knob(name, values)
        a = te.placeholder((n,), name="a")
        b = te.compute((n,), lambda i: a[i] * 2.0, name="b")
        sch = Schedule(te.create_prim_func([a, b]))
        (loop,) = sch.get_loops(sch.get_sblock("b"))
        outer, inner = sch.split(loop, factors=[None, cfg["inner"].val])
        if len(knobs) > 1 and cfg["vec"].val:
            sch.vectorize(inner)
        return sch, [a, b]
    return template


@pytest.mark.parametrize("knobs", [[("inner", [1, 2, 4, 8, 16, 32])],
                                   [("inner", [1, 2, 4, 8, 16, 32]), ("vec", [False, True])]],
                         ids=["one-knob", "two-knob"])
def test_one_and_two_knob_real_tasks(knobs, measure_opt):
    name = f"test/vadd{len(knobs)}"
    autotvm.template(name)(_vector_add_template(knobs))
    task = autotvm.task.create(name, (1024,), "llvm")
    tuner = GADQNTuner(task, pop_size=4, seed=0)
    tuner.tune(9, measure_opt)
    assert len(tuner.history) == min(9, len(task.config_space))
    assert len({h["index"] for h in tuner.history}) == len(tuner.history)
    assert tuner.best_flops > 0

"""GA-DQN as a MetaSchedule search strategy, driven by ms.tune_tir."""

import json
import os

from autotvm.env import load_tensor_intrinsics
from rl_tuner import GADQNSearchStrategy

from conftest import matmul_primfunc


def test_tune_tir_with_gadqn_strategy(tmp_path):
    load_tensor_intrinsics()
    from tvm.s_tir import meta_schedule as ms

    from tools.metaschedule import fast_build

    strategy = GADQNSearchStrategy(seed=0, pop_size=6)
    database = ms.tune_tir(matmul_primfunc(), {"kind": "llvm", "num-cores": 2}, str(tmp_path), max_trials_global=12,
                           num_trials_per_iter=4, strategy=strategy,
                           builder=ms.builder.LocalBuilder(max_workers=2, f_build=fast_build),
                           runner=ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(number=2, repeat=1)))
    lines = open(os.path.join(tmp_path, "database_tuning_record.json")).read().splitlines()
    assert 1 <= len(lines) <= 12
    secs = [json.loads(line)[1][1] for line in lines]
    assert any(s and min(s) < 1e9 for s in secs)
    assert len(database.get_all_tuning_records()) == len(lines)

"""CUDA tasks without a GPU: the target's limits, the check before building, a clear runner error.

On a GPU, MetaSchedule's postprocessors reject most of a design space (threads per block, shared
memory). These tests need no GPU: the design space, the check and the builds (where nvcc is
installed) are TVM's own; only the timings given to the tuners are synthetic, because nothing
here can run a CUDA kernel.
"""

import shutil
import time

import numpy as np
import pytest
import tvm

import autotvm
from autotvm.measure.measure import MeasureInput, MeasureResult
from tools.tuners import make_tuner

from conftest import matmul_primfunc

HAS_GPU = tvm.cuda(0).exist


@pytest.fixture(scope="module")
def cuda_task():
    return autotvm.task.create_from_primfunc(matmul_primfunc(256, 256, 256), "cuda", name="mm256-cuda")


def test_a_bare_cuda_target_gets_the_limits_the_gpu_rules_read():
    target = autotvm.make_target("cuda")
    assert int(target.attrs["max_threads_per_block"]) >= 256
    assert int(target.attrs["max_shared_memory_per_block"]) >= 48 * 1024
    given = autotvm.make_target({"kind": "cuda", "arch": "sm_80", "max_threads_per_block": 512})
    assert int(given.attrs["max_threads_per_block"]) == 512 and str(given.attrs["arch"]) == "sm_80"


def test_most_of_a_cuda_space_is_rejected_before_building(cuda_task):
    assert cuda_task.checks_before_build
    rng = np.random.default_rng(0)
    verdicts = [cuda_task.check(cuda_task.config_space.get(int(i)))
                for i in rng.integers(0, len(cuda_task.config_space), 100)]
    rejected = [v for v in verdicts if v is not None]
    assert 50 <= len(rejected) < 100, len(rejected)  # measured: 93% of uniform configs
    assert all("VerifyGPUCode" in v for v in rejected)


def synthetic_timings(task, seen):
    """Checks every config it is given with the target's own check, records it, and times it
    synthetically (no GPU here): a smooth function of the knobs, so the tuners have a landscape."""
    def measure(inputs):
        out = []
        for inp in inputs:
            assert task.check(inp.config) is None, inp.config.index  # only valid configs reach a build
            seen.append(inp.config.index)
            cost = 1e-3 * (1.0 + 0.1 * sum(inp.config.knob) % 1.0)
            out.append(MeasureResult((cost,), 0, 0.0, time.time()))
        return out
    return measure


@pytest.mark.parametrize("name,options", [("random", {}), ("ga", {"pop_size": 8}), ("xgb", {"plan_size": 8}),
                                          ("ga-dqn", {"pop_size": 8})])
def test_tuners_spend_no_trial_on_a_config_the_target_rejects(cuda_task, name, options):
    tuner = make_tuner(name, cuda_task, seed=0, **options)
    seen = []
    tuner.run_loop(synthetic_timings(cuda_task, seen), 2, 24)
    assert len(tuner.history) == 24 and len(seen) == 24 and len(set(seen)) == 24  # the budget: valid configs
    assert tuner.rejected > 0 and all(row["error_no"] == 0 for row in tuner.history)
    assert set(seen) <= tuner.visited and len(tuner.visited) == 24 + tuner.rejected  # none proposed twice
    if name in ("ga", "ga-dqn"):  # a rejected child gave its slot back: the population is all valid
        assert all(cuda_task.check(cuda_task.config_space.get(m.index)) is None for m in tuner.population)
        assert tuner.generation >= 2


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc to build CUDA code")
def test_configs_that_pass_the_check_build(cuda_task):
    tuner = make_tuner("random", cuda_task, seed=1)
    seen = []
    tuner.run_loop(synthetic_timings(cuda_task, seen), 2, 4)
    builder = autotvm.LocalBuilder(n_parallel=2, timeout=60)
    builds = builder.build([MeasureInput(cuda_task.target, cuda_task, cuda_task.config_space.get(i)) for i in seen])
    assert [b.error_no for b in builds] == [0] * 4, [b.error_msg for b in builds]


@pytest.mark.skipif(HAS_GPU, reason="this machine has a CUDA GPU")
def test_measuring_on_cuda_without_a_gpu_is_a_clear_error(cuda_task):
    option = autotvm.measure_option(autotvm.LocalBuilder(n_parallel=1), autotvm.LocalRunner())
    with pytest.raises(autotvm.AutoTVMError, match="no CUDA GPU.*RPC"):
        make_tuner("random", cuda_task, seed=0).tune(2, option)


def test_the_tune_summary_counts_the_configs_the_target_rejected():
    from tools.tune import format_summary

    row = {"model": "m", "task": "mm", "weight": 1, "configs": 900, "trials": 64, "best_gflops": 1.0, "seconds": 2.0}
    assert "rejected" not in format_summary([dict(row, rejected=0)])  # LLVM: nothing to say
    assert "rejected before building (not trials): 455" in format_summary([dict(row, rejected=455)])
    # a function with one config has nothing to tune: no GFLOPS figure, and the columns explained
    text = format_summary([dict(row, configs=1, trials=1, best_gflops=0.0, rejected=0)])
    assert "- (1 config)" in text and "0.00" not in text and "calls: times the model calls" in text


def test_a_space_the_target_rejects_entirely_ends_the_tuning_instead_of_looping():
    from synthetic import one_knob_dominates, synthetic_measure

    task = one_knob_dominates()
    task.checks_before_build = True
    task.check = lambda config: "postprocessor VerifyGPUCode rejected the config"  # nothing is valid
    tuner = make_tuner("ga", task, seed=0, pop_size=8)
    tuner.run_loop(synthetic_measure(task), 2, 16)
    assert tuner.history == [] and 0 < tuner.rejected <= 200 * 2

"""CUDA: tune a real operator on the GPU. Skipped cleanly where no GPU is present."""

import pytest
import tvm

import autotvm
from autotvm.tuner import RandomTuner, XGBTuner

from conftest import matmul_primfunc

HAS_GPU = tvm.cuda(0).exist

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not HAS_GPU, reason="no CUDA GPU on this machine")]


@pytest.mark.parametrize("tuner_cls", [RandomTuner, XGBTuner])
def test_tune_matmul_on_cuda(tuner_cls, tmp_path):
    task = autotvm.task.create_from_primfunc(matmul_primfunc(256, 256, 256), "cuda", name="mm256")
    opt = autotvm.measure_option(autotvm.LocalBuilder(n_parallel=4, timeout=30),
                                 autotvm.LocalRunner(number=5, repeat=3, timeout=10, check_correctness=True))
    tuner = tuner_cls(task, seed=0)
    tuner.tune(16, opt, callbacks=[autotvm.callback.log_to_file(str(tmp_path / "cuda.json"))])
    assert len(tuner.history) == 16
    assert tuner.best_flops > 0

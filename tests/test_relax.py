"""A PyTorch model through torch.export -> Relax: extract tasks, tune, build with the best records."""

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

import autotvm
from autotvm.tuner import RandomTuner


class TwoLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(256, 256)
        self.fc2 = torch.nn.Linear(256, 64)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


@pytest.fixture(scope="module")
def program():
    from tvm.relax.frontend.torch import from_exported_program

    torch.manual_seed(0)
    model = TwoLayer().eval()
    example = torch.randn(32, 256)
    with torch.no_grad():
        exported = torch.export.export(model, (example,))
        expected = model(example).numpy()
    mod = from_exported_program(exported, keep_params_as_input=True)
    mod, params = relax.frontend.detach_params(mod)
    return mod, params["main"], example.numpy(), expected


def _run(exe, params, x):
    vm = relax.VirtualMachine(exe, tvm.cpu())
    args = [tvm.runtime.tensor(x)] + [tvm.runtime.tensor(p.numpy()) for p in params]
    out = vm["main"](*args)
    out = out[0] if not hasattr(out, "numpy") else out
    timer = vm.time_evaluator("main", tvm.cpu(), number=10, repeat=5)
    return out.numpy(), timer(*args).median


def test_extract_tune_and_build(program, measure_opt, tmp_path):
    mod, params, x, expected = program
    tasks = autotvm.task.extract_from_program(mod, "llvm")
    assert len(tasks) >= 2 and all(t.weight >= 1 for t in tasks)
    matmuls = [t for t in tasks if t.flop >= 2 * 32 * 256 * 64]
    assert matmuls
    log = str(tmp_path / "model.json")
    for task in matmuls:
        RandomTuner(task, seed=0).tune(12, measure_opt, callbacks=[autotvm.callback.log_to_file(log)])
    untuned_out, untuned_s = _run(autotvm.build_program(mod, "llvm"), params, x)
    with autotvm.apply_history_best(log):
        tuned_out, tuned_s = _run(autotvm.build_program(mod, "llvm"), params, x)
    np.testing.assert_allclose(untuned_out, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tuned_out, expected, rtol=1e-4, atol=1e-4)
    assert tuned_s < untuned_s / 1.5, (tuned_s, untuned_s)

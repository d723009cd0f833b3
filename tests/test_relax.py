"""A PyTorch model through torch.export -> Relax: extract tasks, tune, build with the best records."""

import re

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

import autotvm
from autotvm.tuner import RandomTuner
from autotvm.task import x86_softmax
from conftest import one_runtime_thread


class TwoLayer(torch.nn.Module):
    def __init__(self, sizes=(256, 256, 64)):
        super().__init__()
        self.fc1 = torch.nn.Linear(sizes[0], sizes[1])
        self.fc2 = torch.nn.Linear(sizes[1], sizes[2])

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def _export(model, example):
    """(Relax module with the weights as trailing inputs, the weights, PyTorch's output)."""
    from tvm.relax.frontend.torch import from_exported_program

    with torch.no_grad():
        exported = torch.export.export(model, (example,))
        expected = model(example).numpy()
    mod, params = relax.frontend.detach_params(from_exported_program(exported, keep_params_as_input=True))
    return mod, params["main"], expected


def _seeded_program(model_class, example_shape):
    """(Relax module, weights, example input, PyTorch's output) of a model built with seed 0."""
    torch.manual_seed(0)
    example = torch.randn(*example_shape)
    mod, params, expected = _export(model_class().eval(), example)
    return mod, params, example.numpy(), expected


@pytest.fixture(scope="module")
def program():
    return _seeded_program(TwoLayer, (32, 256))


def _run(exe, params, x):
    return _run_timed([exe], params, x, rounds=0)[0][0]


def _run_timed(exes, params, x, rounds=7):
    """Each executable's output and its fastest of ``rounds`` timings on one thread
    (``one_runtime_thread``), the executables timed in turn: another test's process on the cores
    only slows a timing down, and a burst of it slows one round of each, not every round of one."""
    args = [tvm.runtime.tensor(x)] + [tvm.runtime.tensor(p.numpy()) for p in params]
    vms = [relax.VirtualMachine(exe, tvm.cpu()) for exe in exes]
    outs = [vm["main"](*args) for vm in vms]
    outs = [(out[0] if not hasattr(out, "numpy") else out).numpy() for out in outs]
    timers = [vm.time_evaluator("main", tvm.cpu(), number=10, repeat=1) for vm in vms]
    times: list[list[float]] = [[] for _ in vms]
    with one_runtime_thread():
        for _ in range(rounds):
            for timer, seconds in zip(timers, times):
                seconds.append(timer(*args).mean)
    return [(out, min(seconds, default=None)) for out, seconds in zip(outs, times)]


def test_extract_tune_and_build(program, measure_opt, tmp_path):
    mod, params, x, expected = program
    tasks = autotvm.task.extract_from_program(mod, "llvm")
    assert len(tasks) >= 2 and all(t.weight >= 1 for t in tasks)
    matmuls = [t for t in tasks if t.flop >= 2 * 32 * 256 * 64]
    assert matmuls
    log = str(tmp_path / "model.json")
    for task in matmuls:
        RandomTuner(task, seed=0).tune(12, measure_opt, callbacks=[autotvm.callback.log_to_file(log)])
    untuned = autotvm.build_program(mod, "llvm")
    with autotvm.apply_history_best(log):
        tuned = autotvm.build_program(mod, "llvm")
    (untuned_out, untuned_s), (tuned_out, tuned_s) = _run_timed([untuned, tuned], params, x)
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
    with autotvm.apply_history_best(log), pytest.warns(UserWarning, match="tunable functions have no record"):  # one matmul tuned of two
        exe = autotvm.build_program(mod, "llvm", bound)
    vm = relax.VirtualMachine(exe, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(x))
    out = out[0] if not hasattr(out, "numpy") else out
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)
    assert "_prepacked" in exe.as_text()


class ConvBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(16)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


@pytest.fixture(scope="module")
def conv_program():
    torch.manual_seed(0)
    model = ConvBlock().eval()
    model.bn.running_mean.uniform_(-1, 1)
    model.bn.running_var.uniform_(0.5, 2)
    example = torch.randn(1, 8, 12, 12)
    mod, params, expected = _export(model, example)
    names = [p.name for p in mod["main"].params[1:]]
    bound = {name: tvm.runtime.tensor(p.numpy()) for name, p in zip(names, params)}
    return mod, bound, example.numpy(), expected


def _conv_task(tasks):
    return next(t for t in tasks if "conv2d" in t.name)


def test_conv_layout_nhwc_with_bound_weights(conv_program, measure_opt, tmp_path):
    """With bound weights, convolutions are tuned and built channels-last; the model's interface
    (NCHW in, NCHW out) and its outputs do not change. Records are per layout."""
    mod, bound, x, expected = conv_program
    nhwc = _conv_task(autotvm.task.extract_from_program(mod, "llvm", bound))
    nchw = _conv_task(autotvm.task.extract_from_program(mod, "llvm", bound, conv_layout="NCHW"))
    out_shape = lambda task: [int(d) for d in task.mod["main"].params[-1].shape]
    assert out_shape(nhwc) == [1, 12, 12, 16] and out_shape(nchw) == [1, 16, 12, 12]
    assert "nhwc" in nhwc.mod.script() and "nhwc" not in nchw.mod.script()
    log = str(tmp_path / "conv.json")
    RandomTuner(nhwc, seed=0).tune(6, measure_opt, callbacks=[autotvm.callback.log_to_file(log)])
    with autotvm.apply_history_best(log):
        exe = autotvm.build_program(mod, "llvm", bound)
        with pytest.warns(UserWarning, match="no record"):
            autotvm.build_program(mod, "llvm", bound, conv_layout="NCHW")
    out = relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(x))
    out = out[0] if not hasattr(out, "numpy") else out
    assert out.numpy().shape == expected.shape
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_conv_layout_is_checked(conv_program):
    mod, bound, _, _ = conv_program
    with pytest.raises(ValueError, match="conv_layout must be one of: auto, NHWC, NCHW, got 'NCHWc'"):
        autotvm.task.extract_from_program(mod, "llvm", bound, conv_layout="NCHWc")


def test_winograd_matches_direct_convolution():
    """Winograd on odd sizes (partial last tiles) and asymmetric channels, against the direct conv;
    maps at most 7 wide stay direct."""
    from autotvm.task.winograd import winograd_conv2d

    rng = np.random.default_rng(0)
    for size, cin, cout in ((7, 24, 8), (9, 24, 8), (10, 8, 16), (17, 8, 8)):  # direct, F(2x2) x 2, F(4x4)
        x = rng.standard_normal((1, size, size, cin)).astype("float32")
        w = rng.standard_normal((cout, 3, 3, cin)).astype("float32")
        bb = relax.BlockBuilder()
        data = relax.Var("x", relax.TensorType((1, size, size, cin), "float32"))
        with bb.function("main", [data]):
            with bb.dataflow():
                out = bb.emit_output(bb.emit(relax.op.nn.conv2d(
                    data, relax.const(w), padding=[1, 1, 1, 1], data_layout="NHWC", kernel_layout="OHWI")))
            bb.emit_func_output(out)
        direct = bb.get()
        winograd = winograd_conv2d(direct)
        assert ("conv2d_winograd" in winograd.script()) == (size > 7) and "conv2d_winograd" not in direct.script()
        run = lambda mod: relax.VirtualMachine(relax.build(mod, target="llvm"), tvm.cpu())["main"](
            tvm.runtime.tensor(x)).numpy()
        expected = run(direct)
        np.testing.assert_allclose(run(winograd), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_winograd_model_tunes_and_builds(conv_program, measure_opt, tmp_path):
    mod, bound, x, expected = conv_program
    tasks = autotvm.task.extract_from_program(mod, "llvm", bound, conv_algorithm="winograd")
    task = next(t for t in tasks if "winograd" in t.name)
    log = str(tmp_path / "winograd.json")
    RandomTuner(task, seed=0).tune(6, measure_opt, callbacks=[autotvm.callback.log_to_file(log)])
    with autotvm.apply_history_best(log):
        exe = autotvm.build_program(mod, "llvm", bound, conv_algorithm="winograd")
    out = relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(x))
    out = out[0] if not hasattr(out, "numpy") else out
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="winograd' needs conv_layout"):
        autotvm.task.extract_from_program(mod, "llvm", bound, conv_layout="NCHW", conv_algorithm="winograd")


def test_winograd_trials_lower_without_renormalizing_split_patterns(conv_program):
    """A Winograd task's trial skips TVM's RenormalizeSplitPattern (``autotvm.lowering``); the
    other tasks' trials keep it."""
    from autotvm.lowering import RENORMALIZE, tir_pipeline

    @tvm.instrument.pass_instrument
    class Passes:
        def __init__(self) -> None:
            self.names = set()

        def run_before_pass(self, _mod, info) -> None:
            self.names.add(info.name)

    def passes(build) -> set:
        seen = Passes()
        with tvm.transform.PassContext(opt_level=3, instruments=[seen]):
            build()
        assert "tirx.StmtSimplify" in seen.names
        return seen.names

    mod, bound, _, _ = conv_program
    skipped = {}
    for algorithm in ("winograd", "direct"):
        task = next(t for t in autotvm.task.extract_from_program(mod, "llvm", bound, conv_algorithm=algorithm)
                    if "conv2d" in t.name)
        func = next(m for m in (_instantiated(task, i) for i in range(20)) if m is not None)
        names = passes(lambda: tvm.compile(func, target=task.target, tir_pipeline=tir_pipeline(task.target)))
        skipped[algorithm] = RENORMALIZE not in names
    assert skipped == {"winograd": True, "direct": False}


def _instantiated(task, index):
    try:
        return task.instantiate(task.config_space.get(index))
    except autotvm.task.InstantiationError:
        return None


def test_nhwc_graph_keeps_one_layout_and_fuses_batch_norm_and_clip():
    """MobileNetV2's pattern: conv, batch norm, ReLU6, an explicit (TensorFlow-style) pad and a
    depthwise conv, exported in NCHW. Built NHWC, it has no function that only moves memory
    between the convolutions, and matches PyTorch."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.expand = nn.Sequential(nn.Conv2d(8, 16, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU6())
            self.depthwise = nn.Sequential(nn.Conv2d(16, 16, 3, stride=2, groups=16, bias=False),
                                           nn.BatchNorm2d(16), nn.ReLU6())
            self.project = nn.Sequential(nn.Conv2d(16, 8, 1, bias=False), nn.BatchNorm2d(8))

        def forward(self, x):
            x = self.expand(x)
            x = nn.functional.pad(x, (0, 1, 0, 1))  # what HF MobileNetV2 does before a stride-2 conv
            x = nn.functional.pad(self.depthwise(x), (0, 0, 0, 0))  # a zero-width pad, as HF exports 1x1s
            return self.project(x)

    torch.manual_seed(0)
    block = Block().eval()
    for bn in (m for m in block.modules() if isinstance(m, nn.BatchNorm2d)):  # not the identity
        bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2), bn.weight.data.uniform_(0.5, 2)
    x = torch.randn(1, 8, 16, 16)
    from tools.models import Model
    from tools.models import bound_params

    mod, params = Model("block", block, (x,)).to_relax()
    named = bound_params(mod, params)
    fused = autotvm.task.relax_integration.fuse_program(
        autotvm.task.relax_integration.prepare_program(mod, named, "NHWC"), "llvm")
    names = sorted(gv.name_hint for gv in fused.get_global_vars() if gv.name_hint != "main")
    convs = [n for n in names if "conv2d" in n]
    assert len(convs) == 3 and sum("clip" in n for n in convs) == 2, names  # ReLU6 inside the kernels
    assert not any("pad" in n or "subtract" in n or "divide" in n for n in names), names  # folded
    assert len(names) == len(convs) + 2, names  # plus the transposes at the graph's two edges
    exe = autotvm.build_program(mod, "llvm", named, conv_layout="NHWC")
    out = relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(x.numpy()))
    out = out[0] if not hasattr(out, "numpy") else out
    with torch.no_grad():
        expected = block(x).numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


class FeedForward(TwoLayer):
    """A transformer's feed-forward block and an attention-like softmax over a transposed view."""

    def __init__(self):
        super().__init__((64, 256, 64))

    def forward(self, x):
        h = self.fc2(torch.nn.functional.gelu(self.fc1(x)))
        return torch.softmax(h.reshape(2, 16, 64).transpose(1, 2), dim=-1)


@pytest.fixture(scope="module")
def feed_forward():
    return _seeded_program(FeedForward, (32, 64))


def test_erf_and_exp_become_fast_math_that_vectorises(feed_forward):
    """LLVM lowers erf and exp to a libm call per value; the fused program computes GELU and
    softmax with TVM's fast-math polynomials instead, and still matches PyTorch."""
    mod, params, x, expected = feed_forward
    fused = autotvm.task.relax_integration.fused_program(mod, "llvm")
    scripts = {gv.name_hint: f.script() for gv, f in fused.functions_items() if isinstance(f, tvm.tirx.PrimFunc)}
    assert any("gelu" in name for name in scripts) and any("softmax" in name for name in scripts), list(scripts)
    assert not any("T.erf(" in text or "T.exp(" in text for text in scripts.values())
    out = _run(autotvm.build_program(mod, "llvm"), params, x)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["gelu", "erf"])
def test_float16_gelu_and_erf_are_as_exact_as_float16_allows(op):
    """A float16 model's GELU and erf (``precision="float16"``) compute in float32 and round once:
    TVM's float16 fast erf strays past 1 near |x| = 4, which scaled a transformer's largest
    activations by up to 2% and compounded over MiniLM's layers."""
    import math

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((4096,), "float16"))
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.gelu(x) if op == "gelu" else relax.op.erf(x))
        bb.emit_func_output(y)
    fused = autotvm.task.relax_integration.fuse_program(bb.get(), "llvm")
    exe = relax.build(fused, target="llvm")
    values = np.linspace(-6, 6, 4096).astype("float16")
    got = relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(values)).numpy().astype(np.float64)
    exact = np.array([v * (1 + math.erf(v / math.sqrt(2))) / 2 if op == "gelu" else math.erf(v)
                      for v in values.astype(np.float64)])
    assert np.abs(got - exact).max() <= 2 * 2.0**-11 * np.abs(exact).max()  # two float16 roundings at most


def test_functions_with_one_config_are_built_with_it(feed_forward, measure_opt, tmp_path):
    """A function whose space has one config is never measured (the task scheduler gives it no
    trials), yet a tuned build gives it that config's schedule instead of TVM's default lowering,
    which runs on one core; tunable functions without records keep the default, and the build
    warns how many they are. An untuned build (no ``apply_history_best``) stays TVM's default
    throughout."""
    from autotvm.task import relax_integration

    mod, params, x, expected = feed_forward
    tasks = autotvm.task.extract_from_program(mod, "llvm")
    single = [t for t in tasks if len(t.config_space) == 1]
    tunable = [t for t in tasks if len(t.config_space) > 1]
    assert single and len(tunable) >= 2, [(t.name, len(t.config_space)) for t in tasks]
    log = str(tmp_path / "ff.json")
    RandomTuner(tunable[0], seed=0).tune(4, measure_opt, callbacks=[autotvm.callback.log_to_file(log)])
    target = autotvm.make_target("llvm")
    fused = relax_integration.fused_program(mod, target)
    assert not relax_integration._records_database(fused, target).get_all_tuning_records()
    with autotvm.apply_history_best(log), pytest.warns(UserWarning) as warned:
        database = relax_integration._records_database(fused, target)
        out = _run(autotvm.build_program(mod, "llvm"), params, x)
    untuned = f"{len(tunable) - 1} of the program's {len(tunable)} tunable functions have no record"
    assert [w for w in warned if untuned in str(w.message) and "built untuned" in str(w.message)], \
        [str(w.message) for w in warned]
    recorded = [t.name for t in tasks if database.has_workload(t.mod)]
    assert sorted(recorded) == sorted([tunable[0].name] + [t.name for t in single])
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_an_embedding_lookup_builds_without_tvms_out_of_bounds_warning_and_clamps(capfd):
    """PyTorch's embedding becomes ``take(mode="fast")``, which TVM legalizes with a warning at every
    build and reads out of bounds on a bad index: the build clamps instead, with the same values in range."""
    bb = relax.BlockBuilder()
    ids = relax.Var("ids", relax.TensorType((3,), "int64"))
    table = relax.Var("table", relax.TensorType((10, 4), "float32"))
    with bb.function("main", [ids, table]):
        bb.emit_func_output(bb.emit(relax.op.take(table, ids, axis=0)))
    vm = relax.VirtualMachine(autotvm.build_program(bb.get(), "llvm"), tvm.cpu())
    weights = np.arange(40, dtype="float32").reshape(10, 4)
    lookup = lambda index: vm["main"](tvm.runtime.tensor(np.array(index)), tvm.runtime.tensor(weights)).numpy()
    np.testing.assert_array_equal(lookup([0, 9, 3]), weights[[0, 9, 3]])
    np.testing.assert_array_equal(lookup([0, 12, -20]), weights[[0, 9, 0]])
    assert "out-of-bounds" not in capfd.readouterr().err


def _kernels(exe):
    """The functions an executable calls, by name (a kernel each on a CPU; the VM's builtins left out)."""
    return [name for name in re.findall(r"call  ([a-zA-Z_0-9]+) ", exe.as_text()) if not name.startswith("vm")]


def tiny_bert():
    """(model, Relax module, its weights by name) of a one-layer Hugging Face BERT, 64 features (512 in
    its feed-forward: its second matmul sums its K in parts on a GPU), 16 tokens."""
    import transformers

    from tools.models import Model, bound_params

    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                                     intermediate_size=512, vocab_size=100)
    model = Model("bert", transformers.BertModel(config).eval(), (torch.randint(0, 100, (1, 16)),))
    mod, params = model.to_relax()
    return model, mod, bound_params(mod, params)


def test_a_bert_layer_is_fewer_larger_kernels_and_computes_the_same():
    """A Hugging Face BERT layer with bound weights: its query, key and value projections are one
    matmul of three times the columns, read through slices (no split that copies them); its
    residual adds, GELU and attention mask are in the kernels of the matmuls before them; its
    softmax is one function, on the CPU's row template; the functions that only reshape (views in
    the build) are not tasks. Its outputs are PyTorch's."""
    model, mod, bound = tiny_bert()
    tasks = autotvm.task.extract_from_program(mod, "llvm", bound)
    fused = autotvm.task.relax_integration.fused_program(mod, "llvm", bound)
    reshapes = {g.name_hint for g, f in fused.functions_items()
                if isinstance(f, tvm.tirx.PrimFunc) and relax.analysis.has_reshape_pattern(f)}
    assert reshapes and not [t.name for t in tasks if relax.analysis.has_reshape_pattern(t.default_module()["main"])], \
        reshapes
    shapes = {t.name: [[int(d) for d in p.shape] for p in t.default_module()["main"].params] for t in tasks}
    # the softmax (4 heads of 16 x 16) on the row template, in float32
    assert [t.args for t in tasks if t.name == x86_softmax.TEMPLATE] == [(4 * 16, 16, 0)], list(shapes)
    assert [name for name, s in shapes.items() if s[:2] == [[16, 64], [64, 192]]], shapes
    assert [t.weight for t in tasks if shapes[t.name][:2] == [[16, 64], [64, 64]]] == [1], shapes  # output projection
    exe = autotvm.build_program(mod, "llvm", bound)
    kernels = _kernels(exe)
    assert not [k for k in kernels if "split" in k], kernels
    assert all("matmul" in k for k in kernels if "gelu" in k), kernels
    # one layer: the embeddings' lookups, sum and norm (5), the pooler (1) and 13 for the layer:
    # Q/K/V, its 3 slices into heads, QK^T with the mask, softmax, PV, the heads back, the output
    # projection with its residual, 2 norms, the feed-forward's 2 matmuls
    assert len(kernels) == 19, kernels
    vm = relax.VirtualMachine(exe, tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(model.inputs[0].numpy()))
    for got, expected in zip(out, model.torch_outputs()):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_elementwise_ops_move_before_a_reshape_only_where_the_result_is_the_same():
    """After a matmul reshaped to 3-D or 4-D: a full-shape add, a broadcast one along the new
    leading axis and a scalar multiply go into the matmul's kernel; an add that broadcasts across
    the heads the reshape made stays after it. Each output is NumPy's."""
    from autotvm.task.matmul_fusion import epilogues_before_reshapes

    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((16, 64), "float32"), rng.standard_normal((64, 64), "float32")
    full, leading, heads = (rng.standard_normal(s, "float32") for s in ((1, 16, 64), (1, 1, 64), (1, 1, 4, 16)))
    bb = relax.BlockBuilder()
    data = relax.Var("x", relax.TensorType((16, 64), "float32"))
    with bb.function("main", [data]):
        with bb.dataflow():
            y = [bb.emit(relax.op.matmul(data, relax.const(w))) for _ in range(3)]  # one each: a kernel
            outs = [bb.emit(relax.op.add(bb.emit(relax.op.reshape(y[0], (1, 16, 64))), relax.const(full))),
                    bb.emit(relax.op.multiply(relax.const(2.0), bb.emit(relax.op.add(
                        relax.const(leading), bb.emit(relax.op.reshape(y[1], (1, 16, 64))))))),
                    bb.emit(relax.op.add(bb.emit(relax.op.reshape(y[2], (1, 16, 4, 16))), relax.const(heads)))]
            out = bb.emit_output(relax.Tuple(outs))
        bb.emit_func_output(out)
    exe = relax.build(autotvm.task.relax_integration.fuse_program(epilogues_before_reshapes(bb.get()), "llvm"),
                      target="llvm")
    kernels = _kernels(exe)
    assert sum("matmul" in k and "add" in k for k in kernels) == 2 and len(kernels) == 4, kernels
    got = relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(x))
    y = x @ w
    expected = [y[None] + full, 2 * (leading + y[None]), y.reshape(1, 16, 4, 16) + heads]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g.numpy(), e, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_a_deep_narrow_matmul_sums_its_k_in_parts_with_its_epilogue_in_the_kernel_that_adds_them(precision):
    """A 32x1024x64 matmul with a constant weight is four partial products of 256 each, side by
    side in one function, then one kernel adds them with the bias and the ReLU; float16 inputs
    sum in float32 as before. The output is NumPy's. A shallow matmul stays as it was."""
    from autotvm.task.split_k import split_factor, split_k_matmuls

    assert (split_factor(32, 1024, 64), split_factor(128, 1536, 384), split_factor(128, 384, 384)) == (4, 4, 2)
    assert (split_factor(1, 4096, 64), split_factor(128, 1536, 4096), split_factor(64, 1000, 64)) == (1, 1, 4)
    assert (split_factor(128, 256, 384), split_factor(128, 384, 1152)) == (1, 1)  # too shallow; outputs enough
    rng = np.random.default_rng(0)
    x, w, bias = (rng.standard_normal(s, "float32") for s in ((32, 1024), (1024, 64), (64,)))
    bb = relax.BlockBuilder()
    data = relax.Var("x", relax.TensorType((32, 1024), "float32"))
    with bb.function("main", [data]):
        with bb.dataflow():
            if precision == "float16":
                y = bb.emit(relax.op.matmul(bb.emit(relax.op.astype(data, "float16")),
                                            relax.const(w.astype("float16")), out_dtype="float32"))
            else:
                y = bb.emit(relax.op.matmul(data, relax.const(w)))
            deep = bb.emit(relax.op.nn.relu(bb.emit(relax.op.add(y, relax.const(bias)))))
            shallow = bb.emit(relax.op.matmul(deep, relax.const(w[:64])))
            out = bb.emit_output(relax.Tuple([deep, shallow]))
        bb.emit_func_output(out)
    mod = split_k_matmuls(bb.get())
    exe = relax.build(autotvm.task.relax_integration.fuse_program(mod, "llvm"), target="llvm")
    kernels = _kernels(exe)
    assert len([k for k in kernels if k.startswith("split_k_matmul")]) == 1, kernels
    assert [k for k in kernels if "add" in k and "relu" in k and "strided_slice" in k], kernels
    assert len([k for k in kernels if "matmul" in k]) == 2, kernels
    split = next(f for g, f in mod.functions_items() if g.name_hint.startswith("split_k_matmul"))
    assert [[int(d) for d in p.shape] for p in split.params] == [[32, 4, 256], [4, 256, 64], [4, 32, 64]]
    assert str(split.params[2].dtype) == "float32"
    deep, shallow = relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(x))
    tolerance = 1e-4 if precision == "float32" else 1e-2
    expected = np.maximum(x @ w + bias, 0)
    np.testing.assert_allclose(deep.numpy(), expected, rtol=tolerance, atol=tolerance * np.abs(expected).max())
    np.testing.assert_allclose(shallow.numpy(), expected @ w[:64], rtol=tolerance,
                               atol=tolerance * np.abs(expected @ w[:64]).max())


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_a_bert_layers_attention_reads_its_heads_in_place_where_a_gpu_build_asks(precision):
    """The rewrite a GPU build makes (``matmul_views``): a BERT layer's two attention matmuls read
    the query, key and value heads where the projection wrote them, in views that give each head
    an axis (the key through a view of its own), and write the heads of their output in the order
    the output projection reads; the query's and key's scale go after the sum. The four copies a
    layer made are gone. Built here for the CPU, its outputs are PyTorch's."""
    from autotvm.task.matmul_views import matmuls_read_views
    from autotvm.task.relax_integration import fuse_program, prepare_program

    model, mod, bound = tiny_bert()
    prepared = prepare_program(mod, bound, precision=precision)
    rewritten = matmuls_read_views(prepared)
    views = [[[int(d) for d in p.shape] for p in f.params]
             for g, f in rewritten.functions_items() if g.name_hint.startswith("view_matmul")]
    probabilities = [1, 4, 16, 16] if precision == "float32" else [4, 16, 16]  # float16: cast, then read
    assert sorted(views) == sorted([[[16, 12, 16], [16, 12, 16], [4, 16, 16]],  # QK^T: 4 heads of 16 features
                                    [probabilities, [16, 12, 16], [16, 4, 16]]]), views  # PV, then a view
    assert "permute_dims" not in rewritten["main"].script() and "permute_dims" in prepared["main"].script()
    before = _kernels(relax.build(fuse_program(prepared, "llvm"), target="llvm"))
    exe = relax.build(fuse_program(rewritten, "llvm"), target="llvm")
    kernels = _kernels(exe)
    assert [k for k in before if "transpose" in k] and not [k for k in kernels if "transpose" in k], kernels
    assert len(kernels) == len(before) - 4, (before, kernels)
    out = relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(model.inputs[0].numpy()))
    tolerance = 1e-4 if precision == "float32" else 1e-2
    for got, expected in zip(out, model.torch_outputs()):
        np.testing.assert_allclose(got.numpy(), expected, rtol=tolerance, atol=tolerance * np.abs(expected).max())


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_a_layer_norm_computes_its_input_in_its_own_kernel_where_a_gpu_build_asks(precision):
    """The merge a GPU build makes after ``FuseOps`` (``norm_prologues``): what only a layer norm
    reads and no reduction computes (the embeddings' cast, lookup and sums; the sum of the
    feed-forward's split-K parts with its bias and the residual) goes into the norm's function, so
    a one-layer BERT is four kernels fewer; a matmul before a norm stays in its own. Built here for
    the CPU, its outputs are PyTorch's."""
    from autotvm.task.norm_prologues import norms_compute_their_inputs
    from autotvm.task.relax_integration import prepare_program
    from autotvm.task.split_k import split_k_matmuls

    model, mod, bound = tiny_bert()
    prepared = split_k_matmuls(prepare_program(mod, bound, precision=precision))

    def build(*merge):
        passes = [relax.transform.LegalizeOps(), relax.transform.AnnotateTIROpPattern(),
                  relax.transform.FoldConstant(), relax.transform.FuseOps(), *merge, relax.transform.FuseTIR()]
        return relax.build(tvm.transform.Sequential(passes)(prepared), target="llvm")

    before, exe = build(), build(norms_compute_their_inputs)
    kernels = _kernels(exe)
    assert len(kernels) == len(_kernels(before)) - 4, (_kernels(before), kernels)
    norms = [k for k in kernels if "layer_norm" in k]
    assert [k for k in norms if "take" in k and "add" in k] and [k for k in norms if "strided_slice" in k], norms
    assert not [k for k in kernels if "matmul" in k and "layer_norm" in k], kernels  # a matmul stays its own
    out = relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(model.inputs[0].numpy()))
    tolerance = 1e-4 if precision == "float32" else 1e-2
    for got, expected in zip(out, model.torch_outputs()):
        np.testing.assert_allclose(got.numpy(), expected, rtol=tolerance, atol=tolerance * np.abs(expected).max())


def test_a_float16_build_casts_a_value_once_where_it_is_computed():
    """float16: a layer norm's float32 output, which the next matmul reads cast to float16 and the
    residual add reads in float32, is cast once, in the norm's kernel, and the residual reads it
    cast back, in its own kernel (as a PyTorch model in half precision reads one float16 value);
    the softmax's cast goes into the softmax's kernel. No kernel only casts, but the one of the
    last norm, whose float32 value is also the model's output. The outputs are as near PyTorch's
    float32 ones as PyTorch's own in float16 (within twice its error)."""
    import copy

    model, mod, bound = tiny_bert()
    exe = autotvm.build_program(mod, "llvm", bound, precision="float16")
    kernels = _kernels(exe)
    assert len([k for k in kernels if re.fullmatch(r"cast\d+", k)]) == 1, kernels
    assert len([k for k in kernels if k.startswith("fused_layer_norm_cast")]) == 2, kernels
    assert [k for k in kernels if "softmax" in k and "cast" in k], kernels
    with torch.no_grad():
        half = copy.deepcopy(model.module).half()(*model.inputs).values()
    out = relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(model.inputs[0].numpy()))
    for got, theirs, expected in zip(out, half, model.torch_outputs()):
        error = np.abs(got.numpy() - expected).max() / np.abs(expected).max()
        assert error <= 2 * np.abs(theirs.float().numpy() - expected).max() / np.abs(expected).max(), error


def test_a_float16_build_takes_relu6():
    """PyTorch's ReLU6 (MobileNetV2's activation) is a clip with scalar bounds, where Relax's
    ``ToMixedPrecision`` stops; it becomes a maximum and a minimum of constants, and the model
    builds in float16 (here for the CPU) and computes what PyTorch does, within float16's error."""
    from tools.models import Model, bound_params

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU6(), torch.nn.Conv2d(16, 8, 1))
    model = Model("relu6", module.eval(), (4 * torch.randn(1, 8, 16, 16),))
    mod, params = model.to_relax()
    assert "R.clip" in mod["main"].script()
    exe = autotvm.build_program(mod, "llvm", bound_params(mod, params), precision="float16")
    got = relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(model.inputs[0].numpy()))
    got = got.numpy() if hasattr(got, "numpy") else got[0].numpy()
    expected = model.torch_outputs()[0]
    np.testing.assert_allclose(got, expected, rtol=1e-2, atol=1e-2 * np.abs(expected).max())


def test_a_matmul_of_two_activations_reads_a_view_in_place_only_where_it_is_affine():
    """``matmul_views``: a batched matmul of a transposed activation divided by a scalar, whose
    output is transposed back and reshaped, is one function writing the transposed layout (the
    reshape then a view; the division after the sum); a matmul reading a transpose merged with a
    reshape (not an affine map of its source) and one of a constant weight stay matmuls. Each
    output is NumPy's."""
    from autotvm.task.matmul_views import matmuls_read_views
    from autotvm.task.relax_integration import fuse_program

    rng = np.random.default_rng(0)
    x, y, w = (rng.standard_normal(s, "float32") for s in ((4, 8, 16), (8, 16, 4), (16, 4)))
    bb = relax.BlockBuilder()
    xv, yv = relax.Var("x", relax.TensorType(x.shape, "float32")), relax.Var("y", relax.TensorType(y.shape, "float32"))
    with bb.function("main", [xv, yv]):
        with bb.dataflow():
            swapped = bb.emit(relax.op.permute_dims(xv, [1, 0, 2]))  # [8, 4, 16]
            halved = bb.emit(relax.op.divide(swapped, relax.const(2.0, "float32")))  # goes after the sum
            batched = bb.emit(relax.op.matmul(halved, yv))  # [8, 4, 4]
            back = bb.emit(relax.op.reshape(bb.emit(relax.op.permute_dims(batched, [1, 0, 2])), [4, 32]))
            merged = bb.emit(relax.op.matmul(bb.emit(relax.op.reshape(swapped, [8, 64])),
                                             bb.emit(relax.op.reshape(yv, [64, 8]))))
            weighted = bb.emit(relax.op.matmul(swapped, relax.const(w)))
            out = bb.emit_output(relax.Tuple([back, merged, weighted]))
        bb.emit_func_output(out)
    mod = matmuls_read_views(bb.get())
    views = [f for g, f in mod.functions_items() if g.name_hint.startswith("view_matmul")]
    assert len(views) == 1 and [int(d) for d in views[0].params[-1].shape] == [4, 8, 4]
    assert mod["main"].script().count("R.matmul") == 2 and "R.divide" not in mod["main"].script()
    exe = relax.build(fuse_program(mod, "llvm"), target="llvm")
    got = relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(y))
    swapped = x.transpose(1, 0, 2)
    for value, expected in zip(got, [(swapped / 2 @ y).transpose(1, 0, 2).reshape(4, 32),
                                     swapped.reshape(8, 64) @ y.reshape(64, 8), swapped @ w]):
        np.testing.assert_allclose(value.numpy(), expected, rtol=1e-5, atol=1e-5)


def conv_block(stride, dtype="float32"):
    """(Relax module, input, PyTorch's output) of an NHWC 3x3 convolution of 256 channels to 256
    with a constant OHWI weight, its bias and a ReLU, on an 8x8 output: 64 x 2304 x 256 as a
    matmul, which a GPU build sums in 8 parts where it reads float16. ``dtype="float16"``: the
    input and weight in float16, summed in float32, as ``ToMixedPrecision`` makes a convolution."""
    rng = np.random.default_rng(0)
    size = 8 * stride
    x = rng.standard_normal((1, size, size, 256), "float32")
    w, bias = rng.standard_normal((256, 3, 3, 256), "float32") / 48, rng.standard_normal((1, 1, 1, 256), "float32")
    bb = relax.BlockBuilder()
    data = relax.Var("x", relax.TensorType(x.shape, "float32"))
    with bb.function("main", [data]):
        with bb.dataflow():
            read = data if dtype == "float32" else bb.emit(relax.op.astype(data, dtype))
            y = bb.emit(relax.op.nn.conv2d(read, relax.const(w.astype(dtype)), strides=[stride, stride],
                                           padding=[1, 1, 1, 1], data_layout="NHWC", kernel_layout="OHWI",
                                           out_dtype="float32"))
            out = bb.emit_output(relax.op.nn.relu(bb.emit(relax.op.add(y, relax.const(bias)))))
        bb.emit_func_output(out)
    expected = torch.nn.functional.conv2d(torch.from_numpy(x).permute(0, 3, 1, 2), torch.from_numpy(w).permute(0, 3, 1, 2),
                                          stride=stride, padding=1).permute(0, 2, 3, 1).numpy()
    return bb.get(), x, np.maximum(expected + bias, 0)


@pytest.mark.parametrize("stride", [1, 2])
def test_a_deep_float16_convolution_with_few_pixels_sums_its_input_channels_in_parts(stride):
    """A float16 3x3 convolution of 256 channels on an 8x8 output is 8 partial convolutions of 32
    input channels each, side by side in one function summing in float32, then one kernel adds
    them with the bias and the ReLU. The output is PyTorch's. In float32 it stays whole."""
    from autotvm.task.split_k import split_k_matmuls

    mod, x, expected = conv_block(stride, "float16")
    mod = split_k_matmuls(mod)
    split = next(f for g, f in mod.functions_items() if g.name_hint.startswith("split_k_conv2d"))
    assert [[int(d) for d in p.shape] for p in split.params][1:] == [[8, 256, 3, 3, 32], [8, 1, 8, 8, 256]]
    assert str(split.params[2].dtype) == "float32"
    exe = relax.build(autotvm.task.relax_integration.fuse_program(mod, "llvm"), target="llvm")
    kernels = _kernels(exe)
    assert [k for k in kernels if "strided_slice" in k and "add" in k and "relu" in k], kernels
    assert len([k for k in kernels if "conv2d" in k]) == 1, kernels
    got = relax.VirtualMachine(exe, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-2, atol=1e-2 * np.abs(expected).max())
    whole = split_k_matmuls(conv_block(stride)[0])
    assert not [g for g in whole.get_global_vars() if "split_k" in g.name_hint]


class MaskedAttention(torch.nn.Module):
    """PyTorch's attention over 8 keys, the keys of query 3 all masked."""

    def __init__(self):
        super().__init__()
        self.k, self.v = torch.nn.Parameter(torch.randn(1, 2, 8, 16)), torch.nn.Parameter(torch.randn(1, 2, 8, 16))
        mask = torch.ones(1, 1, 8, 8, dtype=torch.bool)
        mask[..., 3, :] = False
        self.register_buffer("mask", mask)

    def forward(self, q):
        return torch.nn.functional.scaled_dot_product_attention(q, self.k, self.v, attn_mask=self.mask)


def test_pytorchs_safe_softmax_is_one_function_with_zeros_for_a_row_of_masked_keys():
    """The attention's softmax, which PyTorch exports with a second pass for rows whose keys are
    all masked, is one function; its output is the attention's, zeros for the masked row."""
    mod, params, x, _ = _seeded_program(MaskedAttention, (1, 2, 8, 16))
    exe = autotvm.build_program(mod, "llvm")
    kernels = _kernels(exe)
    assert len([k for k in kernels if "softmax" in k]) == 1 and not [k for k in kernels if "equal" in k], kernels
    got = _run(exe, params, x)
    k, v = (p.numpy() for p in params[:2])
    scores = x @ k.transpose(0, 1, 3, 2) / 4.0
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    weights[..., 3, :] = 0
    np.testing.assert_allclose(got, weights @ v, rtol=1e-5, atol=1e-5)
    assert not got[..., 3, :].any()

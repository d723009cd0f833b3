"""Side study: how fast can the same tuner, with the same budget, make ResNet-18's 3x3 convolutions
in each way the model can be prepared? Prints the best time per call of each task, variant and seed.

Variants (each is how ``extract_from_program`` / ``build_program`` prepare the model):
  nchw            NCHW, weights layout-free (prepacked at compile time)
  nchw-noprepack  NCHW with the layout-free attribute removed (the kernel reads OIHW weights)
  nhwc            NHWC (channels innermost), weights layout-free
  winograd        NHWC, 3x3 stride-1 convolutions by Winograd F(4x4, 3x3)

    python benchmarks/conv_variants.py --layers 4,1 --variants nchw,nhwc,winograd --seeds 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tvm  # noqa: E402

import autotvm  # noqa: E402
from autotvm.task.trace_task import TraceTask  # noqa: E402
from tools.compare import comparison_measure_option  # noqa: E402
from tools.tune import load_program  # noqa: E402
from tools.tuners import make_tuner  # noqa: E402

VARIANTS = {"nchw": ("NCHW", "direct"), "nchw-noprepack": ("NCHW", "direct"), "nhwc": ("NHWC", "direct"),
            "winograd": ("NHWC", "winograd")}
LAYERS = {1: (56, 64), 2: (28, 128), 3: (14, 256), 4: (7, 512)}  # ResNet-18 stage -> (map size, channels)


def conv_task(tasks: list, layout: str, layer: int) -> TraceTask:
    """The stride-1 3x3 conv of a ResNet stage: the heaviest task with that output shape."""
    size, channels = LAYERS[layer]
    shape = [1, size, size, channels] if layout == "NHWC" else [1, channels, size, size]
    matching = [t for t in tasks if "conv2d" in t.name and [int(d) for d in t.mod["main"].params[-1].shape] == shape]
    return max(matching, key=lambda t: t.weight)


def without_prepack(task: TraceTask) -> TraceTask:
    plain = task.mod["main"].without_attr("layout_free_buffers")
    return TraceTask(task.name, tvm.IRModule({"main": plain}), task.target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=os.path.join(os.path.dirname(__file__), "resnet18.json"))
    parser.add_argument("--layers", default="4,1", help="ResNet stages whose 3x3 stride-1 conv to tune")
    parser.add_argument("--variants", default="nchw,nhwc,winograd", help=", ".join(VARIANTS))
    parser.add_argument("--tuner", default="ga-dqn")
    parser.add_argument("--options", default="{}", help="JSON: tuner options")
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()

    spec = json.load(open(args.config))["models"][0]
    target = autotvm.make_target("llvm")
    _, mod, params = load_program(spec)
    option = comparison_measure_option()
    for variant in args.variants.split(","):
        layout, algorithm = VARIANTS[variant]
        tasks = autotvm.task.extract_from_program(mod, target, params, conv_layout=layout, conv_algorithm=algorithm)
        for layer in (int(x) for x in args.layers.split(",")):
            task = conv_task(tasks, layout, layer)
            task = without_prepack(task) if variant == "nchw-noprepack" else task
            for seed in range(args.seeds):
                start = time.perf_counter()
                tuner = make_tuner(args.tuner, task, seed=seed, **json.loads(args.options))
                tuner.tune(args.trials, option)
                print(f"layer {layer} {variant:15} seed {seed}: best {task.flop / tuner.best_flops * 1e3:6.3f} ms "
                      f"({task.name}, {time.perf_counter() - start:4.0f} s)", flush=True)


if __name__ == "__main__":
    main()

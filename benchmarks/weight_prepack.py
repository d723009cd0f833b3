"""Side study: does marking a model's weights layout-free (TVM's CPU weight prepack) let the
same tuner reach faster kernels? Tunes ResNet-18 conv tasks twice per seed, once as extracted
(weights layout-free) and once with the attribute removed, with the same tuner and budget.

    python benchmarks/weight_prepack.py --tasks fused_conv2d9,fused_conv2d1 --seeds 2 \
        --options '{"mutation": "local"}'
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
from tools.tune import model_tasks  # noqa: E402
from tools.tuners import make_tuner  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=os.path.join(os.path.dirname(__file__), "resnet18.json"))
    parser.add_argument("--tasks", default="fused_conv2d9,fused_conv2d1", help="task name prefixes")
    parser.add_argument("--tuner", default="ga-dqn")
    parser.add_argument("--options", default="{}", help="JSON: tuner options")
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()

    spec = json.load(open(args.config))["models"][0]
    target = autotvm.make_target("llvm")
    _, _, _, tasks = model_tasks(spec, target)
    option = autotvm.measure_option(autotvm.LocalBuilder(n_parallel=2, timeout=30),
                                    autotvm.LocalRunner(number=3, repeat=3, timeout=10))
    for prefix in args.tasks.split(","):
        prepacked = next(t for t in tasks if t.name.startswith(prefix + "_"))
        plain_func = prepacked.mod["main"].without_attr("layout_free_buffers")
        plain = TraceTask(prepacked.name, tvm.IRModule({"main": plain_func}), target)
        for seed in range(args.seeds):
            for label, task in (("prepack", prepacked), ("plain", plain)):
                start = time.perf_counter()
                tuner = make_tuner(args.tuner, task, seed=seed, **json.loads(args.options))
                tuner.tune(args.trials, option)
                print(f"{prefix} {label:8} seed {seed}: best {tuner.best_flops / 1e9:6.1f} GFLOPS, "
                      f"{time.perf_counter() - start:5.0f} s", flush=True)


if __name__ == "__main__":
    main()

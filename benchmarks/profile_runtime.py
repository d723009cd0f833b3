"""Per-operator profile of PyTorch eager or OpenVINO on a config's models, to set beside the
per-function profile of the TVM builds (``run_settings.profile``).

    python benchmarks/profile_runtime.py -c configs/resnet-18.json --runtime pytorch --runs 10
    python benchmarks/profile_runtime.py -c configs/bert-minilm.json --runtime openvino

Builds each model exactly as ``driver.py -m=benchmark`` does (``tools.models.load_model``), on
the target's cores, warms it up, then prints the runtime's own profile: ``torch.profiler``'s
table grouped by input shape (mean time per call), or OpenVINO's performance counters summed
per layer type (ms per inference, with the kernels it chose).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import autotvm  # noqa: E402
from tools.models import load_model  # noqa: E402
from tools.runtimes import openvino_model  # noqa: E402


def profile_pytorch(model, runs: int, rows: int, threads: int) -> str:
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(threads)
    with torch.no_grad():
        for _ in range(5):
            model.module(*model.inputs)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(runs):
                model.module(*model.inputs)
    return prof.key_averages(group_by_input_shape=True).table(
        sort_by="self_cpu_time_total", row_limit=rows, max_name_column_width=30, max_shapes_column_width=60)


def profile_openvino(model, runs: int, rows: int, threads: int) -> str:
    request = openvino_model(model, threads, {"PERF_COUNT": "YES"}).create_infer_request()
    inputs = [x.numpy() for x in model.inputs]
    for _ in range(5):
        request.infer(inputs)
    totals: dict[str, list] = collections.defaultdict(lambda: [0, 0.0, set()])
    for _ in range(runs):
        request.infer(inputs)
        for layer in request.get_profiling_info():
            if layer.status.name == "EXECUTED":
                entry = totals[layer.node_type]
                entry[0] += 1
                entry[1] += layer.real_time.total_seconds() * 1e3
                entry[2].add(layer.exec_type)
    grand = sum(entry[1] for entry in totals.values()) / runs
    lines = [f"{'layer type':20} {'calls':>6} {'ms':>8}  kernels", f"{'all':20} {'':>6} {grand:8.3f}"]
    for kind, (calls, ms, kernels) in sorted(totals.items(), key=lambda kv: -kv[1][1])[:rows]:
        lines.append(f"{kind:20} {calls // runs:6d} {ms / runs:8.3f}  {', '.join(sorted(kernels))}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-c", "--config", default="configs/resnet-18.json")
    parser.add_argument("--runtime", choices=("pytorch", "openvino"), default="pytorch")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rows", type=int, default=25)
    args = parser.parse_args()
    config = json.load(open(args.config))
    threads = autotvm.runtime_threads(autotvm.make_target(config.get("target", "llvm")))
    run = profile_pytorch if args.runtime == "pytorch" else profile_openvino
    for spec in config["models"]:
        model = load_model(spec)
        print(f"== {spec['name']}: {args.runtime}, {args.runs} runs, {threads} threads")
        print(run(model, args.runs, args.rows, threads))


if __name__ == "__main__":
    main()

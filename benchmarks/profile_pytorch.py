"""Per-operator profile of PyTorch eager on a config's models, to set beside TVM's `profile`.

    python benchmarks/profile_pytorch.py -c configs/resnet-18.json --runs 10

Builds each model exactly as `driver.py -m=benchmark` does (`tools.models.load_model`), warms it
up, then prints `torch.profiler`'s table grouped by input shape (mean time per call).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

from tools.models import load_model  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-c", "--config", default="configs/resnet-18.json")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--rows", type=int, default=25)
    args = parser.parse_args()
    for spec in json.load(open(args.config))["models"]:
        model = load_model(spec)
        with torch.no_grad():
            for _ in range(5):
                model.module(*model.inputs)
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                for _ in range(args.runs):
                    model.module(*model.inputs)
        print(f"== {spec['name']}: {args.runs} runs")
        print(prof.key_averages(group_by_input_shape=True).table(
            sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=30, max_shapes_column_width=60))


if __name__ == "__main__":
    main()

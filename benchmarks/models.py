"""Tune each shipped model config, benchmark it against the other runtimes, and write one table.

    python benchmarks/models.py --out results/models.md            # all four configs/*.json
    python benchmarks/models.py --configs configs/resnet-18.json   # one

For each config: ``driver.py -m=tune`` (its wall time is the tuning time), then ``driver.py
-m=benchmark``, each in its own process so that no runtime's threads outlive its block. The table
gives, per model, every variant's median latency, the tuned build's speed-up over eager and over
the fastest other runtime, and the tuning time. Rerunning resumes the tunes from their logs.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import subprocess
import sys
import time

import tabulate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNTIMES = ("pytorch-eager", "torch-compile", "onnxruntime", "openvino")


def _driver(method: str, config: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, os.path.join(ROOT, "driver.py"), f"-m={method}", f"-c={config}"], check=True)
    return time.perf_counter() - start


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            name = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.processor()
    return f"{name}, {os.cpu_count()} cores"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", nargs="+", default=sorted(glob.glob(os.path.join(ROOT, "configs", "*.json"))))
    parser.add_argument("--out", default="results/models.md")
    args = parser.parse_args()
    rows = []
    for path in args.configs:
        config = json.load(open(path, encoding="utf-8"))
        tune_s = _driver("tune", path)
        time.sleep(1)
        _driver("benchmark", path)
        settings = config["autotuner_settings"]
        # the driver ran in this working directory: relative save paths are relative to it
        result = os.path.join(settings.get("save_path", "results"), f"{settings.get('save_name', 'tuning')}-benchmark.json")
        for model in config["models"]:
            timed = {r["variant"]: r for r in json.load(open(result, encoding="utf-8")) if r["model"] == model["name"]}
            tuned = timed.get("tvm-tuned")
            fastest = min((timed[v]["median_ms"], v) for v in RUNTIMES if v in timed)
            rows.append([model["name"], *[timed[v]["median_ms"] if v in timed else None for v in RUNTIMES],
                         tuned["median_ms"] if tuned else None,
                         tuned["speedup_over_eager"] if tuned else None,
                         f"{fastest[0] / tuned['median_ms']:.2f} ({fastest[1]})" if tuned else "-",
                         settings.get("model_trials"), round(tune_s)])
    headers = ["model", *[f"{v} ms" for v in RUNTIMES], "tvm-tuned ms", "x eager", "x fastest other", "trials",
               "tune s"]
    table = tabulate.tabulate(rows, headers=headers, tablefmt="github", floatfmt=".2f", missingval="-")
    text = f"Medians of interleaved rounds, batch 1, {_cpu()}, {time.strftime('%Y-%m-%d')}\n\n{table}\n"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as handle:
        handle.write(text)
    print(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

"""``driver.py -m=experiment``: run the named experiments of ``experiments.names`` (the registry
``tools.experiments.EXPERIMENTS``), print each one's table and ratio lines, and say where its
outputs went."""

from __future__ import annotations

import os
from typing import Any

import autotvm

from .experiments import EXPERIMENTS, format_headroom, format_throughput
from .model_tuners import format_model_table
from .saved_runs import check_previous_results_dir
from .settings import Config
from .stats import format_table

# the table printer and the plots of experiments whose outputs differ from the operator experiments'
MODEL_OUTPUTS = {"model_tuners": (format_model_table, "curves.png, bars.png; table.csv: the table above; logs/: every "
                                                      "run's records"),
                 "throughput": (format_throughput, "curves.png; summary.csv: the table above"),
                 "bf16_headroom": (format_headroom, "curves.png of the float32 tuning; summary.csv: the table above")}


def run_experiments(config: Config) -> dict[str, Any]:
    check_previous_results_dir(config.experiments.previous_results_dir)  # before the workers start
    option = config.autotuner_settings.measure_option(config.target)
    # the workers started and the device opened before the first run: no run pays for them
    option["builder"].start(wait=True)
    option["runner"].start(autotvm.make_target(config.target), wait=True)
    results = {}
    for name in config.experiments.names:
        print(f"== experiment {name}", flush=True)
        rows, ratios = EXPERIMENTS[name](config, option)
        table, plots = MODEL_OUTPUTS.get(name, (format_table, "curves.png"))
        print(table(rows))
        if ratios:
            print("\n".join(ratios))
        out_dir = os.path.join(config.experiments.out_dir, name)
        print(f"wrote {out_dir}/: runs.json (every run), summary.csv, ratios.txt and the plots ({plots})")
        results[name] = rows
    return results

"""Quality benchmark: Random, GA, XGB, GA-DQN, its random-action ablation and MetaSchedule on
C1, MM512 and R3x3, each with the same trial budget and several seeds, all in one run.

    python benchmarks/compare_tuners.py --trials 200 --seeds 3 --out results/compare_tuners.json
    python benchmarks/compare_tuners.py --ops c1,r3x3 --tuners ga,ga@screen,ga-dqn \
        --options '{"ga@screen": {"pop_size": 16, "screen": 16, "immigrants": 2}}' --out results/screen.json

Prints the median best GFLOPS, trials to 90% of the final best and the tuner overhead, then the
geometric-mean ratios of GA-DQN over GA, XGB and its ablation.

``--remeasure N`` then measures the final best config of every run again, N times, all of an
op's configs together in a fresh order each round, and prints the same table and ratios over
those measurements (the median of each config's N). A run's best is the largest of its
noisy timings and reads high: on 2 Zen 4 cores by a median 4-11% against the median of its
timings again (1-2% against the fastest of them; docs/findings.md), so the ratios are printed on
the fastest of each config's N too. MetaSchedule's runs do not record their configs and are left out of it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tools.compare import (comparison_measure_option, format_table, ratio_lines, remeasure_into,  # noqa: E402
                           remeasured_ratio_lines, remeasured_runs, run_grid, summarise)
from tools.config import check_tuner_variants  # noqa: E402
from tools.tuners import base_tuner  # noqa: E402
from tools.plots import tuning_curves  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default="c1,mm512,r3x3")
    parser.add_argument("--tuners", default="random,ga,xgb,ga-dqn,ga-dqn-random,metaschedule",
                        help="tuner names; NAME@LABEL is NAME with the --options given for NAME@LABEL, "
                             "to compare variants of one tuner (e.g. ga-dqn,ga-dqn@restart3)")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=0,
                        help="seeds first-seed .. first-seed + seeds - 1 (fresh seeds to confirm a design chosen on others)")
    parser.add_argument("--options", default='{"ga": {"pop_size": 32}}',
                        help="JSON: per-tuner options (GA-DQN and its ablation use their default pop_size 16)")
    parser.add_argument("--number", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--n-parallel", type=int, default=2)
    parser.add_argument("--remeasure", type=int, default=0, metavar="N",
                        help="measure every run's final best config again N times and compare those (0: off)")
    parser.add_argument("--out", default="results/compare_tuners.json")
    parser.add_argument("--plot", default=None, help="PNG of the tuning curves (default: beside --out)")
    args = parser.parse_args()

    per_tuner = json.loads(args.options)
    tuners = args.tuners.split(",")
    try:  # a misspelt option would otherwise be ignored by make_tuner, and the run measure the default
        check_tuner_variants(tuners, {k: v for k, v in per_tuner.items() if k in tuners}, "--tuners", "--options")
    except ValueError as err:
        sys.exit(str(err))
    measure_option = comparison_measure_option(args.n_parallel, args.number, args.repeat)
    ms_settings = {"number": args.number, "repeat": args.repeat, "min_repeat_ms": 0, "n_parallel": args.n_parallel}
    try:
        runs = run_grid(args.out, range(args.first_seed, args.first_seed + args.seeds), args.ops.split(","),
                        tuners, args.trials, measure_option,
                        lambda _op, name: per_tuner.get(name, {}), ms_settings, {"args": vars(args)})
    except ValueError as err:
        sys.exit(str(err))
    rows = summarise(runs)
    print(format_table(rows))
    plot = args.plot or os.path.splitext(args.out)[0] + ".png"
    tuning_curves(runs, plot, f"Best GFLOPS vs trials, {args.trials} trials, {args.seeds} seeds")
    print(f"wrote {args.out} and {plot}")
    pairs = [("ga-dqn", base) for base in ("ga", "xgb", "ga-dqn-random", "random", "metaschedule")]
    pairs += [(name, base_tuner(name)) for name in tuners if "@" in name]  # variant / plain
    print("\n".join(ratio_lines(rows, runs, pairs)))
    if args.remeasure > 0:
        again = remeasure_into(args.out, runs, args.remeasure, measure_option=measure_option)
        runs_again = remeasured_runs(runs, again)
        rows_again = summarise(runs_again)
        print(f"\nEach run's best config measured again ({args.remeasure} times; median GFLOPS):")
        print(format_table(rows_again))
        print("\n".join(ratio_lines(rows_again, runs_again, pairs)))
        print(f"\nThe same, each config read as the fastest of its {args.remeasure} timings:")
        print("\n".join(remeasured_ratio_lines(runs, again, pairs, "fastest")))

if __name__ == "__main__":
    main()

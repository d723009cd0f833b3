"""Quality benchmark: Random, GA, XGB, GA-DQN, its random-action ablation and MetaSchedule on
C1, MM512 and R3x3, each with the same trial budget and several seeds, all in one run.

    python benchmarks/compare_tuners.py --trials 200 --seeds 3 --out results/compare_tuners.json
    python benchmarks/compare_tuners.py --ops c1,r3x3 --tuners ga-dqn,ga-dqn@restart3 \
        --options '{"ga-dqn@restart3": {"restart_after": 3}}' --out results/restart.json

Prints the median best GFLOPS, trials to 90% of the final best and the tuner overhead, then the
geometric-mean ratios of GA-DQN over GA, XGB and its ablation.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import autotvm  # noqa: E402
from tools.compare import (check_one_machine, format_table, machine_description, ratio_lines,  # noqa: E402
                           run_metaschedule, run_tuner, summarise)
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
    parser.add_argument("--out", default="results/compare_tuners.json")
    parser.add_argument("--plot", default=None, help="PNG of the tuning curves (default: beside --out)")
    args = parser.parse_args()

    builder = autotvm.LocalBuilder(n_parallel=args.n_parallel, timeout=30)
    runner = autotvm.LocalRunner(number=args.number, repeat=args.repeat, timeout=10)
    option = autotvm.measure_option(builder, runner)
    per_tuner = json.loads(args.options)
    runs, machine = [], machine_description()
    if os.path.exists(args.out):  # resume: keep the runs already done, if they were timed on this machine
        earlier = json.load(open(args.out))
        try:
            check_one_machine([earlier.get("machine"), machine] if earlier.get("runs") else [])
        except ValueError as err:
            sys.exit(f"cannot resume {args.out}: {err}; pass a new --out")
        runs = earlier["runs"]
    done = {(r["op"], r["tuner"], r["seed"]) for r in runs}
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for op in args.ops.split(","):
            for name in args.tuners.split(","):
                if (op, name, seed) in done:
                    continue
                if name == "metaschedule":
                    run = run_metaschedule(op, seed, args.trials, args.number, args.repeat, 0, args.n_parallel)
                else:
                    run = run_tuner(op, name.split("@")[0], seed, args.trials, option, per_tuner.get(name, {}))
                run["tuner"] = name
                runs.append(run)
                print(f"{op:6} {name:14} seed {seed}: best {run['best_gflops']:7.2f} GFLOPS, "
                      f"{run['wall_seconds']:6.1f} s", flush=True)
                os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
                json.dump({"args": vars(args), "machine": machine, "runs": runs}, open(args.out, "w"))
    rows = summarise(runs)
    print(format_table(rows))
    plot = args.plot or os.path.splitext(args.out)[0] + ".png"
    tuning_curves(runs, plot, f"Best GFLOPS vs trials, {args.trials} trials, {args.seeds} seeds")
    print(f"wrote {args.out} and {plot}")
    pairs = [("ga-dqn", base) for base in ("ga", "xgb", "ga-dqn-random", "random", "metaschedule")]
    pairs += [(name, name.split("@")[0]) for name in args.tuners.split(",") if "@" in name]  # variant / plain
    print("\n".join(ratio_lines(rows, runs, pairs)))

if __name__ == "__main__":
    main()

"""Do the Q-networks add value? GA-DQN against its random-action ablation on synthetic NK
landscapes (rugged, interacting knobs; equal or unequal knob importance), with and without the
model screen, over many seeds. No builds: each run takes about a second, so the answer rests
on many seeds instead of the three that the real-operator comparison can afford.

    python benchmarks/agent_value.py --seeds 16 --trials 200 --out benchmarks/results/agent_value.json
    python benchmarks/agent_value.py --options '{"reward": "score"}' --screens 16 --out /tmp/score.json

Prints, per landscape and screen, the geometric mean over landscapes of the median best
GFLOPS of each policy, and the ratio GA-DQN / ablation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

from rl_tuner import GADQNTuner  # noqa: E402
from synthetic import nk_landscape, run  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--landscapes", type=int, default=3, help="landscapes of each kind")
    parser.add_argument("--screens", default="1,16")
    parser.add_argument("--options", default="{}", help="JSON: GADQNTuner options for both policies")
    parser.add_argument("--out", default="results/agent_value.json")
    args = parser.parse_args()
    options = json.loads(args.options)
    rows = []
    for weighted in (False, True):
        tasks = [nk_landscape(weighted=weighted, seed=s) for s in range(args.landscapes)]
        for screen in (int(s) for s in args.screens.split(",")):
            medians = {}
            for policy in ("dqn", "random"):
                medians[policy] = [statistics.median(
                    run(GADQNTuner(task, action_policy=policy, screen=screen, seed=seed, **options), task,
                        args.trials).best_flops / 1e9
                    for seed in range(args.first_seed, args.first_seed + args.seeds)) for task in tasks]
            gm = {p: float(np.exp(np.mean(np.log(m)))) for p, m in medians.items()}
            row = {"landscape": "nk-weighted" if weighted else "nk", "screen": screen, "medians": medians,
                   "geomean_dqn": gm["dqn"], "geomean_ablation": gm["random"], "ratio": gm["dqn"] / gm["random"]}
            rows.append(row)
            print(f"{row['landscape']:12} screen {screen:3d}: GA-DQN {gm['dqn']:.3f}, ablation {gm['random']:.3f}, "
                  f"ratio {row['ratio']:.3f}", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    json.dump({"args": vars(args), "rows": rows}, open(args.out, "w"), indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

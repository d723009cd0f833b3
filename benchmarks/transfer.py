"""Does a GA-DQN agent carried from task to task beat one trained from scratch, and its ablation?

A network's tasks come in families that share a template (ResNet-18 has four 3x3 convs of the
same loop nest), so their design spaces have the same knobs and a direction ("move a factor into
the inner tile") means the same on each. A tuning run gives an agent only ~190 transitions; an
agent that tuned two sibling tasks first has seen ~570 when it starts on the third.

    python benchmarks/transfer.py --seeds 6 --out benchmarks/results/transfer.json

1. Pretraining, once per family: GA-DQN tunes the first sibling from scratch (seed
   ``--pretrain-seed``), then the second continuing the same agent; the agent is saved
   (``--agents``, beside ``--out`` by default).
2. Then on C1, MM512 and R3x3, for each seed: "ga-dqn@transfer" (``mode="continue"`` from the
   family's saved agent), "ga-dqn" (from scratch) and "ga-dqn-random" (the ablation), all in
   one run. No target op is among the pretraining tasks.

Prints the median best GFLOPS and the geometric-mean ratios (90% bootstrap intervals over seeds).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import autotvm  # noqa: E402
from tools.compare import format_table, ratio_lines, run_grid, run_tuner, summarise  # noqa: E402

# target op -> the sibling tasks its agent is pretrained on, in order (tools/workloads.py)
FAMILIES = {"c1": ("pw96", "pw192"), "mm512": ("mm768", "mm1024"), "r3x3": ("r3x3-256", "r3x3-128")}
TUNERS = ("ga-dqn@transfer", "ga-dqn", "ga-dqn-random")


def pretrain(op: str, path: str, seed: int, trials: int, measure_option: dict) -> None:
    """Tune ``op``'s siblings one after the other with one GA-DQN agent; save it to ``path``."""
    previous = None
    for sibling in FAMILIES[op]:
        options = {"mode": "continue", "checkpoint": previous} if previous else {}
        run = run_tuner(sibling, "ga-dqn", seed, trials, measure_option, options, save_agent=path)
        print(f"pretrain {op}: {sibling:9} best {run['best_gflops']:7.2f} GFLOPS, {run['wall_seconds']:6.1f} s",
              flush=True)
        previous = path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default="c1,mm512,r3x3")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--pretrain-seed", type=int, default=100)
    parser.add_argument("--agents", default=None, help="folder of the pretrained agents (default: beside --out)")
    parser.add_argument("--out", default="results/transfer.json")
    args = parser.parse_args()
    ops = args.ops.split(",")
    unknown = sorted(set(ops) - set(FAMILIES))
    if unknown:
        sys.exit(f"no sibling tasks for {', '.join(unknown)}; allowed: {', '.join(FAMILIES)}")

    builder = autotvm.LocalBuilder(n_parallel=2, timeout=30)
    option = autotvm.measure_option(builder, autotvm.LocalRunner(number=3, repeat=3, timeout=10))
    agents = args.agents or os.path.splitext(args.out)[0] + "_agents"
    checkpoint = {op: os.path.join(agents, f"{op}.pt") for op in ops}
    for op in ops:
        if not os.path.exists(checkpoint[op]):
            pretrain(op, checkpoint[op], args.pretrain_seed, args.trials, option)

    def options_for(op: str, name: str) -> dict:
        return {"mode": "continue", "checkpoint": checkpoint[op]} if name == "ga-dqn@transfer" else {}

    try:
        runs = run_grid(args.out, range(args.first_seed, args.first_seed + args.seeds), ops, list(TUNERS),
                        args.trials, option, options_for, {}, {"args": vars(args)})
    except ValueError as err:
        sys.exit(str(err))
    rows = summarise(runs)
    print(format_table(rows))
    pairs = [("ga-dqn@transfer", "ga-dqn"), ("ga-dqn@transfer", "ga-dqn-random"), ("ga-dqn", "ga-dqn-random")]
    print("\n".join(ratio_lines(rows, runs, pairs)))


if __name__ == "__main__":
    main()

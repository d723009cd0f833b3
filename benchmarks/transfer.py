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
   one run (``--tuners`` picks some of them). No target op is among the pretraining tasks.

``--pretrain-on same --pretrain-runs K`` pretrains instead on the target op itself, K runs with
seeds ``--pretrain-seed`` .. ``--pretrain-seed + K - 1`` (none of them a test seed): the most an
agent could know before it starts, K times the transitions of one run on the very landscape it
then tunes. It bounds what carrying an agent can give, and shows whether a move policy learned
from this op's own rewards adds anything over uniform moves.

Prints the median best GFLOPS and the geometric-mean ratios (90% bootstrap intervals over seeds).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tools.compare import (comparison_measure_option, format_table, ratio_lines, run_grid, run_tuner,  # noqa: E402
                           summarise)

# target op -> the sibling tasks its agent is pretrained on, in order (tools/workloads.py)
FAMILIES = {"c1": ("pw96", "pw192"), "mm512": ("mm768", "mm1024"), "r3x3": ("r3x3-256", "r3x3-128")}
TUNERS = ("ga-dqn@transfer", "ga-dqn", "ga-dqn-random")


def pretraining_runs(op: str, source: str, runs: int, seed: int) -> list[tuple[str, int]]:
    """The (task, seed) runs an agent for ``op`` is pretrained on, in order: its two siblings
    with one seed, or ``runs`` runs of ``op`` itself with consecutive seeds."""
    if source == "same":
        return [(op, seed + i) for i in range(runs)]
    return [(sibling, seed) for sibling in FAMILIES[op]]


def pretrain(op: str, path: str, schedule: list[tuple[str, int]], trials: int, measure_option: dict) -> None:
    """Tune the tasks of ``schedule`` one after the other with one GA-DQN agent; save it to ``path``."""
    previous = None
    for task, seed in schedule:
        options = {"mode": "continue", "checkpoint": previous} if previous else {}
        run = run_tuner(task, "ga-dqn", seed, trials, measure_option, options, save_agent=path)
        print(f"pretrain {op}: {task:9} seed {seed} best {run['best_gflops']:7.2f} GFLOPS, "
              f"{run['wall_seconds']:6.1f} s", flush=True)
        previous = path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default="c1,mm512,r3x3")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--pretrain-seed", type=int, default=100)
    parser.add_argument("--pretrain-on", choices=("siblings", "same"), default="siblings",
                        help="pretrain on the op's two sibling tasks, or on the op itself")
    parser.add_argument("--pretrain-runs", type=int, default=4, help="runs of the op itself with --pretrain-on same")
    parser.add_argument("--tuners", default=",".join(TUNERS), help=f"any of {', '.join(TUNERS)}")
    parser.add_argument("--agents", default=None, help="folder of the pretrained agents (default: beside --out)")
    parser.add_argument("--out", default="results/transfer.json")
    args = parser.parse_args()
    ops, tuners = args.ops.split(","), args.tuners.split(",")
    if set(tuners) - set(TUNERS):
        sys.exit(f"unknown tuners {', '.join(sorted(set(tuners) - set(TUNERS)))}; allowed: {', '.join(TUNERS)}")
    unknown = sorted(set(ops) - set(FAMILIES)) if args.pretrain_on == "siblings" else []
    if unknown:
        sys.exit(f"no sibling tasks for {', '.join(unknown)}; allowed: {', '.join(FAMILIES)}")
    test_seeds = range(args.first_seed, args.first_seed + args.seeds)
    if args.pretrain_on == "same" and set(test_seeds) & set(range(args.pretrain_seed, args.pretrain_seed + args.pretrain_runs)):
        sys.exit("--pretrain-on same: the pretraining seeds overlap the test seeds; pass another --pretrain-seed")

    option = comparison_measure_option()
    agents = args.agents or os.path.splitext(args.out)[0] + "_agents"
    checkpoint = {op: os.path.join(agents, f"{op}.pt") for op in ops}
    for op in ops:
        if not os.path.exists(checkpoint[op]):
            pretrain(op, checkpoint[op], pretraining_runs(op, args.pretrain_on, args.pretrain_runs, args.pretrain_seed),
                     args.trials, option)

    def options_for(op: str, name: str) -> dict:
        return {"mode": "continue", "checkpoint": checkpoint[op]} if name == "ga-dqn@transfer" else {}

    try:
        runs = run_grid(args.out, test_seeds, ops, tuners,
                        args.trials, option, options_for, {}, {"args": vars(args)})
    except ValueError as err:
        sys.exit(str(err))
    rows = summarise(runs)
    print(format_table(rows))
    pairs = [(a, b) for a, b in (("ga-dqn@transfer", "ga-dqn"), ("ga-dqn@transfer", "ga-dqn-random"),
                                  ("ga-dqn", "ga-dqn-random")) if a in tuners and b in tuners]
    print("\n".join(ratio_lines(rows, runs, pairs)))


if __name__ == "__main__":
    main()

"""Which mutation moves (and crossover cut points) pay, how many runs it takes to know, and what
knowing would be worth.

GA-DQN has stayed level with its random-action ablation through every design of the mutation
agent. This benchmark asks whether any move policy could do better, in three steps.

1. ``--analyse``. The ablation takes its moves (a knob and a direction, a redraw, or "keep")
   uniformly, so its runs give unbiased estimates of each move's mean reward. The reward is the
   measured child's gain over its better parent. For every op this prints the moves worth most
   over all ablation runs of the given result files. Then it asks how much data it takes to find
   the good moves. Rank the moves on n runs, take the top 5, and score them on the other half of
   the runs: the mean reward of those moves there, over the mean of all moves. The median is
   taken over 300 random splits. n = 1 is the most a learner could know at the end of one
   200-trial run, in hindsight, with every transition of that run. The same is done for the
   crossover agent's action, the cut point (the ablation draws it uniformly too), with the best
   cut point in place of the top 5 moves. A Kruskal-Wallis test says, for the moves and for the
   cut points, whether the actions' rewards differ at all.

       python benchmarks/move_values.py --analyse benchmarks/results/*.json --machine "family 26"

   (``--machine "family 26"`` reads the Zen 5 runs alone, as the figures in benchmarks/README.md
   were taken before the Zen 4 session's runs were added.)

2. ``--agent OP=PATH`` (with ``--analyse``): the rank correlation between a saved agent's mean
   Q per move and those estimates, over the moves seen at least 30 times. The Q rows come from
   400 random configs of the op. It shows whether an agent has learned the moves' values.

3. The default: a fixed prior policy against the ablation, on fresh seeds. The prior ranks the
   valid moves by their estimated value over every ablation run of ``--prior-from`` (none of them
   a test seed). It gives the screen's 16 candidates of a slot its top moves, as the agents do
   with ``spread=1``. This is what a mutation agent that had learned the values perfectly, and
   state-free, would do. The crossover point stays uniform, as in the ablation.

       python benchmarks/move_values.py --prior-from benchmarks/results/*.json --machine "family 26" --first-seed 180 --seeds 6 \\
           --out benchmarks/results/move_prior_seeds180-185.json

If the prior beats the ablation, better learning (or knowledge carried into a run) could pay.
If it is level, no move policy can lift GA-DQN above its ablation at this budget.
``state_policy.py`` asks the same of policies that read the agents' states (the parents, the child).
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import random
import statistics
import sys
from typing import Any, Iterable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotvm.task.space import DIRECTIONS  # noqa: E402
from rl_tuner import GADQNTuner  # noqa: E402
from tools.compare import (comparison_measure_option, format_table, machine_label, ratio_lines,  # noqa: E402
                           run_grid, summarise)
from tools.workloads import workload_task  # noqa: E402

ABLATIONS = ("ga-dqn-random", "ga-dqn-random@directed")  # the tuner names of directed-move ablation runs
Move = tuple[Any, Any]  # (knob, move name), as the monitor writes them; (None, None) is "keep"


CHOICES = {  # what a monitor row says each agent chose
    "mutation": lambda row: (row["mutated_knob"], row["mutation_move"]),
    "crossover": lambda row: row["crossover_action"],
}


def ablation_monitors(paths: list[str], machine: str = "") -> dict[str, list[list[dict]]]:
    """Per op, the monitor rows of every directed-move ablation run in ``paths``, one list per
    run. Files without a recorded machine (the Zen 3 sessions) are skipped, and so are those whose
    machine label does not contain ``machine`` (so one machine's runs can be read alone)."""
    runs: dict[str, list] = collections.defaultdict(list)
    for path in paths:
        try:
            data = json.load(open(path))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or not data.get("machine") or machine not in machine_label(data["machine"]):
            continue
        for run in data.get("runs", []):
            monitor = (run.get("monitor") or []) if run.get("tuner") in ABLATIONS else []
            if any(str(row.get("mutation_move")).startswith("(") for row in monitor):
                runs[run["op"]].append(monitor)
    return runs


def transitions(monitors: dict[str, list[list[dict]]],
                choice: str = "mutation") -> dict[str, list[list[tuple[Any, float]]]]:
    """The (action, reward) pairs of ``ablation_monitors``' runs; the action is the mutation move
    or, with ``choice="crossover"``, the cut point."""
    action_of = CHOICES[choice]
    return {op: [[(action_of(row), row["reward"]) for row in run] for run in runs] for op, runs in monitors.items()}


def ablation_transitions(paths: list[str], choice: str = "mutation",
                         machine: str = "") -> dict[str, list[list[tuple[Any, float]]]]:
    """Per op, the (action, reward) pairs of every directed-move ablation run in ``paths`` (see
    ``ablation_monitors`` and ``transitions``)."""
    return transitions(ablation_monitors(paths, machine), choice)


def move_values(runs: list[list[tuple[Move, float]]]) -> dict[Move, list[float]]:
    values: dict[Move, list[float]] = collections.defaultdict(list)
    for run in runs:
        for move, reward in run:
            values[move].append(reward)
    return values


def held_out_gain(runs: list, n_train: int, top: int = 5, splits: int = 300) -> float:
    """Median over random splits of the held-out mean reward of the ``top`` moves ranked on
    ``n_train`` runs, over the held-out mean of all moves (the test half is the second half)."""
    rng, gains = random.Random(1), []
    for _ in range(splits):
        order = rng.sample(range(len(runs)), len(runs))
        train = move_values([runs[i] for i in order[:n_train]])
        test = move_values([runs[i] for i in order[len(runs) // 2:]])
        best = sorted(train, key=lambda m: -statistics.mean(train[m]))[:top]
        picked = [r for m in best for r in test.get(m, [])]
        every = [r for rewards in test.values() for r in rewards]
        gains.append(statistics.mean(picked) / statistics.mean(every) if picked else 1.0)
    return statistics.median(gains)


def held_out_line(runs: list, sizes: Iterable[int], top: int) -> str:
    """``held_out_gain`` for each number of training runs in ``sizes`` (at most half the runs)."""
    sizes = sorted({n for n in sizes if n <= len(runs) // 2})
    return "; ".join(f"{n} run{'s' if n > 1 else ''} x{held_out_gain(runs, n, top=top):.2f}" for n in sizes)


def move_name(tuner: GADQNTuner, action: int) -> Move:
    knob, move = tuner.decode_mutation(action)
    return knob, (str(DIRECTIONS[move]) if isinstance(move, int) else move)


def agent_correlation(op: str, path: str, values: dict[Move, list[float]]) -> str:
    """The rank correlation of a saved agent's mean Q per move with the moves' estimated values."""
    from scipy.stats import spearmanr

    tuner = GADQNTuner(workload_task(op), mode="greedy",
                       checkpoint=path, seed=0)
    rng = np.random.default_rng(0)
    children = [[int(rng.integers(d)) for d in tuner.dims] for _ in range(400)]
    q = tuner.mutation_agent.q_values(tuner._mutation_states(children, [0.8] * len(children), 0))
    masks = tuner.mutation_masks([False] * len(children), children)
    per_move: dict[Move, list[float]] = collections.defaultdict(list)
    for row, mask in zip(q, masks):
        for action in np.flatnonzero(mask):
            per_move[move_name(tuner, int(action))].append(float(row[action]))
    common = [m for m in per_move if len(values.get(m, [])) >= 30]
    rho, p = spearmanr([statistics.mean(values[m]) for m in common], [statistics.mean(per_move[m]) for m in common])
    return f"{op}: {path}: Spearman {rho:.3f} (p {p:.3f}) over {len(common)} moves"


def spread_test(values: dict[Any, list[float]]) -> float:
    """The Kruskal-Wallis p-value of "every action's rewards come from one distribution" (over
    the actions taken at least 5 times; NaN where fewer than two were)."""
    from scipy.stats import kruskal

    groups = [rewards for rewards in values.values() if len(rewards) >= 5]
    return float(kruskal(*groups).pvalue) if len(groups) > 1 else float("nan")


def cut_point_lines(runs: list, mean: float) -> list[str]:
    """The crossover cut points' values (x the mean reward, with their standard error), whether
    they differ at all, and what ranking them on n runs is worth on held-out runs."""
    values = move_values(runs)
    cuts = ", ".join(f"{cut}: x{np.mean(r) / mean:.2f} (se {np.std(r) / np.sqrt(len(r)) / mean:.2f})"
                     for cut, r in sorted(values.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))
    curve = held_out_line(runs, (1, 6, len(runs) // 2), 1)
    return [f"  crossover cut points (equal-values test p {spread_test(values):.2f}): {cuts}",
            f"  the best cut point ranked on n runs, on held-out runs: {curve}"]


def analyse(paths: list[str], agents: dict[str, str], machine: str = "") -> None:
    monitors = ablation_monitors(paths, machine)
    crossover = transitions(monitors, "crossover")
    for op, runs in sorted(transitions(monitors).items()):
        values = move_values(runs)
        mean = statistics.mean(r for rewards in values.values() for r in rewards)
        print(f"{op}: {len(runs)} ablation runs, {sum(map(len, runs))} measured children, "
              f"{len(values)} distinct moves, mean reward {mean:.4f}")
        for move, rewards in sorted(values.items(), key=lambda kv: -statistics.mean(kv[1]))[:5]:
            print(f"  knob {move[0]} {move[1]}: x{statistics.mean(rewards) / mean:.2f} of the mean "
                  f"({len(rewards)} children, {np.mean(np.array(rewards) > 0):.2f} of them better than their parent)")
        curve = held_out_line(runs, (1, 2, 6, 20, len(runs) // 2), 5)
        print(f"  the top 5 moves ranked on n runs, on held-out runs: {curve}")
        print(f"  equal-values test of the moves: p {spread_test(values):.2g}")
        print("\n".join(cut_point_lines(crossover[op], mean)))
        if op in agents:
            print("  " + agent_correlation(op, agents[op], values))


class PriorTuner(GADQNTuner):
    """The ablation, except that the mutation move is ranked by a fixed table of move values
    (a slot's candidates take the top of the ranking, as the agents do with ``spread=1``; ties
    and moves not in the table at the table's mean, broken at random)."""

    def __init__(self, task: Any, values: dict[Move, float], **options: Any) -> None:
        super().__init__(task, action_policy="random", **options)
        default = float(np.mean(list(values.values())))
        self.action_values = np.array([values.get(move_name(self, a), default)
                                       for a in range(self.mutation_agent.n_actions)])

    def _choose(self, agent, states, masks, group=1):
        if agent is not self.mutation_agent or group > 1:
            return super()._choose(agent, states, masks, group)
        score = self.action_values
        actions = np.empty(len(masks), np.int64)
        for i, mask in enumerate(masks):
            valid = np.flatnonzero(mask)
            ranked = valid[np.lexsort((self.rng.random(len(valid)), -score[valid]))]
            actions[i] = ranked[i % len(ranked)]
        return actions, None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--analyse", nargs="+", metavar="RESULTS", help="result files to analyse (no tuning)")
    parser.add_argument("--agent", action="append", default=[], metavar="OP=PATH", help="a saved agent to check")
    parser.add_argument("--prior-from", nargs="+", default=glob.glob("benchmarks/results/*.json"), metavar="RESULTS")
    parser.add_argument("--machine", default="", help='read only the runs of machines whose label contains this '
                        '(e.g. "family 26" for the Zen 5 runs; default: every recorded machine)')
    parser.add_argument("--ops", default="c1,mm512,r3x3")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--first-seed", type=int, default=180)
    parser.add_argument("--out", default="results/move_prior.json")
    args = parser.parse_args()
    if args.analyse:
        analyse(args.analyse, dict(a.split("=", 1) for a in args.agent), args.machine)
        return

    ops, seeds = args.ops.split(","), range(args.first_seed, args.first_seed + args.seeds)
    transitions = ablation_transitions(args.prior_from, machine=args.machine)
    missing = [op for op in ops if not transitions.get(op)]
    if missing:
        sys.exit(f"no ablation runs with directed moves for {', '.join(missing)} in --prior-from; "
                 f"found them for: {', '.join(sorted(transitions)) or 'no op'}")
    values = {op: {m: statistics.mean(r) for m, r in move_values(transitions[op]).items()} for op in ops}
    option = comparison_measure_option()

    def options_for(op: str, name: str) -> dict:
        return {"values": values[op]} if name == "ga-dqn@prior" else {}

    try:
        runs = run_grid(args.out, seeds, ops, ["ga-dqn@prior", "ga-dqn-random"], args.trials, option, options_for, {},
                        {"args": vars(args)}, factories={"ga-dqn@prior": PriorTuner})
    except ValueError as err:
        sys.exit(str(err))
    rows = summarise(runs)
    print(format_table(rows))
    print("\n".join(ratio_lines(rows, runs, [("ga-dqn@prior", "ga-dqn-random")])))


if __name__ == "__main__":
    main()

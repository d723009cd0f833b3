"""Could a policy that reads its state pick better cut points or moves than uniform choices?

``move_values.py`` showed that neither agent's action, taken without looking at the state, is
worth learning at this budget: the cut points' rewards do not differ at all, and a table that
knows every move's mean value finds configs no better than uniform moves. What it could not
test is a policy that reads the state, as the agents do: the crossover agent sees both parents'
genes and fitness, the mutation agent the child's genes. This benchmark estimates what the best
such policy learnable from a few runs would be worth, without building one into the tuner.

1. Record (the default). The random-action ablation runs on fresh seeds with ``screen=1``, so
   that every child bred is measured and its cut point and move are exactly uniform (over the
   n-1 cut points; over the moves valid for that child). Each monitor row also gets what the
   agents would have seen: both parents' genes and fitness, the child's genes before its
   mutation, and the valid moves. Children whose move was redrawn because they were already
   measured (``repair``) are marked; their move was not uniform, and the estimate leaves them out.

       python benchmarks/state_policy.py --first-seed 190 --seeds 10 --out benchmarks/results/state_policy_seeds190-199.json

2. ``--analyse``. Per op and per agent, a gradient-boosted model of reward(state, action) is
   fitted on the other runs (folds by run, so no run informs its own policy); the policy takes
   its best valid action. Its value on the held-out runs is the off-policy (inverse propensity)
   estimate that uniform logging allows: the rewards of the children whose logged action is
   the one the policy would have taken, weighted by the number of actions the uniform choice
   had (self-normalised). It is reported over the mean reward of the uniform choice, with a 90%
   bootstrap interval over runs, beside the same estimate for a state-free policy (the action
   with the best mean reward on the other runs), which is ``move_values.py``'s policy.

       python benchmarks/state_policy.py --analyse benchmarks/results/state_policy_seeds190-199.json [--folds 10]

3. ``--crossover-from``: the state-reading cut-point policy, fitted on every recorded run of
   each op, run online against the recording ablation on fresh seeds (mutation moves uniform in
   both), to see whether what step 2 estimates carries into the best config found.

       python benchmarks/state_policy.py --crossover-from benchmarks/results/state_policy_seeds190-199.json \
           --first-seed 200 --seeds 5 --out benchmarks/results/state_policy_cuts_seeds200-204.json

Measured (benchmarks/README.md, "Could a policy that reads its state do better?"): reading the
child adds nothing to the moves' table, and the cut points of a model of the parents are level
with uniform ones on fresh seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotvm.task.space import DIRECTIONS  # noqa: E402
from rl_tuner import GADQNTuner  # noqa: E402
from move_values import move_values  # noqa: E402
from tools.compare import comparison_measure_option, format_table, ratio_lines, run_grid, summarise  # noqa: E402
from tools.workloads import workload_task  # noqa: E402

TUNER = "ga-dqn-random@states"
MODEL_TUNER = "ga-dqn-random@model-cuts"
BOOTSTRAPS = 1000


class RecordingAblation(GADQNTuner):
    """The random-action ablation, measuring every child bred (``screen=1``), whose monitor rows
    also hold the states the agents would have acted on (as knob indices, not scaled genes)."""

    def __init__(self, task: Any, **options: Any) -> None:
        super().__init__(task, action_policy="random", screen=1, **options)

    def repair(self, knob: list[int], info: Any, taken: set[int]) -> tuple[list[int], Any] | None:
        repaired = super().repair(knob, info, taken)
        return None if repaired is None else (repaired[0], dict(repaired[1], repaired=True))

    def _knob_indices(self, genes: np.ndarray) -> list[int]:
        return np.rint(genes[: self.n_knobs] * np.maximum(self.dims_arr - 1, 1)).astype(int).tolist()

    def on_measured(self, member: Any, flops: float) -> None:
        rows = len(self.monitor)
        super().on_measured(member, flops)
        if len(self.monitor) == rows:
            return
        row, info = self.monitor[-1], member.info
        if "crossover" in info:
            state = info["crossover"][0]
            row["parents"] = [self._knob_indices(state), self._knob_indices(state[self.max_knobs:])]
            row["parent_fitness"] = [float(f) for f in state[-2:]]
        state, _, mask = info["mutation"]
        row["child"] = self._knob_indices(state)
        row["valid_actions"] = np.flatnonzero(mask).tolist()
        row["repaired"] = bool(info.get("repaired"))


def record(args: argparse.Namespace, tuners: tuple[str, ...] = (TUNER,),
           options_for: Any = lambda op, name: {}) -> list[dict]:
    """Every (seed, op, tuner) run of ``tuners``, saved to ``--out`` (resumed if stopped)."""
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    try:
        return run_grid(args.out, seeds, args.ops.split(","), list(tuners), args.trials, comparison_measure_option(),
                        options_for, {}, {"args": vars(args)},
                        factories={TUNER: RecordingAblation, MODEL_TUNER: ModelCrossover})
    except ValueError as err:
        sys.exit(str(err))


# -- the off-policy estimate
def cut_features(p1: list[int], p2: list[int], fitness: list[float], dims: np.ndarray) -> np.ndarray:
    """A row per cut point: its child's genes over the knobs' ranges, the parents' fitness, the
    cut, and how many knobs on each side of it the parents differ in."""
    p1, p2 = np.array(p1), np.array(p2)
    differ, scale = p1 != p2, np.maximum(dims - 1, 1)
    rows = []
    for cut in range(len(dims) - 1):  # cut point ``cut`` takes knobs 0..cut from p1, the rest from p2
        child = np.concatenate([p1[: cut + 1], p2[cut + 1:]]) / scale
        rows.append(np.concatenate([child, fitness, [cut, differ[: cut + 1].sum(), differ[cut + 1:].sum()]]))
    return np.array(rows)


def crossover_samples(run: list[dict], dims: np.ndarray) -> list[dict]:
    """One sample per child bred by crossover, with ``cut_features`` for each cut point."""
    return [{"features": cut_features(*row["parents"], row["parent_fitness"], dims),
             "actions": list(range(len(dims) - 1)), "action": row["crossover_action"], "reward": row["reward"]}
            for row in run if "parents" in row and not row["repaired"]]


def mutation_samples(run: list[dict], tuner: GADQNTuner) -> list[dict]:
    """One sample per measured child: the features of each valid move (the child's genes over the
    knobs' ranges, its better parent's fitness, the knob, the direction or redraw or keep)."""
    samples = []
    for row in run:
        if "child" not in row or row["repaired"]:
            continue
        genes = np.array(row["child"]) / np.maximum(tuner.dims_arr - 1, 1)
        fitness = max(row.get("parent_fitness") or [0.0])
        features = []
        for action in row["valid_actions"]:
            knob, move = tuner.decode_mutation(action)
            code = -1 if move is None else len(DIRECTIONS) if move == "redraw" else move
            features.append(np.concatenate([genes, [fitness, -1 if knob is None else knob, code]]))
        samples.append({"features": np.array(features), "actions": row["valid_actions"],
                        "action": row["mutation_action"], "reward": row["reward"]})
    return samples


def action_means(samples: list[dict]) -> tuple[dict[Any, float], float]:
    """Each action's mean reward over ``samples`` (taken at least 5 times), and the mean of all,
    for the actions taken fewer times."""
    rewards = move_values([[(s["action"], s["reward"]) for s in samples]])
    table = {a: float(np.mean(r)) for a, r in rewards.items() if len(r) >= 5}
    return table, float(np.mean([s["reward"] for s in samples]))


def with_table(sample: dict, table: dict[Any, float], floor: float) -> np.ndarray:
    """A sample's features per action, plus the action's mean reward on the training runs, so
    that the state-reading model knows what the state-free table knows."""
    return np.column_stack([sample["features"], [table.get(a, floor) for a in sample["actions"]]])


def fit_model_policy(samples: list[dict], table: dict[Any, float], floor: float, seed: int) -> Any:
    """A small gradient-boosted regression of the reward on the logged action's features; returns
    the policy that takes the valid action of the highest predicted reward."""
    import xgboost

    x = np.array([with_table(s, table, floor)[s["actions"].index(s["action"])] for s in samples])
    y = np.array([s["reward"] for s in samples])
    params = {"max_depth": 4, "eta": 0.05, "subsample": 0.8, "min_child_weight": 5, "seed": seed, "nthread": 2}
    booster = xgboost.train(params, xgboost.DMatrix(x, label=y), num_boost_round=200)
    return lambda s: s["actions"][int(np.argmax(booster.predict(xgboost.DMatrix(with_table(s, table, floor)))))]


def matched(samples: list[dict], choose) -> tuple[np.ndarray, np.ndarray]:
    """Per sample, the importance weight (the number of actions the uniform choice had) where the
    policy takes the logged action, else 0, and the reward."""
    weights = np.array([len(s["actions"]) * (choose(s) == s["action"]) for s in samples], np.float64)
    return weights, np.array([s["reward"] for s in samples])


def snips_ratio(parts: list[tuple[np.ndarray, np.ndarray]]) -> float:
    """The self-normalised importance-weighted reward of a policy over the uniform choice's mean."""
    weights, rewards = (np.concatenate(column) for column in zip(*parts))
    return float((weights * rewards).sum() / max(weights.sum(), 1e-12) / rewards.mean())


def policy_values(runs: list[list[dict]], folds: int = 4, seed: int = 0) -> dict[str, tuple[float, float, float]]:
    """The estimate of the state-reading policy and of the state-free one (the action with the
    best mean reward), each over the uniform choice's mean reward, with a 90% bootstrap interval
    over runs. Each run is judged by policies fitted on the runs of the other ``folds`` (runs
    are dealt to folds in turn; ``folds`` = the number of runs leaves one run out)."""
    fold_of = np.arange(len(runs)) % folds
    per_run: dict[str, list] = {"state": [None] * len(runs), "state-free": [None] * len(runs)}
    for fold in range(folds):
        train = [s for run, f in zip(runs, fold_of) if f != fold for s in run]
        table, floor = action_means(train)
        by_model = fit_model_policy(train, table, floor, seed)

        def by_table(s: dict) -> Any:
            return max(s["actions"], key=lambda a: table.get(a, floor))

        for i in np.flatnonzero(fold_of == fold):
            per_run["state"][i], per_run["state-free"][i] = matched(runs[i], by_model), matched(runs[i], by_table)
    rng, every = np.random.default_rng(seed), np.arange(len(runs))
    out = {}
    for name, parts in per_run.items():
        boot = [snips_ratio([parts[i] for i in rng.choice(every, len(every))]) for _ in range(BOOTSTRAPS)]
        out[name] = (snips_ratio(parts), *np.percentile(boot, [5, 95]))
    return out


def recorded_runs(paths: list[str]) -> dict[str, list[list[dict]]]:
    """Per op, the monitor rows of every recorded ablation run in ``paths``, one list per run."""
    runs: dict[str, list[list[dict]]] = {}
    for path in paths:
        try:
            recorded = json.load(open(path))["runs"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            sys.exit(f"cannot read recorded runs from {path}: {err!r}; pass result files this script wrote")
        for run in recorded:
            if run.get("tuner") == TUNER:
                runs.setdefault(run["op"], []).append(run["monitor"])
    if not runs:
        sys.exit(f"no runs of {TUNER} in {', '.join(paths)}; record some first (the default mode)")
    return runs


def op_tuner(op: str) -> GADQNTuner:
    return GADQNTuner(workload_task(op), action_policy="random")


def analyse(paths: list[str], folds: int) -> None:
    for op, runs in sorted(recorded_runs(paths).items()):
        tuner = op_tuner(op)
        for agent, samples in (("crossover", [crossover_samples(run, tuner.dims_arr) for run in runs]),
                               ("mutation", [mutation_samples(run, tuner) for run in runs])):
            values = policy_values(samples, min(folds, len(runs)))
            text = ", ".join(f"{name} x{v:.2f} ({lo:.2f}-{hi:.2f})" for name, (v, lo, hi) in values.items())
            print(f"{op:6} {agent:9} {len(runs)} runs, {sum(map(len, samples))} children: {text}", flush=True)


class ModelCrossover(RecordingAblation):
    """The recording ablation, except that the cut point is the one a reward model fitted on
    earlier recorded runs of the op prefers for the two parents (``policy``)."""

    def __init__(self, task: Any, policy: Any, **options: Any) -> None:
        super().__init__(task, **options)
        self.cut_policy = policy

    def _choose(self, agent, states, masks, group=1):
        if agent is not self.crossover_agent:
            return super()._choose(agent, states, masks, group)
        cuts = list(range(self.n_knobs - 1))
        samples = [{"features": cut_features(self._knob_indices(state), self._knob_indices(state[self.max_knobs:]),
                                             state[-2:], self.dims_arr), "actions": cuts} for state in states]
        return np.array([self.cut_policy(sample) for sample in samples], np.int64), None


def compare_cut_policy(args: argparse.Namespace) -> None:
    """The cut-point policy fitted on every recorded run of ``--crossover-from`` against the
    recording ablation, on fresh seeds."""
    policies, recorded = {}, recorded_runs(args.crossover_from)
    for op in args.ops.split(","):
        dims = op_tuner(op).dims_arr
        samples = [s for run in recorded.get(op, []) for s in crossover_samples(run, dims)]
        if not samples:
            sys.exit(f"no recorded runs of {op} in --crossover-from")
        policies[op] = fit_model_policy(samples, *action_means(samples), seed=0)
    runs = record(args, (MODEL_TUNER, TUNER), lambda op, name: {"policy": policies[op]} if name == MODEL_TUNER else {})
    rows = summarise(runs)
    print(format_table(rows))
    print("\n".join(ratio_lines(rows, runs, [(MODEL_TUNER, TUNER)])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--analyse", nargs="+", metavar="RESULTS", help="recorded result files to analyse (no tuning)")
    parser.add_argument("--crossover-from", nargs="+", metavar="RESULTS",
                        help="run the cut-point policy fitted on these recorded runs against the ablation")
    parser.add_argument("--folds", type=int, default=4, help="with --analyse: folds of runs (default 4)")
    parser.add_argument("--ops", default="c1,mm512,r3x3")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=190)
    parser.add_argument("--out", default="results/state_policy.json")
    args = parser.parse_args()
    if args.folds < 2:
        parser.error(f"--folds must be at least 2, got {args.folds}")
    if args.analyse:
        analyse(args.analyse, args.folds)
    elif args.crossover_from:
        compare_cut_policy(args)
    else:
        record(args)


if __name__ == "__main__":
    main()

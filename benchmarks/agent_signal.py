"""What does the mutation agent know that the screen model does not? A diagnostic on real ops.

GA-DQN's measured child is the screen model's pick among 16 bred candidates, and on the real
ops GA-DQN is level with its random-action ablation (benchmarks/README.md). This asks why, with
the measurements a run makes anyway. For every measured child that the agents bred, it records
the Q of the move that made it (the agent's estimate of the child's improvement over its better
parent), the model's score of the child, and two outcomes: the improvement ((child - parent) /
best so far, signed: what the agent is trained to predict) and the child's own score (child /
best so far: what the search needs, and what the model is trained to rank). Then, per op, over
every run and for each outcome:

- how well each one ranks the measured children: Spearman correlation with the outcome,
  taken within a generation (the model is refit once a generation, and Q drifts slowly), then
  pooled over generations and runs (ranks scaled to [-1, 1] per generation, then correlated);
- what Q says beyond the model: the partial rank correlation of Q and the outcome, given the
  model's score;
- whether more data would teach the agent more: a fresh network trained only on the other
  runs' transitions of the same op (five times the data a run gives), scored on the held-out
  run's children, and the mean reward of each move in those runs (a state-free baseline).

Those are measured children only: each is the model's favourite of its slot. With
``--slots-every k`` every candidate of every k-th screened slot is measured too, after the run
(so the run itself is unchanged), which shows what happens inside a slot: how good the 16
candidates are (their best and mean over the best known then; ``--policy random`` gives the
ablation's uniform candidates), how well the model and Q rank them, and what the candidate each
way of picking would measure is worth against the slot's best.

Each run also keeps its measurements in order (``history``) and each recorded slot the number
the screen model was fit on (``fit_count``), so ``--analyse`` can refit other screen models on
exactly what the run knew at that slot and score them on its measured candidates (the
seventeenth session's comparison of ``screen_model`` "rank" and "reg"). ``--analyse`` also counts,
before and after trial 60, the measured children that beat the best so far by more than 0, 3 and
10%: where a run's best is made (the eighteenth session).

    python benchmarks/agent_signal.py --seeds 6 --first-seed 60 --out benchmarks/results/agent_signal_seeds60-65.json
    python benchmarks/agent_signal.py --analyse benchmarks/results/agent_signal_seeds60-65.json
    python benchmarks/agent_signal.py --seeds 2 --first-seed 70 --slots-every 3 --out benchmarks/results/agent_signal_slots_seeds70-71.json
    python benchmarks/agent_signal.py --policy random --seeds 2 --first-seed 70 --slots-every 3 \
        --out benchmarks/results/agent_signal_slots_ablation_seeds70-71.json
    python benchmarks/agent_signal.py --analyse benchmarks/results/agent_signal_slots_*seeds70-71.json
    python benchmarks/agent_signal.py --seeds 2 --first-seed 80 --slots-every 2 \
        --out benchmarks/results/agent_signal_slots_history_seeds80-81.json

Each interval is a 90% bootstrap over runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from scipy.stats import rankdata

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autotvm.measure.measure import MeasureInput, create_measure_batch  # noqa: E402
from autotvm.tuner.cost_model import XGBCostModel  # noqa: E402
from rl_tuner import GADQNTuner  # noqa: E402
from rl_tuner.dqn import DQNAgent, DQNConfig  # noqa: E402
from tools.compare import comparison_measure_option, machine_description  # noqa: E402
from tools.workloads import workload_task  # noqa: E402


class RecordingTuner(GADQNTuner):
    """GA-DQN that keeps, for each measured child the agents bred, what each side thought of it;
    with ``slots_every`` k > 0, also every k-th screened slot's whole candidate list (the
    candidates are measured after the run, so the tuner sees only what it would have seen)."""

    def __init__(self, *args, slots_every: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.records: list[dict] = []
        self.slots: list[dict] = []
        self.slots_every, self._screened = slots_every, 0
        self._fit_count = 0  # measurements the screen model was last fit on

    def _fit_screen_model(self) -> None:
        super()._fit_screen_model()
        self._fit_count = len(self.scores)

    def _model_pick(self, members):
        pick = super()._model_pick(members)
        if self.screen_model is not None and pick.info and "mutation" in pick.info:
            scores = self._predicted(members)
            pick.info["model_score"] = float(scores[members.index(pick)])
            self._screened += 1
            if self.slots_every and self._screened % self.slots_every == 0 and len(members) > 1:
                self.slots.append({
                    "trial": len(self.history), "generation": self.generation, "picked": members.index(pick),
                    "fit_count": self._fit_count, "best_gflops": self.best_flops / 1e9,
                    "indices": [m.index for m in members], "model_score": scores.tolist(),
                    "q": [None if m.info.get("mutation_q") is None else float(m.info["mutation_q"][m.info["mutation"][1]])
                          for m in members]})
        return pick

    def on_measured(self, member, flops: float) -> None:
        best_before = self._best_before
        super().on_measured(member, flops)
        info = member.info
        if not info or "mutation" not in info or "model_score" not in info or best_before <= 0:
            return
        state, action, _ = info["mutation"]
        q = info.get("mutation_q")
        self.records.append({
            "trial": len(self.history), "generation": self.generation, "action": int(action),
            "q": None if q is None else float(q[action]), "model_score": info["model_score"],
            "improvement": (flops - info["parent_best"]) / best_before, "score": flops / best_before,
            "reward": self.monitor[-1]["reward"],
            "state": np.asarray(state, np.float32).round(5).tolist()})


def run_one(op: str, seed: int, trials: int, measure_option: dict, slots_every: int = 0, policy: str = "dqn") -> dict:
    task = workload_task(op)
    tuner = RecordingTuner(task, seed=seed, slots_every=slots_every, action_policy=policy)
    start = time.perf_counter()
    tuner.tune(trials, measure_option)
    run = {"op": op, "seed": seed, "policy": policy, "best_gflops": tuner.best_flops / 1e9, "wall_seconds": time.perf_counter() - start,
           "state_dim": tuner.mutation_agent.state_dim, "n_actions": tuner.mutation_agent.n_actions,
           "records": tuner.records, "slots": tuner.slots, "slots_every": slots_every,
           "history": [[index, flops / 1e9] for index, flops in tuner.scores.items()]}
    if tuner.slots:
        measure_slots(tuner, tuner.slots, measure_option)
        for slot in tuner.slots:
            slot["picked_in_run"] = tuner.scores[slot["indices"][slot["picked"]]] / 1e9
    return run


def measure_slots(tuner: GADQNTuner, slots: list[dict], measure_option: dict) -> None:
    """Measure every recorded candidate after the run (``gflops``; 0 for a failure). The picked
    one is measured a second time (``picked_in_run`` is the first): the measurement noise."""
    task = tuner.task
    measure = create_measure_batch(task, measure_option)
    points = sorted({i for slot in slots for i in slot["indices"]})
    gflops = {}
    for start in range(0, len(points), 32):
        chunk = points[start:start + 32]
        results = measure([MeasureInput(task.target, task, task.config_space.get(i)) for i in chunk])
        gflops |= {i: tuner.flops_of(r) / 1e9 for i, r in zip(chunk, results)}
    for slot in slots:
        slot["gflops"] = [gflops[i] for i in slot["indices"]]


# -- analysis
def scaled_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks scaled to [-1, 1] (0 for a single value)."""
    return (rankdata(values) - 1) / max(len(values) - 1, 1) * 2 - 1 if len(values) > 1 else np.zeros(len(values))


def within_generation(records: list[dict], key: str) -> np.ndarray:
    """``key`` of each record as ranks within its (run, generation)."""
    out = np.zeros(len(records))
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(records):
        groups.setdefault((r["run"], r["generation"]), []).append(i)
    for idx in groups.values():
        out[idx] = scaled_ranks(np.array([records[i][key] for i in idx], np.float64))
    return out


def correlations(records: list[dict], predictors: list[str], target: str) -> dict[str, float]:
    """Pooled within-generation rank correlation of each predictor with ``target``, and the
    partial correlation of the first predictor given the second (when there are two)."""
    y = within_generation(records, target)
    x = {k: within_generation(records, k) for k in predictors}
    out = {k: float(np.corrcoef(v, y)[0, 1]) for k, v in x.items()}
    if len(predictors) == 2:
        a, b = predictors
        r_ay, r_by, r_ab = out[a], out[b], float(np.corrcoef(x[a], x[b])[0, 1])
        out[f"{a} given {b}"] = (r_ay - r_ab * r_by) / np.sqrt(max((1 - r_ab**2) * (1 - r_by**2), 1e-12))
        out[f"{a} with {b}"] = r_ab
    return out


def bootstrap(records: list[dict], predictors: list[str], target: str, n: int = 1000,
              seed: int = 0) -> dict[str, tuple]:
    """90% interval of each correlation, resampling whole runs."""
    rng = np.random.default_rng(seed)
    by_run: dict[int, list[dict]] = {}
    for r in records:
        by_run.setdefault(r["run"], []).append(r)
    runs = list(by_run)
    draws: dict[str, list[float]] = {}
    for _ in range(n):
        sample = []
        for new_id, run in enumerate(rng.choice(runs, size=len(runs))):
            sample += [dict(r, run=new_id) for r in by_run[run]]
        for k, v in correlations(sample, predictors, target).items():
            draws.setdefault(k, []).append(v)
    return {k: (float(np.percentile(v, 5)), float(np.percentile(v, 95))) for k, v in draws.items()}


def held_out_scores(runs: list[dict], steps: int) -> list[dict]:
    """For each run: a fresh network and per-move mean rewards, both fit on the other runs (of the
    same op and policy), scoring the run's children (``pooled_q`` and ``move_mean`` on copies of
    its records)."""
    out = []
    for i, run in enumerate(runs):
        others = [r for j, other in enumerate(runs) if j != i for r in other["records"]]
        agent = DQNAgent(run["state_dim"], run["n_actions"], DQNConfig(q_init=0.0, buffer_size=max(len(others), 1)), seed=i)
        for r in others:
            agent.buffer.add(r["state"], r["action"], r["reward"], r["state"], np.ones(run["n_actions"], bool), True)
        for _ in range(steps if others else 0):
            agent.train_step()
        totals: dict[int, list[float]] = {}
        for r in others:
            totals.setdefault(r["action"], []).append(r["reward"])
        overall = float(np.mean([r["reward"] for r in others])) if others else 0.0
        q = agent.q_values(np.array([r["state"] for r in run["records"]], np.float32)) if run["records"] else []
        for r, row in zip(run["records"], q):
            out.append(dict(r, pooled_q=float(row[r["action"]]),
                            move_mean=float(np.mean(totals[r["action"]])) if r["action"] in totals else overall))
    return out


def analyse(runs: list[dict], steps: int) -> dict:
    for n, run in enumerate(runs):
        for r in run["records"]:
            r["run"] = n
    result = {}
    for key in dict.fromkeys(f"{run['op']} {run.get('policy', 'dqn')}" for run in runs):
        group = [run for run in runs if f"{run['op']} {run.get('policy', 'dqn')}" == key]
        mine = [r for run in group for r in run["records"]]
        scored = [r for r in mine if r["q"] is not None]
        held = held_out_scores(group, steps) if len(group) > 1 else []  # a single run has no others to learn from
        views = {"in-run Q vs model": (scored, ["q", "model_score"]),
                 "pooled Q vs model": (held, ["pooled_q", "model_score"]),
                 "move mean vs model": (held, ["move_mean", "model_score"])}
        result[key] = {"children": len(mine), "agent_chosen": len(scored)}
        for target in ("improvement", "score"):
            for name, (records, predictors) in views.items():
                if not records:  # the ablation has no Q of its own
                    continue
                point, interval = correlations(records, predictors, target), bootstrap(records, predictors, target)
                result[key][f"{name}, {target}"] = {k: {"r": v, "interval": interval[k]} for k, v in point.items()}
    return result


def slot_analysis(runs: list[dict], weights: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0)) -> dict:
    """Over the slots whose every candidate was measured, per op and policy:

    - what the candidate set is worth: its best and its mean over the best GFLOPS known then
      (the agents' 16 against the ablation's 16 uniform ones);
    - each ranking's within-slot Spearman correlation with the measured GFLOPS;
    - the GFLOPS of the candidate each way of picking measures, over the slot's best (mean over
      slots): the model, the agent's Q, their within-slot z-scores summed with weight w on Q,
      and a uniform pick (the slot's mean)."""
    out = {}
    for run in runs:
        if not run.get("slots") or "gflops" not in run["slots"][0]:
            continue
        key = f"{run['op']} {run.get('policy', 'dqn')}"
        acc = out.setdefault(key, {"set_best": [], "set_mean": [], "noise": [], "rho": {"model": [], "q": []}, "picks": {}})
        for slot in run["slots"]:
            g, best = np.array(slot["gflops"], np.float64), slot["best_gflops"]
            if g.max() <= 0:
                continue
            acc["set_best"].append(g.max() / best)
            acc["set_mean"].append(g.mean() / best)
            if g[slot["picked"]] > 0 and slot["picked_in_run"] > 0:
                acc["noise"].append(abs(np.log(g[slot["picked"]] / slot["picked_in_run"])))
            model = np.array(slot["model_score"], np.float64)
            rankings = [("model", model)]
            q = None if None in slot["q"] else np.array(slot["q"], np.float64)
            if q is not None:
                rankings.append(("q", q))
            for name, x in rankings:
                if np.ptp(x) > 0 and np.ptp(g) > 0:
                    acc["rho"][name].append(float(np.corrcoef(rankdata(x), rankdata(g))[0, 1]))
            picks = acc["picks"]
            picks.setdefault("uniform", []).append(g.mean() / g.max())
            picks.setdefault("model", []).append(g[int(np.argmax(model))] / g.max())
            if q is not None:
                z = [(x - x.mean()) / x.std() if x.std() > 0 else np.zeros_like(x) for x in (model, q)]
                for w in weights:
                    picks.setdefault(f"model + {w:g} q", []).append(g[int(np.argmax(z[0] + w * z[1]))] / g.max())
                picks.setdefault("q alone", []).append(g[int(np.argmax(q))] / g.max())
    return {key: {"slots": len(acc["set_best"]),
                  "set_best_over_best_so_far": float(np.nanmean(acc["set_best"])),
                  "set_mean_over_best_so_far": float(np.nanmean(acc["set_mean"])),
                  "spearman": {k: float(np.mean(v)) for k, v in acc["rho"].items() if v},
                  "pick_over_slot_best": {k: float(np.mean(v)) for k, v in acc["picks"].items()},
                  "remeasure_abs_log_ratio_median": float(np.median(acc["noise"])) if acc["noise"] else None}
            for key, acc in out.items()}


SCREENS = {"rank, knob features": ("rank", "feature_matrix"), "reg, knob features": ("reg", "feature_matrix"),
           "reg, knob and tile features": ("reg", "tile_feature_matrix")}


def screen_model_analysis(runs: list[dict]) -> dict:
    """Refit each way of screening on what the run had measured when the slot was screened (the
    run's ``history`` up to the slot's ``fit_count``), then score the slot's measured candidates:
    within-slot Spearman correlation and the pick over the slot's best, per op. "rank, knob
    features" is the screen the runs used (its refit reproduces the recorded scores)."""
    out, spaces = {}, {}
    for run in runs:
        if not run.get("history") or not run.get("slots") or "gflops" not in run["slots"][0]:
            continue
        if run["op"] not in spaces:
            spaces[run["op"]] = workload_task(run["op"]).config_space
        space = spaces[run["op"]]
        knobs = np.array([space.point2knob(index) for index, _ in run["history"]], dtype=np.int64)
        gflops = np.array([g for _, g in run["history"]])
        for slot in run["slots"]:
            g = np.array(slot["gflops"], np.float64)
            if g.max() <= 0 or np.ptp(g) == 0:
                continue
            n, candidates = slot["fit_count"], np.array([space.point2knob(i) for i in slot["indices"]], dtype=np.int64)
            for name, (loss, features) in SCREENS.items():
                model = XGBCostModel(loss, seed=0)
                model.fit(getattr(space, features)(knobs[:n]), gflops[:n])
                scores = model.predict(getattr(space, features)(candidates))
                acc = out.setdefault(run["op"], {}).setdefault(name, {"rho": [], "pick": []})
                acc["rho"].append(float(np.corrcoef(rankdata(scores), rankdata(g))[0, 1]) if np.ptp(scores) > 0 else 0.0)
                acc["pick"].append(g[int(np.argmax(scores))] / g.max())
    return {op: {name: {"slots": len(acc["pick"]), "spearman": float(np.mean(acc["rho"])),
                        "pick_over_slot_best": float(np.mean(acc["pick"]))} for name, acc in rows.items()}
            for op, rows in out.items()}


NEW_BEST_MARGINS = (0.0, 0.03, 0.10)


def new_best_analysis(runs: list[dict], split: int = 60) -> dict:
    """Where a run's best is made: per op and policy, and before and after trial ``split``, the
    measured children the agents bred and how many beat the best so far by more than each of
    ``NEW_BEST_MARGINS`` (per run). A re-measured config moves by 1-2%, so a new best by less
    than 3% is mostly a lucky measurement of a config like the best, not a better one."""
    out: dict = {}
    for run in runs:
        row = out.setdefault(f"{run['op']} {run.get('policy', 'dqn')}", {"runs": 0})
        row["runs"] += 1
        for r in run["records"]:
            phase = row.setdefault(f"trials < {split}" if r["trial"] < split else f"trials >= {split}",
                                   {"children": 0} | {f"new best by > {m:.0%}": 0 for m in NEW_BEST_MARGINS})
            phase["children"] += 1
            for m in NEW_BEST_MARGINS:
                phase[f"new best by > {m:.0%}"] += r["score"] > 1 + m
    return out


def report_new_bests(result: dict) -> None:
    for key, row in result.items():
        n = row["runs"]
        for phase, counts in row.items():
            if phase != "runs":
                cells = ", ".join(f"{k} {v / n:.1f}" for k, v in counts.items())
                print(f"{key:13} {phase:14} per run ({n} runs): {cells}")


def report_screen_models(result: dict) -> None:
    for op, rows in result.items():
        for name, row in rows.items():
            print(f"{op:6} {name:28} {row['slots']:4} slots: within-slot Spearman {row['spearman']:.3f}, "
                  f"the pick over the slot's best {row['pick_over_slot_best']:.3f}")


def report(result: dict) -> None:
    for key, views in result.items():
        print(f"{key}: {views['children']} measured children bred by the agents, {views['agent_chosen']} with an agent's Q")
        for name, rows in views.items():
            if isinstance(rows, dict):
                cells = ", ".join(f"{k} {v['r']:+.3f} ({v['interval'][0]:+.3f} to {v['interval'][1]:+.3f})"
                                  for k, v in rows.items())
                print(f"  {name:32} {cells}")


def report_slots(result: dict) -> None:
    for key, row in result.items():
        rho = ", ".join(f"{k} {v:.3f}" for k, v in row["spearman"].items())
        picks = ", ".join(f"{k} {v:.3f}" for k, v in row["pick_over_slot_best"].items())
        print(f"{key}: {row['slots']} slots measured whole; the set's best {row['set_best_over_best_so_far']:.3f} and "
              f"mean {row['set_mean_over_best_so_far']:.3f} of the best so far; within-slot Spearman: {rho}; "
              f"re-measured pick, median |log ratio| {row['remeasure_abs_log_ratio_median']:.3f}\n"
              f"  the pick over the slot's best: {picks}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", default="c1,mm512,r3x3")
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--first-seed", type=int, default=60)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--steps", type=int, default=1000, help="gradient steps of the network fit on the other runs")
    parser.add_argument("--out", default="results/agent_signal.json")
    parser.add_argument("--policy", default="dqn", choices=("dqn", "random"),
                        help="random: the ablation (no Q: only the slot measurements mean anything)")
    parser.add_argument("--slots-every", type=int, default=0,
                        help="k > 0: also measure every candidate of every k-th screened slot, after the run")
    parser.add_argument("--analyse", nargs="+", default=None,
                        help="analyse the runs saved in these files instead of tuning")
    args = parser.parse_args()
    if args.analyse:
        data = {"runs": [run for path in args.analyse for run in json.load(open(path))["runs"]]}
    else:
        measure_option = comparison_measure_option()
        data = {"args": vars(args), "machine": machine_description(), "runs": []}
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for op in args.ops.split(","):
                run = run_one(op, seed, args.trials, measure_option, args.slots_every, args.policy)
                data["runs"].append(run)
                print(f"{op:6} seed {seed}: best {run['best_gflops']:7.2f} GFLOPS, {len(run['records'])} children "
                      f"recorded, {run['wall_seconds']:.0f} s", flush=True)
                os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
                json.dump(data, open(args.out, "w"))
    data["analysis"] = analyse(data["runs"], args.steps)
    report(data["analysis"])
    data["slot_analysis"] = slot_analysis(data["runs"])
    report_slots(data["slot_analysis"])
    data["new_bests"] = new_best_analysis(data["runs"])
    report_new_bests(data["new_bests"])
    data["screen_models"] = screen_model_analysis(data["runs"])
    report_screen_models(data["screen_models"])
    if not args.analyse:
        json.dump(data, open(args.out, "w"))


if __name__ == "__main__":
    main()

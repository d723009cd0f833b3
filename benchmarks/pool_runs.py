"""Pool the runs of several ``compare_tuners.py`` result files and compare the tuners over them.

Runs taken on different days are less comparable than one run (the machine is shared), so a
pooled figure is a second look, not a headline; what it adds is seeds. A run of the same
(op, tuner, seed) in a later file replaces the earlier one. Files timed on different CPUs are
refused (GFLOPS differ by several times between them); files written before the machine was
recorded count as one "unrecorded" machine (sessions 1-10: 2 Zen 3 cores, AVX2).

    python benchmarks/pool_runs.py benchmarks/results/compare_tuners_spread_seeds0-4.json \
        benchmarks/results/compare_tuners_immigrants_screen.json --rename ga-dqn@imm2=ga-dqn \
        --tuners ga,xgb,ga-dqn

Prints the pooled median best GFLOPS per op and tuner, and the reference tuner's (``--reference``,
GA-DQN by default) geometric-mean ratio over each other tuner with its 90% bootstrap interval
over seeds. ``--trials N`` reads every run as it stood after N trials (to pool a longer run with
shorter ones; overhead and wall time stay the whole run's); ``--stuck F`` also counts, per op and
tuner, the runs whose best is below F times the op's median over all pooled runs; ``--settled
N[,N...]`` prints, per op and tuner, how much of its final best a run had already found after N
trials (the median over runs, and the lowest): where the result of a run is decided.
``--remeasured`` compares each run on its best config as its own file measured it again
(``compare_tuners.py --remeasure``, ``headroom.py``) in place of the run's own timing, which reads
high; with ``--trials N``, on the config that was its best after N trials. Runs whose file did
not measure that config again are left out, and counted. ``--statistic fastest`` reads a config's
timings again by their fastest in place of their median. With ``--remeasured`` it also prints, per
op and tuner, how high a run's own timing of its best read, and how unsteady that config is (the
fastest of its timings again over their median), and how much each run left to find: the
fastest config that any run of its file found over the run's best, both read on timings again
that were not used to pick that fastest config.

    python benchmarks/pool_runs.py benchmarks/results/headroom_seeds210-212.json \
        benchmarks/results/compare_tuners_remeasured_zen4_seeds213-215.json --remeasured --trials 200

``--measure-again N --out FILE`` measures the best config of every pooled run again, N times,
each op's configs together in one pass on this machine (which must be the files' machine), and
writes the pooled runs with those timings to FILE (a stopped pass resumes from it); then it
reports as ``--remeasured`` does on them. Timed in one pass, runs of files taken on different
days compare as fairly as runs of one file, and the fastest config of all of them says how much
any run left to find. With ``--last-bests K`` it measures each run's last K bests-so-far (the
configs at which its best rose), not only its final best, and prints what timing them again
after tuning and keeping the fastest would gain (held out as the ceiling is).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import sys
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tools.compare import (STATISTICS, best_index_at, check_one_machine, format_table,  # noqa: E402
                           machine_description, ratio_lines, remeasure_into, remeasured_runs, summarise,
                           trials_to_fraction)


def pooled_runs(paths: list[str], rename: dict[str, str], tuners: set[str] | None) -> list[dict]:
    """Every run of the files, tuners renamed, later files winning on the same (op, tuner, seed);
    each run carries, as ``"again"``, its file's measurements again of the op's configs (empty
    when there are none), and as ``"source"`` its file. Raises ``ValueError`` when the files were
    timed on different machines."""
    by_key: dict[tuple, dict] = {}
    files = [json.load(open(path)) for path in paths]
    check_one_machine(data.get("machine") for data in files)
    for path, data in zip(paths, files):
        for run in data["runs"]:
            run = dict(run, tuner=rename.get(run["tuner"], run["tuner"]),
                       again=data.get("remeasured", {}).get(run["op"], {}), source=path)
            if tuners is None or run["tuner"] in tuners:
                by_key[(run["op"], run["tuner"], run["seed"])] = run
    return list(by_key.values())


def measure_together(runs: list[dict], paths: list[str], rounds: int, out: str, count: int = 1) -> list[dict]:
    """The pooled runs with their best configs (their last ``count`` bests-so-far, see
    ``last_bests``) measured again together, ``rounds`` times, each op in one pass
    (``tools.compare.remeasure_into``), written to ``out`` as one result file and
    carried by each run as ``"again"`` (``"source"`` is then ``out``, so the fastest config is
    sought over all of them). A pass stopped part way resumes from ``out``. Raises
    ``ValueError`` when this machine is not the one the files were timed on."""
    machine = machine_description()
    check_one_machine([machine] + [json.load(open(path)).get("machine") for path in paths])
    plain = [{k: v for k, v in run.items() if k not in ("again", "source")} for run in runs]
    if not os.path.isfile(out):
        with open(out, "w") as handle:
            json.dump({"args": {"pooled": paths, "measure_again": rounds, "last_bests": count}, "machine": machine,
                       "runs": plain}, handle)
    again = remeasure_into(out, plain, rounds, bests=lambda run: last_bests(run, count))
    return [dict(run, again=again.get(run["op"], {}), source=out) for run in plain]


def cut_at(run: dict, trials: int) -> dict:
    """The run as it stood after ``trials`` trials (the whole run if it is shorter)."""
    curve = run["curve"][:trials]
    return dict(run, curve=curve, trials=len(curve), best_gflops=curve[-1] if curve else 0.0,
                trials_to_90=trials_to_fraction(curve))


def on_bests_measured_again(runs: list[dict], statistic: str = "median") -> list[dict]:
    """The runs whose best config their file measured again, each with ``best_gflops`` the
    ``statistic`` of those measurements (the rest are left out)."""
    return [again for run in runs for again in remeasured_runs([run], {run["op"]: run["again"]}, statistic)]


def best_timings_again(run: dict) -> list[float]:
    """The run's best config's timings again in its own file (empty when it was not measured again)."""
    return run["again"].get(str(best_index_at(run))) or []


def steadiness_lines(runs: list[dict]) -> list[str]:
    """Per op and tuner, over the runs whose best config was measured again: how high the run's
    own timing of it read against the median of its timings again, and how far the fastest of
    those timings is above their median (medians over runs). The second is the config's own
    unsteadiness: a tuner that keeps the largest of many single noisy timings favours configs
    whose speed varies, which a comparison on the median penalises and one on the fastest
    does not (benchmarks/README.md, "Eighteen seeds measured again, and how steady each
    tuner's best config is")."""
    timed = [(r, best_timings_again(r)) for r in runs]
    timed = [(r, again) for r, again in timed if again]
    lines = []
    for op in sorted({r["op"] for r, _ in timed}):
        for tuner in sorted({r["tuner"] for r, _ in timed if r["op"] == op}):
            timings = [(r["curve"][-1], again) for r, again in timed if r["op"] == op and r["tuner"] == tuner]
            own = statistics.median(best / statistics.median(v) for best, v in timings)
            fastest = statistics.median(max(v) / statistics.median(v) for _, v in timings)
            lines.append(f"{op:8} {tuner:16} {len(timings):3} runs; over the median of the best's timings again: "
                         f"its own timing {own:.3f}, the fastest of them {fastest:.3f}")
    return lines


def held_out_splits(rounds: int) -> list[tuple[list[int], list[int]]]:
    """Every way to split ``rounds`` timings into a half that picks (the larger half) and a half
    that reads."""
    return [(list(pick), [k for k in range(rounds) if k not in pick])
            for pick in itertools.combinations(range(rounds), (rounds + 1) // 2)]


def held_out_gain(candidates: list[list[float]], own: list[float],
                  read: Callable[[list[float]], float]) -> float | None:
    """The fastest of ``candidates`` (each a config's timings again) over ``own``: the fastest is
    picked on one half of the timings and both are read (by ``read``) on the other half; the
    median over every such split. Picked and read on the same timings, the fastest of many noisy
    timings reads high, as a run's own best does. ``None`` with fewer than two timings each."""
    rounds = min(map(len, candidates + [own]))
    ratios = []
    for pick, rest in held_out_splits(rounds) if rounds >= 2 else []:
        top = max(candidates, key=lambda v: read([v[k] for k in pick]))
        if (own_read := read([own[k] for k in rest])) > 0:
            ratios.append(read([top[k] for k in rest]) / own_read)
    return statistics.median(ratios) if ratios else None


def ceiling_ratios(runs: list[dict], statistic: str = "median") -> list[dict]:
    """Each run whose best config was measured again, with ``"ceiling_ratio"``: the fastest
    config its file measured again (the bests of all its runs, timed together) over the run's
    own best, held out (``held_out_gain``; ``headroom.py``'s ceiling is read on the same
    timings). The ratio says how much a run left to find: a tuner 10% above another needs the
    other's runs to leave at least 10% (benchmarks/README.md, "How much did each run leave to
    find?")."""
    out = []
    for run in runs:
        own, candidates = best_timings_again(run), [v for v in run["again"].values() if v]
        if own and (ratio := held_out_gain(candidates, own, STATISTICS[statistic])) is not None:
            out.append(run | {"ceiling_ratio": ratio})
    return out


def last_bests(run: dict, count: int) -> list[int]:
    """The configs of the run's last ``count`` bests-so-far (where its best rose), its final best
    last; none for a run that did not record its configs (MetaSchedule's)."""
    curve = run["curve"] if "indices" in run else []
    risen = [run["indices"][t] for t, gflops in enumerate(curve) if gflops > 0 and (t == 0 or gflops > curve[t - 1])]
    return risen[-count:]


def validation_ratios(runs: list[dict], count: int, statistic: str = "median") -> list[dict]:
    """Each run whose last ``count`` bests-so-far were all measured again, with
    ``"validation_ratio"``: the fastest of them over its final best, held out
    (``held_out_gain``). It says what timing a run's top configs again after tuning, and keeping
    the fastest, would gain over deploying its best as timed while tuning."""
    out = []
    for run in runs:
        candidates = [run["again"].get(str(index)) for index in last_bests(run, count)]
        if not candidates or not all(candidates):
            continue
        if (ratio := held_out_gain(candidates, candidates[-1], STATISTICS[statistic])) is not None:
            out.append(run | {"validation_ratio": ratio})
    return out


def per_op_ratio_lines(rated: list[dict], key: str, what: str) -> tuple[list[str], dict[str, float]]:
    """Per op and tuner, the median over runs of ``key`` (with its mean and largest), saying
    ``what`` it is; and per tuner the geometric mean of those medians over the ops."""
    lines, per_tuner = [], {}
    for op in sorted({r["op"] for r in rated}):
        for tuner in sorted({r["tuner"] for r in rated if r["op"] == op}):
            ratios = [r[key] for r in rated if r["op"] == op and r["tuner"] == tuner]
            per_tuner.setdefault(tuner, []).append(statistics.median(ratios))
            lines.append(f"{op:8} {tuner:16} {len(ratios):3} runs; {what}: {per_tuner[tuner][-1]:.3f} "
                         f"(mean {statistics.mean(ratios):.3f}, largest {max(ratios):.3f})")
    return lines, {tuner: math.exp(statistics.mean(map(math.log, medians))) for tuner, medians in per_tuner.items()}


def ceiling_lines(runs: list[dict], statistic: str = "median") -> list[str]:
    """``ceiling_ratios`` per op and tuner (median over runs), and per tuner the geometric mean
    over the ops."""
    what = "the fastest config of its file over the run's best, on held-out timings again"
    lines, per_tuner = per_op_ratio_lines(ceiling_ratios(runs, statistic), "ceiling_ratio", what)
    return lines + [f"{tuner} leaves {ratio:.3f} x its best to find (geometric mean over the ops)"
                    for tuner, ratio in sorted(per_tuner.items())]


def validation_lines(runs: list[dict], count: int, statistic: str = "median") -> list[str]:
    """``validation_ratios`` per op and tuner (median over runs), and per tuner the geometric mean
    over the ops."""
    lines, per_tuner = per_op_ratio_lines(validation_ratios(runs, count, statistic), "validation_ratio",
                                          f"the fastest of its last {count} bests over its best, held out")
    return lines + [f"{tuner}: timing its last {count} bests again and keeping the fastest gains {ratio:.3f} "
                    "(geometric mean over the ops)" for tuner, ratio in sorted(per_tuner.items())]


def stuck_lines(runs: list[dict], fraction: float) -> list[str]:
    """Per op and tuner, how many runs ended below ``fraction`` of the op's median best."""
    lines = []
    for op in sorted({r["op"] for r in runs}):
        of_op = [r for r in runs if r["op"] == op]
        floor = fraction * statistics.median(r["best_gflops"] for r in of_op)
        for tuner in sorted({r["tuner"] for r in of_op}):
            mine = [r for r in of_op if r["tuner"] == tuner]
            stuck = sum(r["best_gflops"] < floor for r in mine)
            lines.append(f"{op:8} {tuner:16} {stuck} of {len(mine)} runs below {floor:.1f} GFLOPS "
                         f"({fraction:g} x the op's median)")
    return lines


def settled_lines(runs: list[dict], checkpoints: list[int]) -> list[str]:
    """Per op and tuner, the median (and lowest) share of a run's final best found after each
    of ``checkpoints`` trials. A run that had 95% of its final best by trial 60 was decided
    there: its later trials added 5%, and a change that acts only on them can add little more."""
    lines = []
    for op in sorted({r["op"] for r in runs}):
        for tuner in sorted({r["tuner"] for r in runs if r["op"] == op}):
            mine = [r for r in runs if r["op"] == op and r["tuner"] == tuner and r.get("curve") and r["curve"][-1] > 0]
            if not mine:
                continue
            parts = []
            for n in checkpoints:
                shares = [r["curve"][min(n, len(r["curve"])) - 1] / r["curve"][-1] for r in mine]
                parts.append(f"{n}: {statistics.median(shares):.3f} ({min(shares):.3f})")
            lines.append(f"{op:8} {tuner:16} {len(mine):3} runs; share of the final best after N trials, "
                         f"median (lowest): {', '.join(parts)}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", help="result files of compare_tuners.py")
    parser.add_argument("--rename", default="", help="old=new[,old=new...]: count a variant's runs as another tuner's")
    parser.add_argument("--tuners", default=None, help="keep only these tuners (comma-separated)")
    parser.add_argument("--reference", default="ga-dqn", help="the tuner whose ratios over the others are printed")
    parser.add_argument("--trials", type=int, default=None, help="read every run as it stood after this many trials")
    parser.add_argument("--stuck", type=float, default=None,
                        help="also count the runs below this fraction of the op's median best (e.g. 0.8)")
    parser.add_argument("--settled", default=None,
                        help="N[,N...]: also print the share of each run's final best found after N trials")
    parser.add_argument("--remeasured", action="store_true",
                        help="compare each run on its best config as its file measured it again")
    parser.add_argument("--statistic", default=None,
                        help=f"with --remeasured: how a config's timings again are read ({', '.join(STATISTICS)}; "
                             "default median)")
    parser.add_argument("--measure-again", type=int, default=0, metavar="N",
                        help="measure every pooled run's best config again, N times, all together; needs --out")
    parser.add_argument("--out", default=None, help="with --measure-again: the result file to write (or resume)")
    parser.add_argument("--last-bests", type=int, default=1, metavar="K",
                        help="with --measure-again, measure each run's last K bests-so-far again, not only its best; "
                             "with either, print what keeping the fastest of them would gain")
    args = parser.parse_args()
    if args.measure_again < 0 or (args.measure_again > 0) != (args.out is not None):
        sys.exit("--measure-again takes a positive number of rounds and goes with --out FILE "
                 f"(got {args.measure_again} and {args.out!r})")
    if args.last_bests < 1 or (args.last_bests > 1 and not (args.remeasured or args.measure_again)):
        sys.exit("--last-bests takes a positive count and needs --remeasured or --measure-again, "
                 f"got {args.last_bests}")
    if args.stuck is not None and args.stuck <= 0:
        sys.exit(f"--stuck must be a fraction above 0 (e.g. 0.8), got {args.stuck}")
    if args.trials is not None and args.trials < 1:
        sys.exit(f"--trials must be a positive number of trials, got {args.trials}")
    if args.statistic is not None and (not (args.remeasured or args.measure_again) or args.statistic not in STATISTICS):
        sys.exit(f"--statistic takes one of {', '.join(STATISTICS)} and needs --remeasured or --measure-again, "
                 f"got {args.statistic!r}")
    checkpoints = args.settled.split(",") if args.settled else []
    if not all(n.isdigit() and int(n) > 0 for n in checkpoints):
        sys.exit(f"--settled takes positive trial counts separated by commas (e.g. 60,100), got {args.settled!r}")
    checkpoints = [int(n) for n in checkpoints]
    try:
        rename = dict(pair.split("=", 1) for pair in args.rename.split(",") if pair)
    except ValueError:
        sys.exit(f"--rename takes old=new pairs separated by commas, got {args.rename!r}")
    for path in args.files:
        if not os.path.isfile(path):
            sys.exit(f"no result file {path!r}; pass files written by compare_tuners.py --out")
    try:
        runs = pooled_runs(args.files, rename, set(args.tuners.split(",")) if args.tuners else None)
    except ValueError as err:
        sys.exit(str(err))
    except (KeyError, TypeError, AttributeError) as err:
        sys.exit(f"not a compare_tuners.py result file (a JSON object with a list of runs): {err}")
    if args.trials is not None:
        runs = [cut_at(run, args.trials) for run in runs]
    if args.measure_again:
        try:
            runs = measure_together(runs, args.files, args.measure_again, args.out, args.last_bests)
        except ValueError as err:
            sys.exit(str(err))
    if args.remeasured or args.measure_again:
        statistic = args.statistic or "median"
        measured = on_bests_measured_again(runs, statistic)
        if not measured:
            sys.exit("--remeasured: no run's best config was measured again in these files "
                     "(write them with compare_tuners.py --remeasure N or headroom.py)")
        print(f"{len(measured)} of {len(runs)} runs, each on its best config measured again, "
              f"the {statistic} of its timings "
              f"({len(runs) - len(measured)} left out: their file did not measure it again)")
        print("\n".join(steadiness_lines(runs)))
        print("\n".join(ceiling_lines(runs, statistic)))
        if args.last_bests > 1:
            print("\n".join(validation_lines(runs, args.last_bests, statistic)))
        runs = measured
    rows = summarise(runs)
    print(format_table(rows))
    if args.stuck is not None:
        print("\n".join(stuck_lines(runs, args.stuck)))
    if checkpoints:
        print("\n".join(settled_lines(runs, checkpoints)))
    print("\n".join(ratio_lines(rows, runs, [(args.reference, base) for base in
                                               sorted({r["tuner"] for r in runs} - {args.reference})])))


if __name__ == "__main__":
    main()

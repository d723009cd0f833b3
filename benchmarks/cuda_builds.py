"""What a GPU tune's host spends per trial before the GPU sees it: checks and builds, no GPU needed.

    python benchmarks/cuda_builds.py --config configs/cuda-resnet-18.json --precision float32
    python benchmarks/cuda_builds.py --config configs/cuda-bert-minilm.json --arch sm_80 --builds 4

For the config's model and the target's architecture (``--arch``; default sm_90, an H100/H200),
it prints how many tasks the model has and how many functions a run of its build calls, then
random configs of the costliest functions (weight x FLOPs) are checked as a tune checks them,
first from their tile sizes alone (threads per block), then by replaying the schedule (shared memory
from its loops, then the postprocessors, then each thread's own buffers against its registers, then
float16 reads that TVM's code generator cannot vectorize);
``--builds`` accepted configs of each function are then built one at a time on one core by the
builder's own function (``autotvm.measure.workers.build_artifact``: TVM's lowering, nvcc where it
is installed, the library's export). It prints the check's cost and acceptance, how many built,
the build times, and what a batch of ``--workers`` builds waits for: the slowest of that many
(resampled from the builds timed here), against the mean a worker that never waits would take.
As many of the configs only the register check rejects are built too, and the same wait is given
with them and without them (each function's configs drawn in the shares the check found). Last, such
a batch of the accepted configs goes through the tune's own builder (``LocalBuilder``,
``--workers`` workers, at most one a core) and its wall time is printed: on a GPU host, the
builds exactly as a tune's round makes them (TVM's CUDA compiler callback, nvcc or NVRTC).

``--neighbours N``: for N built configs of each function, each knob is changed to another of its
values at random (a mutation's step), and of the neighbours that pass the check, those that lower
to their config's CUDA source are counted: what a cache of compiled kernels would save.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=os.path.join(ROOT, "configs", "cuda-resnet-18.json"))
    parser.add_argument("--precision", default=None, help="float32 or float16 (default: the config's)")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--functions", type=int, default=6, help="the costliest functions to sample")
    parser.add_argument("--checks", type=int, default=150, help="random configs checked per function")
    parser.add_argument("--builds", type=int, default=5, help="accepted configs built per function")
    parser.add_argument("--workers", type=int, default=16, help="build workers of the GPU host (n_parallel)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--neighbours", type=int, default=0,
                        help="accepted configs a function whose single-knob neighbours are lowered and compared")
    args = parser.parse_args()

    import tabulate

    import autotvm
    from autotvm.env import host_cores
    from autotvm.env import find_nvcc
    from tools.config import load_config
    from tools.models import build_model, model_tasks

    config = load_config(args.config)
    precision = args.precision or config.run_settings.precision
    target = autotvm.make_target({"kind": "cuda", "arch": args.arch})  # the GPU's limits, or every GPU's
    rows, builds, in_nvcc, batch, sizes = [], [], [], [], []
    drawn: list = []  # every build: (seconds, seconds in nvcc, whether only the register check rejects it, its weight)
    disagreements = 0
    neighbours = [0, 0]  # single-knob neighbours that pass the check, and those with their config's CUDA source
    rng = np.random.default_rng(args.seed)
    mutations = np.random.default_rng([args.seed, 1])  # the neighbours' own, so that the rest draws as without them
    with tempfile.TemporaryDirectory(prefix="cuda-builds-") as out_dir:  # the libraries built, removed after
        for spec in config.models:
            _, mod, params, tasks = model_tasks(spec, target, precision)
            calls = [name for name in re.findall(r"call  (\w+) ", build_model(spec, mod, params, target, precision).as_text())
                     if not name.startswith("vm.")]  # the VM's builtins (views, the CUDA graph's) left out
            sizes.append(f"{spec.name}: {len(tasks)} tasks, a run calls {len(calls)} functions")
            for task in sorted(tasks, key=lambda t: -t.weight * t.flop)[: args.functions]:
                row, sampled, wrong = _sample(task, args, rng, out_dir)
                rows.append(row)
                accepted, times, nvcc_times = sampled["accepted"]
                batch += [autotvm.MeasureInput(task.target, task, config_) for config_ in accepted]
                builds += times
                in_nvcc += nvcc_times
                for rejected, (_, times_, nvcc_) in ((False, sampled["accepted"]), (True, sampled["registers"])):
                    share = sampled["counts"][rejected] / max(len(times_), 1)  # each build stands for this many checked
                    drawn += [(t, n, rejected, share) for t, n in zip(times_, nvcc_)]
                disagreements += wrong
                if args.neighbours:
                    built_, same = _same_source_neighbours(task, accepted[: args.neighbours], mutations)
                    neighbours = [neighbours[0] + built_, neighbours[1] + same]
    print(tabulate.tabulate(rows, headers=["function", "accepted", "rejected from tiles", "then from loops",
                                           "then from registers", "then float16 gathers", "replay ms", "check ms",
                                           "built", "build s median", "build s max"]))
    print(f"{config.models[0].name} {precision} for {args.arch}, nvcc: {find_nvcc() or 'not installed (lowering only)'}; "
          "a config's mean time, one core: replay ms, replaying it and running the postprocessors; check ms, the "
          f"tune's check (threads per block from its tiles, then shared memory from the replayed loops, then the "
          f"postprocessors, then a thread's own buffers against its registers, then float16 reads TVM cannot "
          f"vectorize); configs the check and the replay disagree on, registers and gathers aside: {disagreements}")
    print("; ".join(sizes))
    if builds:
        draws = rng.choice(builds, size=(2000, args.workers))
        nvcc = f" ({np.mean(in_nvcc):.2f} s of it in nvcc)" if find_nvcc() else ""
        print(f"{len(builds)} builds on one core: mean {np.mean(builds):.2f} s{nvcc}, median {np.median(builds):.2f} s, "
              f"max {max(builds):.2f} s; a batch of {args.workers} on {args.workers} workers waits "
              f"{draws.max(axis=1).mean():.2f} s for its slowest (resampled), against {np.mean(builds):.2f} s a build")
    over = [row for row in drawn if row[2]]
    if over:
        def waits(rows: list) -> float:
            weights = np.array([row[3] for row in rows])
            picks = rng.choice(len(rows), size=(2000, args.workers), p=weights / weights.sum())
            return float(np.array([row[0] for row in rows])[picks].max(axis=1).mean())

        print(f"{len(over)} builds of configs only the register check rejects: mean {np.mean([r[0] for r in over]):.2f} s "
              f"({np.mean([r[1] for r in over]):.2f} s in nvcc), max {max(r[0] for r in over):.2f} s; a batch of "
              f"{args.workers} drawn as checked (each function's configs in their shares) waits {waits(drawn):.2f} s "
              f"for its slowest with them, {waits([r for r in drawn if not r[2]]):.2f} s without")
    if args.neighbours:
        print(f"single-knob neighbours of accepted configs (each knob of {args.neighbours} a function changed to another "
              f"value at random, as a mutation does): {neighbours[1]} of the {neighbours[0]} that pass the check lower "
              "to their config's CUDA source (a build a cache of compiled kernels would save)")
    if batch:
        _build_batch(batch, min(args.workers, host_cores()))


def _build_batch(accepted: list, workers: int) -> None:
    """One batch of ``workers`` of the accepted configs (in the table's order, again from the first
    when fewer) through the tune's builder; prints its wall time, the workers' load and the CUDA
    compiler's share."""
    import autotvm

    inputs = [accepted[i % len(accepted)] for i in range(workers)]
    builder = autotvm.LocalBuilder(n_parallel=workers, timeout=120)
    try:
        builder.executor  # the workers started and TVM imported, as before a tune's first round
        start = time.perf_counter()
        results = builder.build(inputs)
        wall = time.perf_counter() - start
    finally:
        builder.close()
    ok = sum(r.error_no == 0 for r in results)
    compiler = (f", {builder.device_compile_seconds / builder.builds:.2f} s of it in {builder.device_compiler}"
                if builder.device_compile_seconds else "")
    print(f"a batch of {workers} builds through the tune's builder on {workers} workers: {wall:.2f} s, {ok} built "
          f"(workers busy {100 * builder.busy_seconds / (wall * workers):.0f}%; "
          f"{builder.busy_seconds / max(builder.builds, 1):.2f} s a build{compiler})")


def _sample(task: Any, args: argparse.Namespace, rng: np.random.Generator, out_dir: str) -> tuple:
    """Check ``args.checks`` random configs of ``task`` as a tune does, build ``args.builds`` accepted
    ones and as many of those only the register check rejects (what it saves); returns the table's
    row, ``{"accepted": (configs, seconds, seconds in nvcc), "registers": (the same), "counts":
    {False: accepted, True: rejected for registers}}`` and the configs the check and the replay
    disagree on (registers and gathers aside)."""
    from autotvm.task.space import InstantiationError

    space = task.config_space
    check = replay = 0.0
    wrong = 0
    accepted, over, from_tiles, from_loops, gathers = [], [], 0, 0, 0
    for _ in range(args.checks):
        config = space.get(int(rng.integers(space.range_length)))
        start = time.perf_counter()
        try:
            task.schedule_of(config)
            ok = True
        except InstantiationError:
            ok = False
        replay += time.perf_counter() - start
        start = time.perf_counter()
        why = task.check(config)  # the tune's check: the tiles first, then the replay
        check += time.perf_counter() - start
        from_tiles += why is not None and "threads per block" in why
        from_loops += why is not None and "shared memory per block" in why
        gather = why is not None and "cannot gather" in why  # replayed well, would not compile
        gathers += gather
        if why is not None and "local memory per thread" in why:  # replayed well, kept from building
            over.append(config)
        elif (why is None) != ok and not gather:  # the check and the replay disagree (none expected)
            wrong += 1
        if why is None:
            accepted.append(config)
    built = {"accepted": _build_each(task, accepted[: args.builds], out_dir),
             "registers": _build_each(task, over[: args.builds], out_dir),
             "counts": {False: len(accepted), True: len(over)}}
    times = built["accepted"][1]
    row = [task.name[:36], f"{len(accepted)}/{args.checks}", f"{from_tiles}/{args.checks - len(accepted)}",
           f"{from_loops}/{args.checks - len(accepted) - from_tiles}",
           f"{len(over)}/{args.checks - len(accepted) - from_tiles - from_loops}",
           f"{gathers}/{args.checks - len(accepted) - from_tiles - from_loops - len(over)}",
           f"{1e3 * replay / args.checks:.1f}", f"{1e3 * check / args.checks:.1f}",
           f"{len(times)}/{len(accepted[: args.builds])}",
           f"{np.median(times):.2f}" if times else "-", f"{max(times):.2f}" if times else "-"]
    return row, built, wrong


def _same_source_neighbours(task: Any, configs: list, rng: np.random.Generator) -> tuple[int, int]:
    """Each knob of each of ``configs`` changed to another of its values at random: how many of
    these neighbours pass the check and lower, and how many lower to the CUDA source of the config
    they came from."""
    space = task.config_space
    lowered = same = 0
    for config in configs:
        knob, source_of_config = space.point2knob(config.index), _cuda_source(task, config)
        for dim, size in enumerate(space.dims):
            if size < 2:
                continue
            value = int(rng.integers(size - 1))
            value += value >= knob[dim]  # any value but the config's own
            neighbour = space.get(space.knob2point([*knob[:dim], value, *knob[dim + 1:]]))
            if task.check(neighbour) is not None:
                continue
            try:
                source = _cuda_source(task, neighbour)
            except Exception:  # TVM's code generator refuses it: a failed trial in a tune
                continue
            lowered += 1
            same += source == source_of_config
    return lowered, same


def _cuda_source(task: Any, config: Any) -> str:
    import tvm

    from autotvm.measure.workers import cuda_sources

    return "".join(cuda_sources(tvm.compile(task.instantiate(config), target=task.target)))


def _build_each(task: Any, configs: list, out_dir: str) -> tuple:
    """Build ``configs`` one at a time with the builder's own function; returns the configs built,
    their seconds and their seconds in nvcc."""
    from autotvm.measure.workers import build_artifact

    done, times, in_nvcc = [], [], []
    for config in configs:
        start = time.perf_counter()
        try:
            built = build_artifact(task.instantiate(config), task.target, out_dir, True, False)
            os.remove(built[0])
            times.append(time.perf_counter() - start)
            in_nvcc.append(built[5])
            done.append(config)
        except Exception as err:  # a kernel nvcc refuses: a failed trial on the GPU host too
            print(f"note: {task.name}: a build failed ({str(err).strip().splitlines()[-1][:100]})")
    return done, times, in_nvcc


if __name__ == "__main__":
    main()

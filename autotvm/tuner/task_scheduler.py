"""Spread one model's trial budget over its tasks, where it lowers the model's latency most.

A model's latency is estimated as ``sum(weight_i * latency_i)``: each task's best measured
latency times how often the model calls it. ``gradient`` (Ansor's task scheduler, MetaSchedule's
``GradientBased``) gives the next round to the task whose weighted latency is expected to drop
fastest per trial: a backward estimate (how much the last ``window`` rounds gained) blended with an
optimistic forward one (that doubling the task's trials could halve what is left). A task leaves
the schedule when it reaches ``per_task_trials``, exhausts its space or its tuner stops early.
``round-robin`` gives every task a round in turn. Tasks whose space has one config are not tuned.

Before each round a task is offered the best configs of its siblings, translated to its own space
(``ConfigSpace.translate``): tasks with the same knobs are one template on other shapes (ResNet-50
has 16 pointwise convolutions, a BERT three weight matmuls), and a tiling that is fast on one shape
is a good start on the next, where a budget of a few dozen trials a task leaves its own search
short of converging. The tuner measures them first and breeds from them as from its own.

With ``in_flight`` > 1 that many rounds, of different tasks, run at once (a thread each, sharing
the builder's workers and the runner's device): a batch waits for its slowest build (on a GPU's
host several times a build's mean: finding 11), so one round's builds and runs fill the cores
and the device while another waits for its last builds. Only where runs do not share the builds'
cores (a GPU): on a CPU the builds would disturb the timings.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from ..checks import AutoTVMError, check, check_options, choice, integer

logger = logging.getLogger("autotvm")

STRATEGIES = ("gradient", "round-robin")
ALPHA = 0.2  # weight of the backward (observed) gradient against the optimistic forward one (Ansor's alpha)
WINDOW = 3  # rounds the backward gradient looks back over (Ansor's backward_window_size)
FAILED_ROUNDS_LIMIT = 2  # a task with no valid measurement after this many rounds gets no more
TRANSFER_PER_ROUND = 2  # sibling tasks' best configs a task is offered before each of its rounds


@dataclass
class TaskState:
    """One task's place in the schedule."""

    task: Any
    tuner: Any
    cap: int  # trials this task may take at most
    trials: int = 0  # trials measured so far, loaded records included
    rounds: int = 0
    seconds: float = 0.0
    done: bool = False
    latencies: list[float] = field(default_factory=list)  # best latency (s) after each round
    offered: set[int] = field(default_factory=set)  # indices offered from siblings, never twice
    siblings: list["TaskState"] = field(default_factory=list, repr=False)  # the other tasks with its knobs

    @property
    def latency(self) -> float:
        """Best measured latency in seconds (inf before any valid measurement)."""
        flops = self.tuner.best_flops
        return self.task.flop / flops if flops > 0 else math.inf


class TaskScheduler:
    """Tune ``tasks`` (each with its ``tuners`` entry) within ``model_trials`` trials in all.

    ``per_task_trials`` caps each task; ``loaded`` gives the trials each tuner already holds (from
    ``load_history``), which count against both budgets. ``round_trials`` is the size of one round
    (a GA generation is a natural choice); ``transfer`` is how many sibling configs a task is
    offered before each round (0: none). ``tune`` runs the schedule; ``on_round(state, measured)``
    is called after each round (progress display), and ``callbacks`` go to every ``Tuner.tune``.
    """

    def __init__(self, tasks: Sequence[Any], tuners: Sequence[Any], model_trials: int, per_task_trials: int,
                 strategy: str = "gradient", round_trials: int = 16, loaded: Sequence[int] | None = None,
                 transfer: int = TRANSFER_PER_ROUND) -> None:
        check("task scheduler", strategy, choice(STRATEGIES))
        if len(tasks) != len(tuners):
            raise AutoTVMError(f"tasks and tuners must pair up: {len(tasks)} tasks, {len(tuners)} tuners")
        check_options({"model_trials": integer(1), "per_task_trials": integer(1), "round_trials": integer(1)},
                      {"model_trials": model_trials, "per_task_trials": per_task_trials, "round_trials": round_trials})
        loaded = list(loaded) if loaded is not None else [0] * len(tasks)
        self.strategy, self.round_trials, self.model_trials = strategy, round_trials, model_trials
        self.transfer = transfer
        self.states = [TaskState(task, tuner, min(per_task_trials, task.config_space.range_length), trials=done)
                       for task, tuner, done in zip(tasks, tuners, loaded)]
        by_signature: dict[tuple, list[TaskState]] = {}
        for state in self.states:
            by_signature.setdefault(state.task.config_space.signature, []).append(state)
        for state in self.states:
            state.siblings = [s for s in by_signature[state.task.config_space.signature] if s is not state]
            state.done = state.task.config_space.range_length <= 1 or state.trials >= state.cap
            if state.trials:
                state.latencies.append(state.latency)
        self._turn = 0

    @property
    def used(self) -> int:
        return sum(s.trials for s in self.states)

    def estimated_latency(self) -> float:
        """``sum(weight * best latency)`` over the tasks with a valid measurement, in seconds."""
        return sum(s.task.weight * s.latency for s in self.states if math.isfinite(s.latency))

    def next_task(self, busy: Sequence[TaskState] = ()) -> TaskState | None:
        """The task that gets the next round, or None when none is left (``busy``: tasks whose
        round is in flight, which get no other)."""
        open_states = [s for s in self.states if not s.done and all(s is not b for b in busy)]
        if not open_states:
            return None
        warm_up = [s for s in open_states if s.rounds == 0 and not s.trials]
        if warm_up:  # every task is measured once before any gradient is trusted, the costliest first
            # (weight x FLOPs): a budget of time may end before every task has had its first round
            return max(warm_up, key=lambda s: s.task.weight * getattr(s.task, "flop", 0))
        if self.strategy == "round-robin":
            for step in range(len(self.states)):
                state = self.states[(self._turn + step) % len(self.states)]
                if not state.done:
                    self._turn = (self._turn + step + 1) % len(self.states)
                    return state
        return min(open_states, key=self._gradient)

    def _gradient(self, state: TaskState) -> float:
        """d(model latency)/d(trials) expected from one more round of ``state`` (more negative: better)."""
        latency = state.latency
        if not math.isfinite(latency):  # measured, but nothing valid yet: try it before refining others
            return -math.inf
        history = state.latencies
        back = history[-min(WINDOW, len(history))] if history else latency
        span = max(1, min(WINDOW, len(history)) - 1) * self.round_trials
        backward = (latency - back) / span
        forward = -latency / max(1, state.trials)
        return state.task.weight * (ALPHA * backward + (1 - ALPHA) * forward)

    def _offer_siblings(self, state: TaskState) -> None:
        """Enqueue the best configs of up to ``transfer`` sibling tasks (the same knobs), fastest
        first, translated to ``state``'s space; one already visited or offered is passed over."""
        measured = [s for s in state.siblings if s.tuner.best_config is not None]
        offers = []
        for sibling in sorted(measured, key=lambda s: s.tuner.best_flops, reverse=True):
            if len(offers) == self.transfer:
                break
            config = state.task.config_space.translate(sibling.tuner.best_config)
            if config is not None and config.index not in state.tuner.visited and config.index not in state.offered:
                state.offered.add(config.index)
                offers.append(config)
        state.tuner.enqueue(offers)

    def tune(self, measure_option: dict, early_stopping: int | None = None, callbacks: Iterable[Callable] = (),
             on_round: Callable[[TaskState, int], None] | None = None, time_budget: float | None = None,
             in_flight: int = 1) -> None:
        """Give rounds to tasks until the model budget is spent, every task is done or, with
        ``time_budget`` (seconds), that time has passed (the rounds in flight end first).
        ``in_flight``: rounds of different tasks measured at once (module docstring)."""
        check("in_flight", in_flight, integer(1))
        callbacks = list(callbacks)
        deadline = math.inf if time_budget is None else time.monotonic() + time_budget
        if in_flight == 1:
            while (state := self._next_round(deadline, {})) is not None:
                size, before, start = self._start_round(state)
                state.tuner.tune(size, measure_option, early_stopping=early_stopping, callbacks=callbacks)
                self._end_round(state, size, before, start, on_round)
            return
        self._tune_in_flight(measure_option, early_stopping, callbacks, on_round, deadline, in_flight)

    def _next_round(self, deadline: float, running: dict) -> TaskState | None:
        """The task of the next round, or None when the budget of trials or time is spent (trials
        of the rounds ``running``, ``_tune_in_flight``'s, counted as spent)."""
        if self.used + _reserved(running) >= self.model_trials or time.monotonic() >= deadline:
            return None
        return self.next_task(busy=[state for state, *_ in running.values()])

    def _start_round(self, state: TaskState, reserved: int = 0) -> tuple[int, int, float]:
        size = min(self.round_trials, state.cap - state.trials, self.model_trials - self.used - reserved)
        self._offer_siblings(state)
        return size, len(state.tuner.history), time.perf_counter()

    def _end_round(self, state: TaskState, size: int, before: int, start: float,
                   on_round: Callable[[TaskState, int], None] | None) -> None:
        state.seconds += time.perf_counter() - start
        measured = len(state.tuner.history) - before
        state.trials += measured
        state.rounds += 1
        state.latencies.append(state.latency)
        stopped_early = measured < size  # the tuner's space ran out or its early stopping fired
        failing = not math.isfinite(state.latency) and state.rounds >= FAILED_ROUNDS_LIMIT
        if failing:
            logger.warning("%s: no valid measurement in %d rounds; it gets no more trials", state.task.name,
                           state.rounds)
        state.done = stopped_early or failing or state.trials >= state.cap
        if on_round is not None:
            on_round(state, measured)

    def _tune_in_flight(self, measure_option: dict, early_stopping: int | None, callbacks: list,
                        on_round: Callable[[TaskState, int], None] | None, deadline: float, in_flight: int) -> None:
        """``tune`` with up to ``in_flight`` rounds at once, each in a thread of its own; the
        schedule, its bookkeeping and ``on_round`` stay in this thread. A round that fails stops
        the schedule once the others have ended, with its error. Ctrl-C lets the rounds in flight
        end (their trials logged), then raises ``KeyboardInterrupt``; a second Ctrl-C stops at once."""
        finished: queue.Queue = queue.Queue()
        running: dict[int, tuple[TaskState, int, int, float]] = {}  # id(state) -> (state, size, before, start)
        error: BaseException | None = None

        def round_of(state: TaskState, size: int) -> None:
            try:
                state.tuner.tune(size, measure_option, early_stopping=early_stopping, callbacks=callbacks)
                finished.put((state, None))
            except BaseException as err:  # handed to the scheduling thread, which raises it
                finished.put((state, err))

        def collect() -> None:
            nonlocal error
            state, err = finished.get()
            self._end_round(*running.pop(id(state)), on_round)
            error = error or err

        try:
            while True:
                while error is None and len(running) < in_flight:
                    state = self._next_round(deadline, running)
                    if state is None:
                        break
                    size, before, start = self._start_round(state, _reserved(running))
                    running[id(state)] = (state, size, before, start)
                    threading.Thread(target=round_of, args=(state, size), daemon=True,
                                     name=f"autotvm-round-{state.task.name}").start()
                if not running:
                    break
                collect()
        except KeyboardInterrupt:
            logger.warning("interrupted: finishing the %d round%s in flight, then stopping (Ctrl-C again to stop now)",
                           len(running), "" if len(running) == 1 else "s")
            while running:
                collect()
            raise
        if error is not None:
            raise error


def _reserved(running: dict) -> int:
    """Trials of the rounds in flight (``_tune_in_flight``'s ``running``)."""
    return sum(entry[1] for entry in running.values())

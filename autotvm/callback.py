"""Callbacks for ``Tuner.tune``: each is called once per measured batch as ``cb(tuner, inputs, results)``."""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Sequence

from .record import encode

_SI = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def log_to_file(file_or_path: Any) -> Callable:
    """Append one JSON line per trial (AutoTVM's record layout), flushed after every batch.

    Only real measurements reach the log; a batch is written as soon as it is measured, so an
    interrupted run leaves a valid log that a later run can resume from.
    """

    def _callback(_tuner: Any, inputs: Sequence, results: Sequence) -> None:
        lines = "".join(encode(inp, res) + "\n" for inp, res in zip(inputs, results))
        if isinstance(file_or_path, (str, os.PathLike)):
            with open(file_or_path, "a", encoding="utf-8") as handle:
                handle.write(lines)
        else:
            file_or_path.write(lines)
            file_or_path.flush()

    if isinstance(file_or_path, (str, os.PathLike)):
        directory = os.path.dirname(os.path.abspath(file_or_path))
        if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
            from .env import AutoTVMError

            raise AutoTVMError(f"cannot write the log {str(file_or_path)!r}: its folder is missing or not writable")
    return _callback


def progress_bar(total: int, prefix: str = "", si_prefix: str = "G", file: Any = None) -> Callable:
    """A tqdm bar showing current and best FLOPS, trials done and elapsed time."""
    from tqdm import tqdm

    if si_prefix not in _SI:
        raise ValueError(f"unknown si_prefix {si_prefix!r}; allowed: {', '.join(_SI)}")
    scale = _SI[si_prefix]
    state: dict = {"bar": None}

    def _callback(tuner: Any, inputs: Sequence, results: Sequence) -> None:
        if state["bar"] is None:
            state["bar"] = tqdm(total=total, desc=prefix or tuner.task.name, unit="trial", file=file,
                                dynamic_ncols=True, leave=True)
            state["start"] = time.perf_counter()
        current = max((tuner.flops_of(r) for r in results), default=0.0)
        bar = state["bar"]
        bar.set_postfix_str(f"Current/Best: {current / scale:7.2f}/{tuner.best_flops / scale:7.2f} {si_prefix}FLOPS",
                            refresh=False)
        bar.update(len(results))
        done = len(tuner.history) >= total or (tuner.ttl is not None and tuner.ttl <= 0)
        if done:
            bar.close()

    return _callback

"""Callbacks for ``Tuner.tune``: each is called once per measured batch as ``cb(tuner, inputs, results)``."""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from .checks import AutoTVMError, check, choice
from .record import append_records, claim_log, encode

_SI = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def log_to_file(file_or_path: Any) -> Callable:
    """Append one JSON line per trial (AutoTVM's record layout), written and flushed to the disk
    after every batch.

    Only real measurements reach the log; a batch is written as soon as it is measured, as whole
    lines, so an interrupted run leaves a valid log that a later run can resume from. A path is
    claimed for this process (``record.claim_log``): a second process writing the same log is
    refused at once, and a full disk stops the tuning with what was saved and how to resume.
    """

    def _callback(_tuner: Any, inputs: Sequence, results: Sequence) -> None:
        lines = "".join(encode(inp, res) + "\n" for inp, res in zip(inputs, results))
        if isinstance(file_or_path, (str, os.PathLike)):
            append_records(file_or_path, lines, len(inputs))
        else:
            file_or_path.write(lines)
            file_or_path.flush()

    if isinstance(file_or_path, (str, os.PathLike)):
        directory = os.path.dirname(os.path.abspath(file_or_path))
        if not os.path.isdir(directory) or not os.access(directory, os.W_OK):
            raise AutoTVMError(f"cannot write the log {str(file_or_path)!r}: its folder is missing or not writable")
        claim_log(file_or_path)
    return _callback


def progress_bar(total: int, prefix: str = "", si_prefix: str = "G", file: Any = None) -> Callable:
    """A tqdm bar showing current and best FLOPS, trials done and elapsed time. Call its
    ``close()`` when tuning stops early on an error, so the bar ends before the message."""
    check("si_prefix", si_prefix, choice(_SI))
    return _ProgressBar(total, prefix, si_prefix, file)


class _ProgressBar:
    def __init__(self, total: int, prefix: str, si_prefix: str, file: Any) -> None:
        self.total, self.prefix, self.si_prefix, self.file = total, prefix, si_prefix, file
        self.bar: Any = None

    def __call__(self, tuner: Any, inputs: Sequence, results: Sequence) -> None:
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(total=self.total, desc=self.prefix or tuner.task.name, unit="trial", file=self.file,
                            dynamic_ncols=True, leave=True)
        scale = _SI[self.si_prefix]
        current = max((tuner.flops_of(r) for r in results), default=0.0)
        self.bar.set_postfix_str(f"Current/Best: {current / scale:7.2f}/{tuner.best_flops / scale:7.2f} "
                                 f"{self.si_prefix}FLOPS", refresh=False)
        self.bar.update(len(results))
        if len(tuner.history) >= self.total or (tuner.ttl is not None and tuner.ttl <= 0):
            self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

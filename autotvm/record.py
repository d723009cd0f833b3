"""Tuning records in AutoTVM's JSON-lines layout: encode, decode, load, pick the best.

Each record also carries ``"space"``, the digest of the knob space it was measured in
(``ConfigSpace.digest``): a record of another space is recognised as stale, skipped with one
warning per file, and never applied. Records without it (older logs, AutoTVM's) are used when
their knob values bind to the task's space and are stale otherwise. ``"flop"``, the task's
FLOP count, lets a reader judge a cost without the task: a cost faster than the target could
run (``env.peak_flops``; a forged, hand-edited or damaged record) is never a measurement.
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import math
import os
import threading
from typing import Any, Iterable, Iterator

import tvm

from .checks import AutoTVMError
from .measure.measure import MeasureInput, MeasureResult
from .task.space import InstantiationError

AUTOTVM_LOG_VERSION = 0.2
FAILED_COST = 1e9
logger = logging.getLogger("autotvm")


class RecordConfig:
    """A config as stored in a record: its index and entity list, not yet bound to a space."""

    def __init__(self, json_dict: dict, space: str | None = None, source: str | None = None) -> None:
        self.index = int(json_dict["index"])
        self.code_hash = json_dict.get("code_hash")
        self.entity = json_dict["entity"]
        self.json_dict = json_dict
        self.space = space  # the digest of the space the record was measured in (None: an older record)
        self.source = source  # the log it was read from

    def to_json_dict(self) -> dict:
        return self.json_dict

    def bind(self, task: Any) -> Any:
        """The ``ConfigEntity`` of ``task``'s space that this record names; ``InstantiationError``
        (with the reason) when the record is stale for that space."""
        if self.space is not None and self.space != task.config_space.digest:
            raise InstantiationError("written for another knob space (the task's space changed since)")
        return task.config_space.from_json_dict(self.json_dict)

    def __repr__(self) -> str:
        return f"RecordConfig(index={self.index})"


class StaleRecords:
    """Counts records that are skipped when bound to a task (they do not fit its space, or their
    cost is implausible for it), per log, and warns once per log."""

    def __init__(self) -> None:
        self.counts: collections.Counter = collections.Counter()
        self.reasons: dict[str, list[str]] = {}
        self.implausible: collections.Counter = collections.Counter()
        self.first_implausible: dict[str, str] = {}

    def add_implausible(self, config: Any, reason: str) -> None:
        source = getattr(config, "source", None) or "(records given in memory)"
        self.implausible[source] += 1
        self.first_implausible.setdefault(source, reason)

    def add(self, config: Any, reason: str) -> None:
        source = getattr(config, "source", None) or "(records given in memory)"
        self.counts[source] += 1
        reasons = self.reasons.setdefault(source, [])
        if reason not in reasons:
            reasons.append(reason)

    def warn(self) -> None:
        """One warning per log with stale records since the last call."""
        for source, count in self.counts.items():
            logger.warning("%s: skipped %d stale record%s (%s); tune again to replace them", source, count,
                           "" if count == 1 else "s", "; ".join(self.reasons[source]))
        for source, count in self.implausible.items():
            logger.warning("%s: skipped %d record%s (first: %s): such records are forged, edited or damaged, "
                           "never measurements", source, count, "" if count == 1 else "s",
                           self.first_implausible[source])
        self.counts.clear()
        self.reasons.clear()
        self.implausible.clear()
        self.first_implausible.clear()


def bind_record(config: Any, task: Any, stale: StaleRecords, result: MeasureResult | None = None) -> Any:
    """``config`` bound to ``task``'s space, or ``None`` (counted in ``stale``) when it does not fit,
    or when ``result``'s cost is faster than ``task``'s target could run it."""
    if result is not None:
        why = implausible(result, getattr(task, "flop", 0.0), task.target, getattr(task, "args", ()))
        if why:
            stale.add_implausible(config, why)
            return None
    if not hasattr(config, "bind"):
        return config
    try:
        return config.bind(task)
    except InstantiationError as err:
        stale.add(config, str(err))
        return None


class RecordTask:
    """The task part of a loaded record: its target, name and args (enough to match a workload),
    and its FLOP count where the record carries it (0 otherwise)."""

    def __init__(self, target: str, name: str, args: list, flop: float = 0.0) -> None:
        self.target = target
        self.name = name
        self.args = tuple(args)
        self.flop = flop

    @property
    def workload(self) -> tuple:
        return (self.name, *_freeze(self.args))


def _freeze(value: Any) -> Any:
    return tuple(_freeze(v) for v in value) if isinstance(value, (list, tuple)) else value


def lookup_key(target: Any, workload: Any) -> tuple:
    """The key records are grouped by: (target kind, workload as ``(name, *args)``, hashable)."""
    return (_target_kind(target), _freeze(tuple(workload)))


def workload_key(task: Any) -> tuple:
    """A hashable key for a task's (name, args)."""
    return (task.name, *_freeze(list(task.args)))


def _row(target: Any, name: str, args: Any, config: dict, result: MeasureResult, space: str | None,
         flop: float = 0.0) -> str:
    costs = list(result.costs) if result.ok else [FAILED_COST]
    row = {
        "input": [str(target), name, list(args), {}],
        "config": config,
        "result": [costs, int(result.error_no), float(result.all_cost), float(result.timestamp)],
        "version": AUTOTVM_LOG_VERSION,
        "tvm_version": tvm.__version__,
    }
    if space is not None:
        row["space"] = space
    if flop:
        row["flop"] = flop
    if not result.ok:  # an extra key: AutoTVM readers ignore it, people debugging need it
        row["error_msg"] = result.error_message
    return json.dumps(row)


def encode(inp: MeasureInput, result: MeasureResult) -> str:
    """One JSON line: input (target, task name, args), config, result, version."""
    space = getattr(inp.config, "space", None)
    digest = space.digest if hasattr(space, "digest") else space  # a ConfigEntity's space, or a record's digest
    return _row(inp.target, inp.task.name, inp.task.args, inp.config.to_json_dict(), result, digest,
                float(getattr(inp.task, "flop", 0.0) or 0.0))


def decode(line: str, source: str | None = None) -> tuple[MeasureInput, MeasureResult]:
    """Inverse of ``encode``; raises ``ValueError`` on a malformed line."""
    row = json.loads(line)
    target, name, args, _ = row["input"]
    costs, error_no, all_cost, timestamp = row["result"]
    task = RecordTask(target, name, args, float(row.get("flop", 0.0) or 0.0))
    inp = MeasureInput(target, task, RecordConfig(row["config"], row.get("space"), source))
    if int(error_no) != 0:
        costs = [row.get("error_msg", "failed")]
    return inp, MeasureResult(tuple(costs), int(error_no), float(all_cost), float(timestamp))


class UnreadableLines:
    """Counts the lines of one log that are not records, for one warning per file."""

    def __init__(self, path: str) -> None:
        self.path, self.count, self.first = path, 0, None

    def add(self, lineno: int, reason: str) -> None:
        self.count += 1
        if self.first is None:
            self.first = (lineno, reason)

    def warn(self) -> None:
        if self.count:
            lineno, reason = self.first
            logger.warning("%s: skipped %d unreadable line%s (first at line %d: %s)", self.path, self.count,
                           "" if self.count == 1 else "s", lineno, reason)


def _impossible(record: tuple[MeasureInput, MeasureResult]) -> str | None:
    """Why a successful result cannot be a measurement (a hand-edited or forged record), or None."""
    inp, result = record
    if not result.ok:
        return None
    try:
        costs = [float(c) for c in result.costs]
    except (TypeError, ValueError):
        return "a cost that is not a number"
    if not costs or not all(math.isfinite(c) and c > 0 for c in costs):
        return "a cost that is not a positive finite number"
    return implausible(result, inp.task.flop, inp.target, inp.task.args)


def implausible(result: MeasureResult, flop: float, target: Any, args: Any = ()) -> str | None:
    """Why ``result``'s cost is faster than ``target`` could run it (a forged, edited or damaged
    record), or None: ``flop`` operations above ``env.peak_flops``, or the tensors of ``args``
    (AutoTVM's ``["TENSOR", shape, dtype]``) read and written once above ``env.peak_bandwidth``."""
    if not result.ok or not math.isfinite(result.mean_cost) or result.mean_cost <= 0:
        return None
    peak_flops, peak_bytes = _peaks(str(target))
    if flop and flop / result.mean_cost > peak_flops:
        return (f"a cost faster than the target can run ({flop / result.mean_cost / 1e9:.3g} GFLOPS, above its bound "
                f"of {peak_flops / 1e9:.3g})")
    moved = _tensor_bytes(args)
    if moved and moved / result.mean_cost > peak_bytes:
        return (f"a cost faster than the target can run ({moved / result.mean_cost / 1e9:.3g} GB/s of its tensors, "
                f"above its bound of {peak_bytes / 1e9:.3g})")
    return None


def _tensor_bytes(args: Any) -> int:
    """The bytes of the ``["TENSOR", shape, dtype]`` entries of a workload's arguments."""
    total = 0
    for arg in args or ():
        if isinstance(arg, (list, tuple)) and len(arg) == 3 and arg[0] == "TENSOR":
            try:
                total += math.prod(int(d) for d in arg[1]) * max(1, tvm.DataType(str(arg[2])).bits // 8)
            except (TypeError, ValueError):
                continue
    return total


@functools.lru_cache(maxsize=64)
def _peaks(target: str) -> tuple[float, float]:
    """(``env.peak_flops``, ``env.peak_bandwidth``) of a record's target (as its text); no bound if
    it cannot be read."""
    from .env import peak_bandwidth, peak_flops

    try:
        spec = json.loads(target) if target.lstrip().startswith("{") else target
        return peak_flops(spec), peak_bandwidth(spec)
    except Exception:
        return math.inf, math.inf


def load_from_file(path: str | os.PathLike) -> Iterator[tuple[MeasureInput, MeasureResult]]:
    """Yield the records of a log. Comment lines are skipped; lines that are no record (bytes
    that are not UTF-8, malformed JSON, a half-written last line, impossible costs) are skipped
    with one warning per file naming how many and the first."""
    if not os.path.isfile(path):
        raise AutoTVMError(f"log file {str(path)!r} does not exist; pass the path written by log_to_file")
    unreadable = UnreadableLines(str(path))
    with open(path, "rb") as handle:
        for lineno, raw in enumerate(handle, 1):
            try:
                line = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                unreadable.add(lineno, "bytes that are not UTF-8")
                continue
            if not line or line.startswith("#"):
                continue
            try:
                record = decode(line, str(path))
            except (ValueError, KeyError, TypeError, IndexError) as err:
                unreadable.add(lineno, f"not a record ({type(err).__name__})")
                continue
            why = _impossible(record)
            if why:
                unreadable.add(lineno, why)
                continue
            yield record
    unreadable.warn()


_CLAIMED: dict[str, int] = {}  # real path of a log -> the descriptor of its lock file, held until exit


class LogWriteError(AutoTVMError):
    """A batch of records could not be written (full disk, file-size limit): none of it is in the log."""


def _lock_path(path: str) -> str:
    directory, name = os.path.split(os.path.abspath(path))
    return os.path.join(directory, f".{name}.lock")


def claim_log(path: str | os.PathLike) -> None:
    """Make this process the one writer of ``path``: an exclusive lock on ``.<log>.lock`` beside it,
    held until the process exits (the kernel releases it even after kill -9). A second process
    that claims the same log is refused at once with the holder's pid: two writers would each
    measure configs the other already has. A half-written last line (a crash mid-write) is cut off
    before anything is appended, so the next record starts on a line of its own."""
    import fcntl

    real = os.path.realpath(path)
    if real in _CLAIMED:
        return
    fd = os.open(_lock_path(real), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        raise AutoTVMError(f"the log {str(path)!r} is being written by another tune (process {holder}); wait for it "
                           "to finish, or tune into another log (autotuner_settings.save_name)") from None
    os.ftruncate(fd, 0)
    os.write(fd, str(os.getpid()).encode())
    _CLAIMED[real] = fd
    _cut_partial_line(real)


def release_log(path: str | os.PathLike) -> None:
    """Give up this process's claim on ``path`` (another process may then write it)."""
    fd = _CLAIMED.pop(os.path.realpath(path), None)
    if fd is not None:
        os.close(fd)  # closing the descriptor releases its lock


def _cut_partial_line(path: str) -> None:
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return
    with open(path, "rb+") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        handle.seek(max(0, size - 65536))
        tail = handle.read()
        if tail.endswith(b"\n"):
            return
        keep = size - len(tail) + tail.rfind(b"\n") + 1 if b"\n" in tail else 0
        handle.truncate(keep)
    logger.warning("%s: removed a half-written last line (%d bytes) left by an interrupted write", path, size - keep)


def append_records(path: str | os.PathLike, lines: str, count: int) -> None:
    """Append ``count`` records (whole lines) as one write, flushed to the disk; on a full disk or a
    file-size limit the log is cut back to where it was, so it never holds half a record. Rounds
    of several tasks may append at once: one writes at a time."""
    claim_log(path)
    with _APPEND_LOCK:
        _append(path, lines, count)


_APPEND_LOCK = threading.Lock()


def _append(path: str | os.PathLike, lines: str, count: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        data = lines.encode("utf-8")
        try:
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        except OSError as err:
            os.ftruncate(fd, size)
            raise LogWriteError(f"cannot write to the log {str(path)!r} ({err.strerror}): every record before this "
                                f"batch is saved, the batch's {count} trial{'' if count == 1 else 's'} are not; free "
                                "space and run the same command again to resume") from None
    finally:
        os.close(fd)


def load_records(records: Any) -> list[tuple[MeasureInput, MeasureResult]]:
    """Accept a path, a list of paths or an iterable of (input, result) pairs."""
    if isinstance(records, (str, os.PathLike)):
        return list(load_from_file(records))
    records = list(records)
    if records and isinstance(records[0], (str, os.PathLike)):
        return [r for path in records for r in load_from_file(path)]
    return records


def best_by_workload(records: Iterable[tuple[MeasureInput, MeasureResult]]
                     ) -> dict[tuple, list[tuple[MeasureInput, MeasureResult]]]:
    """The successful records of each (target kind, workload), fastest first. A cost that is not
    a positive finite number is no measurement and is left out."""
    groups: dict[tuple, list[tuple[MeasureInput, MeasureResult]]] = {}
    for inp, res in records:
        if res.ok and math.isfinite(res.mean_cost) and res.mean_cost > 0:
            groups.setdefault(lookup_key(inp.target, workload_key(inp.task)), []).append((inp, res))
    for group in groups.values():
        group.sort(key=lambda pair: pair[1].mean_cost)
    return groups


def _target_kind(target: Any) -> str:
    if hasattr(target, "kind"):
        return target.kind.name
    text = str(target)
    try:
        return json.loads(text)["kind"]
    except (ValueError, KeyError, TypeError):
        return text.split()[0] if text else ""


def pick_best(in_file: str | os.PathLike, out_file: str | os.PathLike, tasks: Iterable[Any] | None = None,
              measure_option: dict | None = None, top: int = 3) -> None:
    """Write only the fastest record of each (target kind, workload) of ``in_file`` to ``out_file``
    (AutoTVM's ``autotvm.record.pick_best``). With ``tasks`` (those the records belong to), a record
    must also fit its task's space and be a cost its target could run. With ``measure_option`` too,
    the ``top`` fastest configs of each task are measured again, together, and the fastest of them
    as measured again is written with its new result: a record is one timing, and the fastest of
    hundreds of timings reads high."""
    from .checks import check_int
    from .measure.measure import create_measure_batch

    check_int("top", top)
    if measure_option is not None and tasks is None:
        raise AutoTVMError("pick_best: measuring again needs tasks=, the tasks the records belong to")
    by_key = {lookup_key(task.target, workload_key(task)): task for task in tasks or []}
    stale = StaleRecords()
    best = []
    for key, group in best_by_workload(load_from_file(in_file)).items():
        task = by_key.get(key)
        if task is None:
            best.append(group[0])
            continue
        fitting: dict[int, tuple[MeasureInput, MeasureResult]] = {}
        for inp, res in group:
            config = bind_record(inp.config, task, stale, res)
            if config is not None and config.index not in fitting:
                fitting[config.index] = (MeasureInput(task.target, task, config), res)
        if not fitting:
            continue
        chosen = list(fitting.values())[: top if measure_option is not None else 1]
        if measure_option is not None:
            inputs = [inp for inp, _ in chosen]
            chosen = [pair for pair in zip(inputs, create_measure_batch(task, measure_option)(inputs)) if pair[1].ok]
        if chosen:
            best.append(min(chosen, key=lambda pair: pair[1].mean_cost))
    stale.warn()
    with open(out_file, "w", encoding="utf-8") as out:
        for inp, res in best:
            out.write(encode(inp, res) + "\n")

"""log -> load -> apply_history_best reproduces the best config, which runs faster than untuned."""

import json

import numpy as np
import tvm

import autotvm
from autotvm.record import best_by_workload, load_from_file
from autotvm.tuner import RandomTuner

from conftest import matmul_template, one_runtime_thread


def _seconds(mod, target):
    """``mod``'s median time on one thread (``one_runtime_thread``)."""
    lib = tvm.compile(mod, target=target)
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(np.random.rand(*[int(x) for x in p.shape]).astype(p.dtype), dev)
            for p in mod["main"].params]
    with one_runtime_thread():
        return lib.mod.time_evaluator("main", dev, number=20, repeat=5)(*args).median


def test_apply_history_best_reproduces_best_and_is_faster(matmul_task, measure_opt, tmp_path):
    log = str(tmp_path / "mm.json")
    tuner = RandomTuner(matmul_task, seed=0)
    tuner.tune(16, measure_opt, callbacks=[autotvm.callback.log_to_file(log)])
    records = list(load_from_file(log))
    assert len(records) == 16
    ((best_inp, best_res), *_), = best_by_workload(records).values()
    assert best_inp.config.index == tuner.best_config.index
    with autotvm.apply_history_best(log):
        tuned = matmul_task.instantiate_best()
    assert tuned.script() == matmul_task.instantiate(tuner.best_config).script()
    untuned = matmul_task.default_module()
    assert _seconds(tuned, matmul_task.target) < _seconds(untuned, matmul_task.target) / 2


def test_template_called_inside_context_uses_best(template_task, measure_opt, tmp_path):
    log = str(tmp_path / "t.json")
    tuner = RandomTuner(template_task, seed=0)
    tuner.tune(6, measure_opt, callbacks=[autotvm.callback.log_to_file(log)])
    with autotvm.apply_history_best(log):
        sch, tensors = matmul_template(32, 32, 32)
    assert sch.mod.script() == template_task.instantiate(tuner.best_config).script()
    assert [int(d) for d in tensors[0].shape] == [32, 32]
    outside, _ = matmul_template(32, 32, 32)
    assert outside.mod.script() == template_task.default_module().script()


def test_corrupt_and_truncated_lines_are_skipped(matmul_task, measure_opt, tmp_path, caplog):
    log = tmp_path / "c.json"
    RandomTuner(matmul_task, seed=3).tune(4, measure_opt, callbacks=[autotvm.callback.log_to_file(str(log))])
    text = log.read_text().splitlines()
    text.insert(1, "{not json")
    text.append(text[-1][: len(text[-1]) // 2])  # a line cut by an interrupted write
    log.write_text("\n".join(["# comment", *text]) + "\n")
    with caplog.at_level("WARNING", logger="autotvm"):
        records = list(load_from_file(str(log)))
    assert len(records) == 4
    warnings = [r.message for r in caplog.records if "unreadable" in r.message]
    assert len(warnings) == 1 and "skipped 2 unreadable lines (first at line 3: not a record" in warnings[0]


def test_record_layout_is_autotvms(matmul_task, measure_opt, tmp_path):
    log = tmp_path / "l.json"
    RandomTuner(matmul_task, seed=4).tune(2, measure_opt, callbacks=[autotvm.callback.log_to_file(str(log))])
    row = json.loads(log.read_text().splitlines()[0])
    target, name, args, extra = row["input"]
    assert json.loads(target)["kind"] == "llvm" and name == "mm64" and args[0][0] == "TENSOR" and extra == {}
    assert set(row["config"]) == {"index", "code_hash", "entity"}
    costs, error_no, all_cost, timestamp = row["result"]
    assert error_no == 0 and all(c > 0 for c in costs) and all_cost > 0 and timestamp > 1.7e9
    assert row["version"] == 0.2


def test_stale_records_are_skipped_with_one_warning_per_log(matmul_task, measure_opt, tmp_path, caplog):
    """Records of an older knob space (another space digest, or an older record without one whose
    knob no longer exists) are skipped with one warning naming the log and the count; the
    fastest record that fits is used, when building and when resuming."""
    log = tmp_path / "stale.json"
    tuner = RandomTuner(matmul_task, seed=5)
    tuner.tune(4, measure_opt, callbacks=[autotvm.callback.log_to_file(str(log))])
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(row["space"] == matmul_task.config_space.digest for row in rows)
    fits = [row for row in rows if row["config"]["index"] != tuner.best_config.index]
    fastest_fitting = min(fits, key=lambda row: sum(row["result"][0]) / len(row["result"][0]))
    faster = 5e-7  # faster than any real record (yet a cost the CPU could run): a stale one would be chosen
    other_space = dict(rows[0], space="0" * 16, result=[[faster], 0, 1.0, 0.0])
    renamed = json.loads(json.dumps(rows[0]))
    del renamed["space"]
    renamed["config"]["entity"][0][0] = "old_knob_name"
    renamed["result"] = [[faster], 0, 1.0, 0.0]
    best_row = next(row for row in rows if row["config"]["index"] == tuner.best_config.index)
    lines = [json.dumps(row) for row in fits + [other_space, renamed]]
    log.write_text("\n".join(lines) + "\n")
    with caplog.at_level("WARNING", logger="autotvm"):
        with autotvm.apply_history_best(str(log)):
            cfg = autotvm.DispatchContext.current_config(matmul_task)
    assert cfg.index == fastest_fitting["config"]["index"] != best_row["config"]["index"]
    warnings = [r.getMessage() for r in caplog.records if "stale" in r.getMessage()]
    assert len(warnings) == 1 and str(log) in warnings[0] and "skipped 2 stale records" in warnings[0]
    caplog.clear()
    with caplog.at_level("WARNING", logger="autotvm"):
        assert RandomTuner(matmul_task, seed=0).load_history(str(log)) == len(fits)
    assert sum("skipped 2 stale records" in r.getMessage() for r in caplog.records) == 1

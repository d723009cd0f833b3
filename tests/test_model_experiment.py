"""``model_tuners``: tuners compared on a whole (tiny) model, MetaSchedule's own search beside
them, every run really tuned, built at its checkpoints and timed."""

import csv
import json
import os

from autotvm.record import load_from_file
from tools.config import load_config
from tools.experiment import run_experiments


def config(tmp_path, **experiments):
    return load_config(json.dumps({
        "models": [{"name": "mlp", "type": "torch", "model": "mlp", "width": 32, "batch": 2}],
        "autotuner_settings": {"trials": 8, "number": 1, "repeat": 2, "n_parallel": 2},
        "run_settings": {"repeat": 2, "number": 5},
        "experiments": {"names": ["model_tuners"], "models": ["mlp"], "tuners": ["ga-dqn", "metaschedule"],
                        "model_trials": 8, "repeats": 1, "checkpoints": 2, "save_path": str(tmp_path),
                        **experiments},
    }))


def test_model_tuners_tunes_builds_and_times_each_run(tmp_path, capsys):
    rows = run_experiments(config(tmp_path, save_name="first"))["model_tuners"]
    out = tmp_path / "first" / "model_tuners"
    assert [r["tuner"] for r in rows] == ["ga-dqn", "metaschedule"]
    runs = json.load(open(out / "runs.json"))
    for run in runs:
        # the untuned build, then the first half of the budget, then all of it
        assert [c["trials"] for c in run["checkpoints"]] == [0, 4, 8], run["checkpoints"]
        seconds = [c["seconds"] for c in run["checkpoints"]]
        assert seconds == sorted(seconds) and seconds[-1] == run["tuning_s"] > 0
        assert run["matches_pytorch"] and all(c["latency_ms"] > 0 for c in run["checkpoints"])
        assert run["latency_ms"] > 0
    assert len(open(out / "logs" / "ga-dqn-seed0-mlp.json").read().splitlines()) == 8
    assert os.path.exists(out / "logs" / "metaschedule-seed0-mlp" / "database_tuning_record.json")
    with open(out / "summary.csv") as handle:
        summary = list(csv.DictReader(handle))
    assert {"model", "tuner", "seed", "trials", "tuning_s", "latency_ms"} <= set(summary[0]) and len(summary) == 2
    with open(out / "functions.csv") as handle:
        functions = list(csv.DictReader(handle))
    # each function GA-DQN tuned, with its best time; MetaSchedule's database names no functions
    tuned = {inp.task.name for inp, res in load_from_file(out / "logs" / "ga-dqn-seed0-mlp.json") if res.error_no == 0}
    assert {f["function"] for f in functions} == tuned and {f["tuner"] for f in functions} == {"ga-dqn"}
    assert all(float(f["best_ms"]) > 0 for f in functions)
    ratio = (out / "ratios.txt").read_text()
    assert ratio.startswith("metaschedule latency / ga-dqn latency:") and "too few seeds for an interval" in ratio
    for plot in ("curves.png", "bars.png"):
        assert (out / plot).stat().st_size > 5000
    printed = capsys.readouterr().out
    assert "seconds to 5%" in printed and ratio.strip() in printed
    # MetaSchedule's own console tables stay in its log folder
    assert "task_scheduler.cc" not in printed

    # an earlier output's runs are reused: nothing tuned again, their final builds rebuilt from the records
    again = config(tmp_path, save_name="again", previous_results_dir=str(tmp_path / "first"))
    run_experiments(again)
    printed = capsys.readouterr().out
    assert printed.count("reusing mlp") == 2 and "trials for the model" not in printed
    assert len(json.load(open(tmp_path / "again" / "model_tuners" / "runs.json"))) == 2

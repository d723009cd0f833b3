"""The README's worked example runs as shipped: your own PyTorch model tuned, built, run and exported."""

import os
import subprocess
import sys

import pytest

from test_driver import ROOT, project_env


@pytest.mark.slow
def test_own_model_example_tunes_builds_runs_and_exports(tmp_path):
    result = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "own_model.py")], cwd=tmp_path,
                            capture_output=True, text=True, timeout=600,
                            env=project_env())
    assert result.returncode == 0, result.stderr[-3000:]
    assert "median ms:" in result.stdout  # its outputs matched PyTorch before it timed them
    assert (tmp_path / "results" / "own_model.so").stat().st_size > 0
    assert sum(1 for _ in open(tmp_path / "results" / "own_model.json")) == 32

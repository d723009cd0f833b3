"""The Singularity recipe installs exactly what the README and CI install (no Singularity here to build it)."""

import os
import re
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return handle.read()


def _sections(text):
    out, name = {}, None
    for line in text.splitlines():
        match = re.match(r"^%(\w+)", line)
        if match:
            name = match.group(1)
            out[name] = []
        elif name:
            out[name].append(line.strip())
    return out


def _pip_installs(lines):
    """The arguments of every 'pip install' line, without flags that only change verbosity or caching."""
    installs = []
    for line in lines:
        match = re.search(r"pip install (.*)", line)
        if match:
            args = [a for a in match.group(1).split() if a not in ("-q", "--no-cache-dir", "--upgrade")]
            installs.append(" ".join(args))
    return installs


def test_recipe_installs_the_project_like_ci_and_readme():
    recipe = _sections(_read("singularity", "gadqn.def"))
    ci = _read(".ci", "run").splitlines()
    readme = _read("README.md")
    recipe_installs = _pip_installs(recipe["post"])
    ci_installs = [i for i in _pip_installs(ci) if i != "pip"]
    assert recipe_installs == ci_installs, (recipe_installs, ci_installs)
    assert '-e ".[test,compare]"' in recipe_installs[0]
    assert 'pip install -e ".[test,compare]"' in readme


def test_recipe_runs_the_driver_and_the_tests():
    recipe = _sections(_read("singularity", "gadqn.def"))
    assert any("driver.py" in line for line in recipe["runscript"])
    assert any("pytest" in line and "tests" in line for line in recipe["test"])
    assert any(line.startswith("From:") and "python:3.1" in line for line in _read("singularity", "gadqn.def").splitlines())


def test_pyproject_pins_what_the_platform_needs():
    project = tomllib.loads(_read("pyproject.toml"))["project"]
    deps = " ".join(project["dependencies"])
    for pin in ("apache-tvm==0.27.0.post1", "apache-tvm-ffi<0.1.15", "torch==2.13.0"):
        assert pin in deps
    for name in ("xgboost", "numpy", "matplotlib", "psutil", "cloudpickle", "tornado", "jsonschema", "tqdm"):
        assert name in deps
    assert project["requires-python"] == ">=3.10"
    packages = tomllib.loads(_read("pyproject.toml"))["tool"]["setuptools"]["packages"]
    for folder in ("autotvm", "ga_tuner", "rl_tuner", "tools"):
        assert folder in packages

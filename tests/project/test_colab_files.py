"""The stored Colab runtimes (tools/colab/) agree with setup.cfg and the notebook, cheaply:
the rehearsal itself (`make colab`, tools/colab/rehearse.py) builds Colab's environment
and runs the notebook there."""

import configparser
import json
import os
import re
import subprocess
import sys

import pytest

from helpers import REPO as ROOT

COLAB = os.path.join(ROOT, "tools", "colab")


def _norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def freeze(runtime):
    with open(os.path.join(COLAB, f"pip-freeze.{runtime}.txt")) as f:
        return {_norm(n): v for n, v in (line.strip().split("==", 1) for line in f
                                         if "==" in line and not line.startswith("#"))}


def _version(text):
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def test_the_rehearsals_roots_are_in_the_freezes():
    for runtime in ("cpu", "tpu"):
        with open(os.path.join(COLAB, f"roots.{runtime}.txt")) as f:
            roots = [_norm(line.strip()) for line in f if line.strip()
                     and not line.startswith("#")]
        assert [r for r in roots if r not in freeze(runtime)] == [], runtime


def test_setup_cfg_minimums_admit_colabs_versions():
    # Installing bert_jax into Colab must not replace what Colab has (numpy is loaded at
    # start-up; jax 0.7.2 is what its users have).
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    requires = [r.strip() for r in config["options"]["install_requires"].splitlines()
                if r.strip() and not r.strip().startswith("#")]
    for runtime in ("cpu", "gpu", "tpu"):
        have = freeze(runtime)
        for requirement in requires:
            match = re.match(r"([\w.-]+)(?:\[.*\])?\s*(?:>=|==)\s*([\d.]+)", requirement)
            if match and _norm(match[1]) in have:
                assert _version(have[_norm(match[1])]) >= _version(match[2]), (runtime,
                                                                              requirement)


def test_the_notebook_sets_its_repository_in_one_place():
    with open(os.path.join(ROOT, "notebooks", "colab_quickstart.ipynb")) as f:
        code = ["".join(c["source"]) for c in json.load(f)["cells"] if c["cell_type"] == "code"]
    assert sum(len(re.findall(r"^REPO_URL = ", c, re.M)) for c in code) == 1
    assert code[0].lstrip("# ").count("REPO_URL = ") == 1


@pytest.fixture
def dry_run():
    sys.path.insert(0, COLAB)
    try:
        import dry_run
        yield dry_run
    finally:
        sys.path.remove(COLAB)


def test_the_gpu_dry_run_runs_the_notebooks_own_install_cell(dry_run):
    cell = dry_run.install_cell(os.path.join(ROOT, "notebooks", "colab_quickstart.ipynb"))
    assert cell.startswith("# Where bert_jax comes from") and "import bert_jax\n" not in cell
    assert '"-m", "pip", "install"' in cell  # what the dry run's preamble rewrites


def test_the_gpu_dry_run_finds_requirements_the_runtime_would_miss(dry_run):
    pytest.importorskip("packaging")
    report = [{"metadata": {"name": "jax-cuda12-plugin", "version": "0.7.2", "requires_dist": [
        "jax-cuda12-pjrt==0.7.2", "jaxlib==0.7.2", "nvidia-nccl-cu12>=2.18; extra == 'with-cuda'",
        "pywin32; sys_platform == 'win32'"]}}]
    runtime = {"jax-cuda12-pjrt": "0.7.2", "jaxlib": "0.7.2"}
    assert dry_run.unmet(report, runtime) == []
    assert dry_run.unmet(report, {**runtime, "jaxlib": "0.12.0"}) == [
        "jax-cuda12-plugin 0.7.2 needs jaxlib==0.7.2; the runtime would have 0.12.0"]
    assert len(dry_run.unmet(report, {"jaxlib": "0.7.2"})) == 1  # a missing one


def test_without_a_url_wheel_or_folder_the_install_cell_says_what_to_do(dry_run, tmp_path):
    # As in a fresh Colab runtime: bert_jax not importable, nothing uploaded to /content.
    cell = dry_run.install_cell(os.path.join(ROOT, "notebooks", "colab_quickstart.ipynb"))
    fresh = ("import importlib.util as _u\n_find = _u.find_spec\n"
             "_u.find_spec = lambda name, *a: None if name == 'bert_jax' else _find(name, *a)\n")
    done = subprocess.run([sys.executable, "-c", fresh + cell], cwd=tmp_path,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    assert done.returncode == 1 and done.stderr.strip() == (
        f"Set REPO_URL in this cell, or upload bert_jax-*.whl or the repository folder "
        f"(as bert_jax/) to {tmp_path}")

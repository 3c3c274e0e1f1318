"""The stored Colab runtimes (tools/colab/) agree with setup.cfg and the notebook, cheaply:
the rehearsal itself (`make colab`, tools/colab/rehearse.py) builds Colab's environment
and runs the notebook there."""

import configparser
import json
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
    for runtime in ("cpu", "tpu"):
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

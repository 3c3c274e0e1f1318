"""The scripts beside the package (bench/, tools/) import only bert_jax names that exist:
they run by hand, on a GPU or for a table, so nothing else would notice a renamed
function until someone runs them."""

from __future__ import annotations

import ast
import glob
import importlib
import os

import pytest

from helpers import REPO as TOP
from helpers import source

SCRIPTS = sorted(glob.glob(os.path.join(TOP, "bench", "*.py"))
                 + glob.glob(os.path.join(TOP, "tools", "*.py")))


def _exists(module: str, name: str) -> bool:
    if hasattr(importlib.import_module(module), name):
        return True
    try:
        importlib.import_module(f"{module}.{name}")
        return True
    except ModuleNotFoundError:
        return False


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: os.path.relpath(p, TOP))
def test_script_imports_resolve(script):
    tree = source.parse(script)
    missing = [f"line {node.lineno}: from {node.module} import {alias.name}"
               for node in ast.walk(tree)
               if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bert_jax")
               for alias in node.names if not _exists(node.module, alias.name)]
    assert not missing, missing


def test_bench_glue_table_sets_both_sides_side_by_side():
    import bench_glue
    rows = [{"task": "mrpc",
             "bert_jax": {"dev": {"validation": {"f1": 0.832, "accuracy": 0.733}},
                          "train_examples_per_second": 3.22},
             "transformers_run_glue": {"dev": {"validation": {"f1": 0.836, "accuracy": 0.752}},
                                       "train_examples_per_second": 2.08}},
            {"task": "mnli", "skipped": "no MNLI folder in glue_data"}]
    lines = bench_glue.table(rows).splitlines()
    assert lines[2] == "| mrpc | f1 83.2, accuracy 73.3 | f1 83.6, accuracy 75.2 | 3.22 / 2.08 |"
    assert lines[3].startswith("| mnli | skipped: no MNLI folder")

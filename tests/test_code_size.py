"""Size limits that keep the code readable (issue 33): no function in bert_jax over 80
lines, and each job (pretrain/job.py, finetune/job.py) a short recipe over the shared
skeleton (`bert_jax.lifecycle`): under 200 lines."""

import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bert_jax")


def test_no_function_is_over_80_lines():
    long = []
    for dirpath, _, filenames in os.walk(ROOT):
        for name in filenames:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                with open(path) as f:
                    tree = ast.parse(f.read(), path)
                long += [f"{os.path.relpath(path, ROOT)}:{node.name} "
                         f"({node.end_lineno - node.lineno + 1} lines)"
                         for node in ast.walk(tree)
                         if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                         and node.end_lineno - node.lineno + 1 > 80]
    assert long == []


@pytest.mark.parametrize("job", ["pretrain", "finetune"])
def test_each_job_stays_under_200_lines(job):
    with open(os.path.join(ROOT, job, "job.py")) as f:
        assert len(f.read().splitlines()) < 200

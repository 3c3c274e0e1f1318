"""Size limits that keep the code readable (issue 33): no function in bert_jax over 80
lines, and each job (pretrain/job.py, finetune/job.py) a short recipe over the shared
skeleton (`bert_jax.train.lifecycle`): under 200 lines."""

import ast
import os

import pytest

from helpers import REPO, source

ROOT = os.path.join(REPO, "bert_jax")


def _modules():
    """(path relative to bert_jax, parsed tree) of every module."""
    for dirpath, _, filenames in os.walk(ROOT):
        for name in filenames:
            if name.endswith(".py"):
                path = os.path.join(dirpath, name)
                yield os.path.relpath(path, ROOT), source.parse(path)


def test_no_function_is_over_80_lines():
    long = [f"{path}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path, tree in _modules() for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > 80]
    assert long == []


@pytest.mark.parametrize("job", ["pretrain", "finetune"])
def test_each_job_stays_under_200_lines(job):
    with open(os.path.join(ROOT, job, "job.py")) as f:
        assert len(f.read().splitlines()) < 200


def test_no_two_modules_define_the_same_public_name():
    """Names that say one thing each (issue 43): a public function or class name is
    defined in one module only; `main`, each command's entry point, is the exception."""
    where: dict[str, list[str]] = {}
    for path, tree in _modules():
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) \
                    and not node.name.startswith("_") and node.name != "main":
                where.setdefault(node.name, []).append(path)
    assert {k: v for k, v in where.items() if len(v) > 1} == {}


def test_every_docstring_starts_with_a_one_line_summary():
    """A docstring's first line says what the thing is or does on its own; details follow
    after a blank line (PEP 257), so `help()` and an editor's hover read well."""
    long = [f"{path}:{getattr(node, 'lineno', 1)}" for path, tree in _modules()
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and (doc := ast.get_docstring(node, clean=False))
            and len(lines := doc.strip("\n").split("\n")) > 1 and lines[1].strip()]
    assert long == []

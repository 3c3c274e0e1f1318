"""The project's own source read as syntax trees, for the tests that check how the code is
written (layering, sizes, which functions mutate a config).

The trees are built in a fresh interpreter: CPython before 3.11.8 and 3.12.1 corrupts the
`ast` module's recursion counter once any parse in the process has failed or raced with a
parse on another thread (python/cpython#106905), after which every `ast.parse` raises
"SystemError: AST constructor recursion depth mismatch". A test worker that has run the
libraries' threads is such a process; a new one with nothing else running is not."""

import ast
import functools
import os
import pickle
import subprocess
import sys

from helpers import REPO

_PARSE_ALL = """
import ast, pickle, sys
paths = sys.stdin.read().split("\\0")
trees = {}
for path in paths:
    with open(path, encoding="utf-8") as f:
        trees[path] = ast.parse(f.read(), path)
sys.stdout.buffer.write(pickle.dumps(trees))
"""


def _python_files() -> list[str]:
    files = []
    for top in ("bert_jax", "tools", "bench", "tests"):
        for folder, _, names in os.walk(os.path.join(REPO, top)):
            files += [os.path.join(folder, n) for n in names if n.endswith(".py")]
    return sorted(files)


@functools.lru_cache(maxsize=None)
def _trees() -> dict[str, ast.Module]:
    paths = _python_files()
    done = subprocess.run([sys.executable, "-c", _PARSE_ALL], input="\0".join(paths).encode(),
                          capture_output=True, check=True)
    return pickle.loads(done.stdout)


def parse(path: str) -> ast.Module:
    """The syntax tree of the project's file `path` (absolute, or relative to the repository)."""
    return _trees()[os.path.join(REPO, path)]

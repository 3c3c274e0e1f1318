"""The notebook's install cell resolved against a runtime's freeze, installing nothing: for
Colab's GPU runtime, whose CUDA wheels are too heavy to install in CI.

    python tools/colab/dry_run.py [--runtime gpu|cpu|tpu] [--repo DIR]

Runs the notebook's real install cell (up to its `import bert_jax`) in Colab's CPU venv
(rehearse.py's: Python 3.13, Colab's pip 24.1.2), in a folder holding the repository as
`bert_jax/`, with `importlib.metadata` answering from the runtime's freeze (so the cell
pins what that runtime has installed) and its `pip install` made a
`pip install --dry-run --ignore-installed --report`: pip resolves bert_jax's whole
dependency tree within the cell's pins. Fails (exit 1, one line per problem) when the
cell fails or would replace a package of the freeze (other than its own
tensorflow-metadata fix), or when a resolved package's requirement is not met by the
runtime as it would be after the install. It cannot see what the runtime's other
packages (outside bert_jax's tree) require of a replaced one, nor CUDA itself: that the
plugins load is Colab's to check; the install leaves them as they are.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import rehearse

INTENDED = {"tensorflow-metadata"}  # the cell's fix for Colab's protobuf (docs/colab.md)

# Run before the cell: the runtime's packages as importlib.metadata's answer, and pip's
# install turned into a dry run that writes a report.
PREAMBLE = """\
import importlib.metadata as _m, json as _j, re as _re, subprocess as _sp, sys as _s
_freeze, _report = _j.loads(_s.argv[1]), _s.argv[2]
_norm = {_re.sub(r"[-_.]+", "-", n).lower(): v for n, v in _freeze.items()}
class _Dist:
    def __init__(self, name, version):
        self.metadata, self.version = {"Name": name}, version
def _version(name):
    try:
        return _norm[_re.sub(r"[-_.]+", "-", name).lower()]
    except KeyError:
        raise _m.PackageNotFoundError(name) from None
_m.distributions = lambda: [_Dist(n, v) for n, v in _freeze.items()]
_m.version = _version
_run = _sp.run
def _dry_run(cmd, *args, **kwargs):
    if list(cmd[1:4]) == ["-m", "pip", "install"]:
        cmd = [*cmd[:4], "--dry-run", "--ignore-installed", "--report", _report, *cmd[4:]]
    return _run(cmd, *args, **kwargs)
_sp.run = _dry_run
"""


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def install_cell(notebook: str) -> str:
    """The notebook's first code cell, up to the import of what it installed."""
    with open(notebook) as f:
        cells = [c for c in json.load(f)["cells"] if c["cell_type"] == "code"]
    return "".join(cells[0]["source"]).split("\nimport bert_jax\n")[0]


def unmet(report: list[dict], after: dict[str, str]) -> list[str]:
    """Requirements of the resolved packages that the runtime after the install misses."""
    from packaging.requirements import Requirement
    from packaging.version import Version
    problems = []
    for item in report:
        meta = item["metadata"]
        for text in meta.get("requires_dist") or ():
            req = Requirement(text)
            if req.marker and ("extra" in str(req.marker) or not req.marker.evaluate()):
                continue
            have = after.get(norm(req.name))
            if have is None or not req.specifier.contains(Version(have), prereleases=True):
                problems.append(f"{meta['name']} {meta['version']} needs {text}; "
                                f"the runtime would have {have}")
    return problems


def check(runtime: str, content: str) -> list[str]:
    """Inside Colab's venv: the cell's dry run against `runtime`'s freeze."""
    freeze = dict(line.split("==", 1) for line in rehearse.freeze_constraints(runtime))
    notebook = os.path.join(content, "bert_jax", "notebooks", "colab_quickstart.ipynb")
    report_file = os.path.join(content, "report.json")
    done = subprocess.run([sys.executable, "-c", PREAMBLE + install_cell(notebook),
                           json.dumps(freeze), report_file], cwd=content,
                          capture_output=True, text=True)
    if done.returncode:
        return [f"the install cell failed: {(done.stdout + done.stderr).strip()[-2000:]}"]
    with open(report_file) as f:
        report = json.load(f)["install"]
    before = {norm(n): v for n, v in freeze.items()}
    resolved = {norm(i["metadata"]["name"]): i["metadata"]["version"] for i in report}
    replaced = {n: (before[n], v) for n, v in resolved.items() if n in before and before[n] != v}
    added = sorted(f"{n}=={v}" for n, v in resolved.items() if n not in before)
    print(f"dry run ({runtime}): {len(resolved)} packages resolved; would add {len(added)}: "
          f"{' '.join(added)}; would replace: "
          + (" ".join(f"{n} {o} -> {v}" for n, (o, v) in sorted(replaced.items())) or "none"))
    problems = [f"the install would replace {n} {o} -> {v}"
                for n, (o, v) in sorted(replaced.items()) if n not in INTENDED]
    return problems + unmet(report, {**before, **resolved})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=("gpu", "cpu", "tpu"), default="gpu")
    parser.add_argument("--repo", default=rehearse.ROOT, help="the checkout (default: this)")
    parser.add_argument("--cache", default=os.path.expanduser("~/.cache/bert_jax/colab"))
    parser.add_argument("--inside", help=argparse.SUPPRESS)  # the content folder, in the venv
    args = parser.parse_args()
    if args.inside:
        problems = check(args.runtime, args.inside)
        for problem in problems:
            print(f"dry run ({args.runtime}): {problem}")
        return 1 if problems else 0
    env = rehearse.build_env("cpu", args.cache)
    content = tempfile.mkdtemp(prefix=f"colab_dry_run_{args.runtime}_")
    try:
        rehearse.copy_repo(os.path.abspath(args.repo), os.path.join(content, "bert_jax"))
        environ = {k: v for k, v in os.environ.items()
                   if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        return subprocess.run([os.path.join(env, "bin", "python"), os.path.abspath(__file__),
                               "--runtime", args.runtime, "--inside", content],
                              env=environ).returncode
    finally:
        shutil.rmtree(content, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""A rehearsal of the quickstart notebook in Colab's runtime, as a new user runs it.

    python tools/colab/rehearse.py [--runtime cpu|tpu] [--install-only] [--repo DIR]

1. Builds (once; cached under ~/.cache/bert_jax/colab/) a Python 3.13 venv holding Colab's
   packages at Colab's versions: the roots in roots.RUNTIME.txt resolved with the runtime's
   freeze (pip-freeze.RUNTIME.txt) as constraints, so every package is exactly Colab's.
   Not all ~640 packages of the freeze: those the notebook imports, the kernel, and the
   packages whose requirements an install could break (roots.*.txt say which).
2. Copies that venv (hard links: seconds) and puts a copy of the repository's files as
   `bert_jax/` in the kernel's working folder, as a clone in Colab's /content is.
3. Starts an ipykernel there the way Colab does (numpy and PIL imported at start-up), with
   Colab's own jupyter_client/nbclient, and runs the notebook's install cell, then every
   cell in smoke mode (or, with --install-only, an import cell).
4. Fails (exit 1, one line per problem) on a cell error, on a package the install replaced
   that the kernel had imported, and on a `pip check` conflict the runtime did not have.

The venvs are built with uv (`uv pip install`, installed once into the cache folder from
PyPI with pip): the same packages at the same versions as pip would install, in a fraction
of the time. What the notebook installs is installed by its own cell, with Colab's pip.
uv reads its own settings (UV_DEFAULT_INDEX, UV_CACHE_DIR, ...), not pip's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PIP_VERSION = "24.1.2"  # Colab's
UV_VERSION = "0.13.9"

# Run in the kernel before the install cell: the distributions of every module loaded so far.
LOADED_PROBE = """\
import importlib.metadata as _m, json as _j, sys as _s
_d = _m.packages_distributions()
print("LOADED=" + _j.dumps(sorted({d for n in list(_s.modules)
                                   for d in _d.get(n.split(".")[0], ())})))
"""
IMPORTS_CELL = """\
import jax, grain, tensorflow_datasets as tfds
import bert_jax.pretrain.job, bert_jax.serve.export, bert_jax.finetune.job
print(jax.__version__, grain.__version__, bert_jax.__file__)
"""


def python313() -> str:
    import glob
    found = sorted(glob.glob("/root/.pyenv/versions/3.13.*/bin/python")) + [
        p for p in (shutil.which("python3.13"),) if p]
    if not found:
        sys.exit("rehearse: no Python 3.13 (pyenv's /root/.pyenv/versions/3.13.* or python3.13)")
    return found[0]


def freeze_constraints(runtime: str) -> list[str]:
    """The freeze's `name==version` lines (`name @ URL` lines point at hosts pip can't use)."""
    with open(os.path.join(HERE, f"pip-freeze.{runtime}.txt")) as f:
        return [line.strip() for line in f if "==" in line and not line.startswith("#")]


def uv(cache: str) -> str:
    """uv, installed (once) into a venv of its own in the cache folder."""
    tool = os.path.join(cache, f"uv-{UV_VERSION}")
    binary = os.path.join(tool, "bin", "uv")
    if not os.path.exists(binary):
        shutil.rmtree(tool, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", tool], check=True)
        subprocess.run([os.path.join(tool, "bin", "python"), "-m", "pip", "install", "-q",
                        f"uv=={UV_VERSION}"], check=True)
    return binary


def uv_install(cache: str, env: str, *args: str) -> None:
    """`uv pip install` into the venv `env`, byte-compiled as pip does (else every
    rehearsal would compile tensorflow again on import)."""
    subprocess.run([uv(cache), "pip", "install", "-q", "--compile-bytecode", "--python",
                    os.path.join(env, "bin", "python"), *args], check=True)


def build_env(runtime: str, cache: str) -> str:
    """The cached venv of Colab's `runtime` (built here if missing)."""
    python = python313()
    with open(os.path.join(HERE, f"roots.{runtime}.txt")) as f:
        roots = f.read()
    constraints = "\n".join(freeze_constraints(runtime)) + "\n"
    key = hashlib.sha256((python + PIP_VERSION + UV_VERSION + roots + constraints).encode())
    key = key.hexdigest()
    env = os.path.join(cache, f"{runtime}-{key[:12]}")
    if os.path.exists(os.path.join(env, ".pip-check")):
        return env
    start = time.time()
    tmp = env + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run([python, "-m", "venv", tmp], check=True)
    for name, text in (("constraints.txt", constraints), ("roots.txt", roots)):
        with open(os.path.join(tmp, name), "w") as f:
            f.write(text)
    uv_install(cache, tmp, f"pip=={PIP_VERSION}", "-c", os.path.join(tmp, "constraints.txt"),
               "-r", os.path.join(tmp, "roots.txt"))
    # The runtime's own conflicts (none, for the CPU freeze's subset): only new ones fail.
    check = pip_check(tmp)
    with open(os.path.join(tmp, ".pip-check"), "w") as f:
        f.write("\n".join(check))
    shutil.rmtree(env, ignore_errors=True)
    os.rename(tmp, env)  # venvs find their prefix from the interpreter's path: no fix-ups
    print(f"rehearse: built Colab's {runtime} venv in {time.time() - start:.0f} s: {env}")
    return env


def copy_env(base: str, env: str) -> None:
    """A copy of the cached venv to install into. Hard links: pip and Python write new
    files, never into existing ones, so the cache stays as built (a real copy where links
    cannot cross file systems)."""
    if subprocess.run(["cp", "-al", base, env], capture_output=True).returncode:
        shutil.rmtree(env, ignore_errors=True)
        subprocess.run(["cp", "-a", base, env], check=True)


def pip_check(env: str) -> list[str]:
    # cwd=env: `python -m` puts the working folder on sys.path, and a checkout's
    # bert_jax.egg-info there would count as installed.
    out = subprocess.run([os.path.join(env, "bin", "python"), "-m", "pip", "check"],
                         capture_output=True, text=True, cwd=env).stdout
    return sorted(line for line in out.splitlines()
                  if line.strip() and not line.startswith("No broken requirements"))


def versions(env: str) -> dict[str, str]:
    code = ("import importlib.metadata as m, json; d = {}\n"
            "for x in m.distributions(): d.setdefault(x.metadata['Name'].lower()"
            ".replace('_', '-'), x.version)\nprint(json.dumps(d))")
    out = subprocess.run([os.path.join(env, "bin", "python"), "-c", code],
                         capture_output=True, text=True, check=True, cwd=env).stdout
    return json.loads(out)


def copy_repo(repo: str, dest: str) -> None:
    """The repository's files (tracked and new, not ignored ones), as a clone has them."""
    files = subprocess.run(["git", "-C", repo, "ls-files", "-z", "-co", "--exclude-standard"],
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if os.path.isfile(os.path.join(repo, name)):
            os.makedirs(os.path.dirname(os.path.join(dest, name)), exist_ok=True)
            shutil.copy2(os.path.join(repo, name), os.path.join(dest, name))


def execute(notebook: str, content: str, install_only: bool) -> int:
    """Inside the Colab venv: runs the notebook in a kernel started as Colab starts one."""
    import jupyter_client
    import nbclient
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    cells = [nbformat.v4.new_code_cell(LOADED_PROBE), code[0]]
    cells += [nbformat.v4.new_code_cell(IMPORTS_CELL)] if install_only else code[1:]
    nb.cells = cells
    # A kernelspec of our own: Colab's jupyter_client 7.4.9 raises TypeError in
    # `format_kernel_cmd()` before a start, so nothing here calls it.
    jupyter = tempfile.mkdtemp(prefix="jupyter_")
    spec_dir = os.path.join(jupyter, "kernels", "colab")
    os.makedirs(spec_dir)
    with open(os.path.join(spec_dir, "kernel.json"), "w") as f:
        json.dump({"argv": [sys.executable, "-m", "ipykernel_launcher", "-f",
                            "{connection_file}"], "display_name": "colab",
                   "language": "python"}, f)
    # Colab's kernel has numpy (and PIL) imported before the first cell runs.
    startup = os.path.join(jupyter, "ipython", "profile_default", "startup")
    os.makedirs(startup)
    with open(os.path.join(startup, "00-colab.py"), "w") as f:
        f.write("import numpy\nimport PIL.Image\n")
    os.environ.update(JUPYTER_PATH=jupyter, IPYTHONDIR=os.path.join(jupyter, "ipython"))
    if not install_only:  # the notebook's model by name and SST-2's zip, from local servers
        sys.path.insert(0, os.path.join(ROOT, "tests"))  # (as tests/project/test_notebook.py)
        from helpers.glue_server import notebook_glue
        from helpers.hub_server import notebook_hub
        hub, glue = notebook_hub(), notebook_glue()
        os.environ.update(HF_ENDPOINT=hub.url, HF_HUB_CACHE=os.path.join(content, "hf_cache"),
                          BERT_JAX_GLUE_URL=glue.url)
    km = jupyter_client.KernelManager(kernel_name="colab")
    client = nbclient.NotebookClient(nb, km=km, timeout=900,
                                     resources={"metadata": {"path": content}})
    error = None
    try:
        client.execute()
    except nbclient.exceptions.CellExecutionError as e:
        error = str(e)
    outputs = ["".join(o.get("text", "") for o in c.outputs if o.get("name") == "stdout")
               for c in nb.cells]
    loaded = next((json.loads(line[len("LOADED="):]) for line in outputs[0].splitlines()
                   if line.startswith("LOADED=")), [])
    with open(os.path.join(content, "rehearsal.json"), "w") as f:
        json.dump({"error": error, "loaded": loaded, "outputs": outputs,
                   "seconds": [c.metadata.get("execution", {}) for c in nb.cells]}, f)
    return 0


def seconds(cell_metadata: dict) -> str:
    from datetime import datetime
    try:
        start, end = (datetime.fromisoformat(cell_metadata[k].replace("Z", "+00:00"))
                      for k in ("iopub.execute_input", "shell.execute_reply"))
        return f"{(end - start).total_seconds():.0f} s"
    except (KeyError, ValueError):
        return "?"


def rehearse(runtime: str, repo: str, cache: str, workdir: str, install_only: bool,
             wheel: bool = False) -> list:
    """Problems found (empty: the notebook ran as in Colab)."""
    base = build_env(runtime, cache)
    env = os.path.join(workdir, "venv")
    start = time.time()
    copy_env(base, env)
    content = os.path.join(workdir, "content")
    copy_repo(repo, os.path.join(content, "bert_jax"))
    notebook = os.path.join(content, "bert_jax", "notebooks", "colab_quickstart.ipynb")
    if wheel:  # an uploaded wheel instead of the folder
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", content,
                        os.path.join(content, "bert_jax")], check=True)
        shutil.move(notebook, os.path.join(workdir, "notebook.ipynb"))
        notebook = os.path.join(workdir, "notebook.ipynb")
        shutil.rmtree(os.path.join(content, "bert_jax"))
    before = versions(env)
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("PYTHON", "VIRTUAL_ENV", "JUPYTER", "XLA_FLAGS"))}
    environ.update(BERT_JAX_NOTEBOOK_SMOKE="1", TMPDIR=workdir,
                   PYDEVD_DISABLE_FILE_VALIDATION="1",  # ipykernel's debugger warning
                   PATH=os.path.join(env, "bin") + os.pathsep + environ.get("PATH", ""))
    subprocess.run([os.path.join(env, "bin", "python"), os.path.abspath(__file__), "--execute",
                    notebook, "--content", content] + (["--install-only"] * install_only),
                   env=environ, cwd=content, check=True)
    with open(os.path.join(content, "rehearsal.json")) as f:
        result = json.load(f)
    after = versions(env)
    problems = []
    if result["error"]:
        error = re.sub(r"\x1b\[[0-9;]*m", "", result["error"])  # the traceback's colours
        problems.append("a cell failed:\n" + error[-3000:])
    changed = {n: (v, after.get(n)) for n, v in before.items() if after.get(n) != v}
    added = sorted(f"{n}=={v}" for n, v in after.items() if n not in before)
    loaded = {n.lower().replace("_", "-") for n in result["loaded"]}
    for name, (old, new) in sorted(changed.items()):
        if name in loaded:
            problems.append(f"the install replaced {name} {old} -> {new}, "
                            "which the kernel had imported")
    with open(os.path.join(base, ".pip-check")) as f:
        known = set(f.read().splitlines())
    problems += [f"new pip check conflict: {line}" for line in pip_check(env)
                 if line not in known]
    print(f"rehearse ({runtime}): {time.time() - start:.0f} s; install cell "
          f"{seconds(result['seconds'][1])}; added {len(added)}: {' '.join(added)}")
    print(f"rehearse ({runtime}): changed {len(changed)}: " + " ".join(
        f"{n} {o} -> {v}" for n, (o, v) in sorted(changed.items())))
    for i, meta in enumerate(result["seconds"][2:], 2):
        print(f"  code cell {i}: {seconds(meta)}")  # the install cell is code cell 1
    if install_only:
        print(f"rehearse ({runtime}): imports: {result['outputs'][-1].strip()}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runtime", choices=("cpu", "tpu"), default="cpu")
    parser.add_argument("--install-only", action="store_true",
                        help="the install cell and the imports, not the whole notebook")
    parser.add_argument("--repo", default=ROOT, help="the checkout to rehearse (default: this)")
    parser.add_argument("--cache", default=os.path.expanduser("~/.cache/bert_jax/colab"))
    parser.add_argument("--wheel", action="store_true",
                        help="upload a wheel of the repository instead of its folder")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument("--build-only", action="store_true",
                        help="build (or find) the runtime's cached venv, and stop")
    parser.add_argument("--execute", help=argparse.SUPPRESS)  # inside the Colab venv
    parser.add_argument("--content", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.execute:
        return execute(args.execute, args.content, args.install_only)
    if args.build_only:
        print(build_env(args.runtime, args.cache))
        return 0
    workdir = tempfile.mkdtemp(prefix=f"colab_{args.runtime}_")
    try:
        problems = rehearse(args.runtime, os.path.abspath(args.repo), args.cache, workdir,
                            args.install_only, args.wheel)
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    for problem in problems:
        print(f"rehearse ({args.runtime}): {problem}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

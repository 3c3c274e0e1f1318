"""The core tests on the oldest supported stack (Colab's) and on the newest releases.

    python tools/colab/matrix.py colab|tpu|newest [pytest arguments]

Each also runs the tests marked slow in tests/serve/test_export.py (the SavedModel exports;
skipped on tpu, which has no TensorFlow, as the tests marked tf are).

colab:  Colab's CPU runtime (Python 3.13, jax 0.7.2, flax 0.11.2, tensorflow 2.20, numpy
        2.1.3; rehearse.py's cached venv, copied), plus bert_jax and pytest added within
        the notebook's pins (uv, as for the venvs): nothing Colab has is replaced.
tpu:    Colab's TPU runtime, a base install: no TensorFlow (jax 0.7.2, grain 0.2.18,
        array_record 0.8.3, protobuf 7; rehearse.py's cached venv, copied), plus bert_jax
        without extras and pytest, within its pins.
newest: Python 3.13 and the newest release of everything (no constraints; TensorFlow through
        bert_jax[tf]), in a venv
        cached beside rehearse.py's (rebuilt when setup.cfg changes; delete
        ~/.cache/bert_jax/colab/newest-* to move to newer releases).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

import rehearse

TESTS = ["tests/models/test_model.py", "tests/pretrain/test_train.py",
         "tests/finetune/test_finetune_csv.py", "tests/train/test_checkpoint.py",
         "tests/data/test_pipeline.py", "tests/serve/test_export.py"]
TEST_PACKAGES = ["pytest", "pytest-timeout", "pytest-xdist"]
NEWEST_EXTRAS = "[tf]"  # the SavedModel exports and tf.data on the newest TensorFlow too


def colab_env(root: str, cache: str, env: str) -> str:
    rehearse.copy_env(rehearse.build_env("cpu", cache), env)
    pins = rehearse.versions(env)
    pins.pop("tensorflow-metadata")  # the notebook's fix for Colab's protobuf, as there
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.writelines(f"{name}=={v}\n" for name, v in pins.items())
    rehearse.uv_install(cache, env, "-c", f.name, "-e", root, "tensorflow-metadata==1.17.3",
                        *TEST_PACKAGES)
    return env


def tpu_env(root: str, cache: str, env: str) -> str:
    rehearse.copy_env(rehearse.build_env("tpu", cache), env)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.writelines(f"{name}=={v}\n" for name, v in rehearse.versions(env).items())
    rehearse.uv_install(cache, env, "-c", f.name, "-e", root, *TEST_PACKAGES)
    return env


def newest_env(root: str, cache: str) -> str:
    # Per checkout too: bert_jax is installed in editable mode.
    with open(os.path.join(root, "setup.cfg"), "rb") as f:
        key = hashlib.sha256(root.encode() + f.read() + str(TEST_PACKAGES).encode()
                             + NEWEST_EXTRAS.encode() + rehearse.UV_VERSION.encode())
        key = key.hexdigest()[:12]
    env = os.path.join(cache, "newest-" + key)
    stamp = os.path.join(env, ".built")
    if not os.path.exists(stamp):
        shutil.rmtree(env, ignore_errors=True)
        subprocess.run([rehearse.python313(), "-m", "venv", env], check=True)
        rehearse.uv_install(cache, env, "-e", root + NEWEST_EXTRAS, *TEST_PACKAGES)
        open(stamp, "w").close()
    return env


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in ("colab", "tpu", "newest"):
        sys.exit(__doc__.strip().splitlines()[2].strip())
    root, stack = rehearse.ROOT, sys.argv[1]
    cache = os.path.expanduser("~/.cache/bert_jax/colab")
    work = tempfile.mkdtemp(prefix="matrix_")
    try:
        make = {"colab": colab_env, "tpu": tpu_env}.get(stack)
        env = (make(root, cache, os.path.join(work, "venv")) if make
               else newest_env(root, cache))
        return run_tests(env, stack, root)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_tests(env: str, stack: str, root: str) -> int:
    python = os.path.join(env, "bin", "python")
    subprocess.run([python, "-c", "import importlib.util, sys, jax, flax, numpy; tf = "
                    "importlib.util.find_spec('tensorflow') and __import__('tensorflow'); "
                    "print(f'{sys.argv[1]}: Python {sys.version.split()[0]}, jax "
                    "{jax.__version__}, flax {flax.__version__}, numpy {numpy.__version__}, "
                    "tensorflow {tf.__version__ if tf else None}')", stack], check=True)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    pytest = [python, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile",
              "--durations=10",
              *sys.argv[2:]]
    # The fast tests, then the SavedModel exports (marked slow), which lag jax the most.
    fast = subprocess.run(pytest + ["-m", "not slow", *TESTS], cwd=root, env=environ)
    exports = subprocess.run(pytest + ["-m", "slow", "tests/serve/test_export.py"], cwd=root,
                             env=environ)
    return fast.returncode or exports.returncode


if __name__ == "__main__":
    sys.exit(main())

"""Every command stops cleanly on SIGTERM (what `kill`, `timeout` and schedulers send):
one line, exit 130, no traceback, no TensorFlow or libtpu crash dump, no temporary file
or folder left (`bert_jax.host.stopping`, opened by `bert_jax.cli.main` around every
command). Each case is a real `bert-jax` process that signals itself at a chosen point
(`STOP_AT`): inside an output's temporary file or folder, or once libtpu is loaded.
pretrain, finetune and distill checkpoint first: test_preemption.py."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time

import pytest

from bert_jax.host import paths
from bert_jax.host.atomic import atomic_directory

from helpers import REPO

# argv: TARGET (module.function to wrap) WHEN (a substring its first argument must hold,
# or "") then the bert-jax arguments. The wrapper sends SIGTERM to its own process after
# the call (for `replacing`: inside the block, a partial line written).
STOP_AT = """
import contextlib, importlib, os, signal, sys
from bert_jax.host import backend_env, compile_cache
compile_cache.configure()
backend_env.configure_backends()
target, when, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
module_name, name = target.rsplit(".", 1)
module = importlib.import_module(module_name)
original = getattr(module, name)
stop = lambda: os.kill(os.getpid(), signal.SIGTERM)
if name == "replacing":
    @contextlib.contextmanager
    def wrapped(path, mode="w"):
        with original(path, mode) as f:
            f.write(b"partial" if "b" in mode else "partial")
            f.flush()
            stop()
            yield f
else:
    def wrapped(*args, **kwargs):
        result = original(*args, **kwargs)
        if when in str(args[:1]):
            stop()
        return result
setattr(module, name, wrapped)
from bert_jax import cli
sys.exit(cli.main(argv))
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A fine-tuned classifier (WORKDIR/best) and a text file to run it on."""
    from bert_jax.models import heads
    from bert_jax.tokenization import WordPieceTokenizer
    from bert_jax.weights import pretrained

    from helpers.export import CONFIG, LABELS, VOCAB, random_params
    root = tmp_path_factory.mktemp("stopping")
    task = {"name": "csv", "family": "classification", "label_names": LABELS,
            "metric": "accuracy", "num_labels": len(LABELS), "max_seq_length": 24,
            "config": {"task": "csv", "max_seq_length": 24}}
    module = heads.BertForSequenceClassification(CONFIG, len(LABELS))
    pretrained.save(root / "workdir" / "best", CONFIG, random_params(module),
                    tokenizer=WordPieceTokenizer(VOCAB), task=task)
    (root / "texts.txt").write_text("the cat sat on the mat .\na bad day\n" * 20)
    return str(root / "workdir"), str(root / "texts.txt")


def stopped(target, when, *args):
    """`bert-jax ARGS` in a fresh process that SIGTERMs itself at `target`."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.path.join(REPO, "tests")])}
    return subprocess.run([sys.executable, "-c", STOP_AT, target, when, *args], env=env,
                          capture_output=True, text=True, timeout=300)


def assert_stopped_cleanly(result, command, folder):
    err = result.stderr
    assert result.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "SIGTERM received" not in err, err[-3000:]
    assert err.splitlines()[-1] == (f"bert-jax {command}: stopped by SIGTERM; {command}'s "
                                    "temporary files were removed"), err
    left = os.listdir(folder) if os.path.isdir(folder) else []
    assert left == [], left  # no .tmp-* file or folder, no partial output


@pytest.mark.long
@pytest.mark.parametrize("command,output", [("predict", "p.jsonl"), ("embed", "e.npy")])
def test_sigterm_while_an_output_file_is_written(tmp_path, model, command, output):
    workdir, texts = model
    out = tmp_path / "out"
    out.mkdir()
    result = stopped("bert_jax.host.paths.replacing", "", command, "--model", workdir,
                     "--input", texts, "--output", str(out / output))
    assert_stopped_cleanly(result, command, out)


@pytest.mark.long
@pytest.mark.parametrize("command,args", [
    ("export", ["--output", "{out}/serving", "--format", "jax", "--platforms", "cpu"]),
    ("convert", ["--to_hf", "{out}/hf"])])
def test_sigterm_once_an_output_folder_is_made(tmp_path, model, command, args):
    """Signalled right after the hidden `.tmp-NAME-HEX/` folder is made (before its
    `try`, this left it behind)."""
    workdir, _ = model
    out = tmp_path / "out"
    out.mkdir()
    args = [a.replace("{out}", str(out)) for a in args]
    result = stopped("bert_jax.host.paths.makedirs", "/.tmp-", command, "--model", workdir,
                     *args)
    assert_stopped_cleanly(result, command, out)


def test_sigterm_to_compile_once_libtpu_is_loaded(tmp_path):
    """libtpu, loaded for the topology, installs a crash handler for SIGTERM (a stack
    dump, then death) unless the process has one already: the CLI's comes first."""
    pytest.importorskip("libtpu")
    result = stopped("bert_jax.aot.compile.topology_devices", "", "compile", "--config",
                     os.path.join(REPO, "configs", "pretrain.py") + ":tiny",
                     "--topology", "v5e-4")
    assert_stopped_cleanly(result, "compile", tmp_path)


def test_errors_name_the_users_path_not_the_temporary_one(tmp_path):
    out = str(tmp_path / "p.jsonl")
    with pytest.raises(OSError) as e:
        with paths.replacing(out) as f:
            f.write("x")
            raise OSError(errno.ENOSPC, "No space left on device")  # as a full disk's write
    assert str(e.value) == f"[Errno 28] No space left on device: '{out}'"
    folder = str(tmp_path / "serving")

    with pytest.raises(PermissionError) as e:
        with atomic_directory(folder) as tmp:
            raise PermissionError(errno.EACCES, "Permission denied", f"{tmp}/saved_model.pb")
    assert str(e.value) == f"[Errno 13] Permission denied: '{folder}/saved_model.pb'"
    assert os.listdir(tmp_path) == []


# argv: WORKDIR CORPUS. Pretraining whose checkpoint of step 2 cannot be written (its
# folder's creation fails as on a full disk); prints the time when the command returns.
FULL_DISK_AT_STEP_2 = """
import errno, os, sys, time
from bert_jax.host import backend_env, compile_cache
compile_cache.configure()
backend_env.configure_backends()
makedirs = os.makedirs
def full_disk(path, *args, **kwargs):
    if "2.orbax-checkpoint-tmp" in os.fspath(path):
        raise OSError(errno.ENOSPC, "No space left on device", os.fspath(path))
    return makedirs(path, *args, **kwargs)
os.makedirs = full_disk
from bert_jax import cli
from helpers.pretrain import SMALL_MODEL
values = dict(model=SMALL_MODEL, input_files=sys.argv[2], max_seq_length=32,
              max_predictions_per_seq=5, global_batch_size=8, num_train_steps=4,
              warmup_steps=1, log_every_steps=2, eval_every_steps=0,
              checkpoint_every_steps=2)
code = cli.main(["pretrain", "--config", "configs/pretrain.py:tiny", "--workdir", sys.argv[1]]
                + [f"--config.{k}={v}" for k, v in values.items()])
print(f"returned at {time.time()}", file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.long
def test_a_failed_checkpoint_write_ends_the_process_at_once(tmp_path, text_corpus):
    """Orbax's later writer threads waited for the failed stage for 300 s (its barrier
    timeout) before the process could exit."""
    workdir = str(tmp_path / "w")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.path.join(REPO, "tests")])}
    result = subprocess.run([sys.executable, "-c", FULL_DISK_AT_STEP_2, workdir, text_corpus],
                            env=env, cwd=REPO, capture_output=True, text=True, timeout=240)
    ended = time.time()
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr[-3000:]
    assert ended - float(lines[-1].split()[-1]) < 30, "the process lingered after the error"
    error = lines[-2]
    assert error.startswith(f"bert-jax pretrain: error: [Errno 28] writing checkpoint 2 under "
                            f"{workdir}/checkpoints failed (No space left on device; "), error
    assert "no complete checkpoint was written yet: free space on its disk, then rerun the " \
        "same command; library errors in " in error, error
    assert "Traceback" not in result.stderr and "never awaited" not in result.stderr
    assert os.listdir(os.path.join(workdir, "checkpoints")) == []  # no partial save left
    os.remove(error.rsplit(" ", 1)[1])

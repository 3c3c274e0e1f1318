"""A run never loses a good checkpoint: resuming with another config stops with one
line instead of calling the checkpoint corrupt, quarantine never deletes, a run with
no readable checkpoint left stops instead of starting over, and a checkpoint write
killed (SIGKILL) or failing (ENOSPC) leaves the previous one restorable."""

import errno
import glob
import json
import os
import signal
import subprocess
import sys

import jax
import orbax.checkpoint as ocp
import pytest

from bert_jax import cli
from bert_jax.pretrain.job import train_and_evaluate
from bert_jax.train import checkpoint

from helpers import REPO
from helpers.pretrain import SMALL_MODEL, small_config
from helpers.states import plan_on, restore, state_on

RUN = checkpoint.run_description({"optimizer": "adamw", "max_seq_length": 32,
                                  "num_train_steps": 4, "mesh_shape": {"data": -1}},
                                 {"hidden_size": 32, "dtype": "float32"}, "abc")


def changed(run, config=None, model=None, vocabulary=None):
    return checkpoint.run_description({**run["config"], **(config or {})},
                                      {**run["model"], **(model or {})},
                                      vocabulary or run["vocabulary"])


def test_compare_runs_splits_fixed_from_changeable_keys():
    fixed, changeable = checkpoint.compare_runs(RUN, changed(
        RUN, {"optimizer": "lamb", "num_train_steps": 8, "mesh_shape": {"data": 2}},
        {"hidden_size": 64, "dtype": "bfloat16"}, "def"))
    assert fixed == ["model.hidden_size 32 -> 64", "optimizer 'adamw' -> 'lamb'",
                     "vocabulary 'abc' -> 'def'"]
    assert changeable == ["mesh_shape {'data': -1} -> {'data': 2}", "model.dtype 'float32' -> "
                          "'bfloat16'", "num_train_steps 4 -> 8"]
    # Attention may switch to the fused path; the dropout key's implementation may not.
    fixed, changeable = checkpoint.compare_runs(
        changed(RUN, {"rng_impl": "threefry", "attention_impl": "einsum"},
                {"attention_impl": "einsum"}),
        changed(RUN, {"rng_impl": "unsafe_rbg", "attention_impl": "fused"},
                {"attention_impl": "fused"}))
    assert fixed == ["rng_impl 'threefry' -> 'unsafe_rbg'"]
    assert changeable == ["attention_impl 'einsum' -> 'fused'",
                          "model.attention_impl 'einsum' -> 'fused'"]
    # Keys an older checkpoint did not record are not compared.
    assert checkpoint.compare_runs({"config": {}}, RUN) == ([], [])
    # A key renamed since the checkpoint was written is compared under its new name.
    assert checkpoint.compare_runs(changed(RUN, {"pack": False}), changed(
        RUN, {"packing": True}))[0] == ["packing False -> True"]


def saved_checkpoints(tmp_path, steps=(1, 2)):
    state, plan = state_on(jax.devices()[:2])
    with checkpoint.Checkpointer(str(tmp_path), keep=5) as ckpt:
        for step in steps:
            ckpt.save(step, state.replace(step=state.step + step), {**RUN, "pipeline": None})
        ckpt.wait()
    return plan.abstract, state


def latest_step(workdir):
    with checkpoint.Checkpointer(str(workdir)) as ckpt:
        return ckpt.latest_step()


def corrupt(step_dir):
    """Truncates the array data of a saved state, as a half-written checkpoint has it."""
    for root, _, files in os.walk(os.path.join(step_dir, "state")):
        for name in files:
            if "manifest" in name or root.endswith(os.sep + "d"):
                open(os.path.join(root, name), "wb").close()


def test_incompatible_checkpoint_stops_and_is_left_where_it_is(tmp_path):
    target, _ = saved_checkpoints(tmp_path)
    other = changed(RUN, {"optimizer": "lamb"}, {"hidden_size": 64})
    with pytest.raises(checkpoint.IncompatibleCheckpointError,
                       match=r"model.hidden_size 32 -> 64; optimizer 'adamw' -> 'lamb'\)"):
        restore(tmp_path, target, run=other)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["1", "2"]
    assert not (tmp_path / checkpoint.CORRUPT_DIR).exists()


def test_checkpoint_of_another_shape_without_a_config_is_incompatible_not_corrupt(tmp_path):
    saved_checkpoints(tmp_path)
    target = plan_on(jax.devices()[:1]).abstract
    target = target.replace(params={**target.params, "extra": jax.ShapeDtypeStruct(
        (3,), "float32", sharding=target.step.sharding)})
    with pytest.raises(checkpoint.IncompatibleCheckpointError, match="do not fit"):
        restore(tmp_path, target)
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["1", "2"]


def test_quarantine_keeps_every_copy_and_stops_when_none_is_left(tmp_path):
    target, state = saved_checkpoints(tmp_path, steps=(1,))
    for _ in range(2):  # the same step goes bad twice: both copies are kept
        with checkpoint.Checkpointer(str(tmp_path), keep=5) as ckpt:
            ckpt.save(2, state, {**RUN, "pipeline": None})
            ckpt.wait()
        corrupt(tmp_path / "checkpoints" / "2")
        assert restore(tmp_path, target, run=RUN)[2] == 1
    moved = sorted(os.listdir(tmp_path / checkpoint.CORRUPT_DIR))
    assert len(moved) == 2 and all(name.startswith("2-") for name in moved)

    corrupt(tmp_path / "checkpoints" / "1")
    with pytest.raises(checkpoint.CheckpointError, match="no readable checkpoint left.*"
                       "start_fresh=true"):
        restore(tmp_path, target, run=RUN)
    assert len(os.listdir(tmp_path / checkpoint.CORRUPT_DIR)) == 3
    assert restore(tmp_path, target, start_fresh=True) is None


def steps_logged(workdir):
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line)["step"] for line in f if '"train/loss"' in line]


@pytest.mark.slow
def test_pretrain_resume_checks_the_config_and_logs_each_step_once(tmp_path, text_corpus,
                                                                   capsys):
    workdir = str(tmp_path / "run")
    overrides = dict(eval_every_steps=0, log_every_steps=1)
    train_and_evaluate(small_config(text_corpus, **overrides), workdir)
    model_file = open(os.path.join(workdir, "model", "bert_jax.json")).read()
    capsys.readouterr()

    # Another model and optimizer: one line naming both, nothing moved or rewritten.
    args = ["pretrain", "--config", os.path.join(REPO, "configs", "pretrain.py") + ":tiny",
            "--workdir", workdir] + [f"--config.{k}={v}" for k, v in dict(
                small_config(text_corpus, **overrides)).items()
                if k in ("input_files", "max_seq_length", "max_predictions_per_seq",
                         "global_batch_size", "num_train_steps", "checkpoint_every_steps",
                         "warmup_steps", "eval_fraction", "log_every_steps",
                         "eval_every_steps")]
    bigger = "{'preset': 'tiny', 'num_hidden_layers': 1, 'hidden_size': 64, " \
        "'num_attention_heads': 2, 'intermediate_size': 64, 'max_position_embeddings': 64}"
    assert cli.main(args + [f"--config.model={bigger}", "--config.optimizer=lamb",
                            "--config.input_pipeline=tf.data"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.hidden_size 32 -> 64" in err, err
    assert "optimizer 'adamw' -> 'lamb'" in err and "cannot change on resume" in err
    assert "input_pipeline 'grain' -> 'tf.data'" in err  # another order of the examples
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["2", "4"]
    assert not os.path.exists(os.path.join(workdir, checkpoint.CORRUPT_DIR))
    assert open(os.path.join(workdir, "model", "bert_jax.json")).read() == model_file

    # A corrupt latest: the run falls back to step 2, replays 3..6, logs each step once.
    corrupt(os.path.join(workdir, "checkpoints", "4"))
    train_and_evaluate(small_config(text_corpus, num_train_steps=6, **overrides), workdir)
    assert steps_logged(workdir) == [1, 2, 3, 4, 5, 6]
    assert len(os.listdir(os.path.join(workdir, checkpoint.CORRUPT_DIR))) == 1


KILL_DURING_SAVE = """
import os, signal, sys
import orbax.checkpoint as ocp
from bert_jax.pretrain.job import train_and_evaluate
from helpers.pretrain import small_config

write_meta = ocp.JsonCheckpointHandler._save_fn

async def die_while_writing_step_4(self, x, directory):
    if directory.parent.name.startswith("4"):  # the state of step 4 is being written
        os.kill(os.getpid(), signal.SIGKILL)
    await write_meta(self, x, directory)

ocp.JsonCheckpointHandler._save_fn = die_while_writing_step_4
train_and_evaluate(small_config(sys.argv[2], eval_every_steps=0), sys.argv[1])
"""


@pytest.mark.slow
def test_sigkill_during_a_checkpoint_write_leaves_the_previous_one_and_resumes(
        tmp_path, text_corpus):
    workdir = str(tmp_path / "killed")
    result = subprocess.run(
        [sys.executable, "-c", KILL_DURING_SAVE, workdir, text_corpus],
        env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.path.join(REPO, 'tests')}"},
        capture_output=True, text=True, timeout=300)
    assert result.returncode == -9, result.stderr[-3000:]
    assert latest_step(workdir) == 2
    train_and_evaluate(small_config(text_corpus, eval_every_steps=0), workdir)
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["2", "4"]
    assert not os.path.exists(os.path.join(workdir, checkpoint.CORRUPT_DIR))


@pytest.mark.slow
def test_enospc_during_a_save_leaves_the_previous_one_and_resumes(tmp_path, text_corpus,
                                                                 monkeypatch):
    workdir = str(tmp_path / "full")
    write_meta = ocp.JsonCheckpointHandler._save_fn

    async def disk_full_at_step_4(self, x, directory):
        if directory.parent.name.startswith("4"):
            raise OSError(errno.ENOSPC, "No space left on device")
        await write_meta(self, x, directory)

    monkeypatch.setattr(ocp.JsonCheckpointHandler, "_save_fn", disk_full_at_step_4)
    with pytest.raises(OSError, match="No space left on device.*step 2, is intact") as e:
        train_and_evaluate(small_config(text_corpus, eval_every_steps=0), workdir)
    assert e.value.errno == errno.ENOSPC
    assert not glob.glob(os.path.join(workdir, "checkpoints", "*tmp*"))  # no partial save
    monkeypatch.setattr(ocp.JsonCheckpointHandler, "_save_fn", write_meta)
    assert latest_step(workdir) == 2
    train_and_evaluate(small_config(text_corpus, eval_every_steps=0), workdir)
    assert sorted(os.listdir(os.path.join(workdir, "checkpoints"))) == ["2", "4"]


def test_converted_text_records_its_options_and_is_rebuilt_when_they_change(
        tmp_path, text_corpus):
    from bert_jax.data.options import DataOptions
    from bert_jax.host.folders import DATA_FOLDER
    from bert_jax.pretrain.inputs import RunInput, input_files, prepare_input_files
    from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer
    vocabulary = load_tokenizer(DEFAULT_VOCAB).fingerprint()

    def convert(**overrides):
        config = small_config(text_corpus, **overrides)
        run_input = RunInput(config.input_files, DataOptions.from_config(config),
                             DEFAULT_VOCAB, vocabulary)
        files = prepare_input_files(run_input, input_files(config.input_files), str(tmp_path),
                                    process_index=0, process_count=1)
        options = json.load(open(os.path.join(os.path.dirname(files[0]), DATA_FOLDER.record)))
        return options, os.stat(files[0]).st_mtime_ns

    options, made = convert()
    assert options["max_seq_length"] == 32 and options["vocabulary"] == vocabulary
    assert convert() == (options, made)  # reused
    rebuilt, _ = convert(max_seq_length=48)
    assert rebuilt["max_seq_length"] == 48
    assert sorted(os.listdir(tmp_path / "data")) == sorted(
        [DATA_FOLDER.record, "summary.json"]
        + [f"pretrain-{i:05d}-of-00008.tfrecord" for i in range(8)])


def pretrain_args(workdir, corpus, **overrides):
    """`bert-jax pretrain` on the small model of test_train, 6 steps, a checkpoint every 2."""
    values = dict(model=SMALL_MODEL, input_files=corpus, max_seq_length=32,
                  max_predictions_per_seq=5, global_batch_size=8, num_train_steps=6,
                  warmup_steps=1, log_every_steps=2, eval_every_steps=0,
                  checkpoint_every_steps=2)
    values.update(overrides)
    return (["pretrain", "--config", os.path.join(REPO, "configs", "pretrain.py") + ":tiny",
             "--workdir", workdir] + [f"--config.{k}={v}" for k, v in values.items()])


@pytest.fixture
def small_filesystem(tmp_path):
    """A 32 MiB tmpfs of its own, so that the test can fill it."""
    path = tmp_path / "small"
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(path)],
                             capture_output=True)
    if mounted.returncode:
        pytest.skip("mounting a small tmpfs needs root (test_enospc_during_a_save_... covers "
                    "ENOSPC with a write hook)")
    yield str(path)
    subprocess.run(["umount", "-l", str(path)], check=True)


@pytest.mark.long
def test_a_full_disk_stops_the_run_at_the_failed_save_with_one_line(
        small_filesystem, text_corpus, capsys, monkeypatch):
    """Checkpoint 2 lands; then the disk is filled to 1 MiB free and checkpoint 4 fails."""
    workdir = os.path.join(small_filesystem, "w")
    save = checkpoint.Checkpointer.save

    def save_on_a_filling_disk(self, step, state, meta):
        if step == 4:
            self.wait()
            free = os.statvfs(small_filesystem)
            with open(os.path.join(small_filesystem, "ballast"), "wb") as ballast:
                ballast.write(b"\0" * (free.f_bavail * free.f_frsize - 2 ** 20))
        return save(self, step, state, meta)

    monkeypatch.setattr(checkpoint.Checkpointer, "save", save_on_a_filling_disk)
    capsys.readouterr()
    assert cli.main(pretrain_args(workdir, text_corpus)) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "ERROR" not in err, err  # hundreds of lines before
    last = err.splitlines()[-1]
    assert last.startswith(f"bert-jax pretrain: error: [Errno 28] writing checkpoint 4 under "
                           f"{workdir}/checkpoints failed (No space left on device; "), last
    assert "MiB free); the last complete one, step 2, is intact: free space on its disk, " \
        "then rerun the same command (it resumes from that step); library errors in " in last, last
    assert os.listdir(os.path.join(workdir, "checkpoints")) == ["2"]  # no partial save left
    assert latest_step(workdir) == 2
    os.remove(last.rsplit(" ", 1)[1])


def test_a_second_run_on_a_busy_workdir_stops_and_a_dead_runs_lock_is_taken_over(
        tmp_path, text_corpus, capsys, caplog):
    from bert_jax.host import workdir_lock
    workdir = str(tmp_path / "w")
    holder = subprocess.Popen(  # another run: holds the workdir's lock until killed
        [sys.executable, "-c", "import sys, time; from bert_jax.host.workdir_lock import "
         "WorkdirLock; WorkdirLock(sys.argv[1], 'bert-jax pretrain').acquire(); "
         "print('held', flush=True); time.sleep(600)", workdir],
        env={**os.environ, "PYTHONPATH": REPO}, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        capsys.readouterr()
        assert cli.main(pretrain_args(workdir, text_corpus)) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"bert-jax pretrain: error: {workdir} is in use by another run "
                              f"(host ") and f", pid {holder.pid}, " in err, err
        assert err.count("\n") == 1, err
        assert os.listdir(workdir) == [workdir_lock.LOCK_FILE]  # the other run's files only
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # The killed run's lock stays behind; the next run takes it over and trains.
    assert cli.main(pretrain_args(workdir, text_corpus, num_train_steps=2)) == 0
    assert f"pid {holder.pid}" in caplog.text and "its process no longer exists" in caplog.text
    assert not os.path.exists(os.path.join(workdir, workdir_lock.LOCK_FILE))
    assert latest_step(workdir) == 2

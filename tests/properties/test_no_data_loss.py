"""No command destroys another run's results (issue 44): the workdir kind marker, its
inference for older workdirs, and moving an earlier run's results aside. The commands'
exit code and one line are in test_bad_input.py's CASES."""

from __future__ import annotations

import json
import os

import pytest

from bert_jax.errors import UserError
from bert_jax.host import folders, workdir_lock
from bert_jax.host.atomic import atomic_directory


def make(root, *names):
    """Folder `root` holding `names` (a trailing / makes a folder)."""
    os.makedirs(root, exist_ok=True)
    for name in names:
        path = os.path.join(root, name)
        if name.endswith("/"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write("{}")
    return str(root)


def test_older_workdirs_get_their_kind_from_what_they_hold(tmp_path):
    kind_of = folders.kind_of
    assert kind_of(str(tmp_path / "absent")) is None
    assert kind_of(make(tmp_path / "empty")) is None
    assert kind_of(make(tmp_path / "pre", "model/bert_jax.json", "checkpoints/20/",
                        "metrics.jsonl")) == "pretraining"
    assert kind_of(make(tmp_path / "ft", "best/bert_jax.json", "eval_results.json",
                        "metrics.jsonl")) == "fine-tuning"
    assert kind_of(make(tmp_path / "seeds", "seed_1/", "eval_results.json")) == "fine-tuning"
    assert kind_of(make(tmp_path / "m", "bert_jax.json", "params/")) == "model"
    data = make(tmp_path / "data", "summary.json", "pretrain-00000-of-00001.tfrecord")
    assert kind_of(data) == "create-data"
    for kind in (folders.PRETRAINING, folders.FINETUNING):  # no run writes there
        with pytest.raises(UserError, match="holds a create-data run"):
            folders.check_kind(data, kind)
    folders.check_kind(data, folders.DATA)  # create-data may write it again
    # Interrupted before the first result: the checkpoint's run config says which.
    ft = make(tmp_path / "ft_ckpt", "checkpoints/4/meta/metadata", "metrics.jsonl")
    with open(os.path.join(ft, "checkpoints/4/meta/metadata"), "w") as f:
        json.dump({"config": {"task": "csv"}}, f)
    assert kind_of(ft) == "fine-tuning"
    pre = make(tmp_path / "pre_ckpt", "checkpoints/4/meta/metadata")
    with open(os.path.join(pre, "checkpoints/4/meta/metadata"), "w") as f:
        json.dump({"config": {"num_train_steps": 4}}, f)
    assert kind_of(pre) == "pretraining"


def test_the_marker_decides_and_a_run_that_wrote_nothing_leaves_nothing(tmp_path):
    workdir = str(tmp_path / "w")
    with workdir_lock.hold(workdir, "bert-jax finetune", kind=folders.FINETUNING):
        pass
    assert not os.path.exists(workdir)  # made by the lock, nothing written: removed
    with workdir_lock.hold(workdir, "bert-jax finetune", kind=folders.FINETUNING):
        make(workdir, "metrics.jsonl")
    assert json.load(open(os.path.join(workdir, folders.JOB_FILE)))["kind"] == "fine-tuning"
    with pytest.raises(UserError, match="holds a fine-tuning run .bert-jax finetune."):
        workdir_lock.hold(workdir, "bert-jax distill", kind=folders.DISTILLATION)
    with pytest.raises(UserError, match="holds a fine-tuning run"):
        workdir_lock.hold(workdir, "bert-jax pretrain", kind=folders.PRETRAINING)
    with pytest.raises(UserError, match="is also --init_from"):
        workdir_lock.hold(workdir, "bert-jax finetune", kind=folders.FINETUNING,
                          inputs={"--init_from": workdir + "/"})
    assert sorted(os.listdir(workdir)) == [folders.JOB_FILE, "metrics.jsonl"]


def test_a_run_that_fails_before_writing_leaves_an_older_workdir_as_it_was(tmp_path):
    workdir = make(tmp_path / "pre", "model/bert_jax.json", "metrics.jsonl")  # no marker
    with pytest.raises(RuntimeError):
        with workdir_lock.hold(workdir, "bert-jax pretrain", kind=folders.PRETRAINING):
            assert os.path.exists(os.path.join(workdir, folders.JOB_FILE))
            raise RuntimeError("a bad config")
    assert sorted(os.listdir(workdir)) == ["metrics.jsonl", "model"]


def test_overwriting_a_training_workdir_is_refused(tmp_path):
    workdir = make(tmp_path / "pre", "model/bert_jax.json", "metrics.jsonl")
    with pytest.raises(UserError, match="holds a pretraining run"):
        with atomic_directory(workdir, overwrite=True):
            pass
    assert sorted(os.listdir(workdir)) == ["metrics.jsonl", "model"]


def test_an_earlier_runs_results_are_moved_aside_not_deleted(tmp_path):
    workdir = make(tmp_path / "ft", "best/bert_jax.json", "eval_results.json", "checkpoints/",
                   "keep.txt")
    aside = folders.set_aside(workdir, ["best", "eval_results.json", "checkpoints",
                                             "predictions"])
    assert os.path.dirname(aside) == os.path.join(workdir, "previous")
    assert sorted(os.listdir(aside)) == ["best", "eval_results.json"]  # empty folders stay
    assert os.path.exists(os.path.join(aside, "best", "bert_jax.json"))
    assert sorted(os.listdir(workdir)) == ["checkpoints", "keep.txt", "previous"]
    assert folders.set_aside(workdir, ["best"]) is None


def visible_files(directory):
    """{name: bytes} of the files a glob would see (not the hidden temporary ones)."""
    return {name: open(os.path.join(directory, name), "rb").read()
            for name in sorted(os.listdir(directory)) if not name.startswith(".")}


KILLS = {  # where a SIGKILL can land in create-data: while a part is written, and after
    # one shard is assembled under its temporary name, before the shards are renamed
    "part": ("from bert_jax.data import tfrecord\n"
             "tfrecord.frame = lambda record: os._exit(137)\n"),
    "shard": ("from bert_jax.data import shard_parts\n"
              "assemble = shard_parts.assemble_shard\n"
              "shard_parts.assemble_shard = lambda task: (assemble(task), os._exit(137))\n"),
}


@pytest.mark.parametrize("where", sorted(KILLS))
def test_create_data_killed_mid_run_leaves_no_shard_and_keeps_the_earlier_run(tmp_path,
                                                                             text_corpus,
                                                                             where):
    import subprocess
    import sys

    from helpers import REPO
    out = str(tmp_path / "records")
    args = ["create-data", "--input", text_corpus, "--output", out, "--max_seq_length",
            "32", "--num_shards", "2", "--num_workers", "1", "--no_progress"]
    killed = ("import os, sys\nfrom bert_jax import cli\n" + KILLS[where]
              + "sys.exit(cli.main(sys.argv[1:]))\n")
    run = lambda: subprocess.run([sys.executable, "-c", killed, *args], capture_output=True,
                                 env={**os.environ, "PYTHONPATH": REPO}, timeout=300)
    assert run().returncode == 137
    # no 0-byte pretrain-0000N-of-00002.tfrecord; the lock a killed run leaves is stale
    assert list(visible_files(out)) == [workdir_lock.LOCK_FILE]
    from bert_jax import cli
    assert cli.main(args) == 0
    before = visible_files(out)
    assert sorted(before) == ["options.json", "pretrain-00000-of-00002.tfrecord",
                              "pretrain-00001-of-00002.tfrecord", "summary.json"]
    assert run().returncode == 137
    after = visible_files(out)
    assert after.pop(workdir_lock.LOCK_FILE)
    assert after == before  # the earlier run's shards are whole


def test_write_text_replaces_a_file_whole_or_not_at_all(tmp_path):
    from bert_jax.host import paths
    path = tmp_path / "eval_results.json"
    paths.write_text(path, "old")
    with pytest.raises(TypeError):  # fails after the file was opened, as a kill would
        paths.write_text(path, object())
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["eval_results.json"]  # no temporary left either


def test_the_python_entry_points_refuse_another_kind_of_workdir(tmp_path):
    from bert_jax.finetune.selection import run_finetune
    from bert_jax.pretrain import job
    from bert_jax.train.config_loader import load_config

    from helpers import REPO
    finetuned = make(tmp_path / "ft", "best/bert_jax.json", "eval_results.json")
    pretrained = make(tmp_path / "pre", "model/bert_jax.json", "metrics.jsonl")
    before = {d: sorted(os.listdir(d)) for d in (finetuned, pretrained)}
    config = load_config(os.path.join(REPO, "configs", "pretrain.py") + ":tiny", [])
    with pytest.raises(UserError, match=f"{finetuned} holds a fine-tuning run"):
        job.train_and_evaluate(config, finetuned)
    config = load_config(os.path.join(REPO, "configs", "finetune.py") + ":csv,tiny", [])
    with pytest.raises(UserError, match=f"{pretrained} holds a pretraining run"):
        run_finetune(config, pretrained)
    config.init_from = finetuned
    with pytest.raises(UserError, match=f"the output folder {finetuned} is also --init_from"):
        run_finetune(config, finetuned)
    assert {d: sorted(os.listdir(d)) for d in (finetuned, pretrained)} == before


def test_a_bucket_workdir_of_another_kind_is_refused(gcs, tmp_path):
    import subprocess
    import sys

    from helpers import REPO
    gcs.upload("kinds/ft/best/bert_jax.json", b"{}")
    gcs.upload("kinds/ft/eval_results.json", b"{}")
    before = gcs.objects("kinds/")
    run = subprocess.run(
        [sys.executable, "-m", "bert_jax.cli", "pretrain", "--config",
         os.path.join(REPO, "configs", "pretrain.py") + ":tiny", "--workdir",
         gcs.uri("kinds", "ft")], env=gcs.environment({**os.environ, "PYTHONPATH": REPO}),
        capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert run.returncode == 2, run.stderr[-2000:]
    assert run.stderr == (f"bert-jax pretrain: error: {gcs.uri('kinds', 'ft')} holds a "
                          "fine-tuning run (bert-jax finetune) whose results this command "
                          "would replace; choose another folder\n")
    assert gcs.objects("kinds/") == before

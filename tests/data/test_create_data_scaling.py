"""create-data across workers and hosts, and as careful as the jobs: the same bytes for a
seed whatever the number of workers or hosts, no TensorFlow in the Example encoder, a lock
on the output folder, summary.json before any output, one last line, SIGTERM and a full
disk leaving no temporary file, stale ones of earlier runs removed."""
import errno
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from bert_jax import cli
from bert_jax.data import cli as data_cli
from bert_jax.data import corpus, example_proto, shard_parts
from bert_jax.data import create_pretraining_data as cpd
from bert_jax.host import folders

from helpers import REPO

SHARDS = sorted(glob.glob(corpus.DEFAULT_CORPUS))


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    """Three small text files cut from the embedded corpus (one document each, or more)."""
    import gzip
    folder = tmp_path_factory.mktemp("texts")
    for index, shard in enumerate(SHARDS[:3]):
        with gzip.open(shard, "rt", encoding="utf-8") as f:
            lines = [next(f) for _ in range(400)]
        (folder / f"t{index}.txt").write_text("".join(lines), encoding="utf-8")
    return sorted(str(p) for p in folder.glob("*.txt"))


def _shards(folder):
    return [open(p, "rb").read() for p in sorted(glob.glob(os.path.join(folder, "*.tfrecord")))]


def _create(texts, folder, workers, *extra):
    return data_cli.create_data_main(["--input", *texts, "--output", str(folder), "--num_shards",
                                      "4", "--dupe_factor", "2", "--num_workers", str(workers),
                                      "--no_progress", *extra])


def test_same_bytes_with_more_workers_than_files_and_fewer(texts, tmp_path):
    assert _create(texts, tmp_path / "w1", 1) == 0
    assert _create(texts, tmp_path / "w2", 2) == 0  # fewer workers than files
    assert _create(texts[:2], tmp_path / "w3", 3) == 0  # more workers than files
    assert _create(texts[:2], tmp_path / "w1b", 1) == 0
    one = _shards(tmp_path / "w1")
    assert len(one) == 4 and all(one)
    assert _shards(tmp_path / "w2") == one
    assert _shards(tmp_path / "w3") == _shards(tmp_path / "w1b")
    for folder in ("w1", "w2", "w3"):
        assert not glob.glob(str(tmp_path / folder / ".tmp-*"))  # the parts were removed


def test_forked_and_spawned_workers_write_the_same_bytes(texts, tmp_path, monkeypatch):
    assert _create(texts[:3], tmp_path / "one", 1) == 0
    monkeypatch.setattr(cpd, "_fork_is_safe", lambda: False)  # this process runs JAX
    assert _create(texts[:3], tmp_path / "spawned", 2) == 0
    # The command, which imports neither TensorFlow nor JAX, forks its workers.
    subprocess.run([sys.executable, "-m", "bert_jax.cli", "create-data", "--input", *texts[:3],
                    "--output", str(tmp_path / "forked"), "--num_shards", "4",
                    "--dupe_factor", "2", "--num_workers", "2", "--no_progress"],
                   cwd=REPO, check=True, capture_output=True)
    one = _shards(tmp_path / "one")
    assert _shards(tmp_path / "spawned") == one
    assert _shards(tmp_path / "forked") == one


def test_workers_fork_only_beside_threads_marked_fork_safe(monkeypatch):
    for name in ("tensorflow", "jax"):  # put back after the test
        monkeypatch.delitem(sys.modules, name, raising=False)
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    # the threads of the test runner (pytest-xdist's) left out
    monkeypatch.setattr(threading, "enumerate", lambda: [threading.main_thread(), other])
    try:
        assert not cpd._fork_is_safe()  # a thread of unknown locks: spawn
        other.fork_safe = True
        assert cpd._fork_is_safe() == (sys.platform == "linux")
        monkeypatch.setitem(sys.modules, "tensorflow", object())
        assert not cpd._fork_is_safe()  # TensorFlow's thread pools: spawn
    finally:
        stop.set()


def test_host_shards_assembled_equal_one_run(texts, tmp_path, capsys):
    assert _create(texts, tmp_path / "one", 1) == 0
    hosts = tmp_path / "hosts"
    for host in (1, 0):  # in any order
        assert _create(texts, hosts, 1, "--num_hosts", "2", "--host_index", str(host)) == 0
        assert not glob.glob(str(hosts / "*.tfrecord"))  # parts only, until --assemble
    assert "--assemble" in capsys.readouterr().out
    assert data_cli.create_data_main(["--output", str(hosts), "--num_shards", "4", "--assemble",
                                      "--num_workers", "2"]) == 0
    assert _shards(hosts) == _shards(tmp_path / "one")
    summary = json.loads((hosts / "summary.json").read_text())
    assert summary == json.loads((tmp_path / "one" / "summary.json").read_text()) | {
        "output_files": summary["output_files"]}
    assert not (hosts / folders.DATA_FOLDER.parts).exists()


def test_assemble_before_every_host_is_done_names_the_missing_files(texts, tmp_path, capsys):
    assert _create(texts, tmp_path, 1, "--num_hosts", "3", "--host_index", "1") == 0
    assert cli.main(["create-data", "--output", str(tmp_path), "--num_shards", "4",
                     "--assemble"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "deprecated" not in line]
    assert len(err) == 1
    assert "2 of 3 input files are not converted yet" in err[0]
    assert not glob.glob(str(tmp_path / "*.tfrecord"))


def test_summary_before_any_output_and_one_last_line(texts, tmp_path, capsys, monkeypatch):
    printed = []
    def checked_print(*args, **kwargs):
        printed.append((tmp_path / "summary.json").exists())
        return print(*args, **kwargs)
    monkeypatch.setattr(data_cli, "print", checked_print, raising=False)
    assert _create(texts[:1], tmp_path, 1) == 0
    assert printed and all(printed)
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) <= 7
    rows = json.loads((tmp_path / "summary.json").read_text())["instances"]
    assert out[-1] == (f"wrote {rows:,} rows in 4 shard(s) to {tmp_path}; pretrain on them: "
                       f"bert-jax pretrain --config.input_files='{tmp_path}/*.tfrecord'")


def test_stale_temporaries_removed_and_lock_held(texts, tmp_path, capsys):
    (tmp_path / ".tmp-pretrain-00000-of-00004.tfrecord-0123456789ab").write_bytes(b"x")
    (tmp_path / ".tmp-pretrain-00000-of-00004.tfrecord-ba9876543210").mkdir()
    assert _create(texts[:1], tmp_path, 1) == 0
    assert not glob.glob(str(tmp_path / ".tmp-*"))
    assert not (tmp_path / "bert_jax.lock").exists()
    # A live run's lock (this process) keeps a second run out, with one line.
    (tmp_path / "bert_jax.lock").write_text(json.dumps(
        {"host": socket.gethostname(), "pid": os.getpid(), "command": "create-data"}))
    before = sorted(os.listdir(tmp_path))
    assert cli.main(["create-data", "--input", texts[0], "--output", str(tmp_path),
                     "--no_progress"]) == 2
    assert "is in use by another run" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == before


def test_full_disk_names_the_path_and_leaves_no_temporary_file(texts, tmp_path, monkeypatch,
                                                                 capsys):
    real_frame = shard_parts.tfrecord.frame
    calls = []
    def full(record):
        calls.append(1)
        if len(calls) > 50:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_frame(record)
    monkeypatch.setattr(shard_parts.tfrecord, "frame", full)
    assert cli.main(["create-data", "--input", *texts, "--output", str(tmp_path / "out"),
                     "--num_workers", "1", "--no_progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no space left on the device of" in err
    assert str(tmp_path / "out") in err
    assert not glob.glob(str(tmp_path / "out" / ".*")) and not glob.glob(
        str(tmp_path / "out" / "*.tfrecord"))


def test_sigterm_ends_workers_and_removes_temporaries(tmp_path):
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "bert_jax.cli", "create-data", "--output", str(out),
         "--num_workers", "2", "--dupe_factor", "5", "--no_progress"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not glob.glob(str(out / ".tmp-*" / "part-*.json")) and time.time() < deadline:
        time.sleep(0.2)  # stop it once a worker has written a part
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert err.strip().splitlines() == [
        "bert-jax create-data: stopped by SIGTERM; create-data's temporary files were removed"]
    assert not os.path.exists(out) or os.listdir(out) == []


def test_example_encoder_matches_tensorflow():
    from tensorflow.core.example import example_pb2
    rng = np.random.default_rng(0)
    rows = {"input_ids": rng.integers(0, 30000, (3, 16)),
            "next_sentence_labels": np.array([0, 1, 1]),
            "masked_lm_weights": rng.random((3, 4)).astype(np.float32),
            "masked_lm_positions": np.zeros((3, 0), np.int64)}
    for i, ours in enumerate(example_proto.serialize_examples(rows)):
        theirs = example_pb2.Example()
        for name, values in rows.items():
            lists = theirs.features.feature[name]
            (lists.float_list if name == "masked_lm_weights" else lists.int64_list).value.extend(
                np.atleast_1d(values[i]).tolist())
        assert ours == theirs.SerializeToString(deterministic=True)


def test_a_bad_host_index_is_one_line(texts, tmp_path, capsys):
    assert cli.main(["create-data", "--input", texts[0], "--output", str(tmp_path),
                     "--num_hosts", "2", "--host_index", "2"]) == 2
    assert "--host_index 2 is not in [0, --num_hosts 2)" in capsys.readouterr().err

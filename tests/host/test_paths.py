"""bert_jax.host.paths and the TFRecord framing it streams: local paths behave as os/glob/open,
bucket paths (a real GCS emulator, see tests/helpers/gcs_server.py) list, append, move and replace;
TFRecords round-trip with TensorFlow's own reader and writer, and damage is caught."""

import os

import numpy as np
import pytest

from bert_jax.data import tfrecord
from bert_jax.host import paths
from bert_jax.host.atomic import atomic_directory

RECORDS = [b"", b"x", bytes(range(256)) * 40, os.urandom(100_000)]


def test_tfrecords_round_trip_with_tensorflow(tmp_path):
    import tensorflow as tf
    ours, theirs = str(tmp_path / "ours.tfrecord"), str(tmp_path / "theirs.tfrecord")
    with tfrecord.RecordWriter(ours) as writer:
        for record in RECORDS:
            writer.write(record)
    with tf.io.TFRecordWriter(theirs) as writer:
        for record in RECORDS:
            writer.write(record)
    assert open(ours, "rb").read() == open(theirs, "rb").read()
    assert list(tfrecord.read_records(theirs)) == RECORDS
    assert [r.numpy() for r in tf.data.TFRecordDataset(ours)] == RECORDS


def test_damaged_tfrecords_fail_naming_the_file_and_record(tmp_path):
    path = tmp_path / "a.tfrecord"
    with tfrecord.RecordWriter(str(path)) as writer:
        for record in RECORDS:
            writer.write(record)
    data = bytearray(path.read_bytes())
    data[50] ^= 1  # inside record 2's bytes (records 0 and 1 take 33 bytes, its header 12)
    path.write_bytes(bytes(data))
    with pytest.raises(tfrecord.CorruptRecordError, match=r"a.tfrecord: record 2 fails"):
        list(tfrecord.read_records(str(path)))
    data[50] ^= 1
    path.write_bytes(bytes(data[:-3]))
    with pytest.raises(tfrecord.CorruptRecordError, match="cut short"):
        list(tfrecord.read_records(str(path)))


def test_local_paths_behave_as_os_and_glob(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths.makedirs("d")
    paths.write_text(paths.join("d", "b.txt"), "b")
    paths.write_text("d/a.txt", "a")
    assert paths.glob("d/*.txt") == ["d/a.txt", "d/b.txt"]
    assert paths.abspath("d") == os.path.join(str(tmp_path), "d")
    assert paths.listdir("d") == ["a.txt", "b.txt"] and paths.getsize("d/a.txt") == 1
    log = paths.Appender("d/log")
    log.write("1\n")
    log.close()
    log = paths.Appender("d/log")
    log.write("2\n")
    log.close()
    assert paths.read_text("d/log") == "1\n2\n"
    with pytest.raises(ZeroDivisionError):
        with paths.replacing("d/a.txt") as f:
            f.write("half")
            1 / 0
    assert paths.read_text("d/a.txt") == "a" and paths.listdir("d") == ["a.txt", "b.txt", "log"]


def test_bucket_paths_list_append_move_and_replace(gcs, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
    paths.configure_storage()
    root = gcs.uri("test_paths")
    with atomic_directory(paths.join(root, "model")) as tmp:
        paths.write_text(paths.join(tmp, "config.json"), "{}")
        with paths.open(paths.join(tmp, "params", "w.npy"), "wb") as f:
            np.save(f, np.arange(3))
    assert gcs.objects("test_paths/") == ["test_paths/model/config.json",
                                          "test_paths/model/params/w.npy"]
    assert paths.glob(paths.join(root, "*", "*.json")) == [paths.join(root, "model",
                                                                      "config.json")]
    assert paths.isdir(paths.join(root, "model")) and paths.listdir(
        paths.join(root, "model")) == ["config.json", "params"]
    with pytest.raises(FileExistsError):
        with atomic_directory(paths.join(root, "model")):
            pass
    log = paths.Appender(paths.join(root, "log.jsonl"))
    log.write("1\n")
    log.flush()
    assert gcs.download("test_paths/log.jsonl") == b"1\n"
    log.write("2\n")
    log.close()
    assert paths.read_text(paths.join(root, "log.jsonl")) == "1\n2\n"
    with paths.replacing(paths.join(root, "log.jsonl")) as f:
        f.write("3\n")
    with pytest.raises(ZeroDivisionError):
        with paths.replacing(paths.join(root, "log.jsonl")) as f:
            f.write("half")
            1 / 0
    assert gcs.download("test_paths/log.jsonl") == b"3\n"
    # Writers that know only local files (TensorFlow's SavedModel) fill a local staging
    # directory, uploaded when the block succeeds and removed either way.
    with atomic_directory(paths.join(root, "export"), local=True) as staging:
        assert not paths.is_remote(staging)
        os.makedirs(os.path.join(staging, "saved_model"))
        with open(os.path.join(staging, "saved_model", "saved_model.pb"), "wb") as f:
            f.write(b"pb")
    assert not os.path.exists(staging)
    assert gcs.download("test_paths/export/saved_model/saved_model.pb") == b"pb"
    with tfrecord.RecordWriter(paths.join(root, "r.tfrecord")) as writer:
        for record in RECORDS:
            writer.write(record)
    assert list(tfrecord.read_records(paths.join(root, "r.tfrecord"))) == RECORDS


def test_a_full_disk_under_a_library_writer_is_named_in_our_words(tmp_path, monkeypatch):
    """Case: tensorstore's `RESOURCE_EXHAUSTED: Error writing ...` (Orbax writing a model's
    params on a full disk) becomes one UserError naming the output; nothing is left."""
    from bert_jax.errors import UserError
    out = tmp_path / "model"
    with pytest.raises(UserError) as raised:
        with atomic_directory(str(out)) as tmp:
            raise ValueError(f"RESOURCE_EXHAUSTED: Error writing \"d/x\" in OCDBT database at "
                             f"local file \"{tmp}/params.orbax-checkpoint-tmp/\": [OS error: "
                             "No space left on device]")
    assert str(raised.value) == (f"no space left on the disk of {out} while writing it: free "
                                 "space there or choose another folder")
    assert os.listdir(tmp_path) == []


def test_a_killed_runs_temporary_sibling_goes_at_the_next_run(tmp_path):
    """Cases: a sibling of an ended process (removed), one of a running process (kept)."""
    dead = tmp_path / ".tmp-model-0123456789ab-999999999"
    alive = tmp_path / f".tmp-model-0123456789ab-{os.getppid()}"
    for folder in (dead, alive):
        os.makedirs(folder / "params")
    with atomic_directory(str(tmp_path / "model")) as tmp:
        paths.write_text(paths.join(tmp, "config.json"), "{}")
    assert sorted(os.listdir(tmp_path)) == [alive.name, "model"]

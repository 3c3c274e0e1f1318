"""create-data as an Apache Beam pipeline (`--beam_pipeline_options`).

The same shards (byte for byte) and statistics as the local engine, in Beam's in-process runner and
on two worker processes; ArrayRecord shards holding the TFRecord shards' records; the transforms
under Beam's TestPipeline; options, bad files and stops reported in one line with nothing under a
final name; no network connection; the deprecated host split naming its Beam equivalent."""
import glob
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from bert_jax import cli
from bert_jax.data import beam_engine, corpus, record_formats, tfrecord
from bert_jax.data import create_pretraining_data as cpd
from bert_jax.data.options import DataOptions
from bert_jax.errors import UserError

from helpers import REPO, words

try:
    import apache_beam as beam
except ImportError:
    beam = None
needs_beam = pytest.mark.skipif(beam is None, reason="Apache Beam is not installed: "
                                "pip install 'bert_jax[beam]'")

IN_PROCESS = "runner=FnApiRunner"
TWO_PROCESSES = "runner=FnApiRunner,direct_running_mode=multi_processing,direct_num_workers=2"


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    """Eight text files cut from the embedded corpus, of different lengths."""
    folder = tmp_path_factory.mktemp("texts")
    shards = sorted(glob.glob(corpus.DEFAULT_CORPUS))
    for index in range(8):
        with gzip.open(shards[index % len(shards)], "rt", encoding="utf-8") as f:
            lines = [next(f) for _ in range(150 + 40 * index)]
        (folder / f"t{index}.txt").write_text("".join(lines), encoding="utf-8")
    return sorted(str(p) for p in folder.glob("*.txt"))


def _create(texts, folder, *extra):
    return cli.main(["create-data", "--input", *texts, "--output", str(folder), "--num_shards",
                     "3", "--dupe_factor", "2", "--num_workers", "1", "--no_progress", *extra])


def _shards(folder, extension="tfrecord"):
    return [open(p, "rb").read() for p in sorted(glob.glob(f"{folder}/*.{extension}"))]


def _summary(folder):
    summary = json.loads(open(os.path.join(folder, "summary.json")).read())
    return dict(summary, output_files=[os.path.basename(p) for p in summary["output_files"]])


@pytest.fixture(scope="module")
def local(texts, tmp_path_factory):
    """The local engine's output folder for `texts`."""
    folder = tmp_path_factory.mktemp("local") / "data"
    assert _create(texts, folder) == 0
    return folder


@needs_beam
@pytest.mark.parametrize("options", [IN_PROCESS, TWO_PROCESSES], ids=["in_process", "two_workers"])
def test_the_pipeline_writes_the_local_engines_shards(texts, local, tmp_path, options):
    assert _create(texts, tmp_path, "--beam_pipeline_options", options) == 0
    assert len(_shards(local)) == 3 and all(_shards(local))
    assert _shards(tmp_path) == _shards(local)
    assert _summary(tmp_path) == _summary(local)
    assert open(tmp_path / "options.json").read() == open(local / "options.json").read()
    assert sorted(os.listdir(tmp_path)) == sorted(os.listdir(local))  # no hidden folder left


@pytest.mark.parametrize("options", [None, pytest.param(IN_PROCESS, marks=needs_beam)],
                         ids=["local", "beam"])
def test_array_record_shards_hold_the_tfrecord_records(texts, local, tmp_path, options):
    extra = ["--beam_pipeline_options", options] if options else []
    assert _create(texts, tmp_path, "--format", "array_record", *extra) == 0
    written = sorted(glob.glob(f"{tmp_path}/*.array_record"))
    expected = sorted(glob.glob(f"{local}/*.tfrecord"))
    assert [os.path.basename(p).rsplit(".", 1)[0] for p in written] == \
        [os.path.basename(p).rsplit(".", 1)[0] for p in expected]
    for array_record, records in zip(written, expected):
        assert record_formats.read_array_records(array_record) == \
            list(tfrecord.read_records(records))
    assert not glob.glob(f"{tmp_path}/*.tfrecord")


@needs_beam
def test_a_rerun_in_the_other_format_removes_the_first_formats_shards(texts, tmp_path):
    assert _create(texts, tmp_path, "--format", "array_record") == 0
    assert _create(texts, tmp_path, "--beam_pipeline_options", IN_PROCESS) == 0
    assert not glob.glob(f"{tmp_path}/*.array_record") and len(_shards(tmp_path)) == 3


def _tasks(texts, parts_dir):
    plan = cpd._plan(texts, [], corpus_vocab(), None, DataOptions(dupe_factor=1), 2)
    return [(index, path, None, str(parts_dir), 2, plan) for index, path in enumerate(texts)]


def corpus_vocab():
    from bert_jax.tokenization import DEFAULT_VOCAB
    return DEFAULT_VOCAB


@needs_beam
def test_the_transforms_under_test_pipeline(texts, tmp_path):
    """The conversion DoFn makes each file's part once; the shard step deals every part's records
    into the shards as the local engine does (checked against `shard_parts.shard_pieces`)."""
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to
    tasks = _tasks(texts[:4], tmp_path)
    init_args = (corpus_vocab(), None, DataOptions(dupe_factor=1))
    targets = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    with TestPipeline(runner="FnApiRunner") as pipeline:
        metas = (pipeline | beam.Create(tasks)
                 | beam.ParDo(beam_engine._convert_files(beam, init_args)))
        assert_that(metas | "indexes" >> beam.Map(lambda meta: meta["index"]),
                    equal_to([0, 1, 2, 3]), label="one part per file")
        shard_tasks = (metas | beam.combiners.ToList()
                       | beam.FlatMap(beam_engine._shard_tasks, str(tmp_path), targets, "tfrecord"))
        assert_that(shard_tasks | "targets" >> beam.Map(lambda task: task[0]),
                    equal_to(targets), label="one task per shard")
    records = [list(tfrecord.read_records(str(tmp_path / f"part-{i:06d}.tfrecord")))
               for i in range(4)]
    assert all(records)


@needs_beam
@pytest.mark.parametrize("text, words_of_it", [
    ("runer=FnApiRunner", "runer is not one of Apache Beam's pipeline options"),
    ("runner=Nope", "runner=Nope is not a runner Beam knows"),
    ("runner=FnApiRunner,,", "an empty option"),
    ("runner=DataflowRunner,project=p,region=r,temp_location=gs://b/t,"
     "extra_packages=dist/bert_jax.tar.gz", "is a local folder, which the workers of "
     "runner=DataflowRunner cannot reach"),
])
def test_options_are_refused_before_anything_starts(text, words_of_it, tmp_path):
    with pytest.raises(UserError, match=words_of_it):
        beam_engine.pipeline_options(text, str(tmp_path))


@needs_beam
def test_a_cluster_runner_without_a_way_to_ship_bert_jax_is_refused():
    with pytest.raises(UserError, match="the workers need bert_jax; add extra_packages="):
        beam_engine.pipeline_options("runner=dataflow,project=p,region=r", "gs://b/data")
    options = beam_engine.pipeline_options(
        "runner=dataflow,project=p,sdk_container_image=img", "gs://b/data")
    assert options.get_all_options()["runner"] == "DataflowRunner"


@needs_beam
def test_a_cluster_runner_is_refused_inputs_its_workers_cannot_read(texts, monkeypatch):
    options = beam_engine.pipeline_options("runner=SparkRunner,requirements_file=r.txt", "gs://b")
    with pytest.raises(UserError, match=f"input {texts[0]} is a local file, which the workers"):
        beam_engine.check_reachable(options, texts)
    monkeypatch.delenv("TFDS_DATA_DIR", raising=False)
    with pytest.raises(UserError, match="cannot reach the local data folder ~/tensorflow_datasets"):
        beam_engine.check_reachable(options, ["tfds:wikipedia/20230601.en:train#0/64"])
    monkeypatch.setenv("TFDS_DATA_DIR", "gs://b/tensorflow_datasets")
    beam_engine.check_reachable(options, ["tfds:wikipedia/20230601.en:train#0/64", "gs://b/t.txt"])
    beam_engine.check_reachable(beam_engine.pipeline_options(IN_PROCESS, "out"), texts)


@needs_beam
def test_direct_runner_says_that_it_downloads(caplog):
    beam_engine.pipeline_options("runner=DirectRunner", "out")
    assert "downloads a binary" in caplog.text


def test_without_beam_the_option_names_the_extra(texts, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "apache_beam", None)
    assert _create(texts, tmp_path / "out", "--beam_pipeline_options", IN_PROCESS) == 2
    err = capsys.readouterr().err
    words.assert_failure_line(err, "create-data")
    assert "pip install 'bert_jax[beam]'" in err
    assert not (tmp_path / "out").exists()


@needs_beam
def test_a_binary_file_stops_before_the_pipeline(texts, tmp_path, capsys, monkeypatch):
    binary = tmp_path / "in" / "zz.txt"
    binary.parent.mkdir()
    binary.write_bytes(b"text\n" + bytes(range(128, 256)) * 50)
    monkeypatch.setattr(beam_engine, "run", lambda *a: pytest.fail("the pipeline started"))
    assert _create(texts + [str(binary)], tmp_path / "out",
                   "--beam_pipeline_options", IN_PROCESS) == 2
    err = capsys.readouterr().err
    words.assert_failure_line(err, "create-data")
    assert f"{binary}:2: not UTF-8 text" in err
    assert not (tmp_path / "out").exists()


@needs_beam
@pytest.mark.parametrize("options", [IN_PROCESS, TWO_PROCESSES], ids=["in_process", "two_workers"])
def test_a_bad_file_found_by_a_worker_is_one_line_and_no_shard(texts, tmp_path, capsys, options):
    """Bytes that are not UTF-8 past the lines the launcher reads: a worker finds them."""
    bad = tmp_path / "in" / "zz.txt"
    bad.parent.mkdir()
    bad.write_bytes("a sentence.\n".encode() * 1500 + b"\xff\xfe end\n")
    out = tmp_path / "out"
    out.mkdir()
    assert _create(texts + [str(bad)], out, "--beam_pipeline_options", options) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"bert-jax create-data: error: {bad}:1501: not UTF-8 text"), err
    assert err.count("\n") == 1 and "[while running" not in err, err
    assert os.listdir(out) == []


@needs_beam
def test_the_pipeline_opens_no_network_connection(texts, tmp_path, monkeypatch):
    """In Beam's in-process runner, where every connection this process makes would show."""
    opened = []
    connect = socket.socket.connect

    def local_only(sock, address):
        host = address[0] if isinstance(address, tuple) else address
        if sock.family in (socket.AF_INET, socket.AF_INET6) and host not in (
                "127.0.0.1", "::1", "localhost"):
            opened.append(address)
            raise OSError("no network in this test")
        return connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", local_only)
    monkeypatch.setattr(socket.socket, "connect_ex", lambda sock, address: (
        opened.append(address), 111)[1])
    assert _create(texts, tmp_path, "--beam_pipeline_options", IN_PROCESS) == 0
    assert opened == []


@pytest.fixture(scope="module")
def big_inputs(tmp_path_factory):
    """Eight copies of the whole embedded corpus (about 60 MB): a conversion of many seconds."""
    folder = tmp_path_factory.mktemp("big")
    text = "".join(gzip.open(p, "rt", encoding="utf-8").read()
                   for p in sorted(glob.glob(corpus.DEFAULT_CORPUS)))
    for index in range(8):
        (folder / f"big{index}.txt").write_text(text, encoding="utf-8")
    return str(folder / "*.txt")


def _beam_workers():
    found = subprocess.run(["pgrep", "-f", "apache_beam.runners.worker.sdk_worker_main"],
                           capture_output=True, text=True).stdout
    return set(found.split())


@needs_beam
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("options", [IN_PROCESS, TWO_PROCESSES], ids=["in_process", "two_workers"])
def test_a_stop_ends_the_pipeline_in_one_line_and_leaves_nothing(big_inputs, tmp_path, signum,
                                                                   options):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "bert_jax.cli", "create-data", "--input", big_inputs,
               "--output", str(out), "--no_progress", "--beam_pipeline_options", options]
    before = _beam_workers()
    process = subprocess.Popen(command, cwd=REPO, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not glob.glob(f"{out}/.tmp-*/shards") and time.time() < deadline:
        time.sleep(0.1)  # the pipeline has started
    time.sleep(1.5)
    assert process.poll() is None, process.stderr.read()
    process.send_signal(signum)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert len(err.strip().splitlines()) == 1, err
    assert ("stopped by SIGTERM" if signum == signal.SIGTERM else "interrupted") in err
    assert not out.exists() or os.listdir(out) == []
    deadline = time.time() + 30  # the worker processes end once their runner is gone
    while _beam_workers() - before and time.time() < deadline:
        time.sleep(0.2)
    assert not _beam_workers() - before

def test_the_host_split_names_the_beam_command_that_replaces_it(texts, tmp_path, capsys):
    assert _create(texts, tmp_path, "--num_hosts", "2", "--host_index", "0") == 0
    err = capsys.readouterr().err
    assert "--num_hosts, --host_index and --assemble are deprecated" in err
    assert "--beam_pipeline_options=runner=DataflowRunner" in err
    assert _create(texts, tmp_path / "b", "--num_hosts", "2",
                   "--beam_pipeline_options", IN_PROCESS) == 2
    assert "leave out --num_hosts" in capsys.readouterr().err

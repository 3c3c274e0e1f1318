"""Raw text given to pretraining (`input_files=*.txt`) is converted with every local core,
each process of a multi-process run converting its share, resumably; `dupe_factor` is a
key; a conversion that would hold the first step for long says so in one line."""
import json
import os
import subprocess
import sys

import pytest

from bert_jax.data import example_maker
from bert_jax.data.options import DataOptions
from bert_jax.host import folders
from bert_jax.pretrain import inputs
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer

from helpers import REPO
from helpers.pretrain import small_config

VOCABULARY = load_tokenizer(DEFAULT_VOCAB).fingerprint()


@pytest.fixture
def corpus_files(tmp_path, text_corpus):  # noqa: F811
    """Four small text files (the test corpus split again)."""
    import glob
    lines = [line for path in sorted(glob.glob(text_corpus)) for line in open(path)]
    folder = tmp_path / "text"
    folder.mkdir()
    for i in range(4):
        (folder / f"part{i}.txt").write_text("".join(lines[i * 150:(i + 1) * 150]))
    return str(folder / "*.txt")


def convert(workdir, corpus, process_index=0, process_count=1, messages=None, **overrides):
    config = small_config(corpus, **overrides)
    return inputs.prepare_input_files(
        run_input(config), inputs.input_files(config.input_files), str(workdir),
        process_index=process_index, process_count=process_count,
        message=(messages.append if messages is not None else print))


def run_input(config):
    return inputs.RunInput(config.input_files, DataOptions.from_config(config), DEFAULT_VOCAB,
                           VOCABULARY)


def contents(files):
    return [open(f, "rb").read() for f in files]


def test_a_stopped_conversion_resumes_from_its_parts(tmp_path, corpus_files, monkeypatch):
    monkeypatch.setattr(inputs, "local_workers", lambda: 1)  # in this process: patchable
    whole = contents(convert(tmp_path / "whole", corpus_files))
    real, calls = example_maker.convert_file, []

    def stopped_at_the_third(task):
        calls.append(task[0])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(task)
    monkeypatch.setattr(example_maker, "convert_file", stopped_at_the_third)
    with pytest.raises(KeyboardInterrupt):
        convert(tmp_path / "run", corpus_files)
    assert not os.path.exists(tmp_path / "run" / "data" / folders.DATA_FOLDER.record)
    monkeypatch.setattr(example_maker, "convert_file", lambda task: calls.append(task[0])
                        or real(task))
    assert contents(convert(tmp_path / "run", corpus_files)) == whole
    assert len(calls) == 5 and sorted(calls[3:]) == sorted(set(range(4)) - set(calls[:2]))
    # (the two files converted before the stop were not converted again)
    assert not os.path.exists(tmp_path / "run" / "data" / "parts")


def test_two_processes_each_convert_their_share_to_the_same_records(tmp_path, corpus_files,
                                                                     monkeypatch):
    """Process 1 converts files 1 and 3, process 0 files 0 and 2 and assembles after the
    barrier: the shards are those of one process converting everything."""
    monkeypatch.setattr(inputs, "local_workers", lambda: 1)
    whole = contents(convert(tmp_path / "one", corpus_files))
    barriers = []
    monkeypatch.setattr(example_maker, "convert_file", _recording(example_maker.convert_file))
    config = small_config(corpus_files)
    for index in (1, 0):  # process 1 first: process 0 assembles once both are done
        _CONVERTED.clear()
        files = inputs.prepare_input_files(
            run_input(config), inputs.input_files(config.input_files), str(tmp_path / "two"),
            process_index=index, process_count=2, message=print, sync=barriers.append)
        assert sorted(_CONVERTED) == [index, index + 2]
    assert barriers == ["raw_text_parts_written"] * 2
    assert contents(files) == whole


_CONVERTED = []


def _recording(real):
    def convert_file(task):
        _CONVERTED.append(task[0])
        return real(task)
    return convert_file


def test_dupe_factor_is_a_key_of_the_conversion(tmp_path, corpus_files, monkeypatch):
    monkeypatch.setattr(inputs, "local_workers", lambda: 1)
    files = convert(tmp_path / "five", corpus_files)
    five = json.load(open(os.path.join(os.path.dirname(files[0]), "summary.json")))
    files = convert(tmp_path / "one", corpus_files, dupe_factor=1)
    folder = os.path.dirname(files[0])
    one = json.load(open(os.path.join(folder, "summary.json")))
    assert json.load(open(os.path.join(folder, folders.DATA_FOLDER.record)))["dupe_factor"] == 1
    assert 0 < one["instances"] < five["instances"] / 3


def test_a_long_conversion_is_said_in_one_line(tmp_path, corpus_files, monkeypatch):
    monkeypatch.setattr(inputs, "local_workers", lambda: 1)
    monkeypatch.setattr(inputs, "_LONG_CONVERSION_S", 0)
    messages = []
    convert(tmp_path / "run", corpus_files, messages=messages)
    long = [m for m in messages if "before the first step" in m]
    assert len(long) == 1 and "bert-jax create-data" in long[0], messages


def test_a_script_without_a_main_guard_is_not_rerun_by_the_workers(tmp_path, corpus_files):
    """Workers are spawned processes: they must not run the calling script again."""
    script = tmp_path / "convert.py"
    script.write_text(
        "import glob, sys\n"
        "from bert_jax.data.create_pretraining_data import create_pretraining_data\n"
        "from bert_jax.data.options import DataOptions\n"
        "from bert_jax.tokenization import DEFAULT_VOCAB\n"
        "print('script ran', flush=True)\n"
        f"create_pretraining_data(sorted(glob.glob({corpus_files!r})), "
        f"[{str(tmp_path / 'out' / 'a.tfrecord')!r}], DEFAULT_VOCAB, "
        "DataOptions(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=1), "
        "num_workers=2, progress=False)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": REPO}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("script ran") == 1
    assert os.path.getsize(tmp_path / "out" / "a.tfrecord") > 0

"""create-data reads a corpus by name from tensorflow-datasets (`tfds:NAME[/CONFIG]`),
on tfds' mock data offline: each record a document, the split read in pieces that are the
workers' and hosts' units of work, as text files are; an unprepared or unknown data set
gets one line saying what to do."""
import glob
import os

import pytest

from bert_jax import cli
from bert_jax.data import create_pretraining_data as cpd
from bert_jax.data import tfds_source
from bert_jax.data.options import DataOptions
from bert_jax.host import folders
from bert_jax.tokenization import DEFAULT_VOCAB

from helpers.words import assert_failure_line

tfds = pytest.importorskip("tensorflow_datasets")
WIKI = "tfds:wikipedia/20230601.en"
OPTIONS = DataOptions(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=2)


@pytest.fixture
def mocked(monkeypatch):
    """tfds' mock data (random text, 6 records a read) in 4 pieces."""
    monkeypatch.setattr(tfds_source, "PIECES", 4)
    with tfds.testing.mock_data(num_examples=6):
        yield


def shards(folder):
    return [open(p, "rb").read() for p in sorted(glob.glob(os.path.join(folder, "*.tfrecord")))]


def test_a_corpus_by_name_becomes_records_and_hosts_split_it(mocked, tmp_path):
    one = str(tmp_path / "one")
    stats = cpd.create_pretraining_data([WIKI], cpd.shard_paths(one, 2), DEFAULT_VOCAB,
                                        OPTIONS, num_workers=1, progress=False)
    assert stats.files == 4 and stats.documents == 24 and stats.instances > 0
    assert len(shards(one)) == 2 and all(shards(one))
    two = str(tmp_path / "two")
    for host in (0, 1):  # each host its pieces, then one assembly
        cpd.create_pretraining_data([WIKI], cpd.shard_paths(two, 2), DEFAULT_VOCAB, OPTIONS,
                                    progress=False,
                                    parts_dir=os.path.join(two, folders.DATA_FOLDER.parts),
                                    host_index=host, num_hosts=2)
    cpd.assemble(two, 2)
    assert shards(two) == shards(one)


def test_an_unprepared_data_set_is_named_with_how_to_prepare_it(tmp_path, capsys,
                                                                 monkeypatch):
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "tfds"))
    out = tmp_path / "records"
    assert cli.main(["create-data", "--input", WIKI, "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert_failure_line(err, "create-data")
    assert "tfds:wikipedia/20230601.en (split 'train') is not prepared" in err
    assert "tfds build wikipedia/20230601.en" in err
    assert not out.exists() or not os.listdir(out)


def test_an_unknown_data_set_is_named(tmp_path, capsys):
    out = tmp_path / "records"
    assert cli.main(["create-data", "--input", "tfds:no_such_corpus_xyz", "--output",
                     str(out)]) == 2
    err = capsys.readouterr().err
    assert_failure_line(err, "create-data")
    assert "tfds:no_such_corpus_xyz: tensorflow-datasets has no data set" in err


@pytest.mark.slow  # a short pretraining run
def test_pretraining_reads_a_corpus_by_name(mocked, tmp_path, monkeypatch):
    """input_files=tfds:NAME: converted into the workdir as raw text is, then trained on."""
    from bert_jax.pretrain import inputs
    from bert_jax.pretrain.job import train_and_evaluate

    from helpers.pretrain import small_config
    monkeypatch.setattr(inputs, "local_workers", lambda: 1)  # the mock lives in this process
    result = train_and_evaluate(small_config(WIKI, dupe_factor=1, eval_every_steps=0),
                                str(tmp_path / "run"))
    assert result["train"]["loss"] > 0
    assert len(glob.glob(str(tmp_path / "run" / "data" / "*.tfrecord"))) == 8


class TinyCorpus(tfds.core.GeneratorBasedBuilder):
    """A prepared data set of a few short documents, built offline in the test's folder."""

    VERSION = tfds.core.Version("1.0.0")
    RECORDS = 40

    def _info(self):
        features = tfds.features.FeaturesDict({"text": tfds.features.Text()})
        return tfds.core.DatasetInfo(builder=self, features=features)

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(self.RECORDS),
                "validation": self._generate_examples(3)}

    def _generate_examples(self, count):
        for i in range(count):
            yield i, {"text": f"document {i} opens here.\nits second sentence follows.\n"
                              f"and a third line ends document {i}."}


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
    """TFDS_DATA_DIR with TinyCorpus prepared."""
    data_dir = str(tmp_path_factory.mktemp("tfds"))
    TinyCorpus(data_dir=data_dir).download_and_prepare()
    return data_dir


@pytest.mark.parametrize("split, records", [("train", 40), ("validation", 3)])
def test_a_split_smaller_than_the_pieces_converts(split, records, tiny_corpus, tmp_path,
                                                  monkeypatch):
    """Cases: a 40-record and a 3-record split (fewer records than the 64 pieces a split is
    read in): one piece a record, every record a document."""
    monkeypatch.setenv("TFDS_DATA_DIR", tiny_corpus)
    spec = f"tfds:tiny_corpus:{split}"
    assert len(tfds_source.pieces(spec)) == records
    stats = cpd.create_pretraining_data([spec], cpd.shard_paths(str(tmp_path / "out"), 1),
                                        DEFAULT_VOCAB, OPTIONS, num_workers=1, progress=False)
    assert stats.files == records and stats.documents == records and stats.instances > 0


@pytest.mark.parametrize("split, message", [
    ("train[:0]", "tfds:tiny_corpus:train[:0] holds no records: choose another split"),
    ("test", "tfds:tiny_corpus:test is not a split of it (its splits: train, validation;")])
def test_a_split_that_reads_nothing_is_named_in_one_line(split, message, tiny_corpus, tmp_path,
                                                        monkeypatch, capsys):
    """Cases: `tfds:tiny_corpus:train[:0]`, a part of no records (tfds' own words: "Instruction
    [] corresponds to no data!"), and a split the data set does not have."""
    monkeypatch.setenv("TFDS_DATA_DIR", tiny_corpus)
    capsys.readouterr()
    out = tmp_path / "records"
    assert cli.main(["create-data", "--input", f"tfds:tiny_corpus:{split}", "--output",
                     str(out)]) == 2
    err = capsys.readouterr().err
    assert_failure_line(err, "create-data")
    assert message in err, err
    assert not out.exists()

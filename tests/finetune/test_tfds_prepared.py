"""A prepared tensorflow-datasets split reads the same without TensorFlow (a base install)."""
import numpy as np
import pytest
import tensorflow_datasets as tfds

from bert_jax.errors import UserError
from bert_jax.finetune import files
from bert_jax.host import tf_host


class BertJaxPreparedProbe(tfds.core.GeneratorBasedBuilder):
    """Two shards' worth of labeled sentences (registered as bert_jax_prepared_probe)."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict({
            "sentence": tfds.features.Text(), "idx": np.int32,
            "label": tfds.features.ClassLabel(names=["negative", "positive"])}))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(40), "validation": self._generate_examples(6)}

    def _generate_examples(self, count):
        for i in range(count):
            yield i, {"sentence": f"sentence {i} é", "idx": i, "label": i % 2}


@pytest.mark.tf  # preparing needs TensorFlow; the read below does not
def test_a_prepared_split_reads_as_tfds_load_reads_it_without_tensorflow(tmp_path, monkeypatch):
    data_dir = str(tmp_path)
    BertJaxPreparedProbe(data_dir=data_dir).download_and_prepare()
    name = "bert_jax_prepared_probe"
    with_tf = files.tfds_examples(name, "train", data_dir=data_dir)
    monkeypatch.setattr(tf_host, "installed", lambda: False)
    without = files.tfds_examples(name, "train", data_dir=data_dir)
    assert len(without) == 40
    assert [{k: np.asarray(v).tolist() for k, v in row.items()} for row in without] == \
        [{k: np.asarray(v).tolist() for k, v in row.items()} for row in with_tf]
    with pytest.raises(UserError, match="has no split 'test' \\(it has train, validation\\)"):
        files.tfds_examples(name, "test", data_dir=data_dir)
    with pytest.raises(UserError, match="must be downloaded or prepared first.*preparing it "
                                        "needs TensorFlow: pip install 'bert_jax\\[tf\\]'"):
        files.tfds_examples(name, "train", data_dir=str(tmp_path / "empty"))

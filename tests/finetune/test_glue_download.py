"""GLUE's zips fetched into glue_data/ (`glue_download.download`) from a local server: the
folder it makes reads as `--config.glue_dir`, a second call fetches nothing, and a failed
fetch (offline, not a zip, another zip, an entry outside the folder, MRPC, a bucket) says so
in one line and leaves no folder behind; a bucket's glue_data works as a local one."""

from __future__ import annotations

import os

import pytest

from bert_jax.errors import UserError
from bert_jax.finetune.tasks import glue_download, glue_files
from bert_jax.host import paths

from helpers.glue import PUBLISHED
from helpers.glue_server import GlueServer, glue_zip


@pytest.fixture
def server(monkeypatch):
    zips = {"SST-2.zip": glue_zip("SST-2", PUBLISHED["SST-2"]),
            "QNLIv2.zip": glue_zip("QNLI", PUBLISHED["QNLI"]),
            "RTE.zip": b"<html>a proxy's login page</html>",
            "CoLA.zip": glue_zip("SST-2", PUBLISHED["SST-2"]),
            "WNLI.zip": glue_zip("WNLI", {"../../escaped.tsv": "x"})}
    glue = GlueServer(zips)
    monkeypatch.setenv("BERT_JAX_GLUE_URL", glue.url + "/")
    yield glue
    glue.close()


def test_download_unpacks_a_folder_that_reads_and_is_fetched_once(server, tmp_path):
    glue_dir = str(tmp_path / "glue_data")
    folder = glue_download.download("sst2", glue_dir)
    assert folder == os.path.join(glue_dir, "SST-2")
    examples = glue_files.load_split(glue_dir, "sst2", "train", ["negative", "positive"])
    assert [e["label"] for e in examples] == [0, 1, 0, 1, 0, 1]
    assert glue_download.download("sst2", glue_dir) == folder
    assert server.requests == ["/SST-2.zip"]
    # QNLI's second version is QNLIv2.zip, unpacked to QNLI/
    assert glue_download.download("qnli", glue_dir) == os.path.join(glue_dir, "QNLI")
    assert sorted(os.listdir(glue_dir)) == ["QNLI", "SST-2"]  # no temporary folder left


@pytest.mark.parametrize("task,words", [
    ("mnli", "HTTP 404 Not Found"), ("rte", "is not a zip file"),
    ("cola", "holds no CoLA/train.tsv"), ("wnli", "points outside its folder")])
def test_a_failed_download_says_why_and_leaves_nothing(server, tmp_path, task, words):
    glue_dir = tmp_path / "glue_data"
    with pytest.raises(UserError, match=words) as e:
        glue_download.download(task, str(glue_dir))
    assert f"{server.url}/{glue_download.ZIPS[task]}" in str(e.value)
    assert os.listdir(glue_dir) == [] and not (tmp_path / "escaped.tsv").exists()


def test_offline_and_unsupported_tasks_are_named(monkeypatch, tmp_path):
    monkeypatch.setenv("BERT_JAX_GLUE_URL", "http://127.0.0.1:9")  # nothing listens there
    with pytest.raises(UserError, match=r"cannot download GLUE sst2 from http://127.0.0.1:9/"
                                        r"SST-2.zip .*offline, fetch it elsewhere"):
        glue_download.download("sst2", str(tmp_path))
    with pytest.raises(UserError, match="MRPC and the diagnostic set are not published as one "
                                        "zip: read them through tensorflow-datasets"):
        glue_download.download("mrpc", str(tmp_path))
    with pytest.raises(UserError, match="no GLUE task 'sst3'.*downloadable: cola, sst2"):
        glue_download.download("sst3", str(tmp_path))
    assert os.listdir(tmp_path) == []


def test_a_leftover_of_an_interrupted_download_goes_and_a_bucket_works(server, tmp_path, gcs,
                                                                      monkeypatch):
    glue_dir = tmp_path / "glue_data"
    leftover = glue_dir / ".tmp-SST-2-0123456789ab-999999999"  # a process that has ended
    (leftover / "SST-2").mkdir(parents=True)
    glue_download.download("sst2", str(glue_dir))
    assert sorted(os.listdir(glue_dir)) == ["SST-2"]
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs.url)
    paths.configure_storage()
    remote = gcs.uri("glue_download", "glue_data")
    assert glue_download.download("sst2", remote) == remote + "/SST-2"
    assert glue_files.load_split(remote, "sst2", "dev", ["negative", "positive"])
    assert gcs.objects("glue_download/") == [f"glue_download/glue_data/SST-2/{name}"
                                             for name in ("dev.tsv", "test.tsv", "train.tsv")]

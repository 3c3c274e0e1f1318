"""notebooks/colab_quickstart.ipynb runs top to bottom in smoke mode (embedded data, SST-2's
zip and its Hub model by name from local servers, a few steps) and leaves its
metrics and plot behind."""

from __future__ import annotations

import glob
import json
import os
import sys

import pytest

from helpers.glue_server import notebook_glue
from helpers.hub_server import NOTEBOOK_MODEL, notebook_hub

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")
jupyter_client = pytest.importorskip("jupyter_client")

from helpers import REPO as ROOT  # noqa: E402

NOTEBOOK = os.path.join(ROOT, "notebooks", "colab_quickstart.ipynb")


def test_committed_notebook_has_no_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, cell.source[:60]


@pytest.mark.slow
def test_notebook_runs_in_smoke_mode(tmp_path, monkeypatch):
    # The kernel inherits this environment: smoke mode, a TMPDIR so the notebook's
    # temporary workdir lands where the test can find it, and conftest's 8 fake CPU
    # devices, so the runs use an 8-way data-parallel mesh.
    monkeypatch.setenv("BERT_JAX_NOTEBOOK_SMOKE", "1")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    hub = notebook_hub()
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf_cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    glue = notebook_glue()
    monkeypatch.setenv("BERT_JAX_GLUE_URL", glue.url)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # jupyter_client runs the `python3` kernelspec with sys.executable, so the notebook
    # sees this venv's packages (and the bert_jax under test), not some other python's.
    km = jupyter_client.KernelManager(kernel_name="python3")
    assert km.format_kernel_cmd()[0] == sys.executable
    client = nbclient.NotebookClient(nb, km=km, timeout=600,
                                     resources={"metadata": {"path": str(tmp_path)}})
    try:
        client.execute()  # raises CellExecutionError, with the traceback, if a cell fails
    finally:
        hub.close()
        glue.close()

    executable = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count for c in executable)
    text = "".join(o.get("text", "") for c in executable for o in c.outputs)
    assert "smoke=True" in text and " x cpu (cpu), compute float32" in text
    assert "SST-2 validation accuracy" in text
    assert f"SST-2 validation accuracy from hf:{NOTEBOOK_MODEL}: " in text
    assert any(f"/{NOTEBOOK_MODEL}/resolve/" in path for _, path in hub.requests)
    assert text.count("p(positive)=") == 4
    assert glue.requests == ["/SST-2.zip"]  # fetched once, read by both fine-tunes

    (workdir,) = glob.glob(str(tmp_path / "bert_jax_notebook_*"))
    assert os.path.getsize(os.path.join(workdir, "curves.png")) > 0
    with open(os.path.join(workdir, "pretrain", "metrics.jsonl")) as f:
        assert any("eval/mlm_accuracy" in json.loads(line) for line in f)
    with open(os.path.join(workdir, "sst2", "metrics.jsonl")) as f:
        assert any("validation/accuracy" in json.loads(line) for line in f)
    assert os.path.exists(os.path.join(workdir, "sst2", "glue_submission", "SST-2.tsv"))

"""GLUE's published zips fetched into a `glue_data/` folder: GLUE without tensorflow-datasets.

`download("sst2", "glue_data")` fetches `SST-2.zip` from the files GLUE publishes (the ones
tensorflow-datasets and `download_glue_data.py` fetch), unpacks it to `glue_data/SST-2/` and
returns that folder, ready for `--config.glue_dir`. A task already there is not fetched again.
Nothing needs TensorFlow: this is how the TPU runtime of Colab, which has none, gets SST-2.

The environment variable BERT_JAX_GLUE_URL points at a mirror holding the same zips.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile

from bert_jax.errors import UserError
from bert_jax.finetune.tasks import glue_files
from bert_jax.host import paths

GLUE_URL = "https://dl.fbaipublicfiles.com/glue/data"
# The zip of each task, named as GLUE publishes it (QNLI's second version unpacks to QNLI/).
ZIPS = {"cola": "CoLA.zip", "sst2": "SST-2.zip", "qqp": "QQP.zip", "stsb": "STS-B.zip",
        "mnli": "MNLI.zip", "qnli": "QNLIv2.zip", "rte": "RTE.zip", "wnli": "WNLI.zip"}


def download(task: str, glue_dir: str, timeout: float = 60) -> str:
    """The task's folder in the local folder `glue_dir`, fetched and unpacked if missing."""
    if task not in ZIPS:
        other = ("MRPC and the diagnostic set are not published as one zip: read them "
                 "through tensorflow-datasets (pip install 'bert_jax[tf]', "
                 "--config.tfds_download=true) or make glue_data with download_glue_data.py"
                 if task in glue_files.LAYOUTS else f"no GLUE task {task!r}")
        raise UserError(f"cannot download {task!r}: {other} (downloadable: {', '.join(ZIPS)})")
    if paths.is_remote(glue_dir):
        raise UserError(f"{glue_dir}: GLUE downloads into a local folder; copy it to the "
                        "bucket afterwards (gcloud storage cp -r)")
    folder = os.path.join(glue_dir, glue_files.LAYOUTS[task].folder)
    if os.path.isfile(os.path.join(folder, "train.tsv")):
        return folder
    url = f"{os.environ.get('BERT_JAX_GLUE_URL', GLUE_URL).rstrip('/')}/{ZIPS[task]}"
    os.makedirs(glue_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".tmp-glue-", dir=glue_dir) as tmp:
        archive = os.path.join(tmp, ZIPS[task])
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response, \
                    open(archive, "wb") as f:
                shutil.copyfileobj(response, f)
        except urllib.error.HTTPError as e:
            raise UserError(f"cannot download GLUE {task} from {url}: HTTP {e.code} "
                            f"{e.reason}") from None
        except (urllib.error.URLError, OSError) as e:
            raise UserError(f"cannot download GLUE {task} from {url} ({getattr(e, 'reason', e)})"
                            f": offline, fetch it elsewhere and unzip it into {glue_dir}") from None
        _unpack(archive, url, os.path.join(tmp, "unpacked"))
        unpacked = os.path.join(tmp, "unpacked", os.path.basename(folder))
        if not os.path.isfile(os.path.join(unpacked, "train.tsv")):
            raise UserError(f"{url} holds no {os.path.basename(folder)}/train.tsv: not GLUE's "
                            f"{ZIPS[task]}")
        shutil.rmtree(folder, ignore_errors=True)  # a folder without train.tsv: incomplete
        os.rename(unpacked, folder)  # whole or not at all
    return folder


def _unpack(archive: str, url: str, dest: str) -> None:
    try:
        with zipfile.ZipFile(archive) as z:
            for name in z.namelist():
                target = os.path.realpath(os.path.join(dest, name))
                if not target.startswith(os.path.realpath(dest) + os.sep):
                    raise UserError(f"{url}: the zip's entry {name!r} points outside its folder")
            z.extractall(dest)
    except zipfile.BadZipFile:
        raise UserError(f"{url} is not a zip file (a proxy's page?)") from None

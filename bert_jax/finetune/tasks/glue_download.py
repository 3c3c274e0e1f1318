"""GLUE's published zips fetched into a `glue_data/` folder: GLUE without tensorflow-datasets.

`download("sst2", "glue_data")` fetches `SST-2.zip` from the files GLUE publishes (the ones
tensorflow-datasets and `download_glue_data.py` fetch), unpacks it to `glue_data/SST-2/` and
returns that folder, ready for `--config.glue_dir`. A task already there is not fetched again.
Nothing needs TensorFlow: this is how the TPU runtime of Colab, which has none, gets SST-2.

The environment variable BERT_JAX_GLUE_URL points at a mirror holding the same zips.
"""
from __future__ import annotations

import os
import pathlib
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
_BLOCK = 8 << 20


def download(task: str, glue_dir: str, timeout: float = 60) -> str:
    """The task's folder in `glue_dir` (any path, a bucket's too), fetched and unpacked if missing.

    Unpacked beside the folder and renamed into place whole; what an interrupted call left there
    is removed by the next."""
    if task not in ZIPS:
        other = ("MRPC and the diagnostic set are not published as one zip: read them "
                 "through tensorflow-datasets (pip install 'bert_jax[tf]', "
                 "--config.tfds_download=true) or make glue_data with download_glue_data.py"
                 if task in glue_files.LAYOUTS else f"no GLUE task {task!r}")
        raise UserError(f"cannot download {task!r}: {other} (downloadable: {', '.join(ZIPS)})")
    folder = paths.join(glue_dir, glue_files.LAYOUTS[task].folder)
    if paths.isfile(paths.join(folder, "train.tsv")):
        return folder
    url = f"{os.environ.get('BERT_JAX_GLUE_URL', GLUE_URL).rstrip('/')}/{ZIPS[task]}"
    paths.makedirs(glue_dir)
    paths.remove_abandoned_siblings(folder)
    with tempfile.TemporaryFile() as archive:  # scratch space of this process, never a path
        _fetch(url, archive, task, glue_dir, timeout)
        tmp = paths.owned_temporary_sibling(folder)
        try:
            _unpack(archive, url, tmp)
            unpacked = paths.join(tmp, paths.basename(folder))
            if not paths.isfile(paths.join(unpacked, "train.tsv")):
                raise UserError(f"{url} holds no {paths.basename(folder)}/train.tsv: not "
                                f"GLUE's {ZIPS[task]}")
            paths.rmtree(folder, missing_ok=True)  # a folder without train.tsv: incomplete
            paths.move(unpacked, folder)
        finally:
            paths.rmtree(tmp, missing_ok=True)
    return folder


def _fetch(url: str, archive, task: str, glue_dir: str, timeout: float) -> None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            while block := response.read(_BLOCK):
                archive.write(block)
    except urllib.error.HTTPError as e:
        raise UserError(f"cannot download GLUE {task} from {url}: HTTP {e.code} "
                        f"{e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise UserError(f"cannot download GLUE {task} from {url} ({getattr(e, 'reason', e)})"
                        f": offline, fetch it elsewhere and unzip it into {glue_dir}") from None


def _unpack(archive, url: str, dest: str) -> None:
    """The zip's files under `dest`; an entry that would land outside it is refused."""
    try:
        with zipfile.ZipFile(archive) as z:
            members = [m for m in z.infolist() if not m.is_dir()]
            for member in members:
                name = pathlib.PurePosixPath(member.filename)
                if name.is_absolute() or ".." in name.parts:
                    raise UserError(f"{url}: the zip's entry {member.filename!r} points outside "
                                    "its folder")
            for member in members:
                target = paths.join(dest, *pathlib.PurePosixPath(member.filename).parts)
                paths.makedirs(paths.dirname(target))
                with z.open(member) as source, paths.open(target, "wb") as out:
                    while block := source.read(_BLOCK):
                        out.write(block)
    except zipfile.BadZipFile:
        raise UserError(f"{url} is not a zip file (a proxy's page?)") from None

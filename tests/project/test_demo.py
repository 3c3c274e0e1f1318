"""`make demo SMOKE=1`: every stage of the demo, a few steps each."""

import os
import subprocess
import sys

import pytest


@pytest.mark.long
def test_demo_smoke_runs_every_stage(tmp_path):
    workdir = tmp_path / "demo"
    result = subprocess.run(
        [sys.executable, "-m", "bert_jax.demo", "--workdir", str(workdir), "--smoke"],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "spam test accuracy: pretrained" in result.stdout
    assert (workdir / "demo.png").stat().st_size > 10_000
    for run in ("finetune_pretrained", "finetune_random"):
        assert (workdir / run / "eval_results.json").exists()
    assert list((workdir / "pretrain" / "checkpoints").iterdir())

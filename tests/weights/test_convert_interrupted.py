"""An interrupted `convert` leaves nothing hidden behind (issue 66): Ctrl-C or SIGTERM at any
moment of writing a model directory stops Orbax's writer threads before the temporary folder
is removed, and a later run into the same output removes what a killed run left."""

import glob
import os
import signal
import subprocess
import sys
import time

import pytest

from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer

transformers = pytest.importorskip("transformers")

VOCAB = os.path.join(DEFAULT_VOCAB, "vocab.txt")
# About 120 MB of float32 weights: writing them takes a moment to interrupt.
CONFIG = dict(vocab_size=len(open(VOCAB).read().splitlines()), hidden_size=512,
              num_hidden_layers=8, num_attention_heads=8, intermediate_size=2048,
              max_position_embeddings=128)


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf") / "model"
    transformers.BertForPreTraining(transformers.BertConfig(**CONFIG)).save_pretrained(folder)
    load_tokenizer(DEFAULT_VOCAB).save(str(folder))
    return str(folder)


def _hidden(folder):
    return glob.glob(os.path.join(folder, ".tmp-*"))


@pytest.mark.parametrize("signum, delay", [(signal.SIGINT, 0.0), (signal.SIGTERM, 0.3),
                                           (signal.SIGINT, 1.5)])
def test_a_stop_while_writing_leaves_no_temporary_folder(hf_model, tmp_path, signum, delay):
    """Cases: Ctrl-C as the write starts and 1.5 s into it, SIGTERM 0.3 s into it; a
    killed run's leftover (`.tmp-m-...-PID` of an ended process) is removed by the next run."""
    out = tmp_path / "out"
    stale = out / ".tmp-m-0123456789ab-999999999"  # a process id no process has
    os.makedirs(stale / "params")
    run = subprocess.Popen([sys.executable, "-m", "bert_jax.cli", "convert", "--from_hf",
                            hf_model, "--output", str(out / "m")],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not any(p != str(stale) for p in _hidden(out)) and run.poll() is None:
        assert time.time() < deadline, "the write never started"
        time.sleep(0.02)
    time.sleep(delay)
    run.send_signal(signum)
    _, err = run.communicate(timeout=120)
    assert _hidden(out) == [], err
    # A stop after the write has ended leaves the whole model; the exit code says whether the
    # command had ended too (0; the process ends at once, stopping.ProcessEnd) or not (130).
    assert run.returncode in (0, 130), err
    assert not (out / "m").exists() or os.path.isdir(out / "m" / "params")
    if run.returncode == 130:
        assert err.strip().count("\n") == 0, err  # one line

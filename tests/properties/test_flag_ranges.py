"""A count or index flag out of range is refused as the command parses its flags (issue 66):
one argparse line naming the flag and the value, exit 2, before any work, rather than a
library's words (`compile --search --workers 0` printed concurrent.futures' "max_workers
must be greater than 0")."""

import subprocess
import sys

import pytest

from bert_jax import cli

from helpers import REPO

CASES = [  # (argv, the flag refused)
    (["compile", "--config", "configs/pretrain.py", "--topology", "v4-8", "--search",
      "--workers", "0"], "--workers"),
    (["compile", "--config", "configs/pretrain.py", "--topology", "v4-8",
      "--num_slices", "-1"], "--num_slices"),
    (["create-data", "--output", "OUT", "--num_shards", "0"], "--num_shards"),
    (["create-data", "--output", "OUT", "--num_workers", "0"], "--num_workers"),
    (["create-data", "--output", "OUT", "--num_hosts", "0"], "--num_hosts"),
    (["create-data", "--output", "OUT", "--host_index", "-1"], "--host_index"),
    (["train-tokenizer", "--output", "OUT", "--vocab_size", "0"], "--vocab_size"),
    (["pretrain", "--workdir", "W", "--num_processes", "0"], "--num_processes"),
    (["create-data", "--output", "OUT", "--num_shards", "two"], "--num_shards"),
]


@pytest.mark.parametrize("argv, flag", CASES, ids=lambda c: c if isinstance(c, str) else None)
def test_a_count_out_of_range_is_refused_at_parsing(argv, flag, tmp_path, monkeypatch, capsys):
    """Cases: compile --workers 0, --num_slices -1; create-data --num_shards 0 and "two",
    --num_workers 0, --num_hosts 0, --host_index -1; train-tokenizer --vocab_size 0;
    pretrain --num_processes 0. Nothing is written."""
    monkeypatch.chdir(REPO)
    argv = [str(tmp_path / a) if a in ("OUT", "W") else a for a in argv]
    with pytest.raises(SystemExit) as stopped:
        cli.main(argv)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: must be an integer >= " in err, err
    assert list(tmp_path.iterdir()) == []


def test_the_google_research_script_refuses_a_zero_count(tmp_path):
    """Case: tools/create_pretraining_data.py --dupe_factor 0."""
    done = subprocess.run(
        [sys.executable, "tools/create_pretraining_data.py", "--input_file", "x.txt",
         "--output_file", str(tmp_path / "out.tfrecord"), "--vocab_file", "v.txt",
         "--dupe_factor", "0"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2
    assert "argument --dupe_factor: must be an integer >= 1, got '0'" in done.stderr

"""A count or index flag out of range is refused before any work in the commands' words
(`errors.check_positive`: one line, exit 2), rather than a library's (`compile --search
--workers 0` printed concurrent.futures' "max_workers must be greater than 0")."""

import pytest

from bert_jax import cli

from helpers import REPO
from helpers.words import assert_failure_line

CASES = [  # (argv, the line's message)
    (["compile", "--config", "configs/pretrain.py:tiny", "--topology", "v4-8", "--search",
      "--workers", "0"], "--workers must be an integer >= 1, got 0"),
    (["create-data", "--output", "OUT", "--num_hosts", "0"],
     "--num_hosts must be an integer >= 1, got 0"),
    (["create-data", "--output", "OUT", "--host_index", "-1"],
     "--host_index must be an integer >= 0, got -1"),
    (["pretrain", "--config", "configs/pretrain.py:tiny", "--workdir", "OUT",
      "--num_processes", "0"], "--num_processes must be an integer >= 1, got 0"),
]


@pytest.mark.parametrize("argv, message", CASES, ids=lambda c: c if isinstance(c, str) else None)
def test_a_count_out_of_range_is_refused_in_one_line(argv, message, tmp_path, monkeypatch,
                                                     capsys):
    """Cases: compile --search --workers 0; create-data --num_hosts 0, --host_index -1;
    pretrain --num_processes 0. Nothing is written."""
    monkeypatch.chdir(REPO)
    argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"bert-jax {argv[0]}: error: {message}\n", err
    assert_failure_line(err, argv[0])
    assert list(tmp_path.iterdir()) == []

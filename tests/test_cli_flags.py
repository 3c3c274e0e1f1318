"""One flag style for every command (`bert_jax.flags`): options are spelled with
underscores in every `--help`, the dashed spelling still parses, and an option renamed
since parses with one warning line."""

from __future__ import annotations

import re

import pytest

from bert_jax import cli, flags

# A multi-word long option spelled with dashes (`--max-seq-length`), anywhere in a help text.
DASHED = re.compile(r"(?<![\w-])--[a-z0-9]+(?:-[a-z0-9]+)+")


def help_text(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--help"])
    assert exit_.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_every_help_spells_options_with_underscores(command, capsys):
    text = help_text(command, capsys)
    assert text.startswith(f"usage: bert-jax {command}")
    assert DASHED.findall(text) == []


def test_the_help_of_multi_word_options_shows_one_spelling(capsys):
    text = help_text("embed", capsys)
    assert "--max_seq_length" in text and "--per_token" in text
    assert "max-seq-length" not in text


def parser(**kwargs) -> flags.ArgumentParser:
    p = flags.ArgumentParser(prog="bert-jax test", **kwargs)
    p.add_argument("--max_seq_length", type=int, default=128)
    p.add_argument("--init_from")
    p.add_argument("--per_token", action="store_true")
    p.add_argument("names", nargs="*")
    return p


@pytest.mark.parametrize("argv", [
    ["--max-seq-length", "64", "--per-token"],
    ["--max-seq-length=64", "--per_token"],
    ["--max_seq_length", "64", "--per-token"],
])
def test_the_dashed_spelling_is_the_same_option(argv, capsys):
    args = parser().parse_args(argv)
    assert (args.max_seq_length, args.per_token) == (64, True)
    assert capsys.readouterr().err == ""


def test_values_and_positionals_are_left_alone():
    args = parser().parse_args(["--init_from", "dir-with-dashes", "--", "--per-token"])
    assert args.init_from == "dir-with-dashes" and args.names == ["--per-token"]
    assert not args.per_token


def test_an_unknown_dashed_option_is_still_an_error(capsys):
    with pytest.raises(SystemExit):
        parser().parse_args(["--max-seq-lenght", "64"])
    assert "unrecognized arguments: --max-seq-lenght" in capsys.readouterr().err


def test_a_renamed_option_works_with_one_warning_line(capsys):
    p = parser(deprecated={"--init": "--init_from"})
    args = p.parse_args(["--init", "a", "--init=b"])
    assert args.init_from == "b"
    assert capsys.readouterr().err.splitlines() == [
        "bert-jax test: warning: --init is deprecated, use --init_from"]


def test_finetune_takes_the_old_init_flag_and_config_key_with_a_warning_each(tmp_path, capsys):
    """`--init` and `--config.dtype` still reach the run (its error names the old flag's
    directory), each with one warning line."""
    from test_train import REPO
    missing = str(tmp_path / "no_model")
    code = cli.main(["finetune", "--config", f"{REPO}/configs/finetune.py:csv,tiny",
                     "--init", missing, "--workdir", str(tmp_path / "run"),
                     "--config.dtype=bfloat16"])
    assert code == 2
    assert capsys.readouterr().err.splitlines() == [
        "bert-jax finetune: warning: --init is deprecated, use --init_from",
        "bert-jax: warning: --config.dtype is deprecated, use --config.compute_dtype",
        f"bert-jax finetune: error: no model directory at {missing}"]
    assert not (tmp_path / "run").exists()

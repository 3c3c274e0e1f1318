"""One flag style for every command (`bert_jax.flags`): options are spelled with
underscores in every `--help`, the dashed spelling still parses, and an option renamed
since parses with one warning line."""

from __future__ import annotations

import os
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
    from helpers import REPO
    missing = str(tmp_path / "no_model")
    code = cli.main(["finetune", "--config", f"{REPO}/configs/finetune.py:csv,tiny",
                     "--init", missing, "--workdir", str(tmp_path / "run"),
                     "--config.dtype=bfloat16"])
    assert code == 2
    assert capsys.readouterr().err.splitlines() == [
        "bert-jax finetune: warning: --init is deprecated, use --init_from",
        "bert-jax: warning: --config.dtype is deprecated, use --config.compute_dtype",
        f"bert-jax finetune: error: {missing}: no such directory (a model is a model "
        "directory, a pretraining or fine-tuning workdir, or hf:ORG/NAME)"]
    assert not (tmp_path / "run").exists()


# Each flag renamed when every command came to name one noun one way (the model a command
# reads: --model; what it writes: --output; its vocabulary: --tokenizer; create-data's
# booleans as the keys they set): (old, new, a command line whose FLAG is either spelling).
# {missing} does not exist, so each command fails at once, after parsing, in one line.
RENAMED = [
    ("--checkpoint", "--model",
     ["embed", "FLAG", "{missing}", "--input", "{missing}.txt", "--output", "{out}.npy"]),
    ("--workdir", "--model", ["evaluate", "FLAG", "{missing}"]),
    ("--workdir", "--model", ["predict", "FLAG", "{missing}", "--input", "{missing}.txt"]),
    ("--workdir", "--model", ["export", "FLAG", "{missing}", "--output", "{out}"]),
    ("--out", "--output", ["export", "--model", "{missing}", "FLAG", "{out}"]),
    ("--checkpoint", "--model", ["convert", "FLAG", "{missing}", "--to_hf", "{out}"]),
    ("--out", "--output", ["convert", "--from_hf", "{missing}", "FLAG", "{out}"]),
    ("--checkpoint", "--model",
     ["extend-vocab", "FLAG", "{missing}", "--add_tokens", "{missing}.txt", "--output", "{out}"]),
    ("--out", "--output",
     ["extend-vocab", "--model", "{missing}", "--add_tokens", "{missing}.txt", "FLAG", "{out}"]),
    ("--out", "--output", ["train-tokenizer", "--input", "{missing}.txt", "FLAG", "{out}"]),
    ("--output_dir", "--output", ["create-data", "--input", "{missing}.txt", "FLAG", "{out}"]),
    ("--vocab", "--tokenizer",
     ["create-data", "--input", "{missing}.txt", "--output", "{out}", "FLAG", "{missing}"]),
    ("--no_static_masking", "--dynamic_masking",
     ["create-data", "--input", "{missing}.txt", "--output", "{out}", "FLAG"]),
    ("--vocab", "--tokenizer", ["tokenize", "FLAG", "{missing}"]),
]


@pytest.mark.parametrize("old, new, argv", RENAMED,
                         ids=[f"{argv[0]} {old}" for old, _, argv in RENAMED])
def test_an_old_spelling_works_with_one_deprecation_line(old, new, argv, tmp_path, capsys):
    values = {"{missing}": str(tmp_path / "missing"), "{out}": str(tmp_path / "out")}

    def stderr_lines(flag: str) -> list[str]:
        args = [flag if a == "FLAG" else a for a in argv]
        for name, value in values.items():
            args = [a.replace(name, value) for a in args]
        assert cli.main(args) == 2  # parsed (argparse would exit), then the missing input
        return capsys.readouterr().err.splitlines()

    current = stderr_lines(new)
    assert len(current) == 1 and current[0].startswith(f"bert-jax {argv[0]}: error: "), current
    assert stderr_lines(old) == [
        f"bert-jax {argv[0]}: warning: {old} is deprecated, use {new}", *current]
    assert not os.path.exists(values["{out}"])


def test_a_boolean_option_takes_its_negation_in_either_spelling(capsys):
    p = flags.ArgumentParser(prog="bert-jax test")
    p.add_argument("--next_sentence_prediction", action=flags.BooleanOptionalAction, default=True)
    assert p.parse_args([]).next_sentence_prediction
    assert p.parse_args(["--next_sentence_prediction"]).next_sentence_prediction
    for negation in ("--no_next_sentence_prediction", "--no-next-sentence-prediction"):
        assert not p.parse_args([negation]).next_sentence_prediction
    assert capsys.readouterr().err == ""
    p.print_help()
    assert "--next_sentence_prediction, --no_next_sentence_prediction" in capsys.readouterr().out

"""`bert-jax COMMAND ...`: one entry point; each command parses its own flags.

Commands are imported lazily so `bert-jax tokenize` does not pay for JAX.
"""

from __future__ import annotations

import importlib
import os
import sys

from bert_jax import compile_cache

COMMANDS = {
    "train-tokenizer": ("bert_jax.tokenization.train", "train a WordPiece or SentencePiece vocabulary"),
    "tokenize": ("bert_jax.tokenization.cli", "tokenize stdin, one line per input line"),
    "create-data": ("bert_jax.data.create_pretraining_data", "text files -> MLM/NSP TFRecords"),
    "pretrain": ("bert_jax.train", "pretrain BERT (MLM + NSP) over a device mesh"),
    "finetune": ("bert_jax.finetune.cli", "fine-tune on GLUE, CSV/TSV/JSONL, CoNLL or SQuAD"),
    "evaluate": ("bert_jax.finetune.cli", "evaluate a fine-tuned workdir"),
    "predict": ("bert_jax.finetune.cli", "predict with a fine-tuned workdir"),
    "embed": ("bert_jax.embed", "one vector per input line"),
    "convert": ("bert_jax.convert.cli", "HF / Google TF checkpoints to and from bert_jax"),
    "extend-vocab": ("bert_jax.convert.extend_vocab", "add tokens to a model's vocabulary"),
    "export": ("bert_jax.export", "serving export of a fine-tuned model"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "usage: bert-jax COMMAND [FLAGS]  (bert-jax COMMAND --help)\n\ncommands:\n" + \
        "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"bert-jax: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    compile_cache.configure()  # before JAX is imported; see bert_jax/compile_cache.py
    module = importlib.import_module(COMMANDS[name][0])
    try:
        # Modules that serve several commands expose main(argv, command=...).
        if getattr(module, "MULTI_COMMAND", False):
            return module.main(rest, command=name) or 0
        return module.main(rest) or 0
    except (ValueError, OSError, KeyError) as e:
        # Bad input (files, configs, checkpoints) ends with one clear line, not a traceback;
        # BERT_JAX_DEBUG=1 shows the traceback.
        if os.environ.get("BERT_JAX_DEBUG"):
            raise
        message = e.args[0] if isinstance(e, KeyError) and e.args else e  # str() quotes it
        print(f"bert-jax {name}: error: {message}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

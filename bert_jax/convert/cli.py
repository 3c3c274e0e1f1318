"""`bert-jax convert`: published checkpoints to and from bert_jax model directories.

  bert-jax convert --from-hf HF_DIR --out MODEL_DIR
"""

from __future__ import annotations

import argparse
import json
import os

from bert_jax import pretrained


def _hf_do_lower_case(hf_dir: str) -> bool:
    """HF records casing in tokenizer_config.json; BERT's published vocabularies default
    to uncased."""
    path = os.path.join(hf_dir, "tokenizer_config.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return bool(json.load(f).get("do_lower_case", True))
    return True


def from_hf(hf_dir: str, out: str, overwrite: bool = False) -> pretrained.Pretrained:
    """Converts an HF BERT directory (config.json, weights, vocab.txt) to a model directory."""
    from bert_jax.convert.hf import load_hf_dir
    from bert_jax.tokenization import load_tokenizer

    vocab = os.path.join(hf_dir, "vocab.txt")
    if not os.path.exists(vocab):
        raise FileNotFoundError(f"no vocab.txt in {hf_dir}")
    config, params = load_hf_dir(hf_dir)
    tokenizer = load_tokenizer(vocab, do_lower_case=_hf_do_lower_case(hf_dir))
    if tokenizer.vocab_size != config.vocab_size:
        raise ValueError(f"{vocab} has {tokenizer.vocab_size} tokens but config.json says "
                         f"vocab_size={config.vocab_size}")
    pretrained.save(out, config, params, tokenizer=tokenizer, task=None, overwrite=overwrite)
    return pretrained.Pretrained(config, params, None, out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bert-jax convert", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-hf", metavar="DIR", help="Hugging Face BERT directory")
    parser.add_argument("--out", required=True, help="bert_jax model directory to write")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    args = parser.parse_args(argv)
    if args.from_hf:
        model = from_hf(args.from_hf, args.out, args.overwrite)
        print(f"wrote {args.out}: {model.config.num_hidden_layers} layers, hidden "
              f"{model.config.hidden_size}, vocab {model.config.vocab_size}")
    return 0

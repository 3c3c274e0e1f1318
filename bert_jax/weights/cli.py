"""`bert-jax convert`: published checkpoints to and from bert_jax model directories.

  bert-jax convert --from_hf HF_DIR --output MODEL_DIR
  bert-jax convert --from_tf1 GOOGLE_DIR --output MODEL_DIR
  bert-jax convert --model MODEL_DIR --to_hf HF_DIR

GOOGLE_DIR holds bert_model.ckpt.{index,data-*}, bert_config.json and vocab.txt
(as in Google's uncased_L-12_H-768_A-12.zip). MODEL_DIR may also be a
pretraining or fine-tuning workdir. Nothing is written when a conversion fails.
"""

from __future__ import annotations

import argparse

from bert_jax import flags
from bert_jax.host import outputs, workdir_kind
from bert_jax.weights.convert import from_hf, from_tf1, hf_architecture, to_hf  # noqa: F401


def main(argv: list[str]) -> int:
    parser = flags.ArgumentParser(prog="bert-jax convert", description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter,
                                  deprecated={"--lower_case": "--do_lower_case",
                                              "--no_lower_case": "--cased",
                                              "--checkpoint": "--model", "--out": "--output"})
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--from_hf", metavar="DIR",
                        help="Hugging Face BERT directory, or hf:ORG/NAME[@REVISION] on the Hub")
    source.add_argument("--from_tf1", metavar="DIR", help="Google TF1 BERT directory")
    source.add_argument("--model", metavar="MODEL_DIR",
                        help="bert_jax model directory or workdir to export (with --to_hf)")
    parser.add_argument("--output",
                        help="bert_jax model directory to write (with --from_hf or --from_tf1)")
    parser.add_argument("--to_hf", metavar="DIR", help="Hugging Face directory to write")
    case = parser.add_mutually_exclusive_group()
    case.add_argument("--do_lower_case", action="store_true", default=None,
                      help="--from_tf1: vocab.txt is uncased (default: guessed from the "
                           "directory name, uncased unless it says cased)")
    case.add_argument("--cased", dest="do_lower_case", action="store_false",
                      help="--from_tf1: vocab.txt is cased")
    parser.add_argument("--overwrite", action="store_true", help="replace the output if it exists")
    args = parser.parse_args(argv)
    source = {"--model": args.model, "--from_hf": args.from_hf, "--from_tf1": args.from_tf1}
    for flag, out in (("--output", args.output), ("--to_hf", args.to_hf)):
        if out:  # never a training run's folder, nor the input
            outputs.check_folder(flag, out, source, workdir_kind.MODEL)
    if args.model:
        if not args.to_hf or args.output:
            parser.error("--model takes --to_hf DIR (not --output)")
        for note in to_hf(args.model, args.to_hf, args.overwrite):
            print(f"note: {note}")
        print(f"wrote {args.to_hf}")
        return 0
    if not args.output or args.to_hf:
        parser.error("--from_hf/--from_tf1 take --output MODEL_DIR (not --to_hf)")
    if args.from_hf:
        model = from_hf(args.from_hf, args.output, args.overwrite)
    else:
        model = from_tf1(args.from_tf1, args.output, args.overwrite, args.do_lower_case)
    heads = [k for k in ("mlm", "nsp", "classifier", "qa_outputs") if k in model.params]
    print(f"wrote {args.output}: {model.config.num_hidden_layers} layers, hidden "
          f"{model.config.hidden_size}, vocab {model.config.vocab_size}, heads: "
          f"{', '.join(heads) or 'none'}")
    return 0

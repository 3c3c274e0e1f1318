"""The weights package's commands.

`bert-jax convert` (`bert_jax.weights.convert`) and `bert-jax extend-vocab`
(`bert_jax.weights.extend_vocab`): flags, output checks, what is printed."""

from __future__ import annotations

import argparse

from bert_jax import flags
from bert_jax.errors import UserError
from bert_jax.host import folders, outputs
from bert_jax.weights import convert, extend_vocab, pretrained


def convert_main(argv: list[str]) -> int:
    """`bert-jax convert`: parses `argv`, then converts one way or the other."""
    parser = flags.ArgumentParser(prog="bert-jax convert", description=convert.__doc__,
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
            outputs.check_folder(flag, out, source, folders.MODEL)
    if args.model:
        if not args.to_hf or args.output:
            parser.error("--model takes --to_hf DIR (not --output)")
        for note in convert.to_hf(args.model, args.to_hf, args.overwrite):
            print(f"note: {note}")
        print(f"wrote {args.to_hf}")
        return 0
    if not args.output or args.to_hf:
        parser.error("--from_hf/--from_tf1 take --output MODEL_DIR (not --to_hf)")
    if args.from_hf:
        model = convert.from_hf(args.from_hf, args.output, args.overwrite)
    else:
        model = convert.from_tf1(args.from_tf1, args.output, args.overwrite, args.do_lower_case)
    heads = [k for k in ("mlm", "nsp", "classifier", "qa_outputs") if k in model.params]
    print(f"wrote {args.output}: {model.config.num_hidden_layers} layers, hidden "
          f"{model.config.hidden_size}, vocab {model.config.vocab_size}, heads: "
          f"{', '.join(heads) or 'none'}")
    return 0


def extend_vocab_main(argv: list[str]) -> int:
    """`bert-jax extend-vocab`: parses `argv`, then writes the model with the new tokens."""
    parser = flags.ArgumentParser(prog="bert-jax extend-vocab", description=extend_vocab.__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter,
                                  deprecated={"--checkpoint": "--model", "--out": "--output"})
    parser.add_argument("--model", required=True, help="model directory or workdir")
    parser.add_argument("--add_tokens", required=True, metavar="FILE",
                        help="tokens to add, one per line")
    parser.add_argument("--output", required=True, help="model directory to write")
    parser.add_argument("--seed", type=int, default=0, help="seed of the new rows")
    parser.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    args = parser.parse_args(argv)
    outputs.check_folder("--output", args.output, {"--model": args.model,
                                                   "--add_tokens": args.add_tokens},
                         folders.MODEL)
    tokens = extend_vocab.read_token_file(args.add_tokens)
    if not tokens:
        raise UserError(f"{args.add_tokens} holds no tokens (empty, or blank lines only): "
                        "nothing to add; give one token per line")
    model = pretrained.load(args.model)
    config, params, tokenizer, summary = extend_vocab.extend(model, tokens, args.seed)
    pretrained.save(args.output, config, params, tokenizer=tokenizer, task=model.task,
                    overwrite=args.overwrite)
    print(f"wrote {args.output}: {len(summary['slots'])} tokens in [unused] slots, "
          f"{len(summary['appended'])} appended, {summary['already_known']} already known; "
          f"vocab_size {model.config.vocab_size} -> {config.vocab_size}")
    return 0

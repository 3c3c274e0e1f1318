"""The serving commands.

`bert-jax embed` (`bert_jax.serve.embed`) and `bert-jax export` (`bert_jax.serve.export`): flags,
checks of the inputs and outputs, what is printed."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from bert_jax import flags
from bert_jax.errors import UserError
from bert_jax.host import encoding, folders, outputs, paths
from bert_jax.models.config import ATTENTION_IMPLS
from bert_jax.serve import embed, export
from bert_jax.weights import pretrained, sentence_embedding


def _parse_layers(text: str) -> list[int]:
    """'-4,-3,-2,-1' -> [-4, -3, -2, -1]."""
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise UserError(f"--layers takes comma-separated integers such as -4,-3,-2,-1, "
                        f"got {text!r}") from None


def _read_lines(path: str) -> list[str]:
    """The lines of a UTF-8 text file, without their newlines."""
    return encoding.decode(paths.read_bytes(path), path).splitlines()


def embed_main(argv: list[str]) -> int:
    """`bert-jax embed`: parses `argv`, then writes one vector per input line.

    With --per_token, one vector per token."""
    parser = flags.ArgumentParser(prog="bert-jax embed", description=embed.__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter,
                                  deprecated={"--checkpoint": "--model"})
    parser.add_argument("--model", required=True,
                        help="model directory (bert-jax convert), pretraining workdir, "
                             "fine-tuning workdir or Hub model (hf:ORG/NAME[@REVISION])")
    parser.add_argument("--input", required=True, help="UTF-8 text, one input per line")
    parser.add_argument("--output", required=True,
                        help=".npy file of float32 [lines, hidden]; .npz with --per_token; "
                             "- writes it to stdout (a pipe, not a terminal)")
    parser.add_argument("--pooling", choices=embed.POOLINGS, default=None,
                        help="default: a sentence-transformers model's own (with its "
                             "normalisation), else cls")
    parser.add_argument("--layer", type=int, default=-1,
                        help="hidden state to pool: -1 last (default), 0 embeddings")
    parser.add_argument("--per_token", action="store_true",
                        help="features of every token (an .npz) instead of one vector a line")
    parser.add_argument("--layers", default=None,
                        help="--per_token: comma-separated hidden states, e.g. -4,-3,-2,-1 "
                             "(default: --layer)")
    parser.add_argument("--combine", choices=embed.COMBINES, default=None,
                        help="--per_token: how several --layers make one vector")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=None,
                        help="default: a sentence-transformers model's own, else 128")
    parser.add_argument("--attention_impl", choices=ATTENTION_IMPLS, default=None,
                        help="fused: jax.nn.dot_product_attention (cuDNN on GPU in bf16); "
                             "default: the model's (einsum unless it was set)")
    # `--layers -4,-3` would read as an unknown option to argparse: bind the value first.
    argv = list(argv)
    for i, arg in enumerate(argv[:-1]):
        if arg == "--layers":
            argv[i:i + 2] = [f"--layers={argv[i + 1]}"]
            break
    args = parser.parse_args(argv)
    outputs.check_file("--output", args.output, {"--input": args.input, "--model": args.model},
                       suffixes=(".npy", ".npz"))
    if paths.is_standard_output(args.output) and sys.stdout.isatty():
        raise UserError(f"--output {args.output} would print binary NumPy data on the terminal: "
                        "pipe it into a program (`| python -c ...`) or name a file")
    if args.per_token:
        return _main_per_token(args)
    for flag, value in (("--layers", args.layers), ("--combine", args.combine)):
        if value is not None:
            raise UserError(f"{flag} is for --per_token features (sentence vectors take "
                            "--layer and --pooling)")
    texts = _read_texts(args.input)
    model = pretrained.load(args.model)
    own = sentence_embedding.own_settings(model.tokenizer_dir, args.pooling)  # ST model's
    pooling = args.pooling or own.get("pooling", "cls")
    max_seq_length = own.get("max_seq_length", 128) if args.max_seq_length is None \
        else args.max_seq_length
    vectors = embed.embed_texts(model, texts, pooling=pooling, layer=args.layer,
                                batch_size=args.batch_size, max_seq_length=max_seq_length,
                                attention_impl=args.attention_impl)
    normalize = own.get("normalize") and pooling == own.get("pooling") and args.layer == -1
    if normalize:
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    with paths.replacing(args.output, "wb") as f:
        np.save(f, vectors)
    how = (f"{pooling} pooling" + (", normalised" if normalize else "")
           + (": the model's own" if own and not args.pooling and args.layer == -1 else ""))
    print(f"wrote {vectors.shape[0]} x {vectors.shape[1]} vectors to {_shown(args.output)} "
          f"({how})", file=_report_stream(args.output))
    return 0


def _shown(output: str) -> str:
    """`--output` as the report names it."""
    return "standard output" if output == paths.STDOUT else output


def _report_stream(output: str):
    """Where the report of writing `output` goes: stderr when the data went to stdout."""
    return sys.stderr if paths.is_standard_output(output) else sys.stdout


def _read_texts(path: str) -> list[str]:
    """The lines of `path`, one input each, refused when none has text.

    A blank line is an input, so that rows match lines."""
    texts = _read_lines(path)
    if not texts:
        raise UserError(f"{path} has no lines: nothing to embed")
    if not any(text.strip() for text in texts):
        raise UserError(f"{path} holds blank lines only: nothing to embed")
    return texts


def _main_per_token(args: argparse.Namespace) -> int:
    if args.pooling is not None:
        raise UserError("--pooling is for sentence vectors, not --per_token features")
    if not (args.output.endswith(".npz") or paths.is_standard_output(args.output)):
        raise UserError(f"--per_token writes an .npz archive: --output must end in .npz, "
                        f"got {args.output!r}")
    layers = _parse_layers(args.layers) if args.layers is not None else [args.layer]
    if len(layers) > 1 and args.combine is None:
        raise UserError(f"--layers names {len(layers)} layers: say how to combine them with "
                        f"--combine {'|'.join(embed.COMBINES)}")
    texts = _read_texts(args.input)
    model = pretrained.load(args.model)
    if args.max_seq_length is None:
        args.max_seq_length = sentence_embedding.read(model.tokenizer_dir).get(
            "max_seq_length", 128)
    features = embed.token_features(model, texts, layers=layers,
                                    combine=args.combine or "sum", batch_size=args.batch_size,
                                    max_seq_length=args.max_seq_length,
                                    attention_impl=args.attention_impl)
    with paths.replacing(args.output, "wb") as f:
        np.savez(f, **features)
    vectors = features["vectors"]
    print(f"wrote {vectors.shape[0]} token vectors of size {vectors.shape[1]} "
          f"({len(texts)} lines) to {_shown(args.output)}", file=_report_stream(args.output))
    return 0


def export_main(argv: list[str]) -> int:
    """`bert-jax export`: parses `argv`, then writes the serving artifacts."""
    parser = flags.ArgumentParser(prog="bert-jax export", description=export.__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter,
                                  deprecated={"--workdir": "--model", "--out": "--output"})
    parser.add_argument("--model", required=True,
                        help="fine-tuning workdir (its best model) or a model directory")
    parser.add_argument("--output", required=True, help="export directory to write")
    parser.add_argument("--format", default="jax,savedmodel",
                        help="comma-separated: jax (jax.export), savedmodel (TF via jax2tf)")
    parser.add_argument("--platforms", default=",".join(export.DEFAULT_PLATFORMS),
                        help="backends to lower for (cpu, cuda, tpu)")
    parser.add_argument("--max_seq_length", type=int, default=None,
                        help="truncation of the raw-string signatures (default: the task's)")
    parser.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    args = parser.parse_args(argv)
    outputs.check_folder("--output", args.output, {"--model": args.model}, folders.MODEL)
    formats = [f.strip() for f in args.format.split(",") if f.strip()]
    unknown = sorted(set(formats) - {"jax", "savedmodel"})
    if unknown or not formats:
        parser.error(f"--format takes jax and/or savedmodel, got {args.format!r}")
    spec = export.export(args.model, args.output, formats,
                         tuple(p.strip() for p in args.platforms.split(",")),
                         args.max_seq_length, args.overwrite)
    print(f"wrote {args.output}: {spec['kind']} model, {', '.join(spec['files'])} "
          f"({', '.join(spec['platforms'])}), outputs {', '.join(spec['outputs'])}")
    return 0

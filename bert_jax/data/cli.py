"""The commands of the data package.

`bert-jax create-data` and `bert-jax train-tokenizer` (flags, checks of the output folder, what is
printed) over `create_pretraining_data` and `build_vocab`, which parse no command line."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from bert_jax import flags
from bert_jax.data import build_vocab, chinese_words, corpus, record_formats
from bert_jax.data import create_pretraining_data as cpd
from bert_jax.data.data_stats import readable_summary
from bert_jax.data.options import DataOptions
from bert_jax.errors import UserError, check_positive
from bert_jax.host import folders, outputs, paths, stopping, workdir_lock
from bert_jax.tokenization import DEFAULT_VOCAB

_BOOLEAN_HELP = {
    "whole_word_masking": "mask whole words (Chinese words from --chinese_segmenter or "
                          "--chinese_ref_file)",
    "dynamic_masking": "write unmasked examples: pretraining with dynamic_masking=True masks "
                       "them anew every epoch",
    "next_sentence_prediction": "sentence pairs with next-sentence labels (default); "
                                "--no_next_sentence_prediction: MLM-only rows of contiguous "
                                "sentences (RoBERTa's FULL-SENTENCES)",
    "sentence_order_prediction": "ALBERT's sentence-order pairs (consecutive spans, swapped "
                                 "with p=0.5) instead of next-sentence pairs",
}


def _create_data_args(argv: list[str]) -> argparse.Namespace:
    parser = flags.ArgumentParser(prog="bert-jax create-data", description=cpd.__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter,
                                  deprecated={"--output_dir": "--output", "--vocab": "--tokenizer",
                                              "--no_static_masking": "--dynamic_masking"})
    parser.add_argument("--input", nargs="+", default=[corpus.DEFAULT_CORPUS],
                        help="text files or globs; default: the embedded corpus")
    parser.add_argument("--output", required=True, help="folder of the TFRecord shards")
    parser.add_argument("--tokenizer", default=DEFAULT_VOCAB,
                        help="tokenizer directory, vocab.txt or .model; default: embedded vocab")
    case = parser.add_mutually_exclusive_group()
    case.add_argument("--do_lower_case", dest="do_lower_case", action="store_true", default=None)
    case.add_argument("--cased", dest="do_lower_case", action="store_false")
    for name, default in DataOptions().create_data_fields().items():
        if isinstance(default, bool):  # --KEY / --no_KEY, as the pretraining config spells it
            parser.add_argument(f"--{name}", action=flags.BooleanOptionalAction,
                                default=default, help=_BOOLEAN_HELP[name])
            continue
        parser.add_argument(f"--{name}", type=type(default), default=default,
                            **({"choices": chinese_words.SEGMENTERS}
                               if name == "chinese_segmenter" else
                               {"choices": chinese_words.KNOWLEDGE_MASKING}
                               if name == "knowledge_masking" else {}))
    parser.add_argument("--chinese_ref_file", nargs="+", default=[],
                        help="whole-word masking: reference segmentations (a line of "
                        "space-separated words per input line), one per input file")
    parser.add_argument("--num_shards", type=int, default=4)
    parser.add_argument("--num_workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no_progress", action="store_true")
    parser.add_argument("--format", choices=record_formats.FORMATS, default="tfrecord",
                        help="the shards' format: TFRecord (what pretraining reads) or "
                        "ArrayRecord (random access, written with group_size:1)")
    parser.add_argument("--beam_pipeline_options", default=None, metavar="KEY=VALUE,...",
                        help="run the conversion as an Apache Beam pipeline with these options "
                        "(pip install 'bert_jax[beam]'): runner=FnApiRunner (the default, in "
                        "this process; add direct_running_mode=multi_processing,"
                        "direct_num_workers=N for N processes), DataflowRunner, FlinkRunner, "
                        "SparkRunner; the same shards as without it")
    parser.add_argument("--num_hosts", type=int, default=1,
                        help="deprecated (use --beam_pipeline_options): split the input files "
                        "over this many hosts (one run each, writing OUTPUT/parts); then "
                        "--assemble once")
    parser.add_argument("--host_index", type=int, default=0,
                        help="deprecated with --num_hosts: this host's index in [0, --num_hosts)")
    parser.add_argument("--assemble", action="store_true",
                        help="deprecated with --num_hosts: make the shards and summary.json "
                        "from every host's parts")
    return parser.parse_args(argv)


def _options(args: argparse.Namespace) -> DataOptions:
    return DataOptions(**{name: getattr(args, name) for name in DataOptions().create_data_fields()})


def write_and_report(args, options: DataOptions, output_files: list[str],
                     summary_dir: str | None) -> None:
    """Shared by `create_data_main` and tools/create_pretraining_data.py.

    converts, saves the summary, then prints a short one and a last line naming the rows, shards,
    folder and the command that reads them."""
    host_index, num_hosts = getattr(args, "host_index", 0), getattr(args, "num_hosts", 1)
    stats = cpd.create_pretraining_data(
        args.input, output_files, args.tokenizer, options, args.do_lower_case,
        args.num_workers, progress=not getattr(args, "no_progress", False),
        chinese_ref_files=getattr(args, "chinese_ref_file", []),
        summary_path=paths.join(summary_dir, folders.DATA_FOLDER.summary) if summary_dir else None,
        parts_dir=paths.join(args.output, folders.DATA_FOLDER.parts) if num_hosts > 1 else None,
        host_index=host_index, num_hosts=num_hosts,
        beam_options=getattr(args, "beam_pipeline_options", None))
    stale = cpd.remove_stale_shards(summary_dir, output_files) if summary_dir and num_hosts == 1 \
        else []
    if stale:
        print(f"removed {len(stale)} shard(s) of an earlier run from {summary_dir} "
              f"(written with another --num_shards or --format)", file=sys.stderr)
    for line in readable_summary(stats):
        print(f"  {line}")
    if num_hosts > 1:
        parts = paths.join(args.output, folders.DATA_FOLDER.parts)
        print(f"host {host_index} of {num_hosts}: {stats.instances:,} rows converted into "
              f"{parts}; when every host is done, run once: "
              f"bert-jax create-data --output {args.output} --num_shards "
              f"{len(output_files)} --assemble")
        return
    print(_last_line(stats.instances, output_files))


def _last_line(rows: int, output_files: list[str]) -> str:
    folder = paths.dirname(paths.abspath(output_files[0]))
    kind, suffix = (("ArrayRecord shard(s)", "*.array_record")
                    if output_files[0].endswith(".array_record") else ("shard(s)", "*.tfrecord"))
    return (f"wrote {rows:,} rows in {len(output_files)} {kind} to {folder}; pretrain on "
            f"them: bert-jax pretrain --config.input_files='{paths.join(folder, suffix)}'")


def _deprecation(args: argparse.Namespace) -> None:
    """The hand-run host split is replaced by a Beam pipeline: one line with the equivalent."""
    if args.num_hosts == 1 and not args.assemble:
        return
    inputs = " ".join(args.input)
    print("bert-jax create-data: --num_hosts, --host_index and --assemble are deprecated and go "
          "in the next release; one command converts on many machines instead: bert-jax "
          f"create-data --input {inputs} --output {args.output} --num_shards {args.num_shards} "
          "--beam_pipeline_options=runner=DataflowRunner,project=PROJECT,region=REGION,"
          "temp_location=gs://BUCKET/tmp,extra_packages=dist/bert_jax-VERSION.tar.gz "
          "(docs/pretraining.md, \"Many machines\")", file=sys.stderr)


def _check_output_dir(output_dir: str) -> None:
    """The shards go into a data folder, never among a training run's or a model's files."""
    if paths.exists(output_dir) and not paths.isdir(output_dir):
        raise UserError(f"--output {output_dir} is a file: the output is a folder (its "
                        "shards and summary.json); choose a folder")
    kind = folders.kind_of(output_dir)
    if kind not in (None, folders.DATA):
        raise UserError(f"--output {output_dir} holds a {kind} run "
                        f"({folders.COMMANDS[kind]}): write the TFRecords into a folder "
                        "of their own")


def create_data_main(argv: list[str]) -> int:
    """`bert-jax create-data`: parses `argv`, then converts under the output folder's lock."""
    args = _create_data_args(argv)
    check_positive("--num_shards", args.num_shards)
    check_positive("--num_workers", args.num_workers)
    check_positive("--num_hosts", args.num_hosts)
    check_positive("--host_index", args.host_index, allow_zero=True)
    if args.beam_pipeline_options is not None and (args.num_hosts > 1 or args.assemble):
        raise UserError("--beam_pipeline_options runs the whole conversion: leave out "
                        "--num_hosts, --host_index and --assemble")
    _deprecation(args)
    output_files = cpd.shard_paths(args.output, args.num_shards, args.format)
    _check_output_dir(args.output)
    # A run on several hosts writes only its own parts: no lock, no shared file.
    lock = workdir_lock.hold(args.output, "create-data") if args.num_hosts == 1 \
        else contextlib.nullcontext()
    with stopping.stop_on_signals("create-data"), lock:
        if args.num_hosts == 1:
            cpd.remove_stale_temporaries(args.output)
        if args.assemble:
            stats = cpd.assemble(args.output, args.num_shards, args.num_workers)
            print(_last_line(stats.instances, output_files))
        else:
            write_and_report(args, _options(args), output_files, args.output)
    return 0


def train_tokenizer_main(argv: list[str]) -> int:
    """`bert-jax train-tokenizer`: parses `argv`, trains, saves."""
    parser = flags.ArgumentParser(prog="bert-jax train-tokenizer",
                                  description=build_vocab.__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter,
                                  deprecated={"--out": "--output"})
    parser.add_argument("--input", nargs="+", default=[corpus.DEFAULT_CORPUS],
                        help="text files or globs (BERT format, .gz accepted); "
                        "default: the embedded corpus")
    parser.add_argument("--vocab_size", type=int, default=8192)
    parser.add_argument("--type", choices=["wordpiece", "unigram", "bpe"], default="wordpiece")
    parser.add_argument("--cased", action="store_true", help="keep case and accents (WordPiece)")
    parser.add_argument("--output", required=True, help="tokenizer directory to write")
    args = parser.parse_args(argv)
    # Never into a model's or a run's folder: its embeddings were trained for its vocabulary.
    outputs.check_folder("--output", args.output, {"--input": corpus.expand_inputs(args.input)},
                         None)
    tokenizer = build_vocab.train_tokenizer(args.input, args.vocab_size, args.type,
                                            args.output, do_lower_case=not args.cased)
    print(f"wrote a {args.type} vocabulary of {tokenizer.vocab_size} tokens to {args.output}")
    return 0

#!/usr/bin/env python3
"""Drop-in for google-research/bert's create_pretraining_data.py (same flag names).

    python tools/create_pretraining_data.py --input_file=a.txt,b.txt.gz \
        --output_file=out-0.tfrecord,out-1.tfrecord --vocab_file=vocab.txt \
        --do_lower_case=True --max_seq_length=128 --max_predictions_per_seq=20 \
        --masked_lm_prob=0.15 --random_seed=12345 --dupe_factor=5

Extra flags: --num_workers. Output files are the shards (comma-separated).
"""
import argparse
import sys

from bert_jax import flags
from bert_jax.cli import report_failure
from bert_jax.data.cli import write_and_report
from bert_jax.data.options import DataOptions


def _bool(value: str) -> bool:
    if value.lower() in ("1", "true", "yes"):
        return True
    if value.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def main(argv) -> int:
    parser = flags.ArgumentParser(description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input_file", required=True)
    parser.add_argument("--output_file", required=True)
    parser.add_argument("--vocab_file", required=True)
    parser.add_argument("--do_lower_case", type=_bool, nargs="?", const=True, default=True)
    parser.add_argument("--do_whole_word_mask", type=_bool, nargs="?", const=True, default=False)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--max_predictions_per_seq", type=int, default=20)
    parser.add_argument("--random_seed", type=int, default=12345)
    parser.add_argument("--dupe_factor", type=int, default=10)
    parser.add_argument("--masked_lm_prob", type=float, default=0.15)
    parser.add_argument("--short_seq_prob", type=float, default=0.1)
    parser.add_argument("--num_workers", type=int, default=1)
    args = parser.parse_args(argv)
    args.input = [args.input_file]
    args.tokenizer = args.vocab_file
    outputs = [p for p in args.output_file.split(",") if p]
    # Google's flag names end here: bert_jax spells them as its config keys.
    options = DataOptions(max_seq_length=args.max_seq_length,
                          max_predictions_per_seq=args.max_predictions_per_seq,
                          masked_lm_prob=args.masked_lm_prob, short_seq_prob=args.short_seq_prob,
                          dupe_factor=args.dupe_factor, seed=args.random_seed,
                          whole_word_masking=args.do_whole_word_mask)
    try:
        write_and_report(args, options, outputs, summary_dir=None)
    except Exception as e:  # noqa: BLE001 - one line, exit code as bert-jax's (cli.main)
        return report_failure(parser.prog, e)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

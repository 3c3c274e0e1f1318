"""`bert-jax tokenize`: text on stdin -> tokens (or ids) on stdout, one line per line."""
import sys
from typing import List

from bert_jax import flags
from bert_jax.encoding import decode_line
from bert_jax.tokenization import DEFAULT_VOCAB, TokenizerError, load_tokenizer


def main(argv: List[str]) -> int:
    parser = flags.ArgumentParser(prog="bert-jax tokenize", description=__doc__)
    parser.add_argument("--vocab", default=DEFAULT_VOCAB,
                        help="tokenizer directory, vocab.txt or SentencePiece .model")
    parser.add_argument("--cased", action="store_true",
                        help="a cased vocab.txt: keep case and accents")
    parser.add_argument("--ids", action="store_true", help="print ids instead of tokens")
    args = parser.parse_args(argv)
    try:
        tokenizer = load_tokenizer(args.vocab, do_lower_case=False if args.cased else None)
    except TokenizerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    stdin = open(sys.stdin.fileno(), "rb", closefd=False)
    offset = 0
    for number, raw in enumerate(stdin, 1):  # bytes that are not UTF-8: one line naming it
        encoding = tokenizer.encode(decode_line(raw, "stdin", number, offset).rstrip("\r\n"))
        offset += len(raw)
        items = encoding.ids if args.ids else encoding.tokens
        sys.stdout.write(" ".join(map(str, items)) + "\n")
    sys.stdout.flush()
    return 0

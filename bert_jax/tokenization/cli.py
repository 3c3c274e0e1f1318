"""`bert-jax tokenize`: text on stdin -> tokens (or ids) on stdout, one line per line."""
import sys
from typing import List

from bert_jax import flags
from bert_jax.host import encoding as codecs
from bert_jax.tokenization import DEFAULT_VOCAB, load_tokenizer


def tokenize_main(argv: List[str]) -> int:
    """`bert-jax tokenize`: parses `argv`, then tokenizes stdin line by line."""
    parser = flags.ArgumentParser(prog="bert-jax tokenize", description=__doc__,
                                  deprecated={"--vocab": "--tokenizer"})
    parser.add_argument("--tokenizer", default=DEFAULT_VOCAB,
                        help="tokenizer directory, vocab.txt or SentencePiece .model "
                        "(default: the bundled vocabulary)")
    parser.add_argument("--cased", action="store_true",
                        help="a cased vocab.txt: keep case and accents")
    parser.add_argument("--ids", action="store_true", help="print ids instead of tokens")
    parser.add_argument("--encoding", default=codecs.DEFAULT,
                        help="of stdin, e.g. latin-1 (default: UTF-8; bytes that are not "
                        "UTF-8 are refused naming the line)")
    args = parser.parse_args(argv)
    tokenizer = load_tokenizer(args.tokenizer, do_lower_case=False if args.cased else None)
    codecs.check_name(args.encoding)
    for line in _stdin_lines(args.encoding):
        encoding = tokenizer.encode(line.rstrip("\r\n"))
        items = encoding.ids if args.ids else encoding.tokens
        sys.stdout.write(" ".join(map(str, items)) + "\n")
    sys.stdout.flush()
    return 0


def _stdin_lines(codec: str):
    """stdin's lines: UTF-8 (bytes that are not: one line naming them), or `codec`."""
    stdin = open(sys.stdin.fileno(), "rb", closefd=False)
    if not codecs.is_default(codec):
        yield from codecs.named_lines(stdin, "stdin", codec)
        return
    offset = 0
    for number, raw in enumerate(stdin, 1):
        yield codecs.decode_line(raw, "stdin", number, offset)
        offset += len(raw)

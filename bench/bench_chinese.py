"""The Chinese recipe, end to end, on ../shared/data/chinese (see docs/chinese.md).

1. train a Chinese WordPiece vocabulary on People's Daily (1998-01) and the review texts;
2. create-data once: People's Daily with its hand segmentation as the reference for
   whole-word masking (`--chinese_ref_file`), the unlabelled training reviews with
   jieba's; the records carry `word_start`, so one set of files serves both maskings;
3. pretrain the same small model twice for the same number of steps: whole-word
   masking, and character-level masking (BERT's Chinese default);
4. fine-tune each, and the same architecture from random initialisation, on
   (a) review sentiment (test accuracy) and (b) character-level NER from People's
   Daily's nr/ns/nt tags (entity F1, with and without the CRF).

    python bench/bench_chinese.py --workdir /work/runs/chinese [--pretrain-steps N] [--smoke]

Every figure is printed as measured, and saved to WORKDIR/results.json.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
CONFIGS = os.path.join(REPO, "configs")
DATA = os.path.join(REPO, "..", "shared", "data", "chinese")
SEQ_LENGTH, PREDICTIONS = 128, 20
PARAGRAPHS_PER_DOCUMENT = 5  # People's Daily marks no article boundaries
ENTITY = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
SENTENCE_END = {"。", "！", "？"}


def paragraphs(data: str, limit: int | None) -> list[list[tuple[str, str]]]:
    """People's Daily paragraphs as [(word, tag)]."""
    result = []
    with gzip.open(os.path.join(data, "people_daily_199801.tagged.txt.gz"), "rt",
                   encoding="utf-8") as f:
        for line in f:
            pairs = [tuple(item.rsplit("/", 1)) for item in line.split()]
            if pairs:
                result.append([(w, t) for w, t in pairs if w.strip()])
            if limit and len(result) == limit:
                break
    return result


def sentences(paragraph):
    """Splits a paragraph after 。！？ into sentences of (word, tag)."""
    current = []
    for word, tag in paragraph:
        current.append((word, tag))
        if word in SENTENCE_END:
            yield current
            current = []
    if current:
        yield current


def char_tags(sentence) -> list[tuple[str, str]]:
    """(character, BIO tag): nr/ns/nt words are PER/LOC/ORG; adjacent nr words are one
    person (MSRA style: 江/nr 泽民/nr)."""
    out, previous = [], None
    for word, tag in sentence:
        kind = ENTITY.get(tag)
        inside = kind is not None and kind == "PER" and previous == "nr"
        for i, ch in enumerate(word):
            if ch.isspace():
                continue
            out.append((ch, "O" if kind is None else
                        f"{'I' if i or inside else 'B'}-{kind}"))
        previous = tag
    return out


def write_data(workdir: str, paras, reviews_dir: str, review_limit: int | None) -> dict:
    """Pretraining text + reference segmentations, review texts + jieba segmentation,
    NER CoNLL splits (every 10th paragraph dev, the next test)."""
    import jieba
    os.makedirs(workdir, exist_ok=True)
    paths = {name: os.path.join(workdir, name) for name in
             ("pd.txt", "pd.ref", "reviews.txt", "reviews.ref", "vocab_corpus.txt",
              "ner_train.conll", "ner_dev.conll", "ner_test.conll")}
    with open(paths["pd.txt"], "w", encoding="utf-8") as text, \
            open(paths["pd.ref"], "w", encoding="utf-8") as ref:
        for index, paragraph in enumerate(paras):
            for sentence in sentences(paragraph):
                text.write("".join(w for w, _ in sentence) + "\n")
                ref.write(" ".join(w for w, _ in sentence) + "\n")
            if (index + 1) % PARAGRAPHS_PER_DOCUMENT == 0:
                text.write("\n")
                ref.write("\n")
    with open(os.path.join(reviews_dir, "train.tsv"), encoding="utf-8") as f:
        reviews = [line.rstrip("\n").split("\t", 1)[1] for line in f][1:review_limit]
    with open(paths["reviews.txt"], "w", encoding="utf-8") as text, \
            open(paths["reviews.ref"], "w", encoding="utf-8") as ref:
        for review in reviews:  # a review per document, a sentence per line
            for sentence in re.split(r"(?<=[。！？!?；;])", " ".join(review.split())):
                if sentence.strip():
                    text.write(sentence.strip() + "\n")
                    ref.write(" ".join(w for w in jieba.cut(sentence.strip()) if w.strip())
                              + "\n")
            text.write("\n")
            ref.write("\n")
    with open(paths["vocab_corpus.txt"], "w", encoding="utf-8") as out:
        for name in ("pd.txt", "reviews.txt"):
            with open(paths[name], encoding="utf-8") as f:
                shutil.copyfileobj(f, out)
    splits = {"ner_train.conll": [], "ner_dev.conll": [], "ner_test.conll": []}
    for index, paragraph in enumerate(paras):
        name = {8: "ner_dev.conll", 9: "ner_test.conll"}.get(index % 10, "ner_train.conll")
        splits[name] += [char_tags(s) for s in sentences(paragraph)]
    for name, rows in splits.items():
        with open(paths[name], "w", encoding="utf-8") as f:
            for sentence in rows:
                if sentence:
                    f.write("".join(f"{ch}\t{tag}\n" for ch, tag in sentence) + "\n")
    return paths


def train_vocab(paths: dict, out: str, size: int) -> str:
    from bert_jax.tokenization import build_vocab
    if not os.path.exists(os.path.join(out, "vocab.txt")):
        build_vocab.train_tokenizer([paths["vocab_corpus.txt"]], size, "wordpiece", out)
    return out


def create_data(paths: dict, vocab: str, out: str, dupe: int) -> list[str]:
    from bert_jax.data import create_pretraining_data as cpd
    outputs = cpd.shard_paths(out, 8)
    if all(os.path.exists(p) for p in outputs):
        return outputs
    options = cpd.Options(max_seq_length=SEQ_LENGTH, max_predictions_per_seq=PREDICTIONS,
                          dupe_factor=dupe, static_masking=False, do_whole_word_mask=True)
    stats = cpd.create_pretraining_data(
        [paths["pd.txt"], paths["reviews.txt"]], outputs, vocab, options,
        num_workers=2, progress=False,
        chinese_ref_files=[paths["pd.ref"], paths["reviews.ref"]])
    print(json.dumps(stats.summary()))
    return outputs


def pretrain(workdir: str, data: list[str], vocab: str, steps: int, whole_words: bool,
             smoke: bool) -> dict:
    from bert_jax.config_loader import load_config
    from bert_jax.pretrain import train_and_evaluate
    config = load_config(f"{CONFIGS}/pretrain.py:tiny", [
        f"--config.input_files={','.join(data)}",
        f"--config.tokenizer={vocab}",
        f"--config.whole_word_masking={whole_words}",
        f"--config.num_train_steps={steps}",
        f"--config.max_seq_length={SEQ_LENGTH}",
        f"--config.max_predictions_per_seq={PREDICTIONS}",
        "--config.global_batch_size=64",
        "--config.learning_rate=2e-3",
        f"--config.warmup_steps={max(1, steps // 10)}",
        f"--config.log_every_steps={max(1, min(50, steps // 10))}",
        f"--config.eval_every_steps={steps}",
        f"--config.checkpoint_every_steps={steps}",
        f"--config.eval_steps={2 if smoke else 20}",
    ])
    start = time.time()
    result = train_and_evaluate(config, workdir)
    result["seconds"] = round(time.time() - start, 1)
    return result


def finetune(workdir: str, init: str, vocab: str, task: str, overrides: list[str],
             smoke: bool) -> dict:
    from bert_jax.config_loader import load_config
    from bert_jax.finetune.cli import run_finetune
    base = [f"--config.init={init}", f"--config.tokenizer={vocab}", "--config.model=tiny",
            f"--config.max_seq_length={SEQ_LENGTH}", "--config.global_batch_size=32",
            "--config.num_train_epochs=3", "--config.log_every_steps=100000"]
    if smoke:
        base += ["--config.max_train_examples=64", "--config.max_eval_examples=64",
                 "--config.num_train_epochs=1"]
    config = load_config(f"{CONFIGS}/finetune.py:{task},tiny", base + overrides)
    if os.path.exists(os.path.join(workdir, "eval_results.json")):
        with open(os.path.join(workdir, "eval_results.json")) as f:
            return json.load(f)
    return run_finetune(config, workdir)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="/work/runs/chinese")
    parser.add_argument("--data", default=DATA,
                        help="the shared Chinese data (People's Daily, reviews/)")
    parser.add_argument("--pretrain-steps", type=int, default=300,
                        help="per pretraining run (about 8 minutes on 2 cores)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--review-examples", type=int, default=2000,
                        help="labelled reviews to fine-tune on (of 13,926)")
    parser.add_argument("--ner-sentences", type=int, default=3000,
                        help="NER training sentences (a random subset)")
    parser.add_argument("--review-pooling", choices=["pooler", "mean"], default="pooler",
                        help="the review classifier's input (see docs/chinese.md)")
    parser.add_argument("--smoke", action="store_true", help="every stage in a few minutes")
    parser.add_argument("--fresh", action="store_true", help="delete WORKDIR first")
    args = parser.parse_args(argv)
    if not os.path.exists(os.path.join(args.data, "people_daily_199801.tagged.txt.gz")):
        print(f"error: the Chinese data is not at {args.data}", file=sys.stderr)
        return 2
    reviews_dir = os.path.join(args.data, "reviews")
    if args.fresh:
        shutil.rmtree(args.workdir, ignore_errors=True)
    work = args.workdir
    steps = 10 if args.smoke else args.pretrain_steps
    start = time.time()
    print("== 1/5 data: People's Daily sentences + reference words, reviews, NER splits")
    paths = write_data(os.path.join(work, "text"),
                       paragraphs(args.data, 300 if args.smoke else None), reviews_dir,
                       200 if args.smoke else None)
    print("== 2/5 train-tokenizer: a Chinese WordPiece vocabulary")
    vocab = train_vocab(paths, os.path.join(work, "vocab"), 2000 if args.smoke else args.vocab_size)
    print("== 3/5 create-data with whole-word masking from the reference segmentation")
    data = create_data(paths, vocab, os.path.join(work, "data"), 1 if args.smoke else 2)
    results = {"pretrain": {}, "reviews": {}, "ner": {}, "crf_ner": {}}
    inits = {"random init": ""}
    for name, whole_words in (("whole-word masking", True), ("character masking", False)):
        print(f"== 4/5 pretrain {steps} steps, {name}")
        directory = os.path.join(work, "pretrain_" + ("wwm" if whole_words else "char"))
        result = pretrain(directory, data, vocab, steps, whole_words, args.smoke)
        results["pretrain"][name] = {"eval_mlm_accuracy": result.get("eval", {}).get(
            "mlm_accuracy"), "seconds": result["seconds"]}
        inits[name] = directory
    reviews = [f"--config.train_file={reviews_dir}/train.tsv",
               f"--config.validation_file={reviews_dir}/dev.tsv",
               f"--config.test_file={reviews_dir}/test.tsv",
               f"--config.max_train_examples={64 if args.smoke else args.review_examples}",
               f"--config.pooling={args.review_pooling}"]
    ner = [f"--config.train_file={paths['ner_train.conll']}",
           f"--config.validation_file={paths['ner_dev.conll']}",
           f"--config.test_file={paths['ner_test.conll']}",
           f"--config.max_train_examples={64 if args.smoke else args.ner_sentences}"]
    for name, init in inits.items():
        tag = name.split()[0]
        print(f"== 5/5 fine-tune from {name}: reviews, NER, NER+CRF")
        r = finetune(os.path.join(work, f"reviews_{tag}"), init, vocab, "csv", reviews,
                     args.smoke)
        results["reviews"][name] = r["test"]["accuracy"]
        for key, crf in (("ner", False), ("crf_ner", True)):
            r = finetune(os.path.join(work, f"{key}_{tag}"), init, vocab, "conll",
                         ner + [f"--config.crf={crf}"], args.smoke)
            results[key][name] = r["test"]["f1"]
    results["minutes"] = round((time.time() - start) / 60, 1)
    with open(os.path.join(work, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    print(f"\npretraining ({steps} steps each): "
          + "; ".join(f"{k}: held-out MLM accuracy {v['eval_mlm_accuracy']:.3f} in "
                      f"{v['seconds'] / 60:.1f} min" for k, v in results["pretrain"].items()))
    print(f"{'init':<22}{'reviews acc':>12}{'NER F1':>9}{'NER+CRF F1':>12}")
    for name in inits:
        print(f"{name:<22}{results['reviews'][name]:>12.4f}{results['ner'][name]:>9.4f}"
              f"{results['crf_ner'][name]:>12.4f}")
    print(f"total {results['minutes']} min; {os.path.join(work, 'results.json')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Does pretraining pay for Chinese NER? The Chinese recipe end to end on CPU.

1. a Chinese WordPiece vocabulary trained on the unlabelled corpus;
2. create-data with whole-word masking (jieba's segmentation), MLM only;
3. the model pretrained for --pretrain_steps (held-out MLM accuracy, minutes);
4. character-level NER fine-tuned from it and from random initialisation with the same
   recipe, --seeds each: test entity F1, mean and std (np.std, as `--config.seeds`).

The NER files may use any tag scheme the `conll` task reads (BIO, IOB1, BIOES, BILOU,
BMES). Without --ner_dev, fine-tuning keeps the last epoch (no selection) and its
per-epoch validation curve is the test set's.

    python bench/bench_chinese.py --corpus corpus.txt --ner_train train.conll \\
        --ner_test test.conll --workdir runs/zh
    python bench/bench_chinese.py --people_daily ../shared/data/chinese --workdir runs/zh

--people_daily writes the corpus and the NER splits from People's Daily 1998-01
(`people_daily_splits`) into WORKDIR/text first. Stages whose outputs exist are
reused (delete WORKDIR or pass --fresh to rerun). The last line printed is one JSON
object: {"mlm_accuracy", "ner_f1": {"pretrained": {"mean", "std"}, "random": {...}},
"minutes"}; WORKDIR/results.json holds it with every run's F1 and curve.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
CONFIGS = os.path.join(REPO, "configs")
# Pretraining rows as long as the NER windows (configs/finetune.py:conll,tiny): positions
# past 64 would never be used, and half-length rows are twice the steps in the budget.
SEQ_LENGTH, PREDICTIONS = 64, 10
ENTITY = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
SENTENCE_END = {"。", "！", "？"}
PARAGRAPHS_PER_DOCUMENT = 5  # People's Daily marks no article boundaries


# --- People's Daily 1998-01 as a corpus and NER splits ---------------------------------

def paragraphs(data: str, limit: int | None = None) -> list[list[tuple[str, str]]]:
    """People's Daily paragraphs as [(word, part-of-speech tag)]."""
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


def people_daily_splits(data: str, out: str, limit: int | None = None) -> dict[str, str]:
    """WORKDIR/text/{corpus.txt, ner_train, ner_dev, ner_test.conll}: every 10th paragraph
    NER dev, the next test, the rest NER train; the corpus (a sentence per line, a blank
    line every 5 paragraphs) holds only the training paragraphs, so pretraining never
    reads the text of the evaluation sentences."""
    os.makedirs(out, exist_ok=True)
    names = ("corpus.txt", "ner_train.conll", "ner_dev.conll", "ner_test.conll")
    paths = {name: os.path.join(out, name) for name in names}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    splits: dict[str, list] = {name: [] for name in names[1:]}
    with open(paths["corpus.txt"], "w", encoding="utf-8") as corpus:
        for index, paragraph in enumerate(paragraphs(data, limit)):
            split = {8: "ner_dev.conll", 9: "ner_test.conll"}.get(index % 10, "ner_train.conll")
            splits[split] += [char_tags(s) for s in sentences(paragraph)]
            if split == "ner_train.conll":
                corpus.writelines("".join(w for w, _ in s) + "\n" for s in sentences(paragraph))
                if (index + 1) % PARAGRAPHS_PER_DOCUMENT == 0:
                    corpus.write("\n")
    for name, rows in splits.items():
        with open(paths[name], "w", encoding="utf-8") as f:
            f.writelines("".join(f"{ch}\t{tag}\n" for ch, tag in s) + "\n" for s in rows if s)
    return paths


# --- the recipe --------------------------------------------------------------------------

def train_vocab(corpus: str, out: str, size: int) -> str:
    from bert_jax.data import build_vocab
    if not os.path.exists(os.path.join(out, "vocab.txt")):
        build_vocab.train_tokenizer([corpus], size, "wordpiece", out)
    return out


def create_data(corpus: str, vocab: str, out: str, dupe: int) -> list[str]:
    """Whole-word-masked MLM-only rows (no next-sentence task: the budget goes to MLM)."""
    from bert_jax.data import create_pretraining_data as cpd
    from bert_jax.data.options import DataOptions
    outputs = cpd.shard_paths(out, 8)
    if all(os.path.exists(p) for p in outputs):
        return outputs
    options = DataOptions(max_seq_length=SEQ_LENGTH, max_predictions_per_seq=PREDICTIONS,
                          dupe_factor=dupe, dynamic_masking=True, whole_word_masking=True,
                          next_sentence_prediction=False)
    stats = cpd.create_pretraining_data([corpus], outputs, vocab, options, num_workers=2,
                                        progress=False)
    print(json.dumps(stats.summary()))
    return outputs


def pretrain(workdir: str, data: list[str], vocab: str, args) -> dict:
    from bert_jax.pretrain.job import train_and_evaluate
    from bert_jax.train.config_loader import load_config
    steps = args.pretrain_steps
    config = load_config(f"{CONFIGS}/pretrain.py:tiny", [
        # No dropout by default: 1.3 passes over the rows do not overfit, and the model
        # learns more per step without it (docs/chinese.md).
        f"--config.model={_with_dropout(args.model, args.pretrain_dropout)!r}",
        f"--config.input_files={','.join(data)}",
        f"--config.tokenizer={vocab}",
        "--config.next_sentence_prediction=false",
        "--config.whole_word_masking=true",  # the records' jieba words, regrouped each epoch
        f"--config.num_train_steps={steps}",
        f"--config.max_seq_length={SEQ_LENGTH}",
        f"--config.max_predictions_per_seq={PREDICTIONS}",
        f"--config.global_batch_size={args.pretrain_batch}",
        f"--config.learning_rate={args.pretrain_lr}",
        f"--config.warmup_steps={max(1, steps // 10)}",
        f"--config.log_every_steps={max(1, min(50, steps // 10))}",
        f"--config.eval_every_steps={steps}",
        f"--config.checkpoint_every_steps={steps}",
        f"--config.eval_steps={args.eval_steps}",
        f"--config.eval_fraction={args.eval_fraction}",
        *args.pretrain_override,
    ])
    settings = {k: getattr(args, k) for k in ("model", "vocab_size", "dupe_factor",
                                                "pretrain_steps", "pretrain_batch",
                                                "pretrain_lr", "pretrain_dropout",
                                                "eval_steps", "eval_fraction",
                                                "pretrain_override")}
    done = os.path.join(workdir, "bench_pretraining.json")
    if os.path.exists(done):  # the same pretraining, finished: reused with its figures
        with open(done) as f:
            figures = json.load(f)
        if figures.pop("settings", None) == settings:
            return figures
    start = time.time()
    result = train_and_evaluate(config, workdir)
    minutes = (time.time() - start) / 60
    tokens = [row["train/tokens_per_second"] for row in _metrics(workdir)
              if "train/tokens_per_second" in row]
    figures = {"mlm_accuracy": result.get("eval", {}).get("mlm_accuracy"),
               "minutes": round(minutes, 2),
               # the training steps' rate (median over the log), and over the whole stage
               # (start-up, compilation, evaluation and checkpointing included)
               "tokens_per_second": round(float(np.median(tokens)), 1) if tokens else None,
               "stage_tokens_per_second": round(
                   steps * args.pretrain_batch * SEQ_LENGTH / (minutes * 60), 1)}
    with open(done, "w") as f:
        json.dump({**figures, "settings": settings}, f)
    return figures


def _with_dropout(model: str, rate: float) -> dict:
    """The model setting (a preset name or a dict literal) with its dropout set to `rate`."""
    from bert_jax.train.config_loader import parse_value  # how --config.model reads it
    spec = parse_value(model)
    spec = spec if isinstance(spec, dict) else {"preset": model}
    return {**spec, "hidden_dropout_prob": rate, "attention_probs_dropout_prob": rate}


def _metrics(workdir: str) -> list[dict]:
    with open(os.path.join(workdir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def finetune_ner(workdir: str, init: str, vocab: str, seed: int, args) -> dict:
    """One NER run (configs/finetune.py:conll,tiny plus the bench's settings): test F1
    and the validation F1 after each epoch."""
    from bert_jax.finetune.cli import run_finetune
    from bert_jax.train.config_loader import load_config
    results_file = os.path.join(workdir, "eval_results.json")
    if not os.path.exists(results_file):
        overrides = [f"--config.init_from={init}", f"--config.tokenizer={vocab}",
                     f"--config.model={args.model}", f"--config.seed={seed}",
                     f"--config.train_file={args.ner_train}",
                     f"--config.validation_file={args.ner_dev or args.ner_test}",
                     f"--config.test_file={args.ner_test}",
                     f"--config.num_train_epochs={args.ner_epochs}",
                     f"--config.keep_checkpoint={'best' if args.ner_dev else 'last'}",
                     f"--config.crf={args.ner_head == 'crf'}",
                     "--config.log_every_steps=100000", *args.ner_override]
        if args.ner_sentences:
            overrides.append(f"--config.max_train_examples={args.ner_sentences}")
        if args.ner_validation_sentences:
            overrides.append(f"--config.max_eval_examples={args.ner_validation_sentences}")
        run_finetune(load_config(f"{CONFIGS}/finetune.py:conll,tiny", overrides), workdir)
    with open(results_file) as f:
        results = json.load(f)
    curve = [round(row["validation/f1"], 4) for row in _metrics(workdir)
             if "validation/f1" in row]
    return {"test_f1": results["test"]["f1"], "validation_f1_per_epoch": curve}


def main(argv=None) -> int:
    from bert_jax import flags
    parser = flags.ArgumentParser(description=__doc__,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--corpus", help="unlabelled Chinese text: a sentence or paragraph "
                        "per line, blank lines between documents")
    parser.add_argument("--ner_train", help="CoNLL file, one character per line, any scheme")
    parser.add_argument("--ner_test")
    parser.add_argument("--ner_dev", help="selects the epoch (default: keep the last)")
    parser.add_argument("--people_daily", metavar="DIR",
                        help="write the corpus and NER splits from People's Daily 1998-01 "
                             "(DIR/people_daily_199801.tagged.txt.gz) and use them")
    parser.add_argument("--model", default="tiny", help="model preset (both inits)")
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--dupe_factor", type=int, default=2)
    parser.add_argument("--pretrain_steps", type=int, default=2000)
    parser.add_argument("--pretrain_batch", type=int, default=64)
    parser.add_argument("--pretrain_lr", type=float, default=2e-3)
    parser.add_argument("--pretrain_dropout", type=float, default=0.0,
                        help="the model's dropout in pretraining (fine-tuning keeps its own)")
    parser.add_argument("--pretrain_override", action="append", default=[],
                        metavar="--config.KEY=VALUE", help="more pretraining settings")
    parser.add_argument("--eval_steps", type=int, default=20, help="held-out MLM batches")
    parser.add_argument("--eval_fraction", type=float, default=0.01,
                        help="share of the pretraining rows held out for the MLM accuracy")
    parser.add_argument("--ner_sentences", type=int, default=8000,
                        help="NER training sentences, a seed-dependent random subset (0: all)")
    parser.add_argument("--ner_validation_sentences", type=int, default=1000,
                        help="validation sentences scored after each epoch (0: all; the "
                             "test set is always scored whole)")
    parser.add_argument("--ner_epochs", type=float, default=3)
    parser.add_argument("--ner_head", choices=("crf", "softmax"), default="crf",
                        help="tag decoder of both inits (the finetune config's `crf`)")
    parser.add_argument("--ner_override", action="append", default=[],
                        metavar="--config.KEY=VALUE", help="more fine-tuning settings")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--fresh", action="store_true", help="delete WORKDIR first")
    parser.add_argument("--prepare_only", action="store_true",
                        help="write the data and the vocabulary, print their paths, stop")
    args = parser.parse_args(argv)
    if args.fresh:
        shutil.rmtree(args.workdir, ignore_errors=True)
    start = time.time()
    if args.people_daily:
        source = os.path.join(args.people_daily, "people_daily_199801.tagged.txt.gz")
        if not os.path.exists(source):
            print(f"error: --people_daily: no {source}", file=sys.stderr)
            return 2
        paths = people_daily_splits(args.people_daily, os.path.join(args.workdir, "text"))
        args.corpus = args.corpus or paths["corpus.txt"]
        args.ner_train = args.ner_train or paths["ner_train.conll"]
        args.ner_dev = args.ner_dev or paths["ner_dev.conll"]
        args.ner_test = args.ner_test or paths["ner_test.conll"]
    missing = [f"--{k}" for k in ("corpus", "ner_train", "ner_test")
               if not getattr(args, k)]
    absent = [p for p in (args.corpus, args.ner_train, args.ner_test, args.ner_dev)
              if p and not os.path.exists(p)]
    if missing or absent:
        problem = f"missing {', '.join(missing)}" if missing else f"no file {absent[0]}"
        print(f"error: {problem} (or pass --people_daily DIR)", file=sys.stderr)
        return 2
    seeds = [int(s) for s in args.seeds.split(",")]
    print("== 1/4 train-tokenizer: a Chinese WordPiece vocabulary", flush=True)
    vocab = train_vocab(args.corpus, os.path.join(args.workdir, "vocab"), args.vocab_size)
    if args.prepare_only:
        print(json.dumps({"corpus": args.corpus, "ner_train": args.ner_train,
                          "ner_dev": args.ner_dev, "ner_test": args.ner_test, "vocab": vocab}))
        return 0
    print("== 2/4 create-data: whole-word masking (jieba), MLM only", flush=True)
    data = create_data(args.corpus, vocab, os.path.join(args.workdir, "data"),
                       args.dupe_factor)
    print(f"== 3/4 pretrain {args.model} for {args.pretrain_steps} steps", flush=True)
    pretrained_dir = os.path.join(args.workdir, "pretrain")
    pretraining = pretrain(pretrained_dir, data, vocab, args)
    print(f"pretraining: {json.dumps(pretraining)}", flush=True)
    runs = {}
    for init_name, init in (("pretrained", pretrained_dir), ("random", "")):
        for seed in seeds:
            print(f"== 4/4 NER from {init_name} init, seed {seed}", flush=True)
            runs[f"{init_name}_seed{seed}"] = run = finetune_ner(
                os.path.join(args.workdir, f"ner_{init_name}_seed{seed}"), init, vocab, seed,
                args)
            print(f"{init_name} seed {seed}: {json.dumps(run)}", flush=True)
    ner_f1 = {}
    for init_name in ("pretrained", "random"):
        scores = [runs[f"{init_name}_seed{s}"]["test_f1"] for s in seeds]
        ner_f1[init_name] = {"mean": round(float(np.mean(scores)), 4),
                             "std": round(float(np.std(scores)), 4)}
    summary = {"mlm_accuracy": pretraining["mlm_accuracy"], "ner_f1": ner_f1,
               "minutes": round((time.time() - start) / 60, 1)}
    with open(os.path.join(args.workdir, "results.json"), "w") as f:
        json.dump({**summary, "pretraining": pretraining, "runs": runs,
                   "settings": vars(args)}, f, indent=2)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

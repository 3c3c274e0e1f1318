"""Token classification: CoNLL-style column files (`conll`) and tfds `conll2003` (NER).

Each word's tag is predicted at its first sub-token; the other sub-tokens carry no
label. NER tag sets (IOB2/BIO, IOB1, IOBES, BILOU, BMES: `tag_schemes`, detected from
the training tags or set by `tag_scheme`) are scored at entity level with seqeval's
semantics and predictions are written in the training file's scheme; other tag sets
(e.g. part of speech) by token accuracy, which is reported for every tag set.
`crf=True` adds a linear-chain CRF over the words.

A sentence longer than `max_seq_length - 2` word pieces is split into windows of
whole words (like SQuAD's `doc_stride` or the `stride` of HF's token-classification
pipeline): consecutive windows share the longest run of whole words of at most
`tagging_stride` tokens (default `max_seq_length // 4`). Training labels every word
of every window; at evaluation each word takes the tag of the window where it has
the most context, min(tokens left of it, tokens right of it), ties to the earlier
window (BERT's max-context rule). A single word longer than a window keeps its first
pieces. With `crf=True` the CRF (training and Viterbi) runs within each window.

Raw text to tag (`predict`, `Finetuned.predict`) is split into words the way
character-level CoNLL data is (`text_io.split_words`: in a text with Chinese every
non-space character is a word, as Chinese NER corpora put one character per line).
Predictions give one tag per word with its character offsets, hence per Chinese
character, and the entities as character spans of the original string.
"""

from __future__ import annotations

import collections

import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.errors import UserError
from bert_jax.finetune import files
from bert_jax.finetune.tasks import crf, metrics, tag_schemes
from bert_jax.finetune.tasks.base import Task, check_known_labels, register
from bert_jax.host import paths
from bert_jax.host.folders import FINETUNING_WORKDIR
from bert_jax.models import heads, losses, task_heads
from bert_jax.tokenization.text_io import (
    rewrite_tags,
    tagged_entities,
    text_example,
    word_token_spans,
)


def word_token_positions(tokenizer, words: list[str], max_tokens: int):
    """Tokenizes the words joined by spaces, with at most `max_tokens` ids.

    Returns (token ids, position of each word's first token or -1 when it was cut or produced no
    token)."""
    ids, starts, ends = word_token_spans(tokenizer, words)
    first = [s if s < e and s < max_tokens else -1 for s, e in zip(starts, ends)]
    return ids[:max_tokens], first


def word_windows(starts: list[int], ends: list[int], max_tokens: int,
                 stride: int) -> list[tuple[int, int]]:
    """[first word, end word) of windows of at most `max_tokens` tokens covering every word.

    Consecutive windows share the longest run of whole words of at most `stride` tokens that still
    lets the next window reach a new word. Both the first and the end word grow at every step, so
    this ends for any stride."""
    num_words = len(starts)
    if num_words == 0:
        return [(0, 0)]
    spans, first = [], 0
    while True:
        end = first + 1  # at least one word, cut if it alone is too long
        while end < num_words and ends[end] - starts[first] <= max_tokens:
            end += 1
        spans.append((first, end))
        if end == num_words:
            return spans
        first = next((w for w in range(first + 1, end)
                      if ends[end - 1] - starts[w] <= stride
                      and ends[end] - starts[w] <= max_tokens), end)


def window_token_range(window, starts, ends, max_tokens) -> tuple[int, int]:
    """Token [start, end) of a word window (a single over-long word is cut)."""
    first, end = window
    if first == end:
        return 0, 0
    return starts[first], min(ends[end - 1], starts[first] + max_tokens)


def max_context_windows(windows, token_ranges, starts, ends) -> list[int]:
    """For each word, the window where min(tokens left, tokens right of the word) is largest.

    Ties go to the earlier one (BERT's `_check_is_max_context`)."""
    best, best_score = [0] * len(starts), [-1] * len(starts)
    for index, ((first, end), (lo, hi)) in enumerate(zip(windows, token_ranges)):
        for w in range(first, end):
            score = max(0, min(starts[w] - lo, hi - ends[w]))
            if score > best_score[w]:
                best[w], best_score[w] = index, score
    return best


def resolve_stride(config, max_seq_length: int) -> int:
    """`tagging_stride` (default max_seq_length // 4), checked against the window."""
    stride = config.tagging_stride
    if stride is None:
        stride = max_seq_length // 4
    window = max_seq_length - 2
    if isinstance(stride, bool) or not isinstance(stride, (int, np.integer)) \
            or not 0 <= stride < window:
        raise UserError(f"tagging_stride must be an integer in [0, {window}) (the window is "
                        f"max_seq_length - 2 = {window} tokens), got {stride!r}")
    return int(stride)


def _tag_where(example, word: int) -> str | None:
    """'PATH:LINE' of a sentence's word when it was read from a CoNLL file."""
    lines = getattr(example, "lines", None)
    return f"{example.path}:{lines[word]}" if lines else None


class TaggingTask(Task):
    sequence_keys = ("label_ids", "label_weights")
    supports_packing = True
    eval_splits = ("validation",)

    def __init__(self, config, name: str):
        super().__init__(config)
        self.name = name
        self.label_names: list[str] = []
        self.scheme: str | None = None  # a tag_schemes.SCHEMES name; None: not NER
        self.label_bias: tuple[float, ...] | None = None  # log label frequencies (training)
        self.use_crf = bool(config.crf)
        self.supports_packing = not self.use_crf  # the CRF would chain across examples
        if name == "conll":
            self.test_split = "test" if config.test_file else None

    # --- data ---
    def load(self, split):
        if self.name == "conll2003":
            rows = files.tfds_examples("conll2003", {"validation": "dev"}.get(split, split),
                                       data_dir=self.config.tfds_data_dir,
                                       download=self.config.tfds_download)
            names = self._tfds_names()
            return [{"words": [files.text(w) for w in r["tokens"]],
                     "tags": [names[int(t)] for t in r["ner"]][:len(r["tokens"])]}
                    for r in rows]
        key = {"train": "train_file", "validation": "validation_file", "test": "test_file"}[split]
        path = self.config[key]
        if not path:
            raise UserError(f"task 'conll' needs --config.{key}")
        if files.table_format(path) in ("csv", "jsonl"):  # (a .tsv may be CoNLL columns)
            raise UserError(f"{path} is a {files.table_format(path).upper()} table, but "
                            f"{self.model_name()} is a token tagging model, which reads CoNLL "
                            "column files: a token and its tag a line, blank lines between "
                            "sentences")
        return files.read_conll(path, self.config.tag_column)

    @staticmethod
    def _tfds_names():
        import tensorflow_datasets as tfds
        return tfds.builder("conll2003").info.features["ner"].feature.names

    def is_labeled(self, example):
        return example.get("tags") is not None

    def prepare(self, train_examples):
        counts = collections.Counter(t for ex in train_examples for t in ex["tags"] or ())
        if not counts:
            raise UserError(f"{self.config.train_file or 'the training data'} has no "
                            "tag column: training needs a token and its tag on each line "
                            "(e.g. 'Paris B-LOC'), blank lines between sentences")
        if self.name == "conll2003":
            self.label_names = list(self._tfds_names())
        else:
            # `O` (the usual majority) first: it is also the tag of words without tokens.
            self.label_names = sorted(counts, key=lambda t: (t != "O", -counts[t], t))
        # The classifier starts at the label frequencies (a tag never seen: one count), so
        # the first steps need not learn the prior (see docs/chinese.md).
        total = sum(counts.values()) + len(self.label_names)
        self.label_bias = tuple(float(np.log(max(counts[t], 1) / total))
                                for t in self.label_names)
        self.scheme = tag_schemes.resolve_scheme(
            self.config.tag_scheme, (ex["tags"] for ex in train_examples if ex["tags"]))
        self._set_metric()

    def check_labels(self, examples):
        """Refuses a tag training did not see (`base.unseen_label`), naming its file:line."""
        check_known_labels(((tag, _tag_where(ex, i)) for ex in examples
                            for i, tag in enumerate(ex.get("tags") or ())),
                           self.label_names, noun="tag")

    def _set_metric(self):
        self.entity_level = self.scheme is not None
        self.selection_metric = "f1" if self.entity_level else "token_accuracy"

    def head(self):
        return task_heads.Head("crf_tagging" if self.use_crf else "tagging",
                               len(self.label_names))

    def spec(self):
        return {**super().spec(), "family": "tagging", "label_names": self.label_names,
                "num_labels": len(self.label_names), "crf": self.use_crf,
                "tag_scheme": self.scheme}

    def restore_spec(self, spec):
        self.label_names = spec["label_names"]
        self.use_crf = spec.get("crf", False)
        # (older workdirs saved no scheme: read it from the label names)
        self.scheme = spec["tag_scheme"] if "tag_scheme" in spec else tag_schemes.detect(
            [[t] for t in self.label_names])
        self._set_metric()

    def featurize(self, examples, tokenizer, max_seq_length, *, training):
        stride = resolve_stride(self.config, max_seq_length)
        if not training:  # scored against a tag it cannot predict, a word would count wrong
            self.check_labels(examples)
        pair_format = tokenizer.pair_format  # [CLS] words [SEP], or the family's row
        max_tokens = max_seq_length - pair_format.num_added(False)
        features = []
        for example_index, ex in enumerate(examples):
            ids, starts, ends = word_token_spans(tokenizer, ex["words"])
            windows = word_windows(starts, ends, max_tokens, stride)
            ranges = [window_token_range(w, starts, ends, max_tokens) for w in windows]
            best = max_context_windows(windows, ranges, starts, ends)
            for index, (window, (lo, hi)) in enumerate(zip(windows, ranges)):
                input_ids, segment_ids = pair_format.build(ids[lo:hi])
                labels, weights, positions = self._window_labels(
                    ex, starts, ends, window, lo - pair_format.text_start, len(input_ids),
                    training=training)
                features.append({
                    "input_ids": input_ids, "segment_ids": segment_ids, "label_ids": labels,
                    "label_weights": weights,
                    # outputs[i] belongs to features[i], so each window has its own index.
                    "feature_index": len(features), "_example_index": example_index,
                    "_word_positions": positions,
                    "_max_context": [b == index for b in best]})
        return features

    def _window_labels(self, ex, starts, ends, window, offset, length, *, training):
        """(label ids, label weights, sub-token positions) for the words of `window`.

        The positions are those of each sentence word's first sub-token in the feature, or -1; token
        i is at position i - offset."""
        index = {t: i for i, t in enumerate(self.label_names)}
        labels = np.zeros(length, np.int32)
        weights = np.zeros(length, np.float32)
        positions = [-1] * len(starts)
        for word in range(*window):
            if starts[word] == ends[word]:
                continue  # no token: predicted as the first label
            positions[word] = position = starts[word] - offset
            if ex.get("tags") is not None:
                tag = ex["tags"][word] if word < len(ex["tags"]) else None
                if tag not in index and training:
                    continue
                labels[position] = index.get(tag, 0)
                weights[position] = 1.0
        return labels, weights, positions

    def examples_from_inputs(self, inputs):
        examples = []
        for i, item in enumerate(inputs):
            if isinstance(item, str):
                examples.append(text_example(item))
                continue
            if not (isinstance(item, (list, tuple)) and all(isinstance(w, str) for w in item)):
                raise UserError(f"input {i}: expected a text or a list of words, "
                                f"got {item!r:.80}")
            examples.append({"words": list(item), "tags": None})
        return examples

    def read_inputs(self, path):
        if files.table_format(path) == "jsonl":
            rows, columns = files.read_table(path)
            for row in rows:
                if not any(key in row for key in ("tokens", "words", "text")):
                    raise self._not_taggable(f"{files.where(row, path)} has no 'tokens', "
                                             "'words' or 'text' key", columns)
            return [{"words": r["tokens"] if "tokens" in r else r["words"], "tags": None}
                    if "tokens" in r or "words" in r else text_example(str(r["text"]))
                    for r in rows]
        if path.endswith((".conll", ".bio", ".iob")):
            return [{"words": s["words"], "tags": None} for s in files.read_conll(path)]
        rows, columns = files.read_table(path)
        if rows and "text" not in columns:
            raise self._not_taggable(f"{path} has no 'text' column", columns)
        return [text_example(r["text"]) for r in rows]

    def _not_taggable(self, what: str, columns: list[str]) -> UserError:
        """The refusal of an input file with nothing to tag (a classification table, say)."""
        tags = ", ".join(self.label_names[:6]) + (", ..." if len(self.label_names) > 6 else "")
        return UserError(f"{self.model_name()} is a token tagging model (conll-style tags: "
                         f"{tags}); --input {what} (its columns: "
                         f"{', '.join(map(repr, columns)) or 'none'}): give it plain text lines "
                         "or a 'text' column to tag, JSONL rows with 'tokens' (a list of "
                         "words), or a CoNLL file (.conll, .bio, .iob); a file of labeled texts "
                         "needs a classification model")

    # --- model ---
    def model(self, config):
        bias = self.label_bias if self.config.label_prior_bias else None
        if self.use_crf:
            return crf.BertForTokenClassificationCRF(config, len(self.label_names), bias)
        return heads.BertForTokenClassification(config, len(self.label_names), bias)

    def loss(self, outputs, batch):
        weights = batch["label_weights"]
        if self.use_crf:
            emissions, transitions, start, end = outputs
            mask, emissions, tags = crf.compact(weights, emissions, batch["label_ids"])
            nll = -crf.log_likelihood(emissions, tags, mask, transitions, start, end)
            # Sentence log-likelihoods per word (the words of the batch).
            return {"loss": (jnp.sum(nll * batch["example_weights"]),
                             jnp.sum(mask).astype(jnp.float32))}
        weights = weights * self.row_weights(batch)
        return {"loss": losses.weighted_cross_entropy(outputs, batch["label_ids"], weights),
                "token_accuracy": losses.weighted_accuracy(outputs, batch["label_ids"], weights)}

    @staticmethod
    def row_weights(batch):
        """[B, 1] example weights for unpacked rows; packed rows' filler has no labels."""
        w = batch["example_weights"]
        return w[:, None] if w.ndim == 1 else 1.0

    def check_distillable(self):
        if self.use_crf:
            raise UserError("a CRF tagger cannot be distilled (no per-token distribution)")

    def soft_loss(self, student, teacher, batch, temperature):
        """KL between the tag distributions of each labeled token."""
        weights = batch["label_weights"] * self.row_weights(batch)
        return losses.distillation_kl(student, teacher, temperature, weights)

    def eval_outputs(self, outputs, batch):
        if not self.use_crf:  # the probabilities are what an ensemble averages
            return {"tags": jnp.argmax(outputs, axis=-1).astype(jnp.int32),
                    "probabilities": jax.nn.softmax(outputs.astype(jnp.float32), axis=-1)}
        emissions, transitions, start, end = outputs
        weights = batch["label_weights"]
        mask, emissions, positions = crf.compact(
            weights, emissions, jnp.broadcast_to(jnp.arange(weights.shape[1]), weights.shape))
        path = crf.viterbi(emissions, mask, transitions, start, end)
        tags = jnp.zeros(weights.shape, jnp.int32)
        rows = jnp.arange(weights.shape[0])[:, None]
        return {"tags": tags.at[rows, positions].set(jnp.where(mask, path, 0))}

    def combine_outputs(self, outputs):
        """Per token, the tag of the mean probabilities; a CRF's best paths do not average."""
        if self.use_crf:
            raise UserError("a CRF tagger decodes whole paths, which do not average: "
                            "ensemble taggers trained without --config.crf")
        probabilities = np.mean([o["probabilities"] for o in outputs], axis=0)
        return {"tags": np.argmax(probabilities, axis=-1), "probabilities": probabilities}

    # --- results ---
    def _word_tags(self, features, outputs) -> list[list[str]]:
        """One tag per word of each example, in example order.

        Each word takes the tag of the window marked as its max-context one (`_max_context`)."""
        by_example: dict[int, list[str]] = {}
        for feature, out in zip(features, outputs):
            tags = by_example.setdefault(feature["_example_index"],
                                         [self.label_names[0]] * len(feature["_word_positions"]))
            for word, (position, best) in enumerate(zip(feature["_word_positions"],
                                                        feature["_max_context"])):
                if position >= 0 and best:
                    tags[word] = self.label_names[int(out["tags"][position])]
        return [by_example[i] for i in range(len(by_example))]

    def evaluate(self, examples, features, outputs):
        predicted = self._word_tags(features, outputs)
        gold = [ex["tags"] for ex in examples]
        scores = metrics.token_accuracy(predicted, gold)
        if self.entity_level:
            scores.update(metrics.entity_scores(predicted, gold))
        return scores

    def predict(self, examples, features, outputs):
        """Records {'words', 'tags', 'offsets', 'entities'}.

        A tag per word in the training scheme, each word's [start, end) and the entities' character
        spans in the raw text, or for examples given as words, in the words joined by single
        spaces."""
        records = []
        for ex, tags in zip(examples, self._word_tags(features, outputs)):
            text, spans = ex.get("text"), ex.get("spans")
            if text is None:
                text = " ".join(ex["words"])
                ends = np.cumsum([len(w) + 1 for w in ex["words"]]) - 1
                spans = [(int(e) - len(w), int(e)) for w, e in zip(ex["words"], ends)]
            tags = rewrite_tags(tags, self.scheme)
            record = {"words": ex["words"], "tags": tags,
                      "offsets": [list(span) for span in spans]}
            if self.entity_level:
                record["entities"] = tagged_entities(text, spans, tags)
            records.append(record)
        return records

    def write_test_predictions(self, records, split, workdir):
        """WORKDIR/predictions/SPLIT.conll: `word<TAB>predicted tag` lines.

        A blank line after each sentence, the training file's layout and tag scheme."""
        path = paths.join(workdir, FINETUNING_WORKDIR.predictions, f"{split}.conll")
        paths.makedirs(paths.dirname(path))
        paths.write_text(path, "".join(
            "".join(f"{w}\t{t}\n" for w, t in zip(record["words"], record["tags"])) + "\n"
            for record in records))
        return path


register("conll")(lambda config: TaggingTask(config, "conll"))
register("conll2003")(lambda config: TaggingTask(config, "conll2003"))

"""Token classification: CoNLL-style column files (`conll`) and tfds `conll2003` (NER).

Each word's tag is predicted at its first sub-token; the other sub-tokens carry no
label. NER tag sets (BIO, IOBES) are scored at entity level with seqeval's
semantics; other tag sets (e.g. part of speech) by token accuracy, which is reported
for every tag set. `crf=True` adds a linear-chain CRF over the words.
Sentences longer than `max_seq_length` are truncated; their cut words are predicted
as the first label (usually `O`).
"""

from __future__ import annotations

import collections

import jax.numpy as jnp
import numpy as np

from bert_jax import heads, losses
from bert_jax.finetune import crf, files, metrics
from bert_jax.finetune.tasks import Task, register


def word_token_positions(tokenizer, words: list[str], max_tokens: int):
    """Tokenizes the words joined by spaces: (token ids, position of each word's first
    token or -1 when it was cut or produced no token) with at most `max_tokens` ids."""
    starts, pos = [], 0
    for w in words:
        starts.append(pos)
        pos += len(w) + 1
    char_to_word = np.repeat(np.arange(len(words)), [len(w) + 1 for w in words])
    encoding = tokenizer.encode(" ".join(words))
    ids, first = [], [-1] * len(words)
    for i, (token_id, (start, _)) in enumerate(zip(encoding.ids, encoding.offsets)):
        if i >= max_tokens:
            break
        word = int(char_to_word[start])
        if first[word] < 0:
            first[word] = i
        ids.append(token_id)
    return ids, first


class TaggingTask(Task):
    sequence_keys = ("label_ids", "label_weights")
    supports_packing = True
    eval_splits = ("validation",)

    def __init__(self, config, name: str):
        super().__init__(config)
        self.name = name
        self.label_names: list[str] = []
        self.use_crf = bool(config.get("crf", False))
        self.supports_packing = not self.use_crf  # the CRF would chain across examples
        if name == "conll":
            self.test_split = "test" if config.get("test_file") else None

    # --- data ---
    def load(self, split):
        if self.name == "conll2003":
            rows = files.tfds_examples("conll2003", {"validation": "dev"}.get(split, split),
                                       data_dir=self.config.get("tfds_data_dir"),
                                       download=self.config.get("tfds_download", False))
            names = self._tfds_names()
            return [{"words": [files.text(w) for w in r["tokens"]],
                     "tags": [names[int(t)] for t in r["ner"]][:len(r["tokens"])]}
                    for r in rows]
        key = {"train": "train_file", "validation": "validation_file", "test": "test_file"}[split]
        if not self.config.get(key):
            raise ValueError(f"task 'conll' needs --config.{key}")
        return files.read_conll(self.config.get(key), self.config.get("tag_column", -1))

    @staticmethod
    def _tfds_names():
        import tensorflow_datasets as tfds
        return tfds.builder("conll2003").info.features["ner"].feature.names

    def is_labeled(self, example):
        return example.get("tags") is not None

    def prepare(self, train_examples):
        if self.name == "conll2003":
            self.label_names = list(self._tfds_names())
        else:
            counts = collections.Counter(t for ex in train_examples for t in ex["tags"] or ())
            # `O` (the usual majority) first: it is also the tag of cut words.
            self.label_names = sorted(counts, key=lambda t: (t != "O", -counts[t], t))
        self._set_metric()

    def _set_metric(self):
        self.entity_level = metrics.is_entity_tag_set(self.label_names)
        self.selection_metric = "f1" if self.entity_level else "token_accuracy"

    def spec(self):
        return {"name": self.name, "family": "tagging", "label_names": self.label_names,
                "num_labels": len(self.label_names), "crf": self.use_crf}

    def restore_spec(self, spec):
        self.label_names = spec["label_names"]
        self.use_crf = spec.get("crf", False)
        self._set_metric()

    def featurize(self, examples, tokenizer, max_seq_length, *, training):
        index = {t: i for i, t in enumerate(self.label_names)}
        features = []
        for i, ex in enumerate(examples):
            ids, first = word_token_positions(tokenizer, ex["words"], max_seq_length - 2)
            labels = np.zeros(len(ids) + 2, np.int32)
            weights = np.zeros(len(ids) + 2, np.float32)
            for word, position in enumerate(first):
                if position >= 0 and ex.get("tags") is not None:
                    tag = ex["tags"][word] if word < len(ex["tags"]) else None
                    if tag not in index and training:
                        continue
                    labels[position + 1] = index.get(tag, 0)
                    weights[position + 1] = 1.0
            features.append({"input_ids": [tokenizer.cls_id, *ids, tokenizer.sep_id],
                             "segment_ids": [0] * (len(ids) + 2), "label_ids": labels,
                             "label_weights": weights, "feature_index": i,
                             "_word_positions": [p + 1 if p >= 0 else -1 for p in first]})
        return features

    def read_inputs(self, path):
        if files.table_format(path) == "jsonl":
            rows, _ = files.read_table(path)
            return [{"words": r["tokens"] if "tokens" in r else r["words"] if "words" in r
                     else str(r["text"]).split(), "tags": None} for r in rows]
        if path.endswith((".conll", ".bio", ".iob")):
            return [{"words": s["words"], "tags": None} for s in files.read_conll(path)]
        rows, _ = files.read_table(path)
        return [{"words": r["text"].split(), "tags": None} for r in rows]

    # --- model ---
    def model(self, config):
        if self.use_crf:
            return crf.BertForTokenClassificationCRF(config, len(self.label_names))
        return heads.BertForTokenClassification(config, len(self.label_names))

    def loss(self, outputs, batch):
        weights = batch["label_weights"]
        if self.use_crf:
            emissions, transitions, start, end = outputs
            mask, emissions, tags = crf.compact(weights, emissions, batch["label_ids"])
            nll = -crf.log_likelihood(emissions, tags, mask, transitions, start, end)
            words = jnp.maximum(jnp.sum(mask), 1.0)
            loss = jnp.sum(nll * batch["example_weights"]) / words
            return loss, {"loss": loss}
        weights = weights * self._row_weights(batch)
        loss, correct, count = losses.weighted_cross_entropy(outputs, batch["label_ids"],
                                                             weights)
        return loss, {"loss": loss, "token_accuracy": correct / jnp.maximum(count, 1.0)}

    @staticmethod
    def _row_weights(batch):
        """[B, 1] example weights for unpacked rows; packed rows' filler has no labels."""
        w = batch["example_weights"]
        return w[:, None] if w.ndim == 1 else 1.0

    def eval_outputs(self, outputs, batch):
        if not self.use_crf:
            return {"tags": jnp.argmax(outputs, axis=-1).astype(jnp.int32)}
        emissions, transitions, start, end = outputs
        weights = batch["label_weights"]
        mask, emissions, positions = crf.compact(
            weights, emissions, jnp.broadcast_to(jnp.arange(weights.shape[1]), weights.shape))
        path = crf.viterbi(emissions, mask, transitions, start, end)
        tags = jnp.zeros(weights.shape, jnp.int32)
        rows = jnp.arange(weights.shape[0])[:, None]
        return {"tags": tags.at[rows, positions].set(jnp.where(mask, path, 0))}

    # --- results ---
    def _word_tags(self, features, outputs) -> list[list[str]]:
        predicted = []
        for feature, out in zip(features, outputs):
            predicted.append([self.label_names[int(out["tags"][p])] if p >= 0
                              else self.label_names[0] for p in feature["_word_positions"]])
        return predicted

    def evaluate(self, examples, features, outputs):
        predicted = self._word_tags(features, outputs)
        gold = [ex["tags"] for ex in examples]
        scores = metrics.token_accuracy(predicted, gold)
        if self.entity_level:
            scores.update(metrics.entity_scores(predicted, gold))
        return scores

    def predict(self, examples, features, outputs):
        return [{"words": ex["words"], "tags": tags}
                for ex, tags in zip(examples, self._word_tags(features, outputs))]


register("conll")(lambda config: TaggingTask(config, "conll"))
register("conll2003")(lambda config: TaggingTask(config, "conll2003"))

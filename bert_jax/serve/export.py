"""`bert-jax export`: a fine-tuned model (or a bare encoder) as serving artifacts.

  bert-jax export --model WORKDIR_OR_MODEL_DIR --output EXPORT_DIR [--format jax,savedmodel]

EXPORT_DIR/
  serving.json        task, labels, max_seq_length, inputs and outputs
  model.jaxexport     jax.export artifact (StableHLO, weights inside): reload with just jax
  saved_model/        TF SavedModel (jax2tf): `serving_default` on token ids, `serve_text` and
                      `serve_text_pair` on raw strings (tokenizer in the graph, tensorflow-text);
                      a tagging model's `serve_text` also tags words (`text_io.split_words`)
  vocab.txt ...       the tokenizer, for callers of model.jaxexport

Both artifacts take int32 [batch, length] `input_ids`, `input_mask`, `segment_ids`
with any batch and any length up to max_position_embeddings, and return a dict of
outputs of the model's head (`bert_jax.models.task_heads.HEADS`). docs/serving.md shows
how to call them.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

# `import jax` alone does not make `jax.export` available on jax 0.7 (Colab's); this does.
from jax import export as jax_export

from bert_jax.errors import UserError
from bert_jax.host import paths, tf_host
from bert_jax.host.atomic import atomic_directory
from bert_jax.models import jax_compat, task_heads
from bert_jax.models.config import check_inputs_fit
from bert_jax.models.encoder import BertModel
from bert_jax.weights import pretrained

SERVING_FILE = "serving.json"
JAX_FILE = "model.jaxexport"
SAVED_MODEL_DIR = "saved_model"
# Lowered for all three so one artifact serves on any backend (lowering needs no device).
DEFAULT_PLATFORMS = ("cpu", "cuda", "tpu")

def serving_function(model: pretrained.Pretrained
                     ) -> tuple[str, dict[str, Any], Callable[..., dict[str, jax.Array]]]:
    """(kind, params, fn): the function that serves the model's head.

    fn(params, input_ids, input_mask, segment_ids) returns the outputs of the model's head
    (`task_heads.HEADS[kind].outputs`); params holds only what fn uses."""
    head = model.head
    kind = head.entry
    # BERT's einsum attention: the artifact serves several platforms, and a fused
    # attention traced on a GPU would embed a cuDNN call the others cannot run.
    config, params = model.config.replace(attention_impl="einsum"), model.params
    if kind.serve is None:
        raise UserError(kind.not_served or f"exporting {head.kind!r} models is not supported")
    encoder = dict(params["bert"])
    if not kind.keeps_pooler:
        encoder.pop("pooler", None)  # these heads run BertModel without the pooler
    if kind.param is None:
        module, params = BertModel(config, add_pooling_layer="pooler" in encoder), encoder
    elif kind.param in params:
        module = kind.module(config, head)
        params = {"bert": encoder, kind.param: params[kind.param]}
    else:
        raise UserError(f"cannot export a {head.kind!r} model: its parameters have no "
                        f"{kind.param} head")

    def fn(params, input_ids, input_mask, segment_ids):
        raw = module.apply({"params": params}, input_ids, input_mask, segment_ids)
        # float32 outputs whatever the compute dtype (bf16 models serve the same API).
        return jax.tree.map(lambda x: x.astype(jnp.float32)
                            if jnp.issubdtype(x.dtype, jnp.floating) else x,
                            kind.serve(raw, input_mask))

    return head.kind, params, fn


def _symbolic_inputs(max_length: int):
    b, length = jax_export.symbolic_shape("b, l", constraints=(f"l <= {max_length}",))
    return [jax.ShapeDtypeStruct((b, length), jnp.int32)] * 3


def export_jax(fn, params, path: str, max_length: int,
               platforms=DEFAULT_PLATFORMS) -> None:
    """Serializes fn with the weights baked in: f(input_ids, input_mask, segment_ids)."""
    bound = jax.jit(lambda ids, mask, segments: fn(params, ids, mask, segments))
    exported = jax_export.export(bound, platforms=platforms)(*_symbolic_inputs(max_length))
    with paths.open(path, "wb") as f:
        f.write(exported.serialize())


@contextlib.contextmanager
def stablehlo_for_tensorflow():
    """While active, jax serializes StableHLO no newer than the installed TensorFlow's own version.

    By default jax writes a version about a month old, and TensorFlow releases lag jax's: tensorflow
    2.21 (StableHLO 1.13.7) cannot read what jax 0.11.2 writes by default, and reads it written as
    1.13.7. jax has no public setting for this, so it wraps the version lookup jax's serializer
    calls; where jax has moved that, jax's default stays and `check_tensorflow_runs` tells whether
    TensorFlow can run it."""
    try:
        from tensorflow.compiler.mlir.stablehlo import stablehlo as tf_stablehlo
        jax_stablehlo = jax_compat.export_stablehlo()
        lookup = jax_stablehlo.get_version_from_compatibility_requirement
    except (ImportError, AttributeError):  # moved: jax's default stays
        yield
        return
    jax_stablehlo.get_version_from_compatibility_requirement = (
        lambda requirement: tf_stablehlo.get_smaller_version(
            lookup(requirement), tf_stablehlo.get_current_version()))
    try:
        yield
    finally:
        jax_stablehlo.get_version_from_compatibility_requirement = lookup


# XLA's float32 erf, x * P(x^2) / Q(x^2) on [-4, 4]: the decomposition that jax >= 0.12
# ships inside a `stablehlo.composite`, written out with plain ops.
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)


def _plain_erf(x):
    y = jnp.clip(x.astype(jnp.float32), -4.0, 4.0)
    return (y * jnp.polyval(jnp.array(_ERF_P, jnp.float32), y * y)
            / jnp.polyval(jnp.array(_ERF_Q, jnp.float32), y * y)).astype(x.dtype)


@contextlib.contextmanager
def erf_without_composites():
    """While active, erf and erfc (the exact GELU) lower to plain StableHLO ops.

    jax 0.12 lowers them to a `stablehlo.composite` whose dynamically shaped decomposition
    tensorflow 2.21 cannot refine ("operand ... has type 'tensor<1x2x64xf32>', but decomposition has
    type 'tensor<?x?x64xf32>'"). The outputs stay within 1e-6."""
    try:
        from jax.extend.core import primitives as special
        from jax.interpreters import mlir
        saved = {p: jax_compat.lowering_rules()[p] for p in (special.erf_p, special.erfc_p)}
    except (ImportError, AttributeError, KeyError):  # moved: jax's lowering stays
        yield
        return
    mlir.register_lowering(special.erf_p, mlir.lower_fun(_plain_erf, multiple_results=False))
    mlir.register_lowering(special.erfc_p, mlir.lower_fun(
        lambda x, accuracy=None: 1 - _plain_erf(x), multiple_results=False))
    try:
        yield
    finally:
        jax_compat.lowering_rules().update(saved)


@stablehlo_for_tensorflow()
@erf_without_composites()
def export_saved_model(fn, params, tokenizer, path: str, max_length: int,
                       max_seq_length: int, labels: list[str] | None,
                       platforms=DEFAULT_PLATFORMS, truncation: str = "head",
                       tagging: bool = False) -> None:
    """Writes a TF SavedModel of `fn` and `params` at `path`.

    Weights as tf.Variables (no 2 GB graph limit), the model as StableHLO via jax2tf,
    WordPiece/SentencePiece tokenization via tensorflow-text. The string signatures truncate to
    `max_seq_length` tokens as fine-tuning did; a tagging model's `serve_text` also returns words
    and a tag per word (`serve_words`)."""
    import tensorflow as tf
    from jax.experimental import jax2tf

    from bert_jax.tokenization.text_io import head_fraction

    module = tf.Module()
    module.params = tf.nest.map_structure(tf.Variable, params)
    converted = jax2tf.convert(
        fn, with_gradient=False, polymorphic_shapes=[None, "(b, l)", "(b, l)", "(b, l)"],
        polymorphic_constraints=(f"l <= {max_length}",),
        native_serialization_platforms=platforms)
    label_table = None if labels is None else tf.constant(labels)
    ids_spec = tf.TensorSpec([None, None], tf.int32)

    @tf.function(input_signature=[ids_spec] * 3, autograph=False)
    def serve_ids(input_ids, input_mask, segment_ids):
        out = dict(converted(module.params, input_ids, input_mask, segment_ids))
        if label_table is not None and "label_ids" in out:
            out["labels"] = tf.gather(label_table, out["label_ids"])
        return out

    head = head_fraction(truncation)
    special = tokenizer.special_ids()
    # The in-graph tokenizer may own TF resources (SentencePiece's model) that the SavedModel
    # must track: build it eagerly, outside any function, and attach it.
    module.tokenizer = tokenizer.tf_module()

    pair_format = tokenizer.pair_format  # the family's rows: [CLS] a [SEP] b [SEP], ...

    def serve_segments(segments):
        budget = max_seq_length - pair_format.num_added(len(segments) > 1)
        pieces = [tokenizer.tf_tokenize(s) for s in segments]
        lengths = truncated_lengths_tf([p.row_lengths() for p in pieces], budget)
        # each cut to its length, filled from start (and end, for head+tail)
        pieces = [keep_head_tail_tf(p, n, head) for p, n in zip(pieces, lengths)]
        ids, segment_ids = pair_format.tf_build(pieces)
        out = serve_ids(ids.to_tensor(special["pad"]),
                        tf.ones_like(ids).to_tensor(0),
                        tf.cast(segment_ids, tf.int32).to_tensor(0))
        return {**out, "input_ids": ids.to_tensor(special["pad"]),
                "input_mask": tf.ones_like(ids).to_tensor(0)}

    if "cpu" in platforms:  # the check runs on this machine's CPU
        check_tensorflow_runs(serve_ids)
    text_spec = tf.TensorSpec([None], tf.string)
    module.serve_ids = serve_ids
    serve_text = (_word_tagger(serve_ids, tokenizer, max_seq_length, label_table) if tagging
                  else lambda text: serve_segments([text]))
    module.serve_text = tf.function(serve_text, input_signature=[text_spec], autograph=False)
    module.serve_text_pair = tf.function(lambda text, text_pair: serve_segments(
        [text, text_pair]), input_signature=[text_spec, text_spec], autograph=False)
    tf.saved_model.save(module, path, signatures={
        "serving_default": module.serve_ids, "serve_text": module.serve_text,
        "serve_text_pair": module.serve_text_pair})


def _word_tagger(serve_ids, tokenizer, max_seq_length: int, label_table):
    """The tagging model's `serve_text` (TF): text in, a tag per word out."""
    import tensorflow as tf

    from bert_jax.tokenization.text_io import tf_split_words

    special = tokenizer.special_ids()

    def serve_words(text):
        """Tagging: text split into words, one tag per word: its first token's.

        Text is split as `text_io.split_words` does, each word's tokens in a row truncated to
        max_seq_length (as `ServedModel.tag_texts`); a word with no token left gets the first
        label."""
        words, starts, ends = tf_split_words(text)
        pieces = tokenizer.tf_tokenize(words.flat_values)  # [words, (pieces)]
        counts = tf.cast(pieces.row_lengths(), tf.int32)
        rows = tf.RaggedTensor.from_row_splits(pieces, words.row_splits).merge_dims(1, 2)
        first = tf.cumsum(counts, exclusive=True) - tf.gather(
            tf.cast(rows.row_splits, tf.int32), words.value_rowids())  # index in its row
        pair_format = tokenizer.pair_format
        budget = max_seq_length - pair_format.num_added(False)
        ids, _ = pair_format.tf_build([rows[:, :budget]])
        ids, mask = ids.to_tensor(special["pad"]), tf.ones_like(ids).to_tensor(0)
        out = serve_ids(ids, mask, tf.zeros_like(ids))
        tagged = (counts > 0) & (first < budget)
        tag_ids = tf.where(tagged, tf.gather_nd(out["label_ids"], tf.stack(
            [tf.cast(words.value_rowids(), tf.int32),
             tf.where(tagged, first + pair_format.text_start, 0)], 1)), 0)
        by_text = words.with_flat_values
        return {**out, "input_ids": ids, "input_mask": mask, "words": words.to_tensor(""),
                "num_words": tf.cast(words.row_lengths(), tf.int32),
                "word_tag_ids": by_text(tag_ids).to_tensor(-1),
                "word_tags": by_text(tf.strings.as_string(tag_ids) if label_table is None
                                     else tf.gather(label_table, tag_ids)).to_tensor(""),
                "word_starts": starts.to_tensor(-1), "word_ends": ends.to_tensor(-1)}

    return serve_words


def check_tensorflow_runs(serve_ids) -> None:
    """Runs the converted model once in TensorFlow before the SavedModel is written.

    One row, two tokens: so that a model TensorFlow cannot run (a jax much newer than the installed
    tensorflow writes ops it does not know) fails here, not when served."""
    import tensorflow as tf
    ids = tf.zeros([1, 2], tf.int32)
    try:
        serve_ids(ids, tf.ones_like(ids), ids)
    except tf.errors.InvalidArgumentError as e:
        detail = next((f" ({line.strip()[:300]})" for line in str(e).splitlines()
                       if "error:" in line and "Graph execution" not in line), "")
        raise UserError(
            f"tensorflow {tf.__version__} cannot run the model as jax {jax.__version__} "
            f"writes it, so the SavedModel would fail when served{detail}; "
            "install a jax and a tensorflow released close together (constraints.txt pins "
            "a pair that works), or export only the jax artifact (--format jax)") from None


def truncated_lengths_tf(lengths: list, budget: int) -> list:
    """In-graph `text_io.truncate_pair` lengths.

    One text's (or a pair's) lengths [B] cut to `budget` tokens in all, longest first
    (`text_io.pair_lengths`)."""
    import tensorflow as tf
    if len(lengths) == 1:
        return [tf.minimum(lengths[0], budget)]
    a, b = lengths
    short = tf.minimum(tf.minimum(a, b), budget // 2)  # what the shorter text keeps
    kept_a = tf.where(a <= b, short, budget - short)
    fits = a + b <= budget
    return [tf.where(fits, a, kept_a), tf.where(fits, b, budget - kept_a)]


def keep_head_tail_tf(pieces, lengths, head: float):
    """In-graph `text_io.keep_head_tail`.

    Each row of the ragged [B, (n)] `pieces` cut to `lengths` [B] tokens, `head` of them from its
    start and the rest from its end."""
    import tensorflow as tf
    n = pieces.row_lengths()
    start = tf.cast(tf.cast(lengths, tf.float64) * head, tf.int64)  # int() in Python
    positions = tf.ragged.range(n)
    keep = (positions < start[:, None]) | (positions >= (n - (lengths - start))[:, None])
    return tf.ragged.boolean_mask(pieces, keep)


class ServedModel:
    """A reloaded `model.jaxexport`.

    `model(input_ids, input_mask, segment_ids)` on int arrays [B, L],
    `model.predict_texts(texts, pairs)` with the exported tokenizer."""

    def __init__(self, export_dir: str):
        self.spec = json.loads(paths.read_text(paths.join(export_dir, SERVING_FILE)))
        self.exported = jax_export.deserialize(
            bytearray(paths.read_bytes(paths.join(export_dir, JAX_FILE))))
        self.export_dir = export_dir
        self._tokenizer = None

    def __call__(self, input_ids, input_mask=None, segment_ids=None) -> dict[str, np.ndarray]:
        input_ids = np.asarray(input_ids, np.int32)
        if input_ids.shape[-1] > self.spec["max_length"]:
            raise UserError(f"input length {input_ids.shape[-1]} exceeds the model's "
                            f"{self.spec['max_length']} positions")
        input_mask = np.ones_like(input_ids) if input_mask is None else input_mask
        segment_ids = np.zeros_like(input_ids) if segment_ids is None else segment_ids
        out = self.exported.call(input_ids, np.asarray(input_mask, np.int32),
                                 np.asarray(segment_ids, np.int32))
        return jax.tree.map(np.asarray, out)

    def encode(self, texts: list[str], pairs: list[str] | None = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """[CLS] text [SEP] (pair [SEP]) or the family's own rows, truncated as in fine-tuning.

        The rows are padded to the longest."""
        from bert_jax.tokenization import load_tokenizer
        from bert_jax.tokenization.text_io import encode_pair

        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.export_dir)
        rows = [encode_pair(self._tokenizer, t, None if pairs is None else pairs[i],
                            self.spec["max_seq_length"], self.spec.get("truncation", "head"))
                for i, t in enumerate(texts)]
        length = max(len(ids) for ids, _ in rows)
        input_ids = np.full((len(rows), length), self._tokenizer.pad_id, np.int32)
        input_mask = np.zeros((len(rows), length), np.int32)
        segment_ids = np.zeros((len(rows), length), np.int32)
        for i, (ids, segments) in enumerate(rows):
            input_ids[i, :len(ids)], input_mask[i, :len(ids)] = ids, 1
            segment_ids[i, :len(ids)] = segments
        return input_ids, input_mask, segment_ids

    def predict_texts(self, texts: list[str], pairs: list[str] | None = None
                      ) -> dict[str, np.ndarray]:
        return self(*self.encode(texts, pairs))

    def tag_texts(self, texts: list[str]) -> list[dict]:
        """Tagging models: {'words', 'tags', 'offsets', 'entities'} per raw text.

        Text is split as character-level CoNLL data is
        (each character of a Chinese text a word, see `text_io.split_words`): one tag per word in
        the training scheme, each word's character offsets, entities as character spans of the text.
        Words past max_seq_length - 2 tokens get the first label (no windows)."""
        from bert_jax.tokenization import load_tokenizer, text_io
        if self.spec["kind"] != "tagging":
            raise ValueError(f"tag_texts needs a tagging model, this one is {self.spec['kind']}")
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.export_dir)
        pair_format = self._tokenizer.pair_format
        labels = self.spec["labels"]
        budget = self.spec["max_seq_length"] - pair_format.num_added(False)
        scheme = (self.spec.get("task") or {}).get("tag_scheme")
        records = []
        for text in texts:
            example = text_io.text_example(text)
            ids, starts, ends = text_io.word_token_spans(self._tokenizer, example["words"])
            ids, _ = pair_format.build(ids[:budget])
            label_ids = self(np.asarray([ids], np.int32))["label_ids"][0]
            tags = text_io.rewrite_tags(
                [labels[int(label_ids[s + pair_format.text_start])] if s < min(e, budget)
                 else labels[0]
                 for s, e in zip(starts, ends)], scheme)
            records.append({"words": example["words"], "tags": tags,
                            "offsets": [list(span) for span in example["spans"]],
                            "entities": text_io.tagged_entities(text, example["spans"], tags)})
        return records


def export(workdir: str, out: str, formats=("jax", "savedmodel"), platforms=DEFAULT_PLATFORMS,
           max_seq_length: int | None = None, overwrite: bool = False) -> dict[str, Any]:
    """Writes the serving artifacts of a fine-tuned workdir or model directory (atomic).

    Returns the serving.json contents."""
    from bert_jax.tokenization import load_tokenizer
    if "savedmodel" in formats:
        tf_host.tensorflow("export --format savedmodel (the default jax,savedmodel; "
                           "--format jax needs none)")
    model = pretrained.load(workdir)
    tokenizer = load_tokenizer(model.tokenizer_dir)
    check_inputs_fit(model.config, model.tokenizer_dir, vocab_size=tokenizer.vocab_size)
    kind, params, fn = serving_function(model)
    labels = pretrained.label_names(model.task)
    max_length = model.config.max_positions
    max_seq_length = min(max_seq_length or (model.task or {}).get("max_seq_length")
                         or max_length, max_length)
    truncation = ((model.task or {}).get("config") or {}).get("truncation", "head")
    spec = {"format_version": 1, "kind": kind, "task": model.task, "labels": labels,
            "max_seq_length": max_seq_length, "truncation": truncation,
            "max_length": max_length,
            "inputs": {k: "int32 [B, L]" for k in ("input_ids", "input_mask", "segment_ids")},
            "outputs": {k: v for k, v in task_heads.HEADS[kind].outputs.items()
                        if k != "pooled_output" or "pooler" in params.get("bert", params)},
            "platforms": list(platforms), "files": {}}
    with atomic_directory(out, overwrite, local=True) as tmp:  # TensorFlow writes locally
        tokenizer.save(tmp)
        if "jax" in formats:
            export_jax(fn, params, paths.join(tmp, JAX_FILE), max_length, platforms)
            spec["files"]["jax"] = JAX_FILE
        if "savedmodel" in formats:
            export_saved_model(fn, params, tokenizer, paths.join(tmp, SAVED_MODEL_DIR),
                               max_length, max_seq_length, labels, platforms, truncation,
                               tagging=task_heads.HEADS[kind].tags_words)
            spec["files"]["savedmodel"] = SAVED_MODEL_DIR
        paths.write_text(paths.join(tmp, SERVING_FILE), json.dumps(spec, indent=2))
    return spec


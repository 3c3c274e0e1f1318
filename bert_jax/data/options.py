"""The pretraining data's options, one type for create-data and the pipeline.

Fields carry the run config's key names (`whole_word_masking`, `seed`, `packing`, ...);
Google's flag spellings (`do_whole_word_mask`, `random_seed`) live only at the command
line of tools/create_pretraining_data.py. create-data reads the example and masking
fields, the pipeline those and its batching fields; what a set of TFRecords was made
with is recorded beside them under these names (`bert_jax.data.data_record`).
"""
from __future__ import annotations

import dataclasses

from bert_jax.data.chinese_words import KNOWLEDGE_MASKING
from bert_jax.errors import UserError
from bert_jax.host import encoding

PIPELINE_FIELDS = ("per_host_batch_size", "packing", "max_examples_per_row", "shuffle_buffer",
                   "repeat", "split", "eval_fraction", "input_pipeline", "input_threads",
                   "input_workers")
INPUT_PIPELINES = ("grain", "tf.data")
# The fields a pretraining run config sets, under these names (its schema,
# bert_jax/train/run_config.py PRETRAIN, holds their run defaults): `from_config` takes
# every one from the config, never from the defaults below.
CONFIG_FIELDS = ("max_seq_length", "max_predictions_per_seq", "masked_lm_prob",
                 "whole_word_masking", "dynamic_masking", "next_sentence_prediction",
                 "sentence_order_prediction", "knowledge_masking", "knowledge_masking_prob",
                 "seed", "packing", "eval_fraction", "dupe_factor", "input_pipeline",
                 "input_threads", "input_workers")


@dataclasses.dataclass(frozen=True)
class DataOptions:
    """The examples create-data makes and the pretraining pipeline reads, and how.

    Examples: rows of max_seq_length L tokens with up to max_predictions_per_seq P masked positions
    (masked_lm_prob of the tokens; whole words with whole_word_masking); sentence pairs with
    next-sentence labels, ALBERT's sentence-order labels (sentence_order_prediction) or MLM-only
    rows of contiguous sentences (next_sentence_prediction=False). knowledge_masking
    'entity'/'phrase': ERNIE's units masked whole in a share knowledge_masking_prob of the rows
    (whole words implied). dynamic_masking: create-data writes no masks and the pipeline masks every
    epoch (keyed by seed); otherwise the records' static masks are used.

    create-data only: short_seq_prob, dupe_factor, chinese_segmenter, entity_file and
    the text's encoding.
    Pipeline only: per_host_batch_size B; packing up to max_examples_per_row examples in
    a row; split 'eval' reads the eval_fraction held out (once, unshuffled), 'train' the
    rest, forever when repeat; input_pipeline 'grain' (ArrayRecord or TFRecord, no TensorFlow,
    a global shuffle; input_workers processes read, parse and mask, 0: this one, in
    input_threads threads each, 0: 1 for local files, 8 for a bucket's) or 'tf.data' (TFRecord,
    bert_jax[tf]; shuffle_buffer records shuffled at a time).

    The defaults are create-data's, which follow google-research/bert's
    create_pretraining_data.py (static masks, random_seed 12345), and the pipeline's when
    used on its own (nothing held out; up to 4 examples per packed row, which a
    pretraining config does not set). A pretraining run's differ (dynamic masking, seed 0,
    1% held out: its schema's) and come from its config (`from_config`)."""

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    whole_word_masking: bool = False
    dynamic_masking: bool = False
    next_sentence_prediction: bool = True
    sentence_order_prediction: bool = False
    knowledge_masking: str = "none"
    knowledge_masking_prob: float = 1.0
    seed: int = 12345
    # create-data
    short_seq_prob: float = 0.1
    dupe_factor: int = 5
    chinese_segmenter: str = "jieba"  # or "none": CJK characters masked one by one
    entity_file: str = ""  # knowledge_masking=entity: an entity list instead of jieba's tags
    encoding: str = encoding.DEFAULT  # of the text files (UTF-16/32 known by a byte-order mark)
    # pipeline
    per_host_batch_size: int = 32
    packing: bool = False
    max_examples_per_row: int = 4
    shuffle_buffer: int = 10_000
    repeat: bool = True
    split: str = "train"
    eval_fraction: float = 0.0
    input_pipeline: str = "grain"
    input_threads: int = 0
    input_workers: int = 0

    def __post_init__(self):
        if self.sentence_order_prediction and not self.next_sentence_prediction:
            raise UserError("sentence_order_prediction makes sentence pairs (its labels "
                            "train the sentence-pair head): it needs "
                            "next_sentence_prediction=True")
        encoding.check_name(self.encoding)
        if self.input_pipeline not in INPUT_PIPELINES:
            raise UserError(f"unknown input_pipeline {self.input_pipeline!r}: use one of "
                            f"{list(INPUT_PIPELINES)}")
        for name in ("input_threads", "input_workers"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 0:
                raise UserError(f"{name} must be a whole number >= 0, not "
                                f"{getattr(self, name)!r}")
        if self.knowledge_masking not in KNOWLEDGE_MASKING:
            raise UserError(f"unknown knowledge_masking {self.knowledge_masking!r}: use one "
                            f"of {list(KNOWLEDGE_MASKING)}")

    def create_data_fields(self) -> dict:
        """The fields create-data reads (the rest are the pipeline's)."""
        return {name: value for name, value in dataclasses.asdict(self).items()
                if name not in PIPELINE_FIELDS}

    @property
    def whole_units(self) -> bool:
        """Whole words (or ERNIE's longer units) are masked together."""
        return self.whole_word_masking or self.knowledge_masking != "none"

    @classmethod
    def from_config(cls, config, **pipeline) -> "DataOptions":
        """The options of a pretraining run config.

        Every CONFIG_FIELDS field its value, create-data's fields at their defaults
        (`pipeline`: the batching fields)."""
        return cls(**{**{name: config[name] for name in CONFIG_FIELDS}, **pipeline})

"""What both readers do to each parsed chunk of records (`ChunkPreparer`).

The held-out split, the sentence-pair labels and dynamic masking. A plain picklable object:
Grain's worker processes run it beside the parsing."""
from __future__ import annotations

import dataclasses
from typing import Dict, Optional

import numpy as np

from bert_jax.data import masking
from bert_jax.data.options import DataOptions
from bert_jax.errors import UserError


@dataclasses.dataclass(frozen=True)
class ChunkPreparer:
    """A parsed chunk (columns plus epoch, file_index, record_index) -> the examples to batch.

    Dynamic masking needs `vocab_size` and `special_ids`; whole-word and knowledge masking the
    `word_start_table` (bool [vocab])."""

    options: DataOptions
    vocab_size: Optional[int] = None
    special_ids: Optional[Dict[str, int]] = None
    word_start_table: Optional[np.ndarray] = None

    def __call__(self, chunk: dict) -> dict:
        options = self.options
        labels = _pair_labels(chunk.pop("next_sentence_labels")[:, 0],
                              chunk.pop("sentence_order_labels")[:, 0],
                              options.next_sentence_prediction,
                              options.sentence_order_prediction)
        if options.next_sentence_prediction:
            chunk["next_sentence_labels"] = labels
        if options.eval_fraction > 0:
            draw = masking.example_keys(0x5E1D, chunk["file_index"], chunk["record_index"])
            held_out = (draw >> np.uint64(11)) * (1.0 / (1 << 53)) < options.eval_fraction
            keep = held_out if options.split == "eval" else ~held_out
            chunk = {k: v[keep] for k, v in chunk.items()}
        if not options.dynamic_masking:
            if len(chunk["input_ids"]) and not chunk["masked_lm_weights"].any():
                raise UserError("these records have no static masks (created with "
                                "--dynamic_masking): use dynamic_masking=True")
            return chunk
        return self._mask(chunk)

    def _mask(self, chunk: dict) -> dict:
        options = self.options
        original = masking.unmask(chunk["input_ids"], chunk["masked_lm_positions"],
                                  chunk["masked_lm_ids"], chunk["masked_lm_weights"])
        keys = masking.example_keys(options.seed, chunk["epoch"], chunk["file_index"],
                                    chunk["record_index"])
        word_start = None
        if self.word_start_table is not None:
            word_start = self.word_start_table[original] & chunk["word_start"].astype(bool)
        if options.knowledge_masking != "none":
            if (chunk["unit_start"][:, :1] < 0).any():
                raise UserError("knowledge_masking needs records made by create-data "
                                "--knowledge_masking entity|phrase (they carry unit_start)")
            use = masking.knowledge_rows(keys, options.knowledge_masking_prob)
            units = self.word_start_table[original] & chunk["unit_start"].astype(bool)
            word_start = np.where(use[:, None], units, word_start)
        chunk.update(masking.mask_batch(
            original, chunk["input_mask"], keys, vocab_size=self.vocab_size,
            mask_id=self.special_ids["mask"], cls_id=self.special_ids["cls"],
            sep_id=self.special_ids["sep"], max_predictions=options.max_predictions_per_seq,
            masked_lm_prob=options.masked_lm_prob, word_start=word_start))
        return chunk


def _pair_labels(nsp: np.ndarray, sop: np.ndarray, next_sentence_prediction: bool,
                 sentence_order_prediction: bool) -> np.ndarray:
    """The sentence-pair labels the run wants (-1: none in the records).

    First checks that the records hold that kind: NSP, SOP or none (MLM-only)."""
    if sentence_order_prediction:
        if (sop < 0).any():
            raise UserError("these records have no sentence-order labels: make them with "
                            "bert-jax create-data --sentence_order_prediction, or set "
                            "sentence_order_prediction=False")
        return sop
    if (sop >= 0).any():
        raise UserError("these records hold sentence-order pairs (create-data "
                        "--sentence_order_prediction): set sentence_order_prediction=True")
    if next_sentence_prediction and (nsp < 0).any():
        raise UserError("these records are MLM-only (made without next-sentence pairs, "
                        "create-data --no_next_sentence_prediction): set "
                        "next_sentence_prediction=False, or make NSP data")
    if not next_sentence_prediction and (nsp >= 0).any():
        raise UserError("these records hold next-sentence pairs with NSP labels: with "
                        "next_sentence_prediction=False use MLM-only data (bert-jax "
                        "create-data --no_next_sentence_prediction)")
    return nsp

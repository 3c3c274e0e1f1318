"""create-data's counts (`Stats`, summed over input files) and the short summary it prints."""
from __future__ import annotations

import array
import dataclasses

from bert_jax.data import lengths


@dataclasses.dataclass
class Stats:
    """Counts for the summary; summed over files."""
    files: int = 0
    empty_files: int = 0
    single_document_files: int = 0
    documents: int = 0
    one_sentence_documents: int = 0
    sentences: int = 0
    empty_sentences: int = 0
    long_sentences: int = 0
    split_lines: int = 0  # lines over LONG_LINE x max_seq_length characters, split
    split_line_pieces: int = 0  # the sentences (or chunks) they were split into
    bytes: int = 0
    instances: int = 0
    tokens: int = 0
    unknown_tokens: int = 0
    maskable_tokens: int = 0
    masked_tokens: int = 0
    masked_as_mask: int = 0
    masked_unchanged: int = 0
    random_next: int = 0
    random_from_same_document: int = 0
    short_targets: int = 0
    swapped: int = 0
    truncated_instances: int = 0  # sentence pairs that lost tokens to max_seq_length
    knowledge_units: int = 0  # entities or phrases (of 2+ characters) in the sentences
    knowledge_rows: int = 0  # rows masked by knowledge units (the rest by words)
    masked_in_knowledge_units: int = 0  # masked tokens of entities or phrases
    # Tokens per document, for the length percentiles of the summary.
    document_tokens: array.array = dataclasses.field(default_factory=lambda: array.array("q"))

    def __iadd__(self, other: "Stats") -> "Stats":
        for field in dataclasses.fields(self):
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
        return self

    def summary(self) -> dict:
        ratio = lambda a, b: round(a / b, 4) if b else 0.0
        return dict(dataclasses.asdict(self),
                    document_tokens=lengths.percentiles(self.document_tokens),
                    truncated_fraction=ratio(self.truncated_instances, self.instances),
                    masked_fraction=ratio(self.masked_tokens, self.maskable_tokens),
                    mask_token_fraction=ratio(self.masked_as_mask, self.masked_tokens),
                    unchanged_fraction=ratio(self.masked_unchanged, self.masked_tokens),
                    knowledge_row_fraction=ratio(self.knowledge_rows, self.instances),
                    masked_in_knowledge_unit_fraction=ratio(self.masked_in_knowledge_units,
                                                            self.masked_tokens),
                    random_next_fraction=ratio(self.random_next, self.instances),
                    swapped_fraction=ratio(self.swapped, self.instances),
                    short_target_fraction=ratio(self.short_targets, self.instances))

    def to_json(self) -> dict:
        """The counts as JSON values (document_tokens as a list), for `from_json`."""
        return dict(dataclasses.asdict(self), document_tokens=self.document_tokens.tolist())

    @classmethod
    def from_json(cls, values: dict) -> "Stats":
        return cls(**dict(values, document_tokens=array.array("q", values["document_tokens"])))


def readable_summary(stats: Stats) -> list[str]:
    """A few lines for people; every count is in summary.json."""
    s = stats.summary()
    lines = [f"{s['files']} file(s), {s['documents']:,} documents, {s['sentences']:,} sentences, "
             f"{s['bytes'] / 1e6:.1f} MB of text",
             f"{s['instances']:,} rows, {s['tokens']:,} tokens "
             f"({s['unknown_tokens']:,} [UNK]), {s['truncated_fraction']:.1%} truncated"]
    if s["masked_tokens"]:
        lines.append(f"masked {s['masked_fraction']:.1%} of the tokens "
                     f"({s['mask_token_fraction']:.0%} [MASK], "
                     f"{s['unchanged_fraction']:.0%} unchanged)")
    if s["random_next"]:
        lines.append(f"random next sentence in {s['random_next_fraction']:.1%} of the pairs")
    if s["swapped"]:
        lines.append(f"swapped sentence order in {s['swapped_fraction']:.1%} of the pairs")
    skipped = [f"{s[k]} {k.replace('_', ' ')}" for k in ("empty_files", "empty_sentences",
                                                          "split_lines") if s[k]]
    if skipped:
        lines.append("noted: " + ", ".join(skipped))
    return lines

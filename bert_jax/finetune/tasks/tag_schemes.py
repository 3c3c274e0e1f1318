"""NER tag schemes: which one a training set uses, and entities written back in it.

Scoring does not depend on the scheme: `text_io.entities` chunks every scheme with
seqeval's default rules (BILOU and BMES read as the IOBES they spell). The scheme
decides how predictions are written: the entities a model found are re-encoded in the
training file's scheme (`text_io.rewrite_tags`), so predicted tags are always well
formed in it (an argmax tagger may emit `I-PER` after `O` in IOB2, or `M-PER` with no
`E-PER` in BMES).

    IOB2 (BIO)  B- starts every entity, I- continues it
    IOB1        I- for every entity word; B- only starts an entity that follows one of
                the same type (CoNLL-2003's original files)
    IOBES       B- I- E- for multi-word entities, S- for single words (BIOES)
    BILOU       B- I- L- and U- (last, unit)
    BMES        B- M- E- and S- (middle): MSRA, Weibo, Resume and most Chinese sets
"""

from __future__ import annotations

import collections
import re
from typing import Iterable, Sequence

from bert_jax.errors import UserError

SCHEMES = {"IOB2": "BI", "IOB1": "BI", "IOBES": "BIES", "BILOU": "BILU", "BMES": "BMES"}
ALIASES = {"BIO": "IOB2", "BIOES": "IOBES"}
# The config values: a scheme, "auto" (detect from the training tags) or "none" (score
# by token accuracy, e.g. for part-of-speech tags).
CHOICES = ("auto", "none", *SCHEMES, *ALIASES)
_PREFIXED = re.compile(r"([BIMESLU])-.+")


def resolve_scheme(name: str, train_tags: Iterable[Sequence[str]]) -> str | None:
    """The scheme for the config value `name` and the training tag sequences.

    None when tags are not entity tags (token accuracy). A named scheme must cover every training
    tag."""
    key = str(name).upper()
    key = ALIASES.get(key, key)
    if key not in (*SCHEMES, "AUTO", "NONE"):
        raise UserError(f"tag_scheme must be one of {', '.join(CHOICES)}; got {name!r}")
    sequences = [list(seq) for seq in train_tags]
    if key == "NONE":
        return None
    if key == "AUTO":
        return detect(sequences)
    prefixes = collections.Counter(t[0] for seq in sequences for t in seq if t != "O")
    wrong = [t for seq in sequences for t in seq if t != "O"
             and not (_PREFIXED.fullmatch(t) and t[0] in SCHEMES[key])]
    if wrong:
        raise UserError(f"tag_scheme={name}: the training tag {wrong[0]!r} is not in that "
                        f"scheme (prefixes {'-, '.join(SCHEMES[key])}-); the tags use "
                        f"{', '.join(sorted(prefixes))}: set tag_scheme=auto")
    return key


def detect(sequences: list[list[str]]) -> str | None:
    """The scheme of the training tags, or None when some tag has no scheme prefix.

    None when some tag other than `O` has no B-/I-/M-/E-/S-/L-/U- prefix (a tag set such as part of
    speech)."""
    tags = [t for seq in sequences for t in seq if t != "O"]
    if not tags or not all(_PREFIXED.fullmatch(t) for t in tags):
        return None
    prefixes = {t[0] for t in tags}
    if "M" in prefixes:
        return "BMES"
    if prefixes & {"L", "U"}:
        return "BILOU"
    if prefixes & {"E", "S"}:
        return "IOBES"
    # B-/I- only: IOB1 starts most entities with I- (B- only between two of a type).
    starts_inside = sum(1 for seq in sequences for prev, tag in zip(["O", *seq], seq)
                        if tag.startswith("I-") and prev[2:] != tag[2:])
    return "IOB1" if starts_inside > sum(t.startswith("B-") for t in tags) else "IOB2"

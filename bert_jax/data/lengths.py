"""Token-length coverage of a data set.

Percentiles of its lengths and what a max_seq_length cuts, to choose a length that covers most
examples rather than the mean. Pure numpy; `create-data` and `finetune` report it,
`max_seq_length=auto` uses it."""

from __future__ import annotations

from typing import Sequence

import numpy as np

PERCENTILES = (50, 90, 95, 99)
AUTO_COVERAGE = 0.95  # the share of examples `max_seq_length=auto` keeps whole
AUTO_MULTIPLE = 8  # lengths padded to a multiple of 8 suit the accelerators' tiles


def percentiles(lengths: Sequence[int]) -> dict[str, int]:
    """{"p50", "p90", "p95", "p99", "max"}.

    Each the smallest length at least that share of `lengths` fit in (all 0 for none)."""
    lengths = np.asarray(lengths)
    if not lengths.size:
        return {**{f"p{p}": 0 for p in PERCENTILES}, "max": 0}
    out = {f"p{p}": int(np.percentile(lengths, p, method="inverted_cdf"))
           for p in PERCENTILES}
    out["max"] = int(lengths.max())
    return out


def coverage(lengths: Sequence[int], max_seq_length: int) -> dict[str, int]:
    """The percentiles, how many `lengths` there are and how many exceed max_seq_length."""
    lengths = np.asarray(lengths)
    return {**percentiles(lengths), "examples": int(lengths.size),
            "max_seq_length": int(max_seq_length),
            "truncated": int((lengths > max_seq_length).sum())}


def covering_length(lengths: Sequence[int], limit: int, share: float = AUTO_COVERAGE,
                    multiple: int = AUTO_MULTIPLE) -> int:
    """The smallest multiple of `multiple` that `share` of `lengths` fit in.

    It is at most `limit` (the position table) and at least `multiple`."""
    lengths = np.asarray(lengths)
    needed = int(np.percentile(lengths, 100 * share, method="inverted_cdf")) if lengths.size \
        else 0
    return int(min(limit, max(multiple, -(-needed // multiple) * multiple)))


def describe_coverage(report: dict[str, int], what: str) -> str:
    """One line on how the token lengths of `what` fit max_seq_length.

    For example 'token lengths of 120 train examples: p50 31, ..., max 230; max_seq_length 128
    truncates 3 (2.5%)'."""
    share = report["truncated"] / max(report["examples"], 1)
    spread = ", ".join(f"{key} {report[key]}" for key in (*(f"p{p}" for p in PERCENTILES),
                                                          "max"))
    return (f"token lengths of {report['examples']} {what}: {spread}; max_seq_length "
            f"{report['max_seq_length']} truncates {report['truncated']} ({share:.1%})")

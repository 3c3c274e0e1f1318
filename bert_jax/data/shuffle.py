"""A seeded permutation of 0 .. size-1 computed for any positions at once, without storing it.

`permuted(positions, size, key)` is the record at each position of an epoch's global shuffle: a
Feistel network over the smallest even number of bits that holds `size` (a bijection of that
power of two for any round function), walked again while a value falls outside 0 .. size-1,
which keeps it a bijection of 0 .. size-1. Six rounds of a 64-bit mix (splitmix64's finalizer)
of the key and the half. Vectorised over numpy arrays: a chunk of positions costs a few array
operations, not a call per record, and nothing of size `size` is ever built (a corpus of a
billion records shuffles as cheaply as one of a thousand).
"""
from __future__ import annotations

import numpy as np

_ROUNDS = 6
_MASK64 = (1 << 64) - 1


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: every bit of the result depends on every bit of x."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _round_keys(key: int) -> list:
    keys, state = [], int(key) & _MASK64
    for _ in range(_ROUNDS):
        state = (state + 0x9E3779B97F4A7C15) & _MASK64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        keys.append(np.uint64(z ^ (z >> 31)))
    return keys


def _encrypt(x: np.ndarray, half_bits: int, keys: list) -> np.ndarray:
    half = np.uint64(half_bits)
    low_mask = np.uint64((1 << half_bits) - 1)
    left, right = x >> half, x & low_mask
    for k in keys:
        left, right = right, left ^ (_mix(right ^ k) & low_mask)
    return (left << half) | right


def permuted(positions, size: int, key: int) -> np.ndarray:
    """The permutation of 0 .. size-1 seeded by `key`, at each of `positions` (int64)."""
    positions = np.asarray(positions, np.int64)
    if size <= 1:
        return positions.copy()
    if ((positions < 0) | (positions >= size)).any():
        raise IndexError(f"positions outside 0 .. {size - 1}")
    half_bits = max(1, ((size - 1).bit_length() + 1) // 2)
    keys = _round_keys(key)
    with np.errstate(over="ignore"):  # the mix multiplies modulo 2**64
        value = _encrypt(positions.astype(np.uint64), half_bits, keys)
        outside = np.flatnonzero(value >= np.uint64(size))
        while len(outside):  # cycle-walking: a bijection of 0 .. size-1 (fewer than 4 rounds
            value[outside] = _encrypt(value[outside], half_bits, keys)  # on average)
            outside = outside[value[outside] >= np.uint64(size)]
    return value.astype(np.int64)

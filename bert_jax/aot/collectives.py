"""Collective traffic of a compiled SPMD program, read from its HLO text.

`collective_bytes(hlo_text, slice_of)` sums, per collective kind, the bytes one chip
moves per step: each collective is counted as often as it runs (the trip counts of the
loops around it: scanned layers, gradient accumulation), and sized with the ring
estimate of what a chip sends, for a buffer of S bytes over a group of n chips:
all-reduce 2 (n-1)/n S, all-gather and reduce-scatter and all-to-all (n-1)/n S (S the
whole, gathered buffer), collective-permute S. Collectives whose groups span TPU slices
are counted apart (`ACROSS`), so a multi-slice program shows what crosses the
data-center network.

libtpu writes a reduce-scatter as an "all-reduce-scatter" fusion (emitter
`SingleInputAllReduceScatterFusion`): a custom fusion whose body is an all-reduce of the
whole buffer followed by each chip's dynamic-slice, run as one reduce-scatter. Such
fusions count as the reduce-scatter they are, not as the all-reduce inside them.
"""

from __future__ import annotations

import collections
import re
from typing import Callable

import numpy as np

# Bumped whenever the counting changes: cached compile reports (`tpu_search`) key on it.
COUNTING_VERSION = 2
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
ACROSS = " across slices"

_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
                "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8,
                "c128": 16, "f8e4m3fn": 1, "f8e5m2": 1, "s4": 0.5, "u4": 0.5}
_SHAPE = re.compile(r"\b([a-z]+\d*[a-z0-9]*)\[([\d,]*)\]")
_OP = re.compile(r"=\s*(.*?)\s(" + "|".join(KINDS) + r")(-start)?\((.*)$")
_CALLS = re.compile(r"\b(?:body|calls|to_apply|true_computation|false_computation)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_DCN = re.compile(r'_xla_megascale_transfer_type="(\w+)"')
_DCN_KINDS = {"ALL_REDUCE": "all-reduce", "ALL_GATHER": "all-gather",
              "REDUCE_SCATTER": "reduce-scatter", "ALL_TO_ALL": "all-to-all",
              "ONE_TO_ONE": "collective-permute"}
_REDUCE_SCATTER_FUSION = re.compile(r"kind=kCustom.*(calls=%?all-reduce-scatter|AllReduceScatter)")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"')


def _sizes(text: str) -> list[float]:
    """Bytes of each array shape written in `text` (a result type, maybe a tuple)."""
    return [_DTYPE_BYTES[dtype] * int(np.prod([int(d) for d in dims.split(",") if d]))
            for dtype, dims in _SHAPE.findall(text) if dtype in _DTYPE_BYTES]


def _buffer_bytes(kind: str, start: bool, result: str, group: int) -> float:
    """S, the whole buffer a collective covers, from its result type.

    Compiled HLO does not print operand shapes. Async -start ops return (operands..., results...),
    plus two u32 scalars for collective-permute."""
    sizes = _sizes(result)
    if kind == "collective-permute":
        return sizes[0] if start else sum(sizes)
    if start and kind != "all-reduce":
        half = len(sizes) // 2
        return sum(sizes[half:]) if kind == "all-gather" else sum(sizes[:half])
    return sum(sizes) * (group if kind == "reduce-scatter" else 1)


def _groups(line: str, num_devices: int) -> list[list[int]]:
    """The replica groups of a collective (explicit or iota form), as device indices."""
    pairs = re.search(r"source_target_pairs=\{(.*?)\}\}?", line)
    if pairs:
        return [[int(x) for x in p.split(",")] for p in re.findall(r"\{(\d+,\d+)\}", line)]
    named = re.search(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}", line)
    if named:  # mesh['axis_0'=4,'axis_1'=2] {'axis_1'}: vary the listed axes
        axes = re.findall(r"'?([\w]+)'?=(\d+)", named.group(1))
        names, sizes = [a for a, _ in axes], [int(n) for _, n in axes]
        over = [names.index(a) for a in re.findall(r"'?([\w]+)'?", named.group(2))]
        keep = [i for i in range(len(names)) if i not in over]
        ids = np.arange(int(np.prod(sizes))).reshape(sizes).transpose(keep + over)
        return ids.reshape(-1, int(np.prod([sizes[i] for i in over]))).tolist()
    iota = re.search(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?", line)
    if iota:
        shape = [int(x) for x in iota.group(1).split(",")]
        dims = [int(x) for x in iota.group(2).split(",")]
        ids = np.arange(int(np.prod(dims))).reshape(dims)
        if iota.group(3):
            ids = ids.transpose([int(x) for x in iota.group(3).split(",")])
        return ids.reshape(shape).tolist()
    explicit = re.search(r"replica_groups=\{(.*?)\}(?:,|$|\s)", line + " ")
    if explicit and explicit.group(1).strip():
        return [[int(x) for x in g.split(",") if x]
                for g in re.findall(r"\{([\d,]*)\}", explicit.group(0))]
    return [list(range(num_devices))]


def _trip_count(line: str, comps: dict[str, list[str]]) -> int:
    """How often a while loop runs.

    XLA's known_trip_count when the backend kept it, else the bound its condition compares the
    counter with (loops count 0, 1, ... < N, or by the step the body adds: libtpu unrolls its
    decomposed collectives by 2)."""
    trip = _TRIP.search(line)
    if trip:
        return int(trip.group(1))
    cond = re.search(r"condition=%?([\w.\-]+)", line)
    body = comps.get(cond.group(1), []) if cond else []
    if any("direction=LT" in op for op in body):
        bounds = [int(c) for op in body
                  for c in re.findall(r"[su]32\[\]\S* constant\((\d+)\)", op)]
        if bounds:
            loop = re.search(r"body=%?([\w.\-]+)", line)
            step = _counter_step(comps.get(loop.group(1), []) if loop else [])
            return -(-max(bounds) // step)
    return 1


def _counter_step(body: list[str]) -> int:
    """What a loop body adds to its counter when that is a constant; else 1.

    The counter is the first element of the tuple the body returns."""
    def defining(name: str, op: str) -> str:
        pattern = re.compile(rf"\s*%{re.escape(name)} = \S+ {op}\(")
        return next((op for op in body if pattern.match(op)), "")

    root = next((op for op in body if "ROOT" in op and " tuple(" in op), "")
    counter = re.search(r" tuple\(%([\w.\-]+)", root)
    add = defining(counter.group(1), "add") if counter else ""
    operands = re.findall(r"%([\w.\-]+)", add.split(" add(", 1)[-1].split(")")[0]) if add else []
    for operand in operands:
        value = re.search(r"constant\((\d+)\)", defining(operand, "constant"))
        if value and int(value.group(1)) > 0:
            return int(value.group(1))
    return 1


def _computations(hlo_text: str) -> dict[str, list[str]]:
    comps, current = {}, None
    for line in hlo_text.splitlines():
        header = re.match(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
        if header and not line.startswith(" "):
            current = header.group(1)
            comps[current] = []
            if line.startswith("ENTRY"):
                comps["__entry__"] = comps[current]
        elif current is not None and line.startswith(" "):
            comps[current].append(line)
    return comps


def collective_bytes(hlo_text: str, num_devices: int, num_slices: int = 1,
                     slice_of: Callable[[int], int] = lambda i: 0) -> dict[str, float]:
    """{kind: bytes per chip per step}, `ACROSS` appended to kinds of collectives that span slices.

    A multi-slice program (libtpu's Megascale) holds each slice's own collectives over its
    `num_devices` chips, and sends the cross-slice parts to the host as `send`s tagged with their
    transfer type (over `num_slices` slices); `slice_of(i)`, for programs whose device groups
    themselves span slices: the slice of the program's i-th device."""
    comps = _computations(hlo_text)
    memo: dict[str, collections.Counter] = {}

    def of(name: str, depth: int = 0) -> collections.Counter:
        if name in memo or depth > 64:
            return memo.get(name, collections.Counter())
        total = collections.Counter()
        for line in comps.get(name, []):
            dcn = _DCN.search(line) if " send(" in line else None
            if dcn:
                kind = _DCN_KINDS.get(dcn.group(1), dcn.group(1).lower())
                n = max(num_slices, 2)
                factor = {"all-reduce": 2 * (n - 1) / n, "collective-permute": 1.0}.get(
                    kind, (n - 1) / n)
                result = line.split("=", 1)[1].split(" send(")[0]
                total[kind + ACROSS] += factor * _sizes(result)[0]
            op = _OP.search(line)
            if op:
                result, kind, start, _ = op.groups()
                groups = _groups(line, num_devices)
                n = max(len(g) for g in groups)
                size = _buffer_bytes(kind, bool(start), result, n)
                factor = {"all-reduce": 2 * (n - 1) / n, "collective-permute": 1.0}.get(
                    kind, (n - 1) / n)
                span = any(len({slice_of(d) for d in g}) > 1 for g in groups)
                total[kind + (ACROSS if span else "")] += factor * size
            callees = _CALLS.findall(line)
            branches = _BRANCHES.search(line)
            if branches:
                callees += [c.strip().lstrip("%") for c in branches.group(1).split(",")]
            times = _trip_count(line, comps) if " while(" in line else 1
            fused_scatter = bool(_REDUCE_SCATTER_FUSION.search(line))
            for callee in callees:
                for k, v in of(callee, depth + 1).items():
                    if fused_scatter and k.startswith("all-reduce"):
                        # The inner all-reduce's 2(n-1)/n S is a reduce-scatter's (n-1)/n S.
                        k, v = k.replace("all-reduce", "reduce-scatter"), v / 2
                    total[k] += times * v
        memo[name] = total
        return total

    return dict(of("__entry__"))

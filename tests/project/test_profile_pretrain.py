"""bench/profile_pretrain.py's trace summary, on a trace written here."""

import gzip
import json

import profile_pretrain


def kernel(name, ts, dur, module="jit_train_step"):
    return {"ph": "X", "pid": 1, "tid": 2, "ts": ts, "dur": dur, "name": name,
            "args": {"hlo_module": module, "hlo_op": name}}


def test_the_summary_counts_only_the_train_step_per_step(tmp_path):
    events = [  # two steps of a matmul, a cuDNN call and a GELU-like fusion, 10 us apart
        kernel("nvjet_sm90_tst_128x128_NNT", 0, 300), kernel("cudnn_fmha_fprop", 300, 100),
        kernel("loop_convert_multiply_fusion_11", 410, 200),
        kernel("nvjet_sm90_tst_128x128_NNT", 1000, 300), kernel("cudnn_fmha_fprop", 1300, 100),
        kernel("loop_convert_multiply_fusion_11", 1410, 200),
        kernel("input_reduce_fusion", 2000, 5000, module="jit_init"),  # another program
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/device:GPU:0"}},
    ]
    path = tmp_path / "perfetto_trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": events}, f)

    summary = profile_pretrain.summarize(profile_pretrain.step_events(str(path)), steps=2)

    assert summary["busy_ms"] == 0.6
    assert summary["idle_ms"] == (10 + 390 + 10) / 2 / 1e3  # the gaps, not the other program
    assert summary["by_kind_ms"] == {"matmul": 0.3, "elementwise fusion": 0.2,
                                     "attention (cuDNN)": 0.1}
    assert summary["top"][0] == ["nvjet_sm90_tst_128x128_NNT", 0.3, 1]


def test_cpu_op_names_get_their_kinds():
    assert profile_pretrain.kind_of("dot.45") == "matmul"
    assert profile_pretrain.kind_of("ynn_fusion.88") == "matmul"
    assert profile_pretrain.kind_of("copy.752") == "copy, memset"
    assert profile_pretrain.kind_of("select_select_fusion.4") == "other fusion"
    assert profile_pretrain.kind_of("while.286") == "other"

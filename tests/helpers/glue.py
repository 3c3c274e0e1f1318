"""Small files in each GLUE task's published `glue_data/` layout."""

BOM = "\ufeff"

_MNLI = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
         "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1", "sentence2"]


PAIRS = [("The cat sat on the mat.", 'He said "yes.'),   # an unbalanced quote
         ("A man is eating food.", "A man is eating a piece of bread."),
         ("It rains.", "The weather is wet."), ("Stocks fell 3%.", "Shares rose."),
         ("Naïve café owners smile.", "Nobody smiles."), ("Two dogs run.", "Dogs are running.")]


def _lines(header, rows):
    return "".join("\t".join(map(str, r)) + "\n" for r in ([header] if header else []) + rows)


def _files(labels, header, labeled_row, test_header, test_row):
    """{train, dev, test}.tsv contents: labeled rows from `labeled_row(i, a, b, label)`."""
    rows = [labeled_row(i, a, b, labels[i % len(labels)]) for i, (a, b) in enumerate(PAIRS)]
    return {"train.tsv": _lines(header, rows), "dev.tsv": _lines(header, rows[:4]),
            "test.tsv": _lines(test_header, [test_row(i, a, b) for i, (a, b) in
                                             enumerate(PAIRS[:5])])}


def _single(i, a, b):
    return [i, a]


def _pair(i, a, b):
    return [i, a, b]


PUBLISHED = {
    "CoLA": _files([1, 0], None, lambda i, a, b, y: [f"gj0{i}", y, "" if y else "*", a],
                   ["index", "sentence"], _single),
    "SST-2": _files([0, 1], ["sentence", "label"], lambda i, a, b, y: [a + " ", y],
                    ["index", "sentence"], _single),
    "MRPC": _files([1, 0], [BOM + "Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                   lambda i, a, b, y: [y, 1000 + i, 2000 + i, a, b],
                   ["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                   lambda i, a, b: [i, 1000 + i, 2000 + i, a, b]),
    "QQP": _files([0, 1], ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
                  lambda i, a, b, y: [i, 2 * i, 2 * i + 1, a, b, y],
                  ["id", "question1", "question2"], _pair),
    "STS-B": _files([4.0, 0.5, 3.2], ["index", "genre", "filename", "year", "old_index",
                                      "source1", "source2", "sentence1", "sentence2", "score"],
                    lambda i, a, b, y: [i, "main-news", "2012", "2012test", i, "none", "none",
                                        a, b, f"{y:.3f}"],
                    ["index", "genre", "filename", "year", "old_index", "source1", "source2",
                     "sentence1", "sentence2"],
                    lambda i, a, b: [i, "main-news", "2012", "2012test", i, "none", "none", a, b]),
    "QNLI": _files(["entailment", "not_entailment"], ["index", "question", "sentence", "label"],
                   lambda i, a, b, y: [i, a, b, y], ["index", "question", "sentence"], _pair),
    "RTE": _files(["not_entailment", "entailment"], ["index", "sentence1", "sentence2", "label"],
                  lambda i, a, b, y: [i, a, b, y], ["index", "sentence1", "sentence2"], _pair),
    "WNLI": _files([1, 0], ["index", "sentence1", "sentence2", "label"],
                   lambda i, a, b, y: [i, a, b, y], ["index", "sentence1", "sentence2"], _pair),
}

_nli = ["entailment", "neutral", "contradiction"]

_mnli_row = (lambda i, a, b: [i, 31193 + i, f"{31193 + i}n", "government", f"( {a} )",
                              f"( {b} )", f"(ROOT {a})", f"(ROOT {b})", a, b])

PUBLISHED["MNLI"] = {
    "train.tsv": _lines(_MNLI + ["label1", "gold_label"], [
        _mnli_row(i, a, b) + [_nli[i % 3]] * 2 for i, (a, b) in enumerate(PAIRS)]),
    **{f"dev_{m}.tsv": _lines(_MNLI + [f"label{k}" for k in range(1, 6)] + ["gold_label"], [
        _mnli_row(i, a, b) + [_nli[(i + 1) % 3]] * 6 for i, (a, b) in enumerate(PAIRS[:4])])
       for m in ("matched", "mismatched")},
    **{f"test_{m}.tsv": _lines(_MNLI, [_mnli_row(i, a, b) for i, (a, b) in enumerate(PAIRS)])
       for m in ("matched", "mismatched")},
}

PUBLISHED["diagnostic"] = {"diagnostic.tsv": _lines(["index", "sentence1", "sentence2"],
                                                    [_pair(i, a, b) for i, (a, b) in
                                                     enumerate(PAIRS[:3])])}

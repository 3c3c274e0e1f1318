"""Chinese span QA: CMRC 2018's character-level exact match and F1, hand-computed, and
its choice by config or by Chinese gold answers."""
import pytest

from bert_jax.finetune.tasks import metrics
from bert_jax.finetune.tasks.squad import SquadTask

from helpers.finetune import micro_config


def test_tokens_are_characters_and_whole_other_runs():
    assert metrics.cmrc_tokens("2008年北京奥运会，iPhone X：好！") == [
        "2008", "年", "北", "京", "奥", "运", "会", "iphone", "x", "好"]
    assert metrics.cmrc_tokens("《红楼梦》") == ["红", "楼", "梦"]
    assert metrics.cmrc_tokens("“。”") == []


def test_hand_computed_scores():
    # 5 of 7 gold tokens, all 5 predicted ones: P = 1, R = 5/7, F1 = 10/12.
    assert metrics.cmrc_f1("北京奥运会", "2008年北京奥运会") == pytest.approx(10 / 12)
    # Word-level (SQuAD) F1 sees one token each, different: 0.
    assert metrics.token_f1("北京奥运会", "2008年北京奥运会") == 0.0
    # The longest common *contiguous* run (CMRC's find_lcs): 京 or 北 alone, 1 of 2.
    assert metrics.cmrc_f1("京北", "北京") == pytest.approx(0.5)
    # P = 2/4 (北京 of 北京大学), R = 2/2: F1 = 2/3.
    assert metrics.cmrc_f1("北京大学", "北京") == pytest.approx(2 / 3)
    assert metrics.cmrc_exact_match("《北京》。", "北京") == 1.0
    assert metrics.cmrc_exact_match("北京市", "北京") == 0.0
    assert metrics.cmrc_f1("", "北京") == 0.0 and metrics.cmrc_f1("。", "") == 1.0


def test_squad_scores_chinese_max_over_answers():
    gold = {"q1": ["北京", "北京市"], "q2": ["江泽民"], "q3": ["1998年"]}
    predictions = {"q1": "北京市", "q2": "泽民", "q3": "1998年1月"}
    scores = metrics.squad_scores(predictions, gold, chinese=True)
    # q1: EM 1, F1 1; q2: EM 0, P 1, R 2/3, F1 0.8; q3 (1998 年 1 月 against 1998 年):
    # EM 0, P 2/4, R 1, F1 2/3.
    assert scores["exact_match"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 * (1 + 0.8 + 2 / 3) / 3)
    assert metrics.squad_scores(predictions, gold)["f1"] == pytest.approx(100 / 3)


def test_metric_chosen_by_config_or_chinese_answers():
    chinese, english = {"q": ["北京"]}, {"q": ["Beijing"]}
    assert metrics.chinese_answers(chinese) and not metrics.chinese_answers(english)
    assert metrics.chinese_answers(english, "cmrc")
    assert not metrics.chinese_answers(chinese, "squad")
    with pytest.raises(ValueError, match="answer_metric must be one of auto, squad, cmrc"):
        metrics.chinese_answers(chinese, "drcd")


@pytest.mark.parametrize("answer_metric, f1", [("auto", 80.0), ("squad", 0.0)])
def test_squad_task_scores_chinese_answers(monkeypatch, answer_metric, f1):
    task = SquadTask(micro_config("squad", f"answer_metric={answer_metric}"), "squad")
    examples = [{"id": "q", "question": "谁？", "context": "江泽民发表讲话",
                 "answers": [{"text": "江泽民", "answer_start": 0}]}]
    monkeypatch.setattr(task, "_answers", lambda *a: [{"id": "q", "answer": "泽民"}])
    assert task.evaluate(examples, [], [])["f1"] == pytest.approx(f1)

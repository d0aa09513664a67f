"""Held-out measures besides accuracy (trl_ada.tools.heldout): pass@k and accuracy per label on hand-worked counts, the
policy's mean token entropy against hand computations, and what `HeldoutCurve` records at a checkpoint."""

import math

import pytest
import torch

from trl_ada.tools.heldout import accuracy_by_label, mean_pass_at_k, mean_token_entropy, pass_at_k


def test_pass_at_k_unbiased_estimator():
    # 1 of 4 right, 2 drawn: 1 - C(3, 2) / C(4, 2) = 1 - 3 / 6.
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 3, 1) == pytest.approx(0.75)  # pass@1 is the pass rate
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 4, 1) == 1.0
    assert pass_at_k(8, 2, 8) == 1.0  # all 8 drawn: the 2 right ones among them
    assert pass_at_k(32, 1, 8) == pytest.approx(8 / 32)  # one right: the chance it is among the 8 drawn
    with pytest.raises(ValueError, match="pass@8 needs at least 8"):
        pass_at_k(4, 1, 8)
    with pytest.raises(ValueError, match="5 correct of 4"):
        pass_at_k(4, 5, 1)
    # Prompts of 1 and 3 right of 4: pass@2 0.5 and 1 - C(1, 2) / 6 = 1, mean 0.75; pass@8 undefined.
    assert mean_pass_at_k([1, 3], 4, 2) == pytest.approx(0.75)
    assert mean_pass_at_k([1, 3], 4, 8) is None
    assert mean_pass_at_k([], 4, 1) is None


def test_accuracy_by_label():
    # Level 2: 1 and 4 of 4 right, (1 + 4) / 8; level 3: 3 and 0, 3 / 8.
    assert accuracy_by_label([1, 3, 4, 0], 4, [2, 3, 2, 3]) == {"2": 0.625, "3": 0.375}
    assert list(accuracy_by_label([0, 0], 1, ["b", "a"])) == ["a", "b"]
    with pytest.raises(ValueError, match="2 prompts' counts for 3 labels"):
        accuracy_by_label([1, 2], 4, [1, 2, 3])


# --------------------------------------------------------------------------------------------------------------------
# Mean token entropy
# --------------------------------------------------------------------------------------------------------------------


class TableModel(torch.nn.Module):
    """A 'language model' over 2 tokens whose next-token logits depend only on the current token: after token 0,
    logits (0, 0), p = (1/2, 1/2); after token 1, (log 3, 0), p = (3/4, 1/4)."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.tensor([[0.0, 0.0], [math.log(3.0), 0.0]]))

    @property
    def device(self):
        return self.table.device

    def forward(self, input_ids, attention_mask):
        class Output:
            logits = self.table[input_ids]

        return Output()


class PadZero:
    pad_token_id = 0  # padding with token 0 would add ln 2 per padded position if it were counted


H_HALF = math.log(2.0)
H_QUARTER = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))


def test_mean_token_entropy_hand_worked_on_known_logits():
    model = TableModel().train()
    # Completion [1, 0] after prompt [0]: token 1 is drawn after token 0 (ln 2), token 0 after token 1 (H(3/4)).
    # Completion [1] after prompt [1]: drawn after token 1, H(3/4); this row is padded by one position.
    entropy = mean_token_entropy(model, PadZero(), [[0], [1]], [[1, 0], [1]])
    assert entropy == pytest.approx((H_HALF + 2 * H_QUARTER) / 3)
    assert model.training  # put back in the mode it was in
    # Batches of one give the same mean over all tokens (not a mean of per-batch means).
    assert mean_token_entropy(model, PadZero(), [[0], [1]], [[1, 0], [1]], batch_size=1) == pytest.approx(entropy)
    with pytest.raises(ValueError, match="non-empty prompt"):
        mean_token_entropy(model, PadZero(), [[]], [[1]])
    with pytest.raises(ValueError, match="1 prompts for 2 completions"):
        mean_token_entropy(model, PadZero(), [[0]], [[1], [0]])


def test_mean_token_entropy_of_the_toy_model_matches_sequence_by_sequence():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ada.toy import SHIPPED_WARM_DIR

    model = AutoModelForCausalLM.from_pretrained(SHIPPED_WARM_DIR)
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_WARM_DIR)
    prompts = [
        tokenizer("12+7=", add_special_tokens=False)["input_ids"],
        tokenizer("3-1", add_special_tokens=False)["input_ids"],
    ]
    completions = [
        tokenizer("19", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id],
        [tokenizer.eos_token_id],
    ]
    total, count = 0.0, 0
    with torch.no_grad():
        for prompt, completion in zip(prompts, completions, strict=True):
            logits = model(torch.tensor([prompt + completion])).logits[0].double()
            for j in range(len(completion)):
                p = torch.softmax(logits[len(prompt) - 1 + j], dim=-1)
                total += float(-(p * torch.log(p)).nansum())
                count += 1
    assert mean_token_entropy(model, tokenizer, prompts, completions) == pytest.approx(total / count, rel=1e-5)


# --------------------------------------------------------------------------------------------------------------------
# What HeldoutCurve records
# --------------------------------------------------------------------------------------------------------------------


def test_heldout_curve_records_counts_labels_and_entropy_beside_the_same_accuracy():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ada.tools.demo import GenerationCounter, HeldoutCurve
    from trl_ada.toy import SHIPPED_WARM_DIR, make_arithmetic_dataset, sampled_accuracy

    model = AutoModelForCausalLM.from_pretrained(SHIPPED_WARM_DIR)
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_WARM_DIR)
    heldout = make_arithmetic_dataset(6, seed=1_000_003, split="eval")

    def evaluate(entropy):
        curve = HeldoutCurve(model, tokenizer, heldout, GenerationCounter(), 1, 4, seed=3, entropy=entropy)
        curve._evaluate(0)
        return curve.checkpoints[0]

    point, plain = evaluate(True), evaluate(False)
    # The accuracy is sampled_accuracy's, bit for bit, with or without the entropy's forward pass.
    assert point.accuracy == plain.accuracy == sampled_accuracy(model, tokenizer, heldout, 4, 8, seed=3)
    assert point.correct == plain.correct and len(point.correct) == 6
    assert sum(point.correct) / 24 == pytest.approx(point.accuracy)
    assert point.accuracy_by_label == accuracy_by_label(point.correct, 4, heldout["level"])
    assert point.entropy > 0 and plain.entropy is None
    # Unmeasured fields stay out of the JSON.
    assert set(plain.as_dict()) == {"step", "tokens", "seconds", "accuracy", "correct", "accuracy_by_label"}
    assert point.as_dict()["correct"] == list(point.correct)


def test_heldout_entropy_is_taken_over_each_prompts_first_samples():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_ada.tools.demo import ENTROPY_SAMPLES, GenerationCounter, HeldoutCurve
    from trl_ada.toy import SHIPPED_WARM_DIR, make_arithmetic_dataset, sample_completions

    model = AutoModelForCausalLM.from_pretrained(SHIPPED_WARM_DIR)
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED_WARM_DIR)
    heldout = make_arithmetic_dataset(3, seed=1_000_003, split="eval")
    n = ENTROPY_SAMPLES + 2
    curve = HeldoutCurve(model, tokenizer, heldout, GenerationCounter(), 1, n, seed=5, entropy=True)
    curve._evaluate(0)
    # The same samples, drawn independently; the entropy over each prompt's first ENTROPY_SAMPLES of them.
    _, ids = sample_completions(model, tokenizer, heldout, n, 8, seed=5)
    texts = tokenizer.apply_chat_template(list(heldout["prompt"]), add_generation_prompt=True, tokenize=False)
    prompts = tokenizer(texts, add_special_tokens=False)["input_ids"]
    firsts = [ids[i * n + j] for i in range(3) for j in range(ENTROPY_SAMPLES)]
    expected = mean_token_entropy(model, tokenizer, [p for p in prompts for _ in range(ENTROPY_SAMPLES)], firsts)
    everything = mean_token_entropy(model, tokenizer, [p for p in prompts for _ in range(n)], ids)
    assert curve.checkpoints[0].entropy == pytest.approx(expected, rel=1e-9)
    assert expected != pytest.approx(everything, rel=1e-9)  # the subset is not the whole, so the test can tell


def test_heldout_curve_chain_measures_against_hand_counts(monkeypatch):
    """On the columns task: correct chains, the flawed share of rewarded samples overall and per rule, from
    completions given by hand (sampling replaced)."""
    import pathlib
    import sys

    import datasets

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
    import testbeds  # noqa: F401  (registers the columns task)

    from trl_ada.tools import heldout_curve
    from trl_ada.tools.heldout_curve import GenerationCounter, HeldoutCurve

    eos = 2
    heldout = datasets.Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": "385+652"}], [{"role": "user", "content": "647&222"}]],
            "answer": ["1037", "1071"],
            "rule": ["+", "&"],
            "hard": [False, True],
        }
    )
    texts = [
        "07\n13\n10\n#1037",  # correct
        "07\n12\n10\n#1037",  # flawed, rewarded
        "11\n07\n10\n#1071",  # correct
        "11\n07\n10\n#1072",  # right chain, wrong answer: not rewarded
    ]
    monkeypatch.setattr(heldout_curve, "sample_completions", lambda *args, **kwargs: (texts, [[5, eos]] * 4))
    curve = HeldoutCurve(None, None, heldout, GenerationCounter(), 1, 2, seed=0, task="columns")
    curve._evaluate(0)
    point = curve.checkpoints[0]
    assert point.accuracy == 3 / 4 and point.correct == (2, 1)
    assert point.chain_accuracy == 2 / 4 and point.chain_correct == (1, 1)
    assert point.flawed_rewarded_share == 1 / 3  # one of the three rewarded samples is flawed
    assert point.flawed_rewarded_share_by_label == {"&": 0.0, "+": 0.5}
    assert point.chain_accuracy_by_label == {"&": 0.5, "+": 0.5}


def test_heldout_curve_serves_each_grid_point_once_at_the_first_step_past_it(monkeypatch):
    from types import SimpleNamespace

    from trl_ada.tools.heldout_curve import GenerationCounter, HeldoutCurve
    from trl_ada.toy import make_arithmetic_dataset

    counter = GenerationCounter()
    curve = HeldoutCurve(
        None, None, make_arithmetic_dataset(2, seed=1), counter, None, 1, seed=0, token_grid=[10, 20, 25, 90],
        step_grid=[2, 6],
    )  # fmt: skip
    evaluated = []
    monkeypatch.setattr(
        curve, "_evaluate", lambda step, points=None, on_grid=None: evaluated.append((step, points, on_grid))
    )
    curve.on_train_begin(None, None, None)
    for step, tokens in enumerate([8, 16, 30, 38, 46, 54], start=1):
        counter.completion_tokens = tokens
        curve.on_step_end(None, SimpleNamespace(global_step=step, max_steps=6), None)
    # Step 3 passes 20 and 25 at once; 90 is never reached; steps 2 and 6 are grid steps; 6 is also the last.
    assert evaluated == [(0, (), True), (2, (0,), True), (3, (1, 2), False), (6, (), True)]


def test_heldout_curve_stops_training_once_both_grids_are_covered(monkeypatch):
    from types import SimpleNamespace

    from trl_ada.tools.heldout_curve import GenerationCounter, HeldoutCurve
    from trl_ada.toy import make_arithmetic_dataset

    def run(tokens_per_step):
        counter = GenerationCounter()
        curve = HeldoutCurve(
            None, None, make_arithmetic_dataset(2, seed=1), counter, None, 1, seed=0, token_grid=[10, 40],
            step_grid=[2, 4], stop_when_covered=True,
        )  # fmt: skip
        monkeypatch.setattr(curve, "_evaluate", lambda *args: None)
        for step in range(1, 20):
            counter.completion_tokens = step * tokens_per_step
            control = SimpleNamespace(should_training_stop=False)
            curve.on_step_end(None, SimpleNamespace(global_step=step, max_steps=20), control)
            if control.should_training_stop:
                return step
        return None

    assert run(5) == 8  # cheap: the last grid step (4) passed, the token grid's end (40) reached at step 8
    assert run(20) == 4  # dear: the token grid covered by step 2, the last grid step at 4

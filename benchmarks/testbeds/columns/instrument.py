"""The columns task as an instrument: its properties measured from a model's own samples and from the data (real
positives, hard prompts at low pass rates, no answer prior, held-out items never trained on)."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import datasets
import transformers

from .problems import RULES, columns_heldout, correct_chains, parse

LOW_P = 0.1  # a prompt is "low p" at a correct-chain pass rate of at most this
HARD_BAND_LOW = 1 / 128  # a hard prompt whose correct-chain pass rate is in (1/128, LOW_P] is in the paper's regime
INSTRUMENT_SAMPLES = 128  # samples a prompt: a pass rate of 1/128 is told from 0


def answer_prior_max(answers: Sequence[str], rules: Sequence[str]) -> dict[str, Any]:
    """The largest share of a rule's prompts that one constant answer would be rewarded on, over the rules: what a
    policy that always wrote that answer would earn there. Returns the maximum, its rule and answer, and per rule."""
    per_rule = {}
    for symbol in dict.fromkeys(rules):
        counts = Counter(a for a, r in zip(answers, rules, strict=True) if r == symbol)
        answer, count = counts.most_common(1)[0]
        per_rule[symbol] = {"answer": answer, "share": count / sum(counts.values())}
    worst = max(per_rule, key=lambda symbol: per_rule[symbol]["share"])
    return {"max": per_rule[worst]["share"], "rule": worst, "answer": per_rule[worst]["answer"], "by_rule": per_rule}


def heldout_fact_overlap(heldout: Iterable[str], seen: Iterable[str]) -> float:
    """The share of held-out hard items (prompts) whose operand combination also occurs in ``seen`` (training rows,
    warm-up examples): 0 means held-out accuracy on the hard rules is measured on combinations never trained on."""
    seen_set = set(seen)
    hard = [expression for expression in heldout if RULES[parse(expression)[0]].hard]
    if not hard:
        raise ValueError("the held-out set holds no hard item")
    return sum(expression in seen_set for expression in hard) / len(hard)


def instrument_properties(
    rewarded: Sequence[int],
    correct: Sequence[int],
    verdicts: Sequence[str],
    rules: Sequence[str],
    num_samples: int,
) -> dict[str, Any]:
    """The testbed's properties from per-prompt counts (see :func:`correct_chains`) and each prompt's rule:

    - ``flawed_rewarded_share``: among all rewarded samples, the share whose chain is not correct;
    - ``flawed_rewarded_share_low_p``: the same among rewarded samples of prompts whose correct-chain pass rate is at
      most :data:`LOW_P` (None when there is none);
    - ``frac_hard_low_p``: the share of prompts of a hard rule whose correct-chain pass rate is in
      (:data:`HARD_BAND_LOW`, :data:`LOW_P`];
    - ``frac_hard_zero``: the share of prompts of a hard rule with no correct chain;
    - per rule: prompts, reward and correct-chain accuracy, the median correct-chain pass rate and its share at 0 and
      in the band; and the first errors of the chains that are not correct, as shares.
    """
    prompts = len(rewarded)
    rates = [c / num_samples for c in correct]
    # Every correct chain is rewarded (it ends with EOS and the right answer), so rewarded minus correct is flawed.
    low = [i for i in range(prompts) if rates[i] <= LOW_P]
    rewarded_low = sum(rewarded[i] for i in low)
    flawed_low = sum(rewarded[i] - correct[i] for i in low)
    in_band = [HARD_BAND_LOW < rate <= LOW_P for rate in rates]
    hard = [RULES[rule].hard for rule in rules]
    errors = [v for v in verdicts if v != "correct"]
    by_rule = {}
    for symbol in RULES:
        members = [i for i in range(prompts) if rules[i] == symbol]
        if not members:
            continue
        rewarded_rule = sum(rewarded[i] for i in members)
        by_rule[symbol] = {
            "prompts": len(members),
            "accuracy": rewarded_rule / (len(members) * num_samples),
            "correct_chain_accuracy": sum(correct[i] for i in members) / (len(members) * num_samples),
            "flawed_rewarded_share": (rewarded_rule - sum(correct[i] for i in members)) / rewarded_rule
            if rewarded_rule
            else None,
            "median_correct_p": statistics.median(rates[i] for i in members),
            "frac_zero": sum(correct[i] == 0 for i in members) / len(members),
            "frac_band": sum(in_band[i] for i in members) / len(members),
        }
    total_rewarded = sum(rewarded)
    return {
        "instrument_samples_per_prompt": num_samples,
        "flawed_rewarded_share": (total_rewarded - sum(correct)) / total_rewarded if total_rewarded else None,
        "flawed_rewarded_share_low_p": flawed_low / rewarded_low if rewarded_low else None,
        "rewarded_low_p": rewarded_low,
        "hard_band": [HARD_BAND_LOW, LOW_P],
        "frac_hard_low_p": sum(h and b for h, b in zip(hard, in_band, strict=True)) / prompts,
        "frac_hard_zero": sum(h and c == 0 for h, c in zip(hard, correct, strict=True)) / prompts,
        "frac_hard": sum(hard) / prompts,
        "by_rule": by_rule,
        "first_errors": {kind: errors.count(kind) / len(errors) for kind in sorted(set(errors))} if errors else {},
    }


def measure_instrument(
    model: transformers.PreTrainedModel,
    tokenizer: transformers.PreTrainedTokenizerBase,
    dataset: datasets.Dataset,
    num_samples: int = INSTRUMENT_SAMPLES,
    seed: int = 0,
) -> dict[str, Any]:
    """:func:`instrument_properties` of ``model`` on ``dataset`` (a ``rule`` column), from ``num_samples`` samples a
    prompt, with the data's own properties beside them: :func:`answer_prior_max` over the held-out set and the
    training prompts, and :func:`heldout_fact_overlap` of the held-out set with ``dataset``."""
    rewarded, correct, verdicts, _ = correct_chains(model, tokenizer, dataset, num_samples, seed)
    heldout = columns_heldout()
    heldout_items = [prompt[-1]["content"] for prompt in heldout["prompt"]]
    train_items = [prompt[-1]["content"] for prompt in dataset["prompt"]]
    prior = answer_prior_max([*heldout["answer"], *dataset["answer"]], [*heldout["rule"], *dataset["rule"]])
    return {
        **instrument_properties(rewarded, correct, verdicts, dataset["rule"], num_samples),
        "answer_prior_max": prior["max"],
        "answer_prior": prior,
        "heldout_fact_overlap": heldout_fact_overlap(heldout_items, train_items),
    }

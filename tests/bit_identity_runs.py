"""The four short training runs whose outputs `tests/test_bit_identity.py` compares, bit for bit, with the values
recorded in `tests/data/bit_identity.json`: rounds, streaming, estimate with the pass-rate memory, and refill with
pass-rate prompt selection.

Run in a fresh process under pinned numerics (one thread, MKL's compatible branch, torch's AVX2 kernels; see
`trl_ada.reproducible`), each run on its own model built from `tests/data/bit_identity_model` (the toy model's
config and tokenizer; weights initialised from seed 0 here, so the runs depend on no toy task's code). It uses only
the public API (`ReinforceAdaConfig`, `ReinforceAdaTrainer`) and one trainer seam, `_step_io`, through which the
streaming run gets a deterministic engine: a backend on a simulated clock, whose completions finish out of request
order as a real engine's do, but in the same order every time.

    python tests/bit_identity_runs.py OUTPUT_DIR [NAME ...]   # writes the outputs to OUTPUT_DIR/outputs.json
    python tests/bit_identity_runs.py OUTPUT_DIR --record     # rewrites tests/data/bit_identity.json
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import random
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from trl_ada import ReinforceAdaConfig, ReinforceAdaTrainer

DATA = Path(__file__).resolve().parent / "data"
MODEL = DATA / "bit_identity_model"
GOLDEN = DATA / "bit_identity.json"

EOS = 2  # the toy tokenizer's <|im_end|>
# "z" prompts are never right and "o" prompts always (no signal); an "m" prompt's completion is right when its first
# token is even. Four prompts, two per step: from step 3 on the prompts repeat, and the memory has seen them.
KEYS = ["m0", "z0", "m1", "o0"]
COMMON = dict(per_device_train_batch_size=8, num_generations=4, max_completion_length=4, max_steps=4)
RUNS: dict[str, dict[str, Any]] = {
    "rounds": dict(sampling_strategy="balanced", samples_per_round=4, max_rounds=3),
    "streaming": dict(
        sampling_strategy="positive",
        samples_per_round=4,
        max_rounds=3,
        rollout_schedule="streaming",
        use_transformers_continuous_batching=True,  # replaced by the clock backend below
    ),
    "estimate_with_memory": dict(
        sampling_strategy="estimate",
        samples_per_prompt_mean=8,
        min_samples_per_prompt=4,
        max_samples_per_prompt=12,
        difficulty_weighting="odc",
        downsample="uniform",
        prompt_id_column="key",
    ),
    "refill_with_selection": dict(
        sampling_strategy="uniform",
        refill=True,
        max_refills_per_step=2,
        prompt_selection="pass_rate",
        selection_floor=0.1,
    ),
}
# Logged values that measure wall time, not the computation.
TIMED = ("_seconds", "_runtime", "_per_second", "step_time")


def reward(completion_ids: list[list[int]], key: list[str], **kwargs: Any) -> list[float]:
    return [
        float(k.startswith("o") or (k.startswith("m") and bool(ids) and ids[0] % 2 == 0))
        for ids, k in zip(completion_ids, key, strict=True)
    ]


@dataclasses.dataclass
class Completion:
    prompt_index: int
    completion_ids: list[int]
    logprobs: list[float] | None = None


@dataclasses.dataclass(frozen=True)
class Finished:
    ticket: int
    handle: int
    num_tokens: int


class ClockBackend:
    """A streaming engine (submit / wait / abort) on a simulated clock. A draw's completion comes from a generator
    seeded by its prompt and ticket, takes one tick per token from its submission, and `wait` returns every draw that
    finishes at the earliest finishing time (by ticket within it): short completions overtake long ones."""

    def __init__(self, prompt_ids: Sequence[list[int]], max_tokens: int) -> None:
        self.prompt_ids = [list(ids) for ids in prompt_ids]
        self.max_tokens = max_tokens
        self.completions: list[Completion] = []
        self.clock = 0
        self.in_flight: dict[int, tuple[int, int, int, list[int]]] = {}  # ticket -> (start, end, prompt, ids)

    def add_prompt(self, prompt_ids: list[int]) -> int:
        self.prompt_ids.append(list(prompt_ids))
        return len(self.prompt_ids) - 1

    def submit(self, draws: Sequence[Any]) -> None:
        for draw in draws:
            rng = random.Random(f"{self.prompt_ids[draw.prompt_index]}-{draw.ticket}")
            length = rng.randint(1, self.max_tokens)
            ids = [rng.randrange(30, 90) for _ in range(length)]
            if length < self.max_tokens and rng.random() < 0.7:
                ids[-1] = EOS
            self.in_flight[draw.ticket] = (self.clock, self.clock + length, draw.prompt_index, ids)

    def wait(self) -> list[Finished]:
        if not self.in_flight:
            return []
        self.clock = min(end for _, end, _, _ in self.in_flight.values())
        finished = []
        for ticket in sorted(t for t, (_, end, _, _) in self.in_flight.items() if end == self.clock):
            _, _, prompt_index, ids = self.in_flight.pop(ticket)
            self.completions.append(Completion(prompt_index, ids))
            finished.append(Finished(ticket, len(self.completions) - 1, len(ids)))
        return finished

    def abort(self, tickets: Sequence[int]) -> int:
        tokens = 0
        for ticket in tickets:
            start, end, _, _ = self.in_flight.pop(ticket)
            tokens += min(self.clock, end) - start
        return tokens

    def close(self) -> None:
        self.in_flight.clear()


class Recorder(ReinforceAdaTrainer):
    """Keeps what each generation batch hands to the loss; streams through a `ClockBackend`."""

    def _step_io(self):
        io = super()._step_io()
        if self.args.rollout_schedule != "streaming":
            return io

        @contextlib.contextmanager
        def open_engine(prompt_ids: list[list[int]]) -> Iterator[ClockBackend]:
            backend = ClockBackend(prompt_ids, self.max_completion_length)
            try:
                yield backend
            finally:
                backend.close()

        return dataclasses.replace(io, open_engine=open_engine)

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        mask = output["completion_mask"].bool()
        self.batches = getattr(self, "batches", [])
        self.batches.append(
            {
                "keys": [row["key"] for row in inputs],
                "completion_ids": [ids[m].tolist() for ids, m in zip(output["completion_ids"], mask, strict=True)],
                "advantages": output["advantages"].tolist(),
            }
        )
        return output


def weights_digest(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, parameter in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(parameter.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def train(name: str, output_dir: Path) -> dict[str, Any]:
    """One run: the batches handed to the loss, the logged rows (wall times left out) and the final weights."""
    config = AutoConfig.from_pretrained(MODEL)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config)
    args = ReinforceAdaConfig(
        output_dir=str(output_dir / name),
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=0,
        learning_rate=1e-2,
        **COMMON,
        **RUNS[name],
    )
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{k}?"}], "key": k} for k in KEYS])
    trainer = Recorder(
        model, reward, args=args, train_dataset=dataset, processing_class=AutoTokenizer.from_pretrained(MODEL)
    )
    trainer.train()
    logs = [{k: v for k, v in row.items() if not k.endswith(TIMED)} for row in trainer.state.log_history]
    return {"batches": trainer.batches, "logs": logs, "weights_sha256": weights_digest(trainer.model)}


def main(argv: Sequence[str]) -> int:
    output_dir, *rest = argv
    record = "--record" in rest
    names = [n for n in rest if n != "--record"] or list(RUNS)
    torch.set_num_threads(1)
    outputs = {name: train(name, Path(output_dir)) for name in names}
    text = json.dumps(outputs, indent=1, sort_keys=True)
    (GOLDEN if record else Path(output_dir) / "outputs.json").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

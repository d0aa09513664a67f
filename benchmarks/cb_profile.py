"""Where streaming through transformers' continuous batching loses time against one `model.generate` call, on CPU.

    python benchmarks/cb_profile.py                       # the 32.5M-parameter "small" Qwen2 shape, 16 prompts
    py-spy record --format raw --threads --rate 50 -o stream.raw -- \
        python benchmarks/cb_profile.py --repeats 1 --methods 4      # sample every thread of one method's run
    python benchmarks/cb_profile.py --summarize stream.raw         # where those samples went

Generation only, no training: a Qwen2 model of the `small` shape (`trl_ada.tools.sized_model`: 8 layers, hidden 512,
vocabulary 16,384, random weights, built offline) samples completions for `--prompts` random prompts of
`--prompt-length` tokens, up to `--max-tokens` tokens, at varied lengths (each token ends the completion with
probability 2 / max-tokens) or, with `--fixed`, to the limit. The methods, each timed `--repeats` times, alternating:

- `generate`: GRPO n=4's rows in one `model.generate` call (what GRPOTrainer does without continuous batching);
- `generate_batch`: the same rows through transformers' continuous batching, `model.generate_batch` (what
  GRPOTrainer does with `use_transformers_continuous_batching=True`);
- `backend, GRPO n=4`: the same rows submitted at once through trl-ada's `ContinuousBatchingBackend` (requests with
  `streaming=True`, read event by event), nothing aborted: the backend's own cost against `generate_batch`;
- `rounds, seq-balanced-8x4`: Reinforce-Ada under rounds (rounds of 8, at most 4), each round one `model.generate`
  call over the active prompts' draws, scored with the same reward;
- `streaming, seq-balanced-8x4`: Reinforce-Ada's streaming schedule (`trl_ada.core.engine.sample`, posterior windows)
  through the backend, scored with the pass-rate reward of `trl_ada.tools.sized_model`.

Each continuous-batching run opens its own manager (as a training step does), with a cache sized by
`trl_ada.adapter.engines.continuous_batching.cache_size` for its rows. Printed: seconds per method (median), tokens,
tokens per second, and for the streaming run the events read, cancellations sent and aborted draws let finish.

Continuous batching generates in a background thread, which Python's own profiler does not see: `--summarize`
reads a py-spy raw profile taken with `--threads` (py-spy samples what each thread is running, idle waits left out)
and splits the samples of the method's run: in the generation thread, attention (transformers'
`sdpa_attention_forward`), linear layers, sampling and the rest; in the main thread, trl-ada's backend and engine,
scoring, and transformers' manager start and stop.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

from trl_ada.adapter.compat import continuous_batching_cache
from trl_ada.adapter.engines.continuous_batching import cache_size, continuous_batching_backend
from trl_ada.core.engine import RoundsBackend, Schedule, sample
from trl_ada.tools.sized_model import SHAPES, build_model, pass_rate_reward, random_prompts, word_tokenizer


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(SHAPES), default="small")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--prompt-length", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--fixed", action="store_true", help="every completion to the limit")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--summarize", metavar="RAW", help="split a py-spy raw profile of this script, and exit")
    parser.add_argument("--methods", default="01234", help="which methods, by position (default all: 01234)")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


class Bench:
    """The model, the prompts and the settings every method shares."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.shape = SHAPES[args.model]
        mean_length = None if args.fixed else args.max_tokens / 2
        self.model = build_model(self.shape, args.seed, mean_length, "cpu").eval()
        self.tokenizer = word_tokenizer(self.shape.vocab)
        self.prompts = random_prompts(args.prompts, args.prompt_length, self.shape.vocab, args.seed)
        rng = __import__("random").Random(args.seed)
        self.pass_rates = [rng.betavariate(0.3372, 0.2984) for _ in self.prompts]
        self.generation_config = self.model.generation_config
        self.generation_config.update(do_sample=True, temperature=1.0, top_k=0, max_new_tokens=args.max_tokens)
        self.counts: dict[str, Any] = {}

    def cache(self, rows: int) -> Any:
        size = cache_size(self.model.config, rows, self.args.prompt_length, self.args.max_tokens, dtype_bytes=4)
        return continuous_batching_cache(size.num_blocks, size.page_size, size.max_batch_tokens)

    def generate(self) -> int:
        ids = torch.tensor([p for p in self.prompts for _ in range(4)])
        with torch.no_grad():
            out = self.model.generate(
                ids, attention_mask=torch.ones_like(ids), generation_config=self.generation_config
            )
        completions = out[:, ids.shape[1] :]
        return sum(int((row == 1).nonzero()[0]) + 1 if (row == 1).any() else len(row) for row in completions)

    def generate_batch(self) -> int:
        from transformers.generation import ContinuousBatchingConfig

        rows = [p for p in self.prompts for _ in range(4)]
        with torch.no_grad():
            outputs = self.model.generate_batch(
                rows,
                generation_config=self.generation_config,
                continuous_batching_config=ContinuousBatchingConfig(**self.cache(len(rows))),
                progress_bar=False,
            )
        return sum(len(o.generated_tokens) for o in outputs.values())

    def backend_grpo(self) -> int:
        from trl_ada.core.engine import Draw

        with self._backend(len(self.prompts) * 4) as backend:
            backend.submit([Draw(i // 4, i) for i in range(len(self.prompts) * 4)])
            finished = []
            while len(finished) < len(self.prompts) * 4:
                finished += backend.wait()
        return sum(f.num_tokens for f in finished)

    def rounds(self) -> int:
        """seq-balanced-8x4 under rounds: each round one `model.generate` call over the active prompts' draws."""
        completions: list[tuple[int, list[int]]] = []

        def generate(requests: list) -> list[int]:
            rows = [r.prompt_index for r in requests for _ in range(r.num_samples)]
            if not rows:
                return []
            ids = torch.tensor([self.prompts[i] for i in rows])
            with torch.no_grad():
                out = self.model.generate(
                    ids, attention_mask=torch.ones_like(ids), generation_config=self.generation_config
                )
            for index, row in zip(rows, out[:, ids.shape[1] :].tolist(), strict=True):
                completions.append((index, row[: row.index(1) + 1] if 1 in row else row))
            return list(range(len(completions) - len(rows), len(completions)))

        def score(requests: list, handles: list[int]) -> list[float]:
            texts = [self.tokenizer.decode(completions[h][1]) for h in handles]
            return pass_rate_reward(texts, [self.pass_rates[completions[h][0]] for h in handles])

        schedule = Schedule.from_strategy("balanced", 4, 8, 4)
        sample(len(self.prompts), schedule, RoundsBackend(generate), score)
        return sum(len(ids) for _, ids in completions)

    def streaming(self) -> int:
        from transformers.generation import ContinuousBatchingConfig

        schedule = Schedule.from_strategy("balanced", 4, 8, 4, round_sizing="posterior")
        events = 0
        with self._backend(len(self.prompts) * 8, ContinuousBatchingConfig) as backend:
            read = backend._read

            def counted(timeout: float) -> bool:
                nonlocal events
                got = read(timeout)
                events += got
                return got

            backend._read = counted

            def score(requests: list, handles: list[int]) -> list[float]:
                completions = [backend.completions[h] for h in handles]
                texts = [self.tokenizer.decode(c.completion_ids) for c in completions]
                return pass_rate_reward(texts, [self.pass_rates[c.prompt_index] for c in completions])

            result = sample(len(self.prompts), schedule, backend, score, rollout="streaming")
            self.counts = dict(
                events=events,
                cancelled=backend.cancelled,
                let_finish=backend.let_finish,
                samples_per_prompt=sum(len(p) for p in result.pools) / len(self.prompts),
            )
        return result.generated_tokens

    def _backend(self, rows: int, config_class: Callable | None = None) -> Any:
        from transformers.generation import ContinuousBatchingConfig

        config = (config_class or ContinuousBatchingConfig)(**self.cache(rows))
        return continuous_batching_backend(
            self.model, self.prompts, self.generation_config, config, self.args.max_tokens
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.summarize:
        for name, share in summarize(args.summarize).items():
            print(f"  {name:<58} {share:6.1%}")
        return 0
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    bench = Bench(args)
    methods = {
        "generate": bench.generate,
        "generate_batch": bench.generate_batch,
        "backend, GRPO n=4": bench.backend_grpo,
        "rounds, seq-balanced-8x4": bench.rounds,
        "streaming, seq-balanced-8x4": bench.streaming,
    }
    methods = {name: method for index, (name, method) in enumerate(methods.items()) if str(index) in args.methods}
    seconds: dict[str, list[float]] = {name: [] for name in methods}
    tokens: dict[str, list[int]] = {name: [] for name in methods}
    for _ in range(args.repeats):
        for name, method in methods.items():
            started = time.perf_counter()
            tokens[name].append(method())
            seconds[name].append(time.perf_counter() - started)
    lengths = "fixed (to the limit)" if args.fixed else f"varied (mean about {args.max_tokens / 2:.0f} before the cut)"
    print(
        f"{bench.shape.name} shape ({bench.shape.parameters() / 1e6:.1f}M parameters), {args.prompts} prompts x "
        f"{args.prompt_length} tokens, up to {args.max_tokens} new tokens, lengths {lengths}, {args.threads} torch "
        f"thread(s), {args.repeats} repeats; torch {torch.__version__}, transformers "
        f"{__import__('transformers').__version__}"
    )
    base = statistics.median(seconds.get("generate") or [float("nan")])
    print(f"  {'method':<30} {'median s':>9} {'x generate':>10} {'tokens':>8} {'tokens/s':>9}")
    for name in methods:
        median = statistics.median(seconds[name])
        count = statistics.median(tokens[name])
        print(f"  {name:<30} {median:>9.2f} {median / base:>10.2f} {count:>8.0f} {count / median:>9.0f}")
    if bench.counts:
        print(f"  streaming, last repeat: {bench.counts}")
    return 0


CATEGORIES = (  # the first that a sampled stack holds names it
    ("attention (transformers' sdpa_attention_forward)", ("sdpa_attention_forward",)),
    ("linear layers", ("Linear.forward",)),
    ("sampling", ("_sample",)),
    (
        "manager start, stop, destroy (transformers)",
        ("init_continuous_batching", "Manager.start", "Manager.stop", "Manager.destroy", "__del__"),
    ),
    ("scoring (decode, reward)", (".score",)),
    ("trl-ada backend (submit, wait, abort)", ("ContinuousBatchingBackend",)),
    ("trl-ada engine", ("engine.py",)),
)


def summarize(path: str) -> dict[str, float]:
    """Shares of the samples taken inside the timed methods (`Bench.*` in the main thread, the manager's generation
    thread), by thread and `CATEGORIES`."""
    counts: dict[str, int] = {}
    for line in open(path, encoding="utf-8"):
        stack, _, number = line.strip().rpartition(" ")
        if not stack:
            continue
        generation_thread = "_run_generation_loop" in stack
        if not generation_thread and ("Bench." not in stack or "Bench.__init__" in stack):
            continue  # imports, the model's build, the printing
        name = next((label for label, markers in CATEGORIES if any(m in stack for m in markers)), "other")
        key = f"{'generation' if generation_thread else 'main'} thread: {name}"
        counts[key] = counts.get(key, 0) + int(number)
    total = sum(counts.values()) or 1
    return {key: count / total for key, count in sorted(counts.items(), key=lambda item: -item[1])}


if __name__ == "__main__":
    sys.exit(main())

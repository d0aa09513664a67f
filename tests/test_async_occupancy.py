"""The Ada loop shares `max_inflight_tasks` between prompts: when the prompts it samples hold fewer requests than that
(a prompt's cap is below it, or a prompt near its budget has fewer left to make), another prompt starts in the free
slots. Run on the asynchronous benchmark's virtual clock and emulated engine (`benchmarks/async_worker.py`), whose
events are exact: occupancy is counted by the engine itself, and each prompt's pool is checked against a schedule
worked out by hand."""

import asyncio
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

import async_emulation
import async_worker
from step_time_emulation import REGIMES, EmulatedEngine, Lengths, Regime, Workload

from trl_ada.adapter.async_worker import AdaRolloutConfig, AdaRolloutLoop

# t0 = 1 s per decode step whatever runs (c = 0): a completion of L tokens takes L seconds, and time is steps.
SECONDS_PER_TOKEN = Regime("hand", c=0.0, t0=1.0)


def dataset(prompts: int):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": [{"role": "user", "content": str(i)}]} for i in range(prompts)])


class CountingEngine(EmulatedEngine):
    """The emulated engine, counting requests in flight on its own: +1 per submitted draw, -1 per finished or aborted
    one, integrated over decode steps (`area`), with the most at once (`peak`)."""

    made: list["CountingEngine"] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.live = self.area = self.peak = self.counted_to = 0
        CountingEngine.made.append(self)

    def _count(self) -> None:
        self.area += self.live * (self.steps - self.counted_to)
        self.counted_to = self.steps

    def submit(self, draws) -> None:
        self._count()
        super().submit(draws)
        self.live += len(draws)
        self.peak = max(self.peak, self.live)

    def wait(self):
        batch = super().wait()  # decodes up to the next finish with `live` requests running
        self._count()
        self.live -= len(batch)
        return batch

    def abort(self, tickets) -> int:
        self._count()
        tokens = super().abort(tickets)
        self.live -= len(tickets)
        return tokens


@pytest.mark.parametrize(
    "key, max_inflight",
    [
        # Before the prompts shared the slots (the benchmark's occupancy table, commit 2559c12):
        ("ada-bal", 12),  # a cap of 8: one prompt ran, 4 slots idle (57.5%)
        ("ada-bal", 7),  # the cap is cut to 7: one prompt, slots idle as it nears its budget of 32 (88.8%)
        ("ada-pos-4x2", 7),  # a cap of 4: one prompt, 3 slots idle (49.0%)
    ],
)
def test_the_loop_keeps_max_inflight_tasks_requests_in_flight(monkeypatch, key, max_inflight):
    """Over a run of 24 groups from the start (no warm-up, so opening and the first prompts' ends count), the
    requests in flight, as the engine counts them, average over its decode steps at least 95% of max_inflight_tasks,
    and never exceed it. (The throughput regime: a step takes about 0.012 virtual seconds, so the loops' periodic
    wake-ups stay few.)"""
    monkeypatch.setattr(async_emulation, "EmulatedEngine", CountingEngine)  # where `simulate` builds it
    CountingEngine.made = []
    method = next(m for m in async_worker.METHODS if m.key == key)
    prompts = 24 + max_inflight + 1
    workload = Workload.draw("paper", prompts, seed=1, lengths=Lengths())
    sim = async_emulation.simulate(
        method,
        workload,
        REGIMES["throughput"],
        dataset(prompts),
        max_inflight=max_inflight,
        samples_per_step=64,
        warmup=0,
        groups=24,
    )
    (engine,) = CountingEngine.made
    assert len(sim.trainer.records) >= 24
    assert engine.live == 0  # the run's end cancelled everything: every request was counted out
    assert engine.peak == max_inflight
    occupancy = engine.area / (engine.steps * max_inflight)
    assert occupancy >= 0.95, occupancy
    # The engine's own token count agrees: every request in flight decodes one token per step.
    assert engine.area == engine.tokens


def test_each_pool_is_still_its_request_order_prefix_when_prompts_share_slots(monkeypatch):
    """Positive rule, n = 2, rounds of 2, at most 2 (budget 4): a cap of 2 per prompt under max_inflight_tasks = 3,
    so prompt 1 starts beside prompt 0 with the third slot. Request k of a prompt is its k-th request in request
    order (the engine numbers them as they start, and a prompt's waiting requests start in request order).

    Prompt 0: rewards 0 1 1 1, lengths 6 2 3 50. Prompt 1: rewards 0 0 1 0, lengths 4 1 2 50.
    t=0: P0 r0, r1 start; P1 r0 starts in the free slot, its r1 waits. t=2: P0 r1 (1) finishes behind r0; P0's r2
    takes the slot first (older prompt) and ends at 5. t=4: P1 r0 (0): pool [0]; P1 r1 starts (ends 5), its r2
    waits. t=5: P0 r2 (1) waits behind r0; P1 r1 (0): pool [0, 0], no positive yet. Their slots go to P0 r3 (ends 55)
    and P1 r2 (ends 7); P1 r3 waits. t=6: P0 r0 (0): pool [0, 1], the rule holds. The first two of P0 to finish were
    both rights (r1, r2): a pool by finish order would have no signal. r2 is dropped, r3 aborted after 1 token, and
    P1 r3 starts. t=7: P1 r2 (1): pool [0, 0, 1], the rule holds; r3 aborted after 1 token."""
    pools: dict[int, list[tuple[float, int]]] = {}
    original = AdaRolloutLoop._score_group

    async def recording(self, group):
        pools[group.group_id] = [(c.reward, len(c.completion_ids)) for c in group.pool.samples]
        return await original(self, group)

    monkeypatch.setattr(AdaRolloutLoop, "_score_group", recording)
    rewards = [[0, 1, 1, 1], [0, 0, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]]
    lengths = [[6, 2, 3, 50], [4, 1, 2, 50], [100] * 4, [100] * 4, [100] * 4]
    ada = AdaRolloutConfig(sampling_strategy="positive", samples_per_round=2, max_rounds=2)
    sim = async_emulation.simulate(
        async_emulation.Method("a", "Ada", 2, ada),
        Workload([0.5] * len(rewards), rewards, lengths),
        SECONDS_PER_TOKEN,
        dataset(len(rewards)),
        max_inflight=3,
        samples_per_step=1000,
        warmup=0,
        groups=2,
    )
    # (reward, length) of each pooled completion, in the pool's order; the lengths name the requests.
    assert pools[0] == [(0.0, 6), (1.0, 2)]  # requests 0, 1
    assert pools[1] == [(0.0, 4), (0.0, 1), (1.0, 2)]  # requests 0, 1, 2
    records = {r.group_id: r for r in sim.trainer.records}
    assert records[0].done_at == pytest.approx(6.0) and records[1].done_at == pytest.approx(7.0)
    costs = {g: (r.cost.started, r.cost.finished, r.cost.aborted, r.cost.tokens) for g, r in records.items()}
    assert costs == {0: (4, 3, 1, 6 + 2 + 3 + 1), 1: (4, 3, 1, 4 + 1 + 2 + 1)}
    assert sorted(records[0].rewards) == sorted(records[1].rewards) == [0.0, 1.0]
    assert sim.client.off_event_submits == 0


def test_request_slots_go_to_the_oldest_prompt_and_a_finished_draw_holds_its_slot_until_settled():
    """Two slots. A young prompt (priority 5) takes both; an older one (priority 1) then asks for one and waits. When
    a young draw finishes, its slot stays held until the young session has stepped (`settle`), and then goes to the
    older prompt's waiting draw before the young prompt's own top-up. Aborting a waiting draw withdraws it; closing a
    backend hands its slots on, and `wake` says there is room for a new prompt."""
    from types import SimpleNamespace

    from trl_ada.adapter.async_worker import RequestSlots, TaskBackend
    from trl_ada.core.engine import Draw

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        slots = RequestSlots(2)
        started: list[str] = []
        gates: dict[str, asyncio.Future] = {}

        def requester(name: str):
            count = iter(range(100))

            async def start():
                label = f"{name}{next(count)}"
                started.append(label)
                gates[label] = loop.create_future()
                await gates[label]
                return SimpleNamespace(completion_ids=[0])

            return start

        young = TaskBackend(requester("young"), slots, priority=5)
        old = TaskBackend(requester("old"), slots, priority=1)
        young.submit([Draw(0, 0), Draw(0, 1)])
        old.submit([Draw(0, 0)])
        assert (slots.held, slots.room, young.in_flight, old.in_flight) == (2, -1, 2, 0)
        await asyncio.sleep(0)
        gates["young0"].set_result(None)
        (finished,) = await young.next_batch()
        assert finished.ticket == 0 and slots.held == 2 and old.in_flight == 0  # still held: not settled yet
        young.submit([Draw(0, 2)])  # the young session's top-up, made while stepping
        young.settle()
        assert (old.in_flight, young.in_flight, slots.held, slots.room) == (1, 1, 2, -1)  # the older prompt got it
        slots.wake.clear()
        young.abort([2])  # the waiting top-up is withdrawn
        assert slots.room == 0 and not slots.wake.is_set()
        await young.close()  # its running draw is cancelled and its slot handed on
        assert (slots.held, slots.room, slots.wake.is_set()) == (1, 1, True)
        await old.close()
        assert (slots.held, slots.room) == (0, 2)
        return started

    assert asyncio.run(main()) == ["young0", "young1", "old0"]

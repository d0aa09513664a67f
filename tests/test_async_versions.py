"""The asynchronous worker refuses a TRL release whose `trl.experimental.async_grpo` it was not built on."""

from __future__ import annotations

import subprocess
import sys

import pytest
import trl
from trl.experimental.async_grpo import async_rollout_worker

from trl_ada.adapter.async_worker import AdaRolloutConfig, AdaRolloutLoop, AdaRolloutWorker

RANGE = ">=1.14.0,<1.17"  # the releases read: 1.14.0-1.14.2, 1.15.0, 1.16.0


def accuracy(completions: list, **kwargs: object) -> list[float]:
    return [0.0 for _ in completions]


@pytest.fixture
def vllm_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    """TRL's worker refuses to build without the vllm package, which the tests do not need."""
    monkeypatch.setattr(async_rollout_worker, "is_vllm_available", lambda: True)


@pytest.mark.parametrize("version", ["1.13.0", "1.17.0", "1.17.0.dev0", "2.0.0"])
def test_the_worker_refuses_a_trl_outside_the_range(
    monkeypatch: pytest.MonkeyPatch, vllm_installed: None, version: str
) -> None:
    monkeypatch.setattr(trl, "__version__", version)
    with pytest.raises(RuntimeError, match=rf"supports TRL {RANGE} .* TRL {version} is installed"):
        AdaRolloutWorker(ada=AdaRolloutConfig(), num_generations=4, reward_funcs=[accuracy])


@pytest.mark.parametrize("version", ["1.14.0", "1.14.2", "1.15.0", "1.16.0", "1.16.1.dev0"])
def test_the_worker_builds_inside_the_range(
    monkeypatch: pytest.MonkeyPatch, vllm_installed: None, version: str
) -> None:
    monkeypatch.setattr(trl, "__version__", version)
    worker = AdaRolloutWorker(ada=AdaRolloutConfig(), num_generations=4, reward_funcs=[accuracy])
    assert worker._loop_cls is AdaRolloutLoop


def test_a_trl_without_the_async_worker_fails_the_import_with_the_range() -> None:
    """In a fresh interpreter where TRL's async rollout module cannot be imported (as in a release without it)."""
    code = (
        "import sys; sys.modules['trl.experimental.async_grpo.async_rollout_worker'] = None\n"
        "import trl_ada.adapter.async_worker"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: trl_ada.adapter.async_worker supports TRL " + RANGE), result.stderr[-2000:]
    assert f"TRL {trl.__version__} is installed" in last

"""benchmarks/cb_profile.py's summary of a py-spy profile, on a hand-written one."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

import cb_profile


def test_cb_profile_splits_a_py_spy_profile_by_thread_and_category(tmp_path):
    """`benchmarks/cb_profile.py --summarize`: samples outside the timed methods are left out, each stack goes to the
    first category it holds (attention before linear layers, the manager's stop before the backend that called
    it), and the shares are of what is left: 6 + 3 + 1 + 2 + 4 + 4 = 20 samples."""
    gen = "thread (1): Thread-1 (_run_generation_loop);ContinuousBatchingManager._run_generation_loop (c.py:1)"
    main = "thread (2): MainThread;main (cb_profile.py:1);Bench.streaming (cb_profile.py:2)"
    raw = tmp_path / "profile.raw"
    raw.write_text(
        "\n".join(
            [
                f"{gen};Qwen2Attention.forward (q.py:3);sdpa_attention_forward (s.py:4);Linear.forward (l.py:5) 6",
                f"{gen};Qwen2MLP.forward (q.py:6);Linear.forward (l.py:5) 3",
                f"{gen};update_batch (c.py:9) 1",
                f"{main};ContinuousBatchingBackend.close (b.py:1);ContinuousBatchingManager.stop (c.py:2) 2",
                f"{main};sample (engine.py:1);Bench.streaming.<locals>.score (cb_profile.py:9) 4",
                f"{main};sample (engine.py:1);ContinuousBatchingBackend.abort (b.py:3) 4",
                "thread (2): MainThread;<module> (cb_profile.py:1);_find_and_load (<frozen>:1) 50",
            ]
        )
        + "\n"
    )
    shares = cb_profile.summarize(str(raw))
    assert shares == {
        "generation thread: attention (transformers' sdpa_attention_forward)": 6 / 20,
        "main thread: scoring (decode, reward)": 4 / 20,
        "main thread: trl-ada backend (submit, wait, abort)": 4 / 20,
        "generation thread: linear layers": 3 / 20,
        "main thread: manager start, stop, destroy (transformers)": 2 / 20,
        "generation thread: other": 1 / 20,
    }

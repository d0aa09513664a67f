"""Tests of the pass-rate memory (`trl_ada.core.memory`) against hand-computed decayed counts and Beta posterior
means."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch

from trl_ada.core.memory import PassRateMemory, prompt_key, prompt_text_key

# --------------------------------------------------------------------------------------------------------------------
# p_hat and updates
# --------------------------------------------------------------------------------------------------------------------


def test_unseen_prompt_gets_the_prior_mean():
    memory = PassRateMemory()
    assert memory.p_hat("id:0") == pytest.approx(1 / 17)  # authors' alpha=1, beta=16
    assert PassRateMemory(alpha=2.0, beta=6.0).p_hat("id:0") == pytest.approx(0.25)
    assert memory.counts("id:0") == (0.0, 0.0)
    assert len(memory) == 0  # reading does not create a record


def test_decayed_counts_over_a_sequence_of_updates():
    memory = PassRateMemory(alpha=1.0, beta=16.0, decay=0.9)
    # step 1: 3 of 8 correct. N_pos = 3, N_total = 8
    memory.update("a", 3, 8)
    assert memory.counts("a") == pytest.approx((3.0, 8.0))
    assert memory.p_hat("a") == pytest.approx(4 / 25)
    # step 2: 0 of 8. N_pos = 0.9 * 3 = 2.7, N_total = 0.9 * 8 + 8 = 15.2
    memory.update("a", 0, 8)
    assert memory.counts("a") == pytest.approx((2.7, 15.2))
    assert memory.p_hat("a") == pytest.approx(3.7 / 32.2)
    # step 3: 8 of 8. N_pos = 0.9 * 2.7 + 8 = 10.43, N_total = 0.9 * 15.2 + 8 = 21.68
    memory.update("a", 8, 8)
    assert memory.counts("a") == pytest.approx((10.43, 21.68))
    assert memory.p_hat("a") == pytest.approx(11.43 / 38.68)


def test_decay_applies_per_update_of_that_prompt_only():
    memory = PassRateMemory(decay=0.5)
    memory.update("a", 4, 8)
    for _ in range(5):  # other prompts being sampled does not age "a"
        memory.update("b", 1, 8)
    assert memory.counts("a") == (4.0, 8.0)
    # b: N_total = 8 * (1 + 0.5 + 0.25 + 0.125 + 0.0625) = 15.5, N_pos = 15.5 / 8
    assert memory.counts("b") == pytest.approx((15.5 / 8, 15.5))


def test_decay_extremes():
    forgetful = PassRateMemory(decay=0.0)
    forgetful.update("a", 8, 8)
    forgetful.update("a", 1, 4)
    assert forgetful.counts("a") == (1.0, 4.0)
    hoarder = PassRateMemory(decay=1.0)
    hoarder.update("a", 8, 8)
    hoarder.update("a", 1, 4)
    assert hoarder.counts("a") == (9.0, 12.0)


def test_tensor_and_numpy_counts_are_stored_as_floats():
    memory = PassRateMemory()
    memory.update("a", torch.tensor(3), np.int64(8))
    assert json.loads(json.dumps(memory.state_dict())) == {"records": [["a", 3.0, 8.0]]}


def test_update_with_nothing_scored_changes_nothing():
    memory = PassRateMemory()
    memory.update("a", 2, 4)
    memory.update("a", 0, 0)
    memory.update("b", 0, 0)
    assert memory.counts("a") == (2.0, 4.0)
    assert "b" not in memory and len(memory) == 1


def test_update_many_sums_duplicates_into_one_decay():
    memory = PassRateMemory(decay=0.9)
    memory.update("a", 1, 2)
    memory.update_many([("a", 1, 4), ("b", 0, 2), ("a", 2, 4)])
    # "a" decays once: (0.9 * 1 + 3, 0.9 * 2 + 8)
    assert memory.counts("a") == pytest.approx((3.9, 9.8))
    assert memory.counts("b") == (0.0, 2.0)


def test_update_many_is_all_or_nothing_on_bad_input():
    memory = PassRateMemory()
    with pytest.raises(ValueError, match="num_positive <= num_total"):
        memory.update_many([("a", 1, 4), ("b", 5, 4)])
    assert len(memory) == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"alpha": 0.0}, "alpha and beta"),
        ({"beta": -1.0}, "alpha and beta"),
        ({"alpha": float("inf")}, "alpha and beta"),
        ({"decay": 1.5}, "decay"),
        ({"max_prompts": 0}, "max_prompts"),
        ({"max_prompts": True}, "max_prompts"),
    ],
)
def test_bad_hyperparameters_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PassRateMemory(**kwargs)


def test_bad_counts_and_keys_are_rejected():
    memory = PassRateMemory()
    for positive, total in [(-1, 4), (5, 4), (float("nan"), 4), (1, float("inf"))]:
        with pytest.raises(ValueError, match="Count only completions"):
            memory.update("a", positive, total)
    with pytest.raises(TypeError, match="prompt_key"):
        memory.update(("not", "a", "str"), 1, 2)


# --------------------------------------------------------------------------------------------------------------------
# LRU cap
# --------------------------------------------------------------------------------------------------------------------


def test_eviction_drops_the_least_recently_updated():
    memory = PassRateMemory(max_prompts=2)
    memory.update("a", 1, 4)
    memory.update("b", 1, 4)
    memory.update("a", 1, 4)  # "a" is now the most recent
    memory.update("c", 1, 4)  # over the cap: "b" goes
    assert len(memory) == 2
    assert "a" in memory and "c" in memory and "b" not in memory
    assert memory.p_hat("b") == pytest.approx(memory.prior_mean)  # an evicted prompt is back to the prior
    assert memory.counts("a") == pytest.approx((1.9, 7.6))  # kept counts are untouched by the eviction


def test_reads_do_not_refresh_recency():
    # Ranks read different prompts; if reads reordered the LRU list, their memories would diverge.
    memory = PassRateMemory(max_prompts=2)
    memory.update("a", 1, 4)
    memory.update("b", 1, 4)
    memory.p_hat("a")
    memory.p_hat_many(["a", "a"])
    memory.update("c", 1, 4)
    assert "a" not in memory and "b" in memory


def test_update_many_evicts_in_order_of_first_appearance():
    memory = PassRateMemory(max_prompts=2)
    memory.update_many([("x", 1, 2), ("y", 1, 2), ("z", 1, 2), ("x", 0, 2)])
    # distinct keys applied as x, y, z: x is the oldest when z arrives
    assert sorted(memory.state_dict()["records"]) == [["y", 1.0, 2.0], ["z", 1.0, 2.0]]


# --------------------------------------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------------------------------------


def _busy_memory(**kwargs) -> PassRateMemory:
    memory = PassRateMemory(decay=0.9, **kwargs)
    rng = np.random.default_rng(0)
    for step in range(30):
        keys = [f"id:{k}" for k in rng.integers(0, 12, size=4)]
        totals = rng.integers(0, 9, size=4)
        memory.update_many([(k, int(rng.integers(0, t + 1)), int(t)) for k, t in zip(keys, totals, strict=True)])
        memory.update(f"id:step{step}", 1, 3)
    return memory


def test_state_round_trips_through_json_exactly():
    memory = _busy_memory(max_prompts=20)
    keys = [f"id:{k}" for k in range(12)]
    state = json.loads(json.dumps(memory.state_dict()))
    restored = PassRateMemory(decay=0.9, max_prompts=20)
    restored.load_state_dict(state)
    assert restored.state_dict() == memory.state_dict()
    assert restored.p_hat_many(keys) == memory.p_hat_many(keys)  # bitwise, not approx
    # the same future updates keep them identical, evictions included
    for m in (memory, restored):
        m.update_many([("id:3", 2, 8), ("id:new", 0, 8), ("id:7", 8, 8)])
    assert restored.state_dict() == memory.state_dict()


def test_save_and_load_a_checkpoint_folder(tmp_path):
    memory = _busy_memory()
    assert memory.save(tmp_path) == tmp_path / "pass_rate_memory.json"
    restored = PassRateMemory(decay=0.9)
    assert restored.load(tmp_path)
    assert restored.state_dict() == memory.state_dict()
    empty = PassRateMemory()
    assert not empty.load(tmp_path / "missing")
    assert len(empty) == 0


def test_loading_into_a_smaller_cap_keeps_the_most_recent():
    memory = PassRateMemory()
    for key in "abcd":
        memory.update(key, 1, 2)
    small = PassRateMemory(max_prompts=2)
    small.load_state_dict(memory.state_dict())
    assert [record[0] for record in small.state_dict()["records"]] == ["c", "d"]


def test_bad_state_is_rejected():
    memory = PassRateMemory()
    with pytest.raises(ValueError, match="'records'"):
        memory.load_state_dict({"counts": []})
    with pytest.raises(ValueError, match="Duplicate key"):
        memory.load_state_dict({"records": [["a", 1, 2], ["a", 1, 2]]})
    with pytest.raises(ValueError, match=r"\[key, N_pos, N_total\]"):
        memory.load_state_dict({"records": [["a", 1]]})


# --------------------------------------------------------------------------------------------------------------------
# prompt_key
# --------------------------------------------------------------------------------------------------------------------


def test_prompt_key_of_token_ids_is_blake2b_of_little_endian_int64():
    expected = hashlib.blake2b(struct.pack("<4q", 151644, 8948, 198, -1), digest_size=16).hexdigest()
    ids = [151644, 8948, 198, -1]
    for form in (ids, tuple(ids), np.array(ids, dtype=np.int32), torch.tensor(ids)):
        assert prompt_key(form) == f"tok:{expected}"
    assert prompt_key([1, 2, 3]) != prompt_key([1, 2, 3, 0])  # padding changes the key: pass unpadded ids


def outputs_under_hash_seeds(code: str, *seeds: str) -> set[str]:
    """The distinct outputs of `python -c code` run once under each PYTHONHASHSEED."""
    return {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in seeds
    }


def test_prompt_key_is_stable_across_interpreter_runs():
    code = "from trl_ada.core.memory import prompt_key; print(prompt_key([5, 6, 7]), prompt_key('q-12'))"
    keys = outputs_under_hash_seeds(code, "1", "2")
    assert keys == {f"{prompt_key([5, 6, 7])} id:q-12\n"}


def test_prompt_key_of_ids_and_bad_input():
    assert prompt_key("gsm8k-17") == "id:gsm8k-17"
    assert prompt_key(17) == "id:17"
    assert prompt_key(17) != prompt_key([17])
    with pytest.raises(TypeError, match="bool"):
        prompt_key(True)
    with pytest.raises(TypeError, match="1-D"):
        prompt_key([[1, 2], [3, 4]])
    with pytest.raises(TypeError, match="integer token ids"):
        prompt_key([0.5, 1.5])


def test_prompt_text_key_hashes_canonical_json():
    messages = [{"role": "user", "content": "Wie viel ist 2+2?"}]
    canonical = '[{"content":"Wie viel ist 2+2?","role":"user"}]'
    expected = hashlib.blake2b(canonical.encode("utf-8"), digest_size=16).hexdigest()
    assert prompt_text_key(messages) == f"txt:{expected}"
    assert prompt_text_key([{"content": "Wie viel ist 2+2?", "role": "user"}]) == f"txt:{expected}"  # key order
    assert prompt_text_key("2+2=") != prompt_text_key("2+2 =")
    assert prompt_text_key("2+2=") != prompt_key("2+2=")  # a text is not an id
    with pytest.raises(TypeError, match="JSON-like"):
        prompt_text_key([{"content": object()}])


# --------------------------------------------------------------------------------------------------------------------
# prompt_text_key of vision-language prompts (messages holding PIL images) and other non-JSON values
# --------------------------------------------------------------------------------------------------------------------


def image_prompt(text, *images):
    """A user message as TRL's `prepare_multimodal_messages` builds it: image parts, then the text."""
    parts = [{"type": "image", "image": image} for image in images]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": text}]}]


def ramp_image(offset=0, shape=(4, 4, 3)):
    from PIL import Image

    return Image.fromarray(((np.arange(np.prod(shape), dtype=np.uint8) * 5) + offset).reshape(shape))


def test_prompt_text_key_of_json_prompts_is_unchanged():
    # Computed before image support: the memories in existing checkpoints are keyed by these.
    assert prompt_text_key("What is 2+3?") == "txt:6e23174994e72a2b8a80197a54ee22c0"
    assert prompt_text_key([{"role": "user", "content": "What color is the square?"}]) == (
        "txt:6585ef3faa1eeeedcb1770bf43ec4029"
    )
    parts = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Describe ü"}]},
    ]
    assert prompt_text_key(parts) == "txt:298d6380b8f5584a9e874af2fa44dbde"


def test_prompt_text_key_counts_images_by_their_pixels():
    import io

    from PIL import Image

    image = ramp_image()
    key = prompt_text_key(image_prompt("What color?", image))
    # Pinned: image prompts' keys must not change between releases either.
    assert key == "txt:4c02b6020a14acf60e5c15743f421986"
    # The same pixels in another object: a copy, or the image written to PNG and decoded again (as datasets does).
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    decoded = Image.open(io.BytesIO(buffer.getvalue()))
    assert type(decoded) is not type(image)
    for same in (image.copy(), ramp_image(), decoded):
        assert prompt_text_key(image_prompt("What color?", same)) == key
    # Another image with the same text, or the same image with another text, or none, or twice: other prompts.
    others = [
        image_prompt("What color?", ramp_image(offset=1)),
        image_prompt("What colour?", image),
        image_prompt("What color?"),
        image_prompt("What color?", image, image),
    ]
    assert len({key, *map(prompt_text_key, others)}) == 5
    # Order of the images counts.
    first, second = ramp_image(), ramp_image(offset=1)
    assert prompt_text_key(image_prompt("?", first, second)) != prompt_text_key(image_prompt("?", second, first))


def test_prompt_text_key_of_images_with_equal_bytes_but_other_shape_mode_or_palette():
    from PIL import Image

    pixels = np.arange(16, dtype=np.uint8)
    square = Image.fromarray(pixels.reshape(4, 4))
    wide = Image.fromarray(pixels.reshape(2, 8))
    assert square.tobytes() == wide.tobytes()
    indexed = square.convert("P")
    recoloured = indexed.copy()
    recoloured.putpalette([255 - v for v in indexed.getpalette()])
    assert indexed.tobytes() == recoloured.tobytes()
    keys = {prompt_text_key(image_prompt("?", image)) for image in (square, wide, indexed, recoloured)}
    assert len(keys) == 4


def test_prompt_text_key_of_images_is_stable_across_interpreter_runs():
    code = (
        "import numpy as np; from PIL import Image; from trl_ada.core.memory import prompt_text_key; "
        "image = Image.fromarray((np.arange(48, dtype=np.uint8) * 5).reshape(4, 4, 3)); "
        "print(prompt_text_key([{'role': 'user', 'content': [{'type': 'image', 'image': image}, "
        "{'type': 'text', 'text': 'What color?'}]}]))"
    )
    keys = outputs_under_hash_seeds(code, "1", "2")
    assert keys == {prompt_text_key(image_prompt("What color?", ramp_image())) + "\n"}


def test_prompt_text_key_of_other_non_json_values_is_content_based():
    import decimal
    import pathlib

    def key(value):
        return prompt_text_key([{"role": "user", "content": "q", "extra": value}])

    array = np.arange(6, dtype=np.int32).reshape(2, 3)
    assert key(array) == key(array.copy()) == key(torch.tensor(array))
    assert key(array) != key(array.reshape(3, 2))  # shape counts
    assert key(array) != key(array.astype(np.int64))  # dtype counts
    assert key(array) != key(array + 1)
    assert key(np.asfortranarray(array)) == key(array)  # memory layout does not
    assert key(b"\x00\x01") == key(bytearray(b"\x00\x01")) != key(b"\x00\x02")
    assert key(np.int64(3)) == key(3) and key(np.float32(0.5)) == key(0.5)
    assert key({"b", "a"}) == key(frozenset(["a", "b"])) != key({"a"})
    assert key(decimal.Decimal("1.5")) == key(decimal.Decimal("1.5")) != key(decimal.Decimal("1.50"))
    assert key(pathlib.PurePosixPath("a/b")) != key("a/b")
    # A set of strings is keyed the same whatever the interpreter's string hashing.
    code = (
        "from trl_ada.core.memory import prompt_text_key; print(prompt_text_key({'alpha', 'beta', 'gamma', 'delta'}))"
    )
    keys = outputs_under_hash_seeds(code, "1", "2", "3")
    assert keys == {prompt_text_key({"alpha", "beta", "gamma", "delta"}) + "\n"}
    # Nothing to key an object by but its address: still an error, not a key that changes between runs.
    with pytest.raises(TypeError, match="memory address"):
        key(object())

"""Vision-language prompts under ReinforceAdaTrainer, on a tiny Qwen2-VL built offline (tests/tiny_vlm.py).

GRPOTrainer turns a conversational `prompt` plus the row's `image` (or `images`) into messages holding PIL images;
those are the prompts the rounds generate from and the pass-rate memory keys by (text and pixels).
"""

import functools
import random

import numpy as np
import pytest
import torch
from datasets import Dataset
from mp_common import cpu_config
from PIL import Image
from test_trainer import ada_logs
from tiny_vlm import VISION_TOKENS, build_tiny_vlm_processor, load_tiny_vlm, save_tiny_vlm
from trl import GRPOConfig, GRPOTrainer
from trl.data_utils import prepare_multimodal_messages

from trl_ada import ReinforceAdaConfig, ReinforceAdaTrainer
from trl_ada.core.memory import prompt_text_key

pytestmark = pytest.mark.slow

VISION_PREFIXES = ("model.visual.",)  # the vision tower; the language model is what every test expects to move


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory):
    """The tiny Qwen2-VL and its processor, saved once per session; trainers load it by path, as TRL does."""
    return save_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm"))


def random_image(seed: int, side: int = 16) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 256, (side, side, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def question(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def image_dataset(rows: list[tuple[str, Image.Image]], p: tuple[float, ...] | None = None) -> Dataset:
    """One row per (text, image), with `p`, the probability of reward 1 for its completions (1/2 by default)."""
    p = p or (0.5,) * len(rows)
    return Dataset.from_list(
        [{"prompt": question(text), "image": image, "p": q} for (text, image), q in zip(rows, p, strict=True)]
    )


def coin_reward(seed: int = 0):
    """Reward 1 with the row's probability `p` whatever the completion; it also records, per scored row, whether
    the images in its prompt are the row's dataset images (the rounds must hand each reward call matching rows)."""
    rng = random.Random(seed)
    mismatches = []

    def coin(completions, prompts, p, **kwargs):
        rows = kwargs["images"] if "images" in kwargs else [[image] for image in kwargs["image"]]
        for prompt, expected in zip(prompts, rows, strict=True):
            shown = [part["image"] for message in prompt for part in message["content"] if part["type"] == "image"]
            if [image.tobytes() for image in shown] != [image.tobytes() for image in expected]:
                mismatches.append(prompt)
        return [float(rng.random() < q) for q in p]

    return coin, mismatches


@functools.cache
def vision_token_ids() -> list[int]:
    return build_tiny_vlm_processor().tokenizer.convert_tokens_to_ids(VISION_TOKENS)


def vlm_config(tmp_path, config_cls=ReinforceAdaConfig, **overrides):
    settings = dict(
        # The untrained model may sample a vision token, which the loss's forward pass would then count as an image
        # placeholder with no pixels behind it ("image features and image tokens do not match").
        generation_kwargs={"suppress_tokens": vision_token_ids()},
        per_device_train_batch_size=8,
        max_completion_length=4,
        max_steps=2,
        learning_rate=1e-2,
        seed=0,
    )
    return cpu_config(str(tmp_path), config_cls, **(settings | overrides))


def make_vlm_trainer(model_dir, tmp_path, reward, dataset, trainer_cls=ReinforceAdaTrainer, peft_config=None, **kw):
    """A trainer given the folder as a model name: TRL loads the model and the processor from it."""
    args = vlm_config(tmp_path, **kw)
    return trainer_cls(str(model_dir), reward, args=args, train_dataset=dataset, peft_config=peft_config)


def snapshot(model) -> dict[str, torch.Tensor]:
    return {name: param.detach().clone() for name, param in model.named_parameters()}


def language_model_moved(before: dict[str, torch.Tensor], model) -> bool:
    return any(
        not torch.equal(before[name], param)
        for name, param in model.named_parameters()
        if not name.startswith(VISION_PREFIXES)
    )


def two_colors():
    """Two image prompts, one hard (reward 1 in 1 of 5): it needs more than one round of 4 to resolve."""
    return image_dataset([("What color?", random_image(1)), ("Which shade?", random_image(2))], p=(0.5, 0.2))


# -------------------------------------------------------------------------------------------------------------------
# The fixture itself: TRL's own GRPOTrainer trains on it
# -------------------------------------------------------------------------------------------------------------------


def test_tiny_vlm_folder_loads_back_with_the_auto_classes(tiny_vlm_dir):
    model, processor = load_tiny_vlm(tiny_vlm_dir)
    assert type(model).__name__ == "Qwen2VLForConditionalGeneration"
    tokenizer = processor.tokenizer
    tokens = {
        "image_token_id": "<|image_pad|>",
        "video_token_id": "<|video_pad|>",
        "vision_start_token_id": "<|vision_start|>",
        "vision_end_token_id": "<|vision_end|>",
    }
    for name, token in tokens.items():
        assert getattr(model.config, name) == tokenizer.convert_tokens_to_ids(token) != tokenizer.unk_token_id
    messages = [prepare_multimodal_messages(question("What color?"), images=[random_image(0), random_image(1)])]
    inputs = processor.apply_chat_template(
        messages, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt"
    )
    # Each 16x16 image is resized to 28x28: 4 patches, merged into one image token.
    assert (inputs["input_ids"] == model.config.image_token_id).sum() == 2
    assert inputs["pixel_values"].shape[0] == 8 and inputs["image_grid_thw"].tolist() == [[1, 2, 2]] * 2
    text = tokenizer.decode(inputs["input_ids"][0])
    assert text.startswith("<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>")
    assert text.endswith("What color?<|im_end|>\n<|im_start|>assistant\n")
    generated = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    assert inputs["input_ids"].shape[1] < generated.shape[1] <= inputs["input_ids"].shape[1] + 3


def test_stock_grpo_trainer_trains_one_step_on_the_tiny_vlm(tiny_vlm_dir, tmp_path):
    coin, mismatches = coin_reward()
    args = vlm_config(tmp_path, config_cls=GRPOConfig, max_steps=1)
    trainer = GRPOTrainer(str(tiny_vlm_dir), coin, args=args, train_dataset=two_colors())
    assert trainer._is_vlm and type(trainer.model).__name__ == "Qwen2VLForConditionalGeneration"
    before = snapshot(trainer.model)
    trainer.train()
    assert language_model_moved(before, trainer.model)
    assert not mismatches


# -------------------------------------------------------------------------------------------------------------------
# ReinforceAdaTrainer on image prompts
# -------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", ["balanced", "positive", "estimate"])
def test_image_prompts_train_under_each_strategy(tiny_vlm_dir, tmp_path, strategy):
    """Rounds (or one allocated round) on image prompts: two steps train, log the ada/* metrics, and the kept rows,
    drawn over several rounds, reach the loss with their own row's pixels."""
    coin, mismatches = coin_reward()
    steps = []

    class Spy(ReinforceAdaTrainer):
        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            steps.append(([row["image"] for row in inputs], output))
            return output

    overrides = {} if strategy == "balanced" else {"sampling_strategy": strategy}  # balanced is the default
    trainer = make_vlm_trainer(
        tiny_vlm_dir, tmp_path, coin, two_colors(), trainer_cls=Spy, samples_per_round=4, **overrides
    )
    before = snapshot(trainer.model)
    trainer.train()

    logs = ada_logs(trainer)
    assert len(logs) == 2
    for log in logs:
        assert log["ada/samples_per_prompt"] >= 4 and log["ada/memory_size"] == 2
        if strategy == "estimate":
            assert log["ada/rounds"] == 1 and "ada/alloc_mean" in log
    if strategy != "estimate":
        assert max(log["ada/rounds"] for log in logs) > 1  # kept rows may come from different rounds
    else:
        assert logs[1]["ada/alloc_min"] < logs[1]["ada/alloc_max"]  # the memory split the second step unevenly
    assert language_model_moved(before, trainer.model), "no language-model parameter moved"
    assert not mismatches, "a reward call saw a prompt with another row's image"
    assert len(trainer.ada_memory) == 2

    image_processor = trainer.processing_class.image_processor
    assert len(steps) == 2
    for images, output in steps:
        expected = image_processor(images=images, return_tensors="pt")
        torch.testing.assert_close(output["pixel_values"], expected["pixel_values"])
        assert torch.equal(output["image_grid_thw"], expected["image_grid_thw"])
        assert output["num_images"] == [1] * len(images)


def test_memory_holds_one_key_per_distinct_text_and_image(tiny_vlm_dir, tmp_path):
    red, blue = random_image(10), random_image(11)
    rows = [
        ("What color?", red),
        ("What color?", blue),  # same text, another image: another prompt
        ("What color?", red.copy()),  # the same pixels in another object (and row): the first prompt again
        ("What shape?", red),  # another text, same image: another prompt
    ]
    coin, _ = coin_reward()
    trainer = make_vlm_trainer(
        tiny_vlm_dir, tmp_path, coin, image_dataset(rows), per_device_train_batch_size=16, max_steps=1
    )
    trainer.train()
    expected = {prompt_text_key(prepare_multimodal_messages(question(text), images=[image])) for text, image in rows}
    assert len(expected) == 3
    assert {key for key, _, _ in trainer.ada_memory.state_dict()["records"]} == expected
    # The duplicated prompt was drawn twice in the step: its counts are the sum of both rows' pools.
    red_key = prompt_text_key(prepare_multimodal_messages(question("What color?"), images=[red]))
    blue_key = prompt_text_key(prepare_multimodal_messages(question("What color?"), images=[blue]))
    assert trainer.ada_memory.counts(red_key)[1] > trainer.ada_memory.counts(blue_key)[1]


def test_rows_with_two_images_train(tiny_vlm_dir, tmp_path):
    first, second = random_image(20), random_image(21)
    dataset = Dataset.from_list(
        [
            {"prompt": question("Which is brighter?"), "images": [first, second], "p": 0.5},
            {"prompt": question("Which is brighter?"), "images": [second, first], "p": 0.5},  # another prompt
        ]
    )
    coin, mismatches = coin_reward()
    trainer = make_vlm_trainer(tiny_vlm_dir, tmp_path, coin, dataset)
    before = snapshot(trainer.model)
    trainer.train()
    assert len(ada_logs(trainer)) == 2
    assert language_model_moved(before, trainer.model)
    assert not mismatches
    keys = {
        prompt_text_key(prepare_multimodal_messages(question("Which is brighter?"), images=pair))
        for pair in ([first, second], [second, first])
    }
    assert {key for key, _, _ in trainer.ada_memory.state_dict()["records"]} == keys


def test_image_prompts_with_a_reference_model(tiny_vlm_dir, tmp_path):
    coin, _ = coin_reward()
    trainer = make_vlm_trainer(tiny_vlm_dir, tmp_path, coin, two_colors(), beta=0.1)
    assert trainer.ref_model is not None
    before = snapshot(trainer.model)
    trainer.train()
    assert len(ada_logs(trainer)) == 2
    assert language_model_moved(before, trainer.model)
    kl = [row["kl"] for row in trainer.state.log_history if "kl" in row]
    assert len(kl) == 2 and all(value >= 0 for value in kl)


def test_image_prompts_with_lora(tiny_vlm_dir, tmp_path):
    from peft import LoraConfig

    coin, _ = coin_reward()
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=r".*language_model.*\.(q_proj|v_proj)")
    trainer = make_vlm_trainer(tiny_vlm_dir, tmp_path, coin, two_colors(), peft_config=lora)
    params = dict(trainer.model.named_parameters())
    adapters = {n: p.detach().clone() for n, p in params.items() if "lora_B" in n}
    base = {n: p.detach().clone() for n, p in params.items() if "lora_" not in n}
    assert adapters and all("language_model" in n for n in adapters)
    assert not any(params[n].requires_grad for n in base)
    trainer.train()
    params = dict(trainer.model.named_parameters())
    assert any(not torch.equal(adapters[n], params[n]) for n in adapters), "LoRA weights did not train"
    assert all(torch.equal(base[n], params[n]) for n in base), "base weights moved under LoRA"
    assert len(ada_logs(trainer)) == 2

"""Random PEFT LoRA adapters for the tiny checkpoints, and PEFT + transformers greedy references for them."""

from __future__ import annotations

from pathlib import Path

import torch

ALL_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def save_random_adapter(
    base: Path, folder: Path, rank: int, alpha: int, seed: int, targets: list[str] = ALL_TARGETS, rslora: bool = False
) -> Path:
    """A PEFT adapter for ``base`` with random A *and* B (PEFT initialises B to zero, which would change nothing)."""
    import peft
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = peft.LoraConfig(r=rank, lora_alpha=alpha, target_modules=targets, use_rslora=rslora)
    peft_model = peft.get_peft_model(model, config)
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.normal_(0.0, 0.3)
    peft_model.save_pretrained(folder)
    return folder


def peft_greedy(base: Path, adapter: Path | None, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    """Greedy outputs of transformers with the PEFT adapter applied (the base model alone for ``None``)."""
    import peft
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, attn_implementation="eager")
    if adapter is not None:
        model = peft.PeftModel.from_pretrained(model, adapter)
    model.eval()
    model.generation_config.eos_token_id = None  # fixed-length outputs, as the engine side runs them
    outs = []
    for prompt in prompts:
        gen = model.generate(
            input_ids=torch.tensor([prompt]), max_new_tokens=max_tokens, do_sample=False, pad_token_id=0
        )
        outs.append(gen[0, len(prompt) :].tolist())
    return outs


def two_adapters_and_references(root: Path, prompts: list[list[int]], max_tokens: int):
    """A tiny Llama under ``root``, adapters "one" (rank 4, every projection) and "two" (rank 8, q and down only),
    and PEFT's greedy tokens for the base model and each adapter."""
    from tests.model.tiny_models import save_tiny_model, save_tiny_tokenizer

    base = save_tiny_model("llama", root / "base")
    save_tiny_tokenizer(base)
    adapters = {
        "one": save_random_adapter(base, root / "one", rank=4, alpha=8, seed=1),
        "two": save_random_adapter(base, root / "two", rank=8, alpha=16, seed=2, targets=["q_proj", "down_proj"]),
    }
    refs = {name: peft_greedy(base, adapters.get(name), prompts, max_tokens) for name in ("base", "one", "two")}
    return base, adapters, refs

"""What a prompt becomes before decoding: token ids through the chat template, the EOS ids
that stop a turn, and the seed of each sampled unit.

    ids = encode(tokenizer, [{"role": "user", "content": "Hi"}], use_template=True)
"""

from __future__ import annotations

import hashlib


def encode(tokenizer, messages: list[dict], use_template: bool) -> list[int]:
    """Prompt ids for a conversation, through the tokenizer's own chat template when it has one."""
    if use_template and getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    text = "".join(f"{m['role'].capitalize()}: {m['content']}\n" for m in messages) + "Assistant:"
    return tokenizer(text)["input_ids"]


def turn_ids(
    tokenizer, turns: list[str], answers: list[list[int]], use_template: bool
) -> list[int]:
    """The prompt of a conversation's turn len(answers): its user turns up to that one, each
    earlier turn followed by its answer (the ids decoded, special tokens left out)."""
    messages = []
    for t, text in enumerate(turns[: len(answers) + 1]):
        messages.append({"role": "user", "content": text})
        if t < len(answers):
            answer = tokenizer.decode(answers[t], skip_special_tokens=True)
            messages.append({"role": "assistant", "content": answer})
    return encode(tokenizer, messages, use_template)


def eos_ids(tokenizer, config, generation_config=None) -> set[int]:
    """Every id that ends a turn: the generation config's, the model config's, the tokenizer's."""
    ids = set()
    for src in (generation_config, config):
        e = getattr(src, "eos_token_id", None) if src is not None else None
        ids |= set(e if isinstance(e, list) else [e] if e is not None else [])
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return ids


def seed_for(seed: int, prompt_id: str, turn: int) -> int:
    """The generator seed of one sampled unit: a hash of (run seed, prompt, turn), so every
    repeat, side and re-measurement of a unit draws from the same seed."""
    h = hashlib.sha256(f"{seed}/{prompt_id}/{turn}".encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)

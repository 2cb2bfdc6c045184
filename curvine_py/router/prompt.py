"""What the router reads from an OpenAI request body: the prompt as text or token ids.

`/v1/completions`: `prompt` is a string, a list of token ids, or a batch of either (the first one is
routed on). `/v1/chat/completions`: `messages` are rendered with the named template `--chat-template`:
chatml (`<|im_start|>{role}\\n{content}<|im_end|>\\n` ... `<|im_start|>assistant\\n`, the Qwen
family) or llama3 (`<|begin_of_text|>` and a header per message). vLLM renders with the model's
own chat template, so for a model with another template the hashes of chat requests differ from vLLM's and the KV policy predicts no hit for them (the
load still decides, never a wrong hit: `--chat-template none` turns chat hashing off).
"""
from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Any

from tokenizers import Tokenizer


class PromptError(ValueError):
    """A body the router cannot route on (answered 400)."""


@dataclass(frozen=True, slots=True)
class Prompt:
    text: str | None                 # the text (None when the client sent token ids)
    tokens: tuple[int, ...] | None   # the token ids (None without a tokenizer)
    cache_salt: str | None = None

    def prefix_key(self, block_size: int, blocks: int, chars: int) -> bytes:
        """The bytes the prefix policy hashes: the first `blocks` blocks of tokens, or the first
        `chars` characters when there are no token ids."""
        salt = (self.cache_salt or "").encode()
        if self.tokens is not None:
            head = self.tokens[:block_size * blocks]
            return salt + b"t" + b",".join(str(t).encode() for t in head)
        return salt + b"s" + (self.text or "")[:chars].encode()

    @property
    def token_count(self) -> int:
        if self.tokens is not None:
            return len(self.tokens)
        return max(1, len(self.text or "") // 4)   # a rough estimate (~4 characters a token)


def _content(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):   # [{"type": "text", "text": ...}, ...]
        return "".join(p.get("text", "") for p in value if isinstance(p, dict) and p.get("type") == "text")
    return ""


def render_chatml(messages: list[Any]) -> str:
    parts = []
    for message in messages:
        if not isinstance(message, dict):
            raise PromptError("each message must be an object")
        parts.append(f"<|im_start|>{message.get('role', 'user')}\n{_content(message.get('content'))}<|im_end|>\n")
    parts.append("<|im_start|>assistant\n")
    return "".join(parts)


def render_llama3(messages: list[Any]) -> str:
    """Llama 3's template: the BOS text, a header per message, and the assistant header."""
    parts = ["<|begin_of_text|>"]
    for message in messages:
        if not isinstance(message, dict):
            raise PromptError("each message must be an object")
        parts.append(f"<|start_header_id|>{message.get('role', 'user')}<|end_header_id|>\n\n"
                     f"{_content(message.get('content')).strip()}<|eot_id|>")
    parts.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
    return "".join(parts)


TEMPLATES = {"chatml": render_chatml, "llama3": render_llama3}


class PromptReader:
    def __init__(self, tokenizer: Tokenizer | None = None, *, chat_template: str = "chatml",
                 add_special_tokens: bool = True) -> None:
        if chat_template not in (*TEMPLATES, "none"):
            raise ValueError(f"chat template {chat_template!r}: {', '.join(TEMPLATES)} or none")
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.add_special_tokens = add_special_tokens

    @classmethod
    def from_file(cls, path: str | None, **options: Any) -> PromptReader:
        if path is None:
            return cls(None, **options)
        file = pathlib.Path(path)
        if not file.is_file():
            raise FileNotFoundError(f"tokenizer file {path}: not found (a tokenizer.json)")
        return cls(Tokenizer.from_file(str(file)), **options)

    def _encode(self, text: str, special: bool = True) -> tuple[int, ...] | None:
        if self.tokenizer is None:
            return None
        return tuple(self.tokenizer.encode(text, add_special_tokens=self.add_special_tokens and special).ids)

    def read(self, path: str, body: dict[str, Any]) -> Prompt:
        salt = body.get("cache_salt")
        salt = salt if isinstance(salt, str) and salt else None
        if path.endswith("/chat/completions"):
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise PromptError("'messages' must be a non-empty list")
            if self.chat_template == "none":
                return Prompt(TEMPLATES["chatml"](messages), None, salt)
            text = TEMPLATES[self.chat_template](messages)
            # the rendered text carries its own BOS (llama3), as vLLM's chat path tokenizes it
            tokens = self._encode(text, special=self.chat_template == "chatml")
            return Prompt(text, tokens, salt)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and not all(isinstance(p, int) for p in prompt):
            prompt = prompt[0]     # a batch: route on its first prompt
        if isinstance(prompt, str):
            return Prompt(prompt, self._encode(prompt), salt)
        if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            return Prompt(None, tuple(prompt), salt)
        raise PromptError("'prompt' must be a string, a list of token ids, or a batch of them")

"""`TextTokenizer`: token ids ↔ text, token bytes for logprobs, and the model's chat template.

Everything comes from one Hugging Face-style folder (`tokenizer.json`, `tokenizer_config.json`,
`generation_config.json`, optionally `chat_template.jinja`), the same folder the weights come from;
a GGUF is converted into such a folder first (`gguf_convert.py`). The `tokenizers` library does
the work, so transformers is never imported by the server.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from modelserver.errors import InvalidRequest, ModelLoadError

# The template every ChatML model (SmolLM2 among them) ships; used by the byte-level test tokenizer.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    content: str


class TextTokenizer:
    """A loaded tokenizer with its special tokens and chat template."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        chat_template: str | None,
        bos_token: str | None,
        eos_token: str | None,
        stop_token_ids: frozenset[int],
    ) -> None:
        self._tokenizer = tokenizer
        self._bos_token = bos_token
        self._eos_token = eos_token
        self.stop_token_ids = stop_token_ids
        self._chat_template = _compile_template(chat_template) if chat_template else None
        self._special_ids = frozenset(
            token_id
            for token_id, token in tokenizer.get_added_tokens_decoder().items()
            if token.special
        )
        self._byte_level = isinstance(tokenizer.decoder, decoders.ByteLevel)

    @property
    def vocab_size(self) -> int:
        return int(self._tokenizer.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; `add_special_tokens` adds the BOS the tokenizer asks for."""
        return list(self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, token_ids: Sequence[int]) -> str:
        """Text of `token_ids`, special tokens (end of turn and the like) left out."""
        return str(self._tokenizer.decode(list(token_ids), skip_special_tokens=True))

    def token_text(self, token_id: int) -> str:
        """How one token reads on its own (a partial UTF-8 character shows as U+FFFD)."""
        if token_id in self._special_ids:
            return str(self._tokenizer.id_to_token(token_id))
        return str(self._tokenizer.decode([token_id], skip_special_tokens=False))

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes one token stands for (OpenAI's logprobs `bytes` field)."""
        piece = self._tokenizer.id_to_token(token_id)
        if piece is None:
            return b""
        if self._byte_level and token_id not in self._special_ids:
            byte_of = _unicode_to_byte()
            if all(char in byte_of for char in piece):
                return bytes(byte_of[char] for char in piece)
        return self.token_text(token_id).encode("utf-8")

    def save(self, tokenizer_file: Path) -> None:
        """Write `tokenizer.json` (the token model only; templates live in tokenizer_config)."""
        self._tokenizer.save(str(tokenizer_file))

    def render_chat(self, messages: Sequence[ChatMessage]) -> str:
        """The prompt text for `messages`, ending where the assistant's answer starts."""
        if self._chat_template is None:
            raise InvalidRequest("this model has no chat template; use /v1/completions")
        try:
            return str(
                self._chat_template.render(
                    messages=[{"role": m.role, "content": m.content} for m in messages],
                    add_generation_prompt=True,
                    bos_token=self._bos_token or "",
                    eos_token=self._eos_token or "",
                )
            )
        except jinja2.TemplateError as exc:
            # Templates reject conversations they cannot express (raise_exception), e.g. roles
            # out of order; that is the client's input, not a server fault.
            raise InvalidRequest(f"the chat template rejected the messages: {exc}") from exc

    @classmethod
    def from_folder(cls, folder: Path) -> TextTokenizer:
        """Load from a Hugging Face model folder."""
        tokenizer_file = folder / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise ModelLoadError(f"{folder} has no tokenizer.json")
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        tokenizer_config = _read_json(folder / "tokenizer_config.json")
        template = tokenizer_config.get("chat_template")
        template_file = folder / "chat_template.jinja"
        if template_file.is_file():
            template = template_file.read_text(encoding="utf-8")
        if isinstance(template, list):  # several named templates: the "default" one serves chat
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        bos_token = _token_content(tokenizer_config.get("bos_token"))
        eos_token = _token_content(tokenizer_config.get("eos_token"))
        stop_ids = _stop_token_ids(folder, tokenizer, eos_token)
        if not stop_ids:
            raise ModelLoadError(f"{folder} names no end-of-sequence token")
        return cls(
            tokenizer,
            chat_template=template,
            bos_token=bos_token,
            eos_token=eos_token,
            stop_token_ids=stop_ids,
        )

    @classmethod
    def byte_level(cls) -> TextTokenizer:
        """A merge-free byte-level tokenizer (3 ChatML specials + 256 bytes) for random models."""
        specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        vocab = {token: index for index, token in enumerate(specials)}
        for byte_char in _byte_to_unicode().values():
            vocab[byte_char] = len(vocab)
        tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        tokenizer.add_special_tokens(specials)
        return cls(
            tokenizer,
            chat_template=CHATML_TEMPLATE,
            bos_token="<|im_start|>",
            eos_token="<|im_end|>",
            stop_token_ids=frozenset({2}),
        )


def _compile_template(source: str) -> jinja2.Template:
    # The same environment transformers' apply_chat_template uses, so templates written for it
    # render identically here.
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    env.filters["tojson"] = lambda value, indent=None: json.dumps(
        value, ensure_ascii=False, indent=indent
    )
    return env.from_string(source)


def _raise_exception(message: str) -> None:
    raise jinja2.TemplateError(message)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    value = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(value, dict):
        raise ModelLoadError(f"{path} is not a JSON object")
    return value


def _token_content(token: object) -> str | None:
    if isinstance(token, dict):
        return str(token.get("content")) if token.get("content") is not None else None
    return str(token) if token is not None else None


def _stop_token_ids(folder: Path, tokenizer: Tokenizer, eos_token: str | None) -> frozenset[int]:
    # A model may end a turn with any of several ids (Llama 3: <|eot_id|> and <|end_of_text|>);
    # generation_config.json lists them, config.json and the tokenizer name the main one.
    ids: set[int] = set()
    for name in ("generation_config.json", "config.json"):
        value = _read_json(folder / name).get("eos_token_id")
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(int(v) for v in value)
    eos_id = tokenizer.token_to_id(eos_token) if eos_token is not None else None
    if eos_id is not None:
        ids.add(int(eos_id))
    return frozenset(ids)


@cache
def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: every byte as a printable character."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    mapping = {byte: chr(byte) for byte in printable}
    shift = 0
    for byte in range(256):
        if byte not in mapping:
            mapping[byte] = chr(256 + shift)
            shift += 1
    return dict(sorted(mapping.items()))


@cache
def _unicode_to_byte() -> dict[str, int]:
    return {char: byte for byte, char in _byte_to_unicode().items()}


def byte_level_alphabet() -> dict[int, str]:
    """The byte → character table byte-level BPE vocabularies are written in."""
    return _byte_to_unicode()

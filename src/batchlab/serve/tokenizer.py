"""A byte-level tokenizer: token i < 256 is the byte i, token 256 is end-of-sequence.

Text is encoded as its UTF-8 bytes, one token per byte, so every string round-trips exactly
(`decode(encode(s)) == s`) and every list of byte tokens is a valid prompt. Decoding skips EOS
(vLLM's `skip_special_tokens`) and replaces bytes that are not valid UTF-8 with U+FFFD. A stream
decodes incrementally: a token that ends in the middle of a multi-byte character yields "" and
the character appears with the token that completes it, so the concatenated stream equals the
decoded whole.

The chat template is plain text, one block per message, then the assistant's header:

    <|system|>\\n{content}\\n<|user|>\\n{content}\\n<|assistant|>\\n
"""

from __future__ import annotations

import codecs

BYTES = 256
EOS = 256             # the one special token
VOCAB = BYTES + 1     # the mini model's vocabulary when it serves text
CHAT_ROLES = ("system", "user", "assistant")


def token_text(token: int) -> str:
    """A token as logprobs and /tokenize name it: an ASCII byte is its character; another byte,
    which is part of a character, `bytes:\\xNN` (OpenAI's convention for such pieces); EOS
    `<|eos|>`."""
    if token < 128:
        return chr(token)
    return f"bytes:\\x{token:02x}" if token < BYTES else "<|eos|>"


def encode(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def decode(tokens: list[int]) -> str:
    return bytes(t for t in tokens if t < BYTES).decode("utf-8", errors="replace")


class StreamDecoder:
    """Decodes one request's tokens as they come; the pieces join to `decode(all tokens)`."""

    __slots__ = ("_decoder",)

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def piece(self, token: int) -> str:
        return "" if token >= BYTES else self._decoder.decode(bytes((token,)))

    def flush(self) -> str:
        """What an unfinished multi-byte character at the end decodes to (U+FFFD), or ""."""
        return self._decoder.decode(b"", final=True)


def chat_prompt(messages: list[tuple[str, str]]) -> str:
    """The chat template: each (role, content) as a block, then the assistant's header."""
    return "".join(f"<|{role}|>\n{content}\n" for role, content in messages) + "<|assistant|>\n"

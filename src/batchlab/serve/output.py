"""One choice's text and logprobs as a client sees them, token by token (vLLM's shapes).

Stop strings: the text ends before the stop string (unless `include_stop_str_in_output`), and a
stream holds back the last bytes that could be the start of one, so the streamed pieces join to
the non-streamed text exactly. A stop token id's own text is left out the same way. `echo` puts
the prompt's text (and, with logprobs, the prompt's logprobs, the first one null) before the
first output. Logprobs are floored at -9999 as vLLM does (JSON has no -inf).

Completions: `{"text_offset", "token_logprobs", "tokens", "top_logprobs"}`, where each token's
`top_logprobs` holds the sampled token and the `logprobs` likeliest (OpenAI's "up to logprobs+1").
Chat: `{"content": [{"token", "logprob", "bytes", "top_logprobs": [the top_logprobs likeliest]}]}`.
"""

from __future__ import annotations

import codecs

import numpy as np

from batchlab.executor.sampling import TokenLogprobs, top_logprobs
from batchlab.serve.protocol import Generation
from batchlab.serve.tokenizer import BYTES, decode, token_text

FLOOR = -9999.0


def _lp(x: float) -> float:
    return max(float(x), FLOOR)


def _bytes(token: int) -> list[int]:
    return [token] if token < BYTES else []


def prompt_entries(prompt: list[int], rows: np.ndarray, k: int) -> list[TokenLogprobs | None]:
    """Each prompt token's logprobs from the rows that predict it ([P-1, V]); the first has none."""
    out: list[TokenLogprobs | None] = [None]
    for i, token in enumerate(prompt[1:]):
        row = rows[i]
        ids, values = top_logprobs(row, k)
        out.append(TokenLogprobs(float(row[token]), ids, values))
    return out


class ChoiceText:
    """One choice's text pieces, stop handling, text offsets and logprob entries."""

    __slots__ = ("gen", "decoder", "held", "hold", "prefix", "counter", "offset", "prefix_entries")

    def __init__(self, gen: Generation, prompt_lps: list[TokenLogprobs | None] | None = None) -> None:
        self.gen = gen
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        trims = gen.stop and not gen.include_stop_str_in_output
        self.hold = max(map(len, gen.stop)) - 1 if trims else 0   # bytes that may start a stop string
        self.held = bytearray()
        self.counter = codecs.getincrementaldecoder("utf-8")(errors="replace")   # for text offsets
        self.offset = 0
        self.prefix, self.prefix_entries = "", []
        if gen.echo:
            self.prefix = decode(gen.prompt)
            if gen.logprobs is not None:   # the prompt's own logprobs lead the first token's
                self.prefix_entries = [self._entry(t, lp) for t, lp in zip(gen.prompt, prompt_lps)]
            else:
                self.offset = len(self.prefix)

    def piece(self, token: int, finish: str | None, stop_reason: str | int | None) -> str:
        """The text that may go out with `token` (held bytes stay back until they cannot start
        a stop string)."""
        out, self.prefix = self.prefix, ""
        gen = self.gen
        if token < BYTES and not (finish and isinstance(stop_reason, int) and not gen.include_stop_str_in_output):
            self.held.append(token)
        if finish is not None:
            if isinstance(stop_reason, str) and not gen.include_stop_str_in_output:
                del self.held[len(self.held) - len(stop_reason.encode("utf-8")):]
            out += self.decoder.decode(bytes(self.held), final=True)
            self.held.clear()
        elif len(self.held) > self.hold:
            cut = len(self.held) - self.hold
            out += self.decoder.decode(bytes(self.held[:cut]))
            del self.held[:cut]
        return out

    def _entry(self, token: int, lp: TokenLogprobs | None) -> tuple:
        """(token, logprobs, text offset): the offset counts the characters before the token."""
        at = self.offset
        if token < BYTES:
            self.offset += len(self.counter.decode(bytes((token,))))
        return token, lp, at

    def entries(self, token: int, lp: TokenLogprobs | None) -> list[tuple]:
        """The logprob entries that go out with `token` (the echoed prompt's with the first)."""
        out, self.prefix_entries = self.prefix_entries, []
        out.append(self._entry(token, lp))
        return out

    def logprobs(self, entries: list[tuple]) -> dict:
        n, chat = self.gen.logprobs, self.gen.chat
        if chat:
            return {"content": [
                {"token": token_text(t), "logprob": _lp(lp.logprob), "bytes": _bytes(t),
                 "top_logprobs": [{"token": token_text(int(i)), "logprob": _lp(v), "bytes": _bytes(int(i))}
                                  for i, v in zip(lp.top_ids.tolist(), lp.top_logprobs.tolist())]}
                for t, lp, _ in entries]}
        tops = []
        for t, lp, _ in entries:
            if lp is None:
                tops.append(None)
                continue
            top = {token_text(t): _lp(lp.logprob)}
            for i, v in zip(lp.top_ids.tolist()[:n], lp.top_logprobs.tolist()[:n]):
                top.setdefault(token_text(int(i)), _lp(v))
            tops.append(top)
        return {"text_offset": [at for _, _, at in entries],
                "token_logprobs": [None if lp is None else _lp(lp.logprob) for _, lp, _ in entries],
                "tokens": [token_text(t) for t, _, _ in entries], "top_logprobs": tops}

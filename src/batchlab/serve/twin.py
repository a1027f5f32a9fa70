"""The serving twin's executor and front-end rules: priced steps, made-up tokens, estimated prompts.

A twin (`batchlab serve --simulate`) is the real server and engine with no weights: each step
lasts what the cost model prices it at (the very price object the simulator asks,
`executor.costed.make_executor`), and each emitted token is made up:

- `seeded` (the default): token k of a request is a printable ASCII byte (32-126) drawn from a
  counter-based hash of (the request's seed, k), so the same seed gives the same text whatever
  the batch, the preemptions or the replica; parallel samples are seeded seed + k as on the real
  server;
- `echo`: token k is the prompt's token k (cycling), so a client can check what came back.

The twin never emits an end-of-sequence token: a request ends at its `max_tokens` ("length"),
at a stop the server honours, or when its client leaves.

A prompt's length is its token ids when the request sends them (the completions API takes a
list of ints); a text prompt (and every chat prompt) is estimated at one token per
`BYTES_PER_TOKEN` bytes of UTF-8, about what BPE tokenizers give English text. The estimated ids
are the 4-byte chunks themselves (mod the vocabulary), so two prompts that share a text prefix
share the token ids of its whole chunks, and a prefix cache hits on them.

The twin has no logits: the server refuses by name every option that reads them (logprobs,
top_k, penalties, logit_bias: `Generation.needs`), and the twin `echo` too (`TWIN_REFUSED`).
Stop strings and stop token ids are honoured, on the made-up tokens.
"""

from __future__ import annotations

import dataclasses
import json
import time

from batchlab.executor.base import StepResult
from batchlab.request import Request
from batchlab.scheduler.plan import StepPlan

BYTES_PER_TOKEN = 4        # a text prompt's estimated tokens: ceil(UTF-8 bytes / 4)
PRINTABLE_LO, PRINTABLE_N = 32, 95   # made-up tokens are the printable ASCII bytes 32..126
OUTPUTS = ("seeded", "echo")
_MASK = (1 << 64) - 1
# Options that need the model's logits (or its text): refused unless neutral.
TWIN_REFUSED = {"logprobs": (None, False), "top_logprobs": (None, 0), "echo": (None, False),
                "logit_bias": (None, {}), "presence_penalty": (None, 0), "frequency_penalty": (None, 0),
                "repetition_penalty": (None, 1), "top_k": (None, -1, 0), "min_p": (None, 0),
                "prompt_logprobs": (None,)}


def _mix(x: int) -> int:
    """splitmix64's finaliser (Steele, Lea and Flood 2014): a counter in, 64 well-mixed bits out."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def seeded_token(seed: int, k: int) -> int:
    """Token k of a request seeded `seed`: a printable ASCII byte."""
    return PRINTABLE_LO + _mix(_mix(seed & _MASK) ^ k) % PRINTABLE_N


def estimate_prompt(utf8: list[int], vocab: int) -> list[int]:
    """A text's estimated token ids: each `BYTES_PER_TOKEN`-byte chunk read as a little-endian
    integer, mod the vocabulary (the last chunk may be shorter)."""
    return [int.from_bytes(bytes(utf8[i:i + BYTES_PER_TOKEN]), "little") % vocab
            for i in range(0, len(utf8), BYTES_PER_TOKEN)]


class TwinExecutor:
    """Prices each plan with the cost model and makes up the tokens it emits.

    `slowdown(start)` multiplies a step's price (fault injection: a replica that slows);
    `priced` keeps the last step's price before the slowdown, for whoever checks it."""

    name = "twin"

    def __init__(self, pricer, output: str = "seeded") -> None:
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
        self.pricer, self.output = pricer, output
        self.prompts: dict[str, list[int]] = {}
        self.seeds: dict[str, int] = {}
        self.outputs: dict[str, list[int]] = {}
        self.slowdown = 1.0
        self.priced = 0.0
        self.steps = 0
        self.run_seconds = 0.0   # CPU time inside `run` (pricing and tokens): never slept

    def add_prompt(self, rid: str, prompt: list[int], sampling=None) -> None:
        self.prompts[rid] = prompt
        self.seeds[rid] = sampling.seed if sampling is not None else 0

    def forget(self, rid: str) -> None:
        self.prompts.pop(rid, None)
        self.seeds.pop(rid, None)
        self.outputs.pop(rid, None)

    def _token(self, rid: str, k: int) -> int:
        if self.output == "echo":
            prompt = self.prompts[rid]
            return prompt[k % len(prompt)]
        return seeded_token(self.seeds[rid], k)

    def _emit(self, rid: str) -> int:
        out = self.outputs.setdefault(rid, [])
        out.append(self._token(rid, len(out)))
        return out[-1]

    def run(self, plan: StepPlan) -> float:
        return self.execute(plan).duration

    def execute(self, plan: StepPlan) -> StepResult:
        """The plan's price (slowed by a fault) and the token each emitting request makes up."""
        entered = time.perf_counter()
        self.priced = self.pricer.run(plan) if plan else 0.0
        tokens = {item.request.id: self._emit(item.request.id) for item in plan.items if item.emits}
        self.steps += 1
        self.run_seconds += time.perf_counter() - entered
        return StepResult(self.priced * self.slowdown, tokens)

    def fork(self, parent: Request, child: Request) -> int:
        """A parallel sample's first token, made up from its own seed."""
        return self._emit(child.id)

    def release(self, request: Request) -> None:
        pass   # no KV of its own: the memory manager keeps the bookkeeping


def parse_twin(body: dict, limits, chat: bool, parse):
    """A request body checked as the real server checks it (`parse`, the protocol's), with the
    twin's rules: options that need logits refused by name, and a text prompt's length estimated
    (`estimate_prompt`) and checked against the context."""
    from batchlab.serve.protocol import bad

    for key, neutral in TWIN_REFUSED.items():
        if key in body and body[key] not in neutral:
            raise bad(key, f"'{key}' = {json.dumps(body[key])} is not served by a twin (batchlab "
                           "serve --simulate): it has no text of the prompt to echo", "unsupported")
    text = chat or not _is_token_ids(body.get("prompt"))
    if not text:
        return parse(body, limits, chat)
    # A text's bytes are about BYTES_PER_TOKEN times its tokens: the protocol counts bytes
    wide = dataclasses.replace(limits, max_model_len=limits.max_model_len * BYTES_PER_TOKEN)
    gen = parse(body, wide, chat)
    gen.prompt = estimate_prompt(gen.prompt, limits.vocab)
    room = limits.max_model_len - len(gen.prompt)
    field = "messages" if chat else "prompt"
    if room < 1:
        raise bad(field, f"the prompt is estimated at {len(gen.prompt)} tokens (one per "
                         f"{BYTES_PER_TOKEN} bytes); the model's context is {limits.max_model_len}, "
                         "which leaves no room for an output", "context_length_exceeded")
    asked = next((k for k in ("max_completion_tokens", "max_tokens") if body.get(k) is not None), None)
    if asked is None:
        gen.max_tokens = min(gen.max_tokens, room)
    elif gen.max_tokens > room:
        raise bad(asked, f"'{asked}' = {gen.max_tokens} with a prompt estimated at {len(gen.prompt)} "
                         f"tokens exceeds the model's context of {limits.max_model_len} (at most {room})",
                  "context_length_exceeded")
    if gen.sampling.min_tokens > gen.max_tokens:
        gen.sampling = dataclasses.replace(gen.sampling, min_tokens=gen.max_tokens)
    return gen


def _is_token_ids(prompt: object) -> bool:
    """A completions prompt given as token ids (a list of ints, or OpenAI's one-prompt array of it)."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
        prompt = prompt[0]
    return isinstance(prompt, list) and set(map(type, prompt)) <= {int, bool}   # isinstance(t, int)

"""Workloads whose requests share prefixes: multi-turn chat sessions and few-shot traffic.

Both write token ids (`Content.tokens`), so a prefix cache sees exactly which prompts share
which prefix. Randomness comes from one seeded numpy Generator per draw.

Chat sessions: every session opens with the same system prompt; turn k's prompt is the whole
conversation so far (system prompt, earlier user messages and answers) plus a new user
message, and its output is the answer. A session's turns are one token stream, so each turn's
content is a prefix of it, answer included: the next turn finds the previous answer's blocks
in the cache. Sessions start as a Poisson process; turn k+1 arrives a think time (exponential)
after turn k arrives. The replay is open loop, as a trace's timestamps are: if turn k is
still being served when turn k+1 arrives, the latter finds less in the cache.

Few-shot: a handful of long instruction-plus-examples templates; each request is one template
(uniformly chosen) followed by its own question.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from batchlab.errors import InputError
from batchlab.workload.base import Workload
from batchlab.workload.content import Content

VOCAB = 32000          # token ids are drawn from [0, VOCAB): only equality matters to a cache
LENGTH_SIGMA = 0.8     # log-normal spread of message and answer lengths


def _check(name: str, value, *, integer: bool, zero_ok: bool = False) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value >= 0 if zero_ok else value > 0) and (not integer or float(value) == int(value))
    if not ok:
        kind = "a whole number" if integer else "a number"
        raise InputError(f"field '{name}' must be {kind} {'>= 0' if zero_ok else '> 0'}, got {value!r}")


def _lengths(rng: np.random.Generator, mean: float, n: int) -> np.ndarray:
    # log-normal with the given mean: mu = ln(mean) − σ²/2; ceil makes every length >= 1
    mu = math.log(mean) - LENGTH_SIGMA ** 2 / 2
    return np.ceil(rng.lognormal(mu, LENGTH_SIGMA, n)).astype(np.int64)


@dataclass(frozen=True, slots=True)
class ChatSessions:
    turns: float = 4.0          # mean turns per session (uniform on 1 .. 2·turns − 1)
    system_prompt: int = 1024   # tokens of the system prompt every session shares
    user: float = 120.0         # mean tokens of a user message
    answer: float = 250.0       # mean tokens of an answer (the turn's output)
    think_time: float = 20.0    # mean seconds from one turn's arrival to the next

    def __post_init__(self) -> None:
        _check("turns", self.turns, integer=False)
        if self.turns < 1:
            raise InputError(f"field 'turns' must be >= 1, got {self.turns!r}")
        _check("system_prompt", self.system_prompt, integer=True, zero_ok=True)
        for name in ("user", "answer", "think_time"):
            _check(name, getattr(self, name), integer=False)

    def describe(self) -> str:
        return (f"chat sessions of {self.turns:g} turns on average, a shared {self.system_prompt}-token system "
                f"prompt, messages ~{self.user:g} and answers ~{self.answer:g} tokens, think time "
                f"~{self.think_time:g} s")

    def generate(self, rng: np.random.Generator, n: int, rate: float) -> Workload:
        """n requests (turns) from sessions starting at rate / turns per second."""
        _check("n", n, integer=True)
        _check("rate", rate, integer=False)
        system = rng.integers(0, VOCAB, self.system_prompt, dtype=np.int64)
        session_gap = self.turns / rate
        rows: list[tuple[float, int, str, int, int, Content, str]] = []
        start, session = 0.0, 0
        max_turns = max(1, round(2 * self.turns - 1))
        while len(rows) < n:
            turns = int(rng.integers(1, max_turns + 1))
            users, answers = _lengths(rng, self.user, turns), _lengths(rng, self.answer, turns)
            thinks = rng.exponential(self.think_time, turns)
            parts = [system]
            for u, a in zip(users, answers):
                parts += [rng.integers(0, VOCAB, u, dtype=np.int64), rng.integers(0, VOCAB, a, dtype=np.int64)]
            stream = np.concatenate(parts)      # [system + Σ(user + answer)]: the whole conversation
            at, used = start, self.system_prompt
            for k in range(min(turns, n - len(rows))):
                prompt = used + int(users[k])
                output = int(answers[k])
                rows.append((at, len(rows), f"s{session}t{k}", prompt, output,
                             Content.tokens(stream[:prompt + output]), f"s{session}"))
                used = prompt + output
                at += float(thinks[k])
            session += 1
            start += float(rng.exponential(session_gap))
        rows.sort(key=lambda row: (row[0], row[1]))
        return Workload(ids=[r[2] for r in rows], arrival=[r[0] for r in rows], prompt=[r[3] for r in rows],
                        output=[r[4] for r in rows], name="sessions", rate=float(rate),
                        notes=[f"{n} requests from {session} {self.describe()}"],
                        content=tuple(r[5] for r in rows), sessions=tuple(r[6] for r in rows))


@dataclass(frozen=True, slots=True)
class FewShot:
    templates: int = 4          # distinct instruction + examples prefixes
    prefix: int = 1536          # tokens of each template
    question: float = 64.0      # mean tokens of a request's own part
    answer: float = 128.0       # mean output tokens

    def __post_init__(self) -> None:
        for name in ("templates", "prefix"):
            _check(name, getattr(self, name), integer=True)
        for name in ("question", "answer"):
            _check(name, getattr(self, name), integer=False)

    def describe(self) -> str:
        return (f"few-shot prompts: one of {self.templates} shared {self.prefix}-token templates, then a "
                f"question of ~{self.question:g} tokens; answers ~{self.answer:g} tokens")

    def generate(self, rng: np.random.Generator, n: int, rate: float) -> Workload:
        """n requests arriving as a Poisson process of `rate` req/s."""
        _check("n", n, integer=True)
        _check("rate", rate, integer=False)
        templates = rng.integers(0, VOCAB, (self.templates, self.prefix), dtype=np.int64)
        which = rng.integers(0, self.templates, n)
        questions, answers = _lengths(rng, self.question, n), _lengths(rng, self.answer, n)
        arrival = np.concatenate(([0.0], np.cumsum(rng.exponential(1.0 / rate, n - 1))))
        content = tuple(Content.tokens(np.concatenate((templates[t], rng.integers(0, VOCAB, q, dtype=np.int64))))
                        for t, q in zip(which, questions))
        return Workload(ids=[str(i) for i in range(n)], arrival=arrival, prompt=self.prefix + questions,
                        output=answers, name="few-shot", rate=float(rate),
                        notes=[f"{n} requests, {self.describe()}, Poisson arrivals at {rate:g} req/s"],
                        content=content)

"""Multi-turn chat sessions for the mini model, whose later turns extend the earlier ones.

Every session opens with one shared system prompt; turn k's prompt is the conversation so far
(system prompt, earlier user messages and the model's own answers) plus a new user message. The
answers are the model's greedy outputs of each turn run alone (`generate`), so the sessions are
also their own reference: a run through the engine, with or without a prefix cache, must give
back exactly `outputs`. Only prompts are content (`Content.tokens`): the engine's outputs are
the model's, so nothing is claimed about tokens before they are computed.

Sessions start `session_gap` apart; turn k+1 arrives `think_time` after turn k (open loop, as
`workload.sessions.ChatSessions`): a turn still running when the next one arrives leaves it less
to find in the cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from batchlab.errors import InputError
from batchlab.model.decoding import generate, random_prompt
from batchlab.model.weights import MiniModel
from batchlab.request import Request
from batchlab.workload.content import Content


@dataclass(slots=True)
class MiniSessions:
    requests: list[Request]            # one per turn, in arrival order
    prompts: dict[str, list[int]]      # each turn's prompt token ids
    outputs: dict[str, list[int]]      # each turn's answer, generated alone (the reference)

    def fresh(self) -> list[Request]:
        """New Request objects for another run (the engine consumes the ones it runs)."""
        return [Request(r.id, r.arrival, r.prompt_tokens, r.output_tokens, index=r.index,
                        content=r.content, session=r.session) for r in self.requests]


def mini_sessions(model: MiniModel, rng: np.random.Generator, sessions: int, turns: list[int],
                  system: int, user: list[list[int]], answer: list[list[int]],
                  session_gap: float = 1.0, think_time: float = 1.0) -> MiniSessions:
    """`turns[s]` turns in session s; `user[s][k]` and `answer[s][k]` token counts of turn k."""
    for name, value in (("sessions", sessions), ("system", system)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"mini sessions: field '{name}' must be an integer >= 0, got {value!r}")
    if len(turns) != sessions or len(user) != sessions or len(answer) != sessions:
        raise InputError("mini sessions: fields 'turns', 'user' and 'answer' need one entry per session")
    vocab = model.config.vocab
    shared = random_prompt(rng, vocab, system)
    requests: list[Request] = []
    prompts: dict[str, list[int]] = {}
    outputs: dict[str, list[int]] = {}
    for s in range(sessions):
        if len(user[s]) < turns[s] or len(answer[s]) < turns[s]:
            raise InputError(f"mini sessions: session {s}: fewer lengths than its {turns[s]} turns")
        conversation = list(shared)
        for k in range(turns[s]):
            conversation += random_prompt(rng, vocab, user[s][k])
            if not conversation:
                raise InputError(f"mini sessions: session {s} turn {k}: an empty prompt")
            rid = f"s{s}t{k}"
            answer_ids = generate(model, conversation, answer[s][k])
            prompts[rid], outputs[rid] = list(conversation), answer_ids
            requests.append(Request(rid, s * session_gap + k * think_time, len(conversation),
                                    answer[s][k], content=Content.tokens(conversation),
                                    session=f"s{s}"))
            conversation += answer_ids
    requests.sort(key=lambda r: (r.arrival, r.id))
    for i, r in enumerate(requests):
        r.index = i
    return MiniSessions(requests, prompts, outputs)

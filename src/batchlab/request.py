"""A request and its progress: raw counters plus derived properties.

The engine stores only counts (`computed`, `emitted`) and derives everything else, as vLLM and
nano-vllm do: a request always "catches up" its computed tokens to the tokens it knows
(prompt + emitted outputs). When nothing is left to catch up but one token, and an output was
already emitted, the step is a decode; any larger catch-up is a prefill (the first prompt pass,
a chunk of it, or the recomputation after a preemption).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from batchlab.memory.block_table import BlockTable
    from batchlab.workload.content import Content


class Status(enum.IntEnum):
    """Ordered as vLLM's: everything from FINISHED on is done."""

    PENDING = 0    # not arrived yet
    WAITING = 1    # arrived, queued for admission
    RUNNING = 2    # admitted: holds a seat and memory
    PREEMPTED = 3  # evicted back to the queue (recompute) or to host memory (swap)
    FINISHED = 4
    REJECTED = 5   # can never run (too long for memory or context); has a reason
    ABORTED = 6    # dropped before it finished (a client went away); has a reason


class Phase(str, enum.Enum):
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(frozen=True, slots=True)
class StopRule:
    """When a request of a real model ends before its output count (vLLM's `check_stop`): at
    `eos` (None: ignored), or at one of `token_ids` once it has `min_tokens` outputs."""

    eos: int | None = None
    token_ids: frozenset[int] = frozenset()
    min_tokens: int = 0

    def stops(self, token: int, emitted: int) -> bool:
        """Whether `token`, output number `emitted`, ends the request."""
        return token == self.eos or (emitted >= self.min_tokens and token in self.token_ids)


@dataclass(slots=True, eq=False)
class Request:
    id: str
    arrival: float
    prompt_tokens: int
    output_tokens: int
    index: int = 0                       # position in the input: ties in arrival keep it
    predicted_output: float | None = None  # what a length-predicting scheduler believes
    content: Content | None = None       # its tokens, as far as a prefix cache can tell
    session: str | None = None           # conversation it belongs to: what affinity routing keys on
    samples: tuple[Request, ...] = ()    # parallel sampling (n > 1): the other samples of this
                                         # prompt, forked from it at its first token
    tenant: str | None = None            # who sent it: what a fair scheduler shares service between
    priority: int = 0                    # vLLM's `priority`: lower is served first, ties by arrival
    program: str | None = None           # the program (agent) whose call this is
    stop: StopRule | None = None         # a real model's tokens that end it early

    status: Status = Status.PENDING
    computed: int = 0        # tokens whose KV is in the cache
    peak_computed: int = 0   # the most ever computed: below it, computing again is recomputation
    emitted: int = 0         # output tokens produced so far
    admitted_at: float | None = None     # first admission
    preemptions: int = 0
    evictions: tuple[list[float], ...] = ()   # [preempted at, re-admitted at] (a tuple: most never have one)
    swapped: bool = False    # KV sits in host memory (swap preemption)
    in_flight: bool = False  # in a pipelined batch that has not returned yet
    reject_reason: str | None = None
    token_times: list[float] = field(default_factory=list)
    kv: BlockTable | None = None   # its blocks, as the paged manager holding it keeps them

    @property
    def known_tokens(self) -> int:
        """Tokens whose KV the next output needs: the prompt plus every emitted output."""
        return self.prompt_tokens + self.emitted

    @property
    def remaining(self) -> int:
        """Tokens to compute before the next output appears."""
        return self.known_tokens - self.computed

    @property
    def phase(self) -> Phase:
        if self.emitted >= 1 and self.remaining == 1:
            return Phase.DECODE
        return Phase.PREFILL

    @property
    def prefill_remaining(self) -> int:
        """The tick contract's prefill_remaining: 0 once only decodes are left."""
        return 0 if self.phase is Phase.DECODE else self.remaining

    @property
    def output_remaining(self) -> int:
        """Outputs not yet produced, the first one included (tick contract)."""
        return self.output_tokens - self.emitted

    @property
    def finished(self) -> bool:
        return self.status >= Status.FINISHED


# Each request's `computed`, for C-level sums over a batch (they run every step).
computed_of = attrgetter("computed")
# Arrival order: (arrival, input order), never the id; a C-level key for sorting whole runs.
arrival_order = attrgetter("arrival", "index")

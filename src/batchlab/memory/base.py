"""The memory-manager interface: it answers and accounts; the scheduler decides.

A manager tracks, in tokens of KV, what running requests hold (reserved or allocated) and store.
Check-then-act as nano-vllm's block manager: `try_admit` and `grow` succeed and account, or fail
and change nothing; `check_integrity` proves the books balance (mini-sglang). `can_admit` is
`fits(room(), need(r), holding())`; `free`, the last admitted first, undoes admissions exactly.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from batchlab.request import Request


class IntegrityError(AssertionError):
    """A memory manager's accounting does not balance: a bug, never a user error."""


class MemoryManager(ABC):
    name: str = "memory"
    capacity_tokens: int | None = None  # None: unlimited
    may_refuse_growth: bool = False     # True only where `grow` can fail (paged)
    cache_version: int = 0              # changes whenever `cached_tokens` may answer differently
    ordered_by_cache: bool = False      # its waiting queue ranks by `cached_tokens` (lpm)
    grows_in_blocks: bool = False       # decodes take a block whenever theirs fills (paged)
    held_is_stored: bool = False        # what it holds is what its requests store (unlimited)
    _held: dict[Request, object]        # the requests holding memory, in admission order

    def reject_reason(self, request: Request) -> str | None:
        """Why `request` can never run here, or None if it can (asked once, at arrival)."""
        return None

    def room(self) -> int:
        """What admissions can take now, in the unit of `need` (blocks or tokens; here no limit)."""
        return 0

    def need(self, request: Request) -> int:
        """What admitting `request` takes from the room now."""
        return 0

    def fits(self, room: int, need: int, holding: bool) -> bool:
        """Whether an admission may take `need` from `room` (`holding`: someone holds memory)."""
        return need <= room

    def holding(self) -> bool:
        return bool(self._held)

    def holders(self) -> list[Request]:
        return list(self._held)

    def can_admit(self, request: Request) -> bool:
        return self.fits(self.room(), self.need(request), bool(self._held))

    def try_admit(self, request: Request) -> bool:
        """Take what `request` needs to start (or restart); False and no change if it can't."""
        if not self.can_admit(request):
            return False
        self._take(request)
        return True

    def cached_tokens(self, request: Request) -> int:
        """Leading tokens of `request` whose KV a prefix cache holds now (≤ known − 1), else 0; changes nothing."""
        return 0

    def reused_tokens(self, request: Request) -> int:
        """Tokens its latest admission found in a prefix cache: its `computed` starts there."""
        return 0

    def loaded_tokens(self, request: Request) -> int:
        """Of `reused_tokens`, those copied in from a host-memory cache tier (priced as swap-in)."""
        return 0

    def observe(self, now: float) -> None:
        """The scheduler's clock at each plan, for a manager that keeps a history over time."""

    def cache_stats(self) -> dict | None:
        """A prefix cache's figures (flat snake_case keys), None for managers without one."""
        return None

    def _take(self, request: Request) -> None:
        """Account the admission of `request`, already known to fit."""
        self._held[request] = None

    def fork(self, parent: Request, child: Request) -> bool:
        """Parallel sampling: `child` continues from `parent`'s computed tokens, here in memory of
        its own (a prefix cache shares the blocks instead); False and no change if no room."""
        return self.try_admit(child)

    def grow(self, request: Request, n_tokens: int) -> bool:
        """Room for `n_tokens` more computed tokens; False and no change if none (`may_refuse_growth`)."""
        return True

    def grow_each(self, requests: list[Request]) -> bool:
        """Room for one more token for every request, all or nothing; False and no change if not."""
        return all(self.grow(r, 1) for r in requests) if self.may_refuse_growth else True

    def grow_run(self, requests: list[Request], n_tokens: int) -> None:
        """Grow every request by `n_tokens` (a decode run, within its `decode_run_room`)."""
        for r in requests:
            self.grow(r, n_tokens)

    def free(self, request: Request) -> None:
        """Release everything `request` holds (finished, or preempted by recompute)."""
        self._held.pop(request, None)

    @abstractmethod
    def held_tokens(self) -> int:
        """Tokens of KV capacity held by running requests (reserved or allocated)."""

    def stored_tokens(self) -> int:
        """Tokens of KV actually written."""
        return sum(r.computed for r in self.holders())

    def shared_tokens(self) -> int:
        """Of the computed tokens summed over holders, those counted again: one block, several holders."""
        return 0

    def decode_run_stored(self, requests: list[Request], steps: int) -> np.ndarray | None:
        """KV stored during each of `steps` decode steps of `requests` (called before them), or
        None where it grows by a token per request a step (windowed layers keep only a window)."""
        return None

    def decode_run_room(self, requests: list[Request], steps: int) -> tuple[int, np.ndarray]:
        """The decode steps k ≤ `steps` in which `requests` can all grow by a token each, and the
        tokens held in each (called before them); here growth never fails nor changes what is held."""
        return steps, np.full(steps, float(self.held_tokens()))

    def block_table(self, request: Request) -> list[int]:
        """The blocks `request` holds, in token order (paged managers); the list grows in place."""
        raise TypeError(f"{self.name} memory has no blocks")

    def append_blocks(self, tables: list[list[int]]) -> int:
        """One more block at the end of each of `tables`, in the order a step grows them; the
        tokens held after, or -1 and no change if too few are free (`grows_in_blocks`)."""
        raise TypeError(f"{self.name} memory has no blocks")

    def check_integrity(self) -> None:
        held = self.held_tokens()
        if held < 0:
            raise IntegrityError(f"{self.name}: negative usage {held}")
        if self.capacity_tokens is not None and held > self.capacity_tokens:
            raise IntegrityError(f"{self.name}: {held} tokens held > capacity {self.capacity_tokens}")
        for r in self.holders():
            if r.finished:
                raise IntegrityError(f"{self.name}: finished request {r.id} still holds memory")

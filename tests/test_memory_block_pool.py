"""The block pool: a free list handed out in order, reference counts, idle cached blocks (LRU)."""

import pytest

from batchlab.memory.base import IntegrityError
from batchlab.memory.block_pool import BlockPool


def test_blocks_come_out_in_order_and_a_released_table_comes_back_in_its_order():
    pool = BlockPool(8)
    a, b = pool.take_free(3), pool.take_free(2)
    assert (a, b) == ([0, 1, 2], [3, 4]) and pool.available() == 3 and pool.total - pool.available() == 5
    pool.free.extend(reversed(a))   # a released table, as the managers push it
    assert pool.take_free(3) == a   # the freed table, head first: a newcomer gets the same blocks
    assert pool.take_free(0) == []


def test_idle_blocks_are_free_and_evicted_least_recently_freed_first():
    pool = BlockPool(4, shared=True)
    taken = pool.take_free(3)
    for b in taken:
        pool.ref[b] = 1
    for b in (2, 0):               # released, still cached: idle, in the order they were freed
        pool.ref[b] = 0
        pool.idle[b] = None
    assert pool.available() == 3 and pool.total - pool.available() == 1
    pool.hold(0)                   # reused while idle: held again, no longer evictable
    assert pool.ref[0] == 1 and list(pool.idle) == [2] and pool.extra_refs == 0
    pool.hold(1)                   # a second holder of a held block
    assert pool.ref[1] == 2 and pool.extra_refs == 1
    assert pool.evict_oldest(1) == [2] and not pool.idle


def test_the_accounting_catches_a_block_held_and_free_at_once():
    pool = BlockPool(4)
    table = pool.take_free(2)
    pool.check([table], "paged")
    pool.free.append(table[0])
    with pytest.raises(IntegrityError, match="free or evictable block is referenced"):
        pool.check([table], "paged")


def test_shared_accounting_catches_a_miscounted_reference():
    pool = BlockPool(4, shared=True)
    table = pool.take_free(2)
    for b in table:
        pool.ref[b] = 1
    pool.check([table], "prefix")
    with pytest.raises(IntegrityError, match="references"):
        pool.check([table, table[:1]], "prefix")


def _held_two_of_six(shared: bool) -> tuple[BlockPool, list[int]]:
    pool = BlockPool(6, shared=shared)
    table = pool.take_free(2)
    for b in table if shared else ():
        pool.ref[b] = 1
    pool.check([table], "pool")
    return pool, table


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("corrupt, message", [
    (lambda pool, table: (pool.free.append(pool.free[0]), [table])[1], "on the free list twice"),
    (lambda pool, table: (pool.free.pop(), [table])[1], r"free \+ 0 cached unreferenced \+ 2 referenced != 6"),
    (lambda pool, table: (setattr(pool, "extra_refs", 1), [table])[1], "1 shared references counted, 0 held"),
    (lambda pool, table: [table, table[:1]], "has 1 references, 2 holders"),
    (lambda pool, table: (pool.idle.__setitem__(pool.free[0], None), [table])[1], "free or evictable"),
], ids=["freed-twice", "lost", "shared-count", "held-twice", "free-and-idle"])
def test_each_broken_account_is_caught_with_its_reason(shared, corrupt, message):
    """Every way the free list, the idle blocks, the tables and the counts can disagree."""
    pool, table = _held_two_of_six(shared)
    with pytest.raises(IntegrityError, match=message):
        pool.check(corrupt(pool, table), "pool")

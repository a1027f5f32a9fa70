"""The prefix index: key -> block on the GPU, a host tier in LRU order, and its version."""

import math

from batchlab.memory.prefix_index import PrefixIndex


def test_a_hit_is_the_run_of_leading_keys_found_on_the_gpu_or_in_host_memory():
    index = PrefixIndex(8, host_limit=math.inf)
    index.add([11, 12, 13], [5, 6, 7], 0, 2)
    assert index.hits([11, 12, 13], 3) == 2 and index.hits([99, 12], 2) == 0
    assert index.hits([11, 12, 13], 1) == 1          # never past the limit
    index.evicted([6])                                # key 12 moves down to the host tier
    assert index.cached == {11: 5} and index.key_of[6] is None and list(index.host) == [12]
    assert index.hits([11, 12, 13], 3) == 2           # found in host memory still
    index.add([12], [3], 0, 1)                        # copied back into a new GPU block
    assert index.cached[12] == 3 and index.key_of[3] == 12


def test_an_equal_block_cached_already_stays_the_one_found():
    index = PrefixIndex(4)
    index.add([7], [1], 0, 1)
    index.add([7], [2], 0, 1)
    assert index.cached == {7: 1} and index.key_of[2] is None


def test_the_host_tier_keeps_its_most_recently_used_keys_within_its_limit():
    index = PrefixIndex(4, host_limit=2)
    index.add([1, 2, 3], [0, 1, 2], 0, 3)
    index.evicted([0, 1])
    index.touch_host(1)                               # used: the most recent now
    index.evicted([2])                                # 3 arrives, the least recent (2) leaves
    assert list(index.host) == [1, 3]


def test_every_change_a_lookup_could_see_moves_the_version():
    index = PrefixIndex(4)
    seen = [index.version]
    index.add([1], [0], 0, 1)
    seen.append(index.version)
    index.forget(0)
    seen.append(index.version)
    index.add([1], [0], 0, 1)
    index.evicted([0])
    seen.append(index.version)
    assert seen == sorted(set(seen)) and not index.cached

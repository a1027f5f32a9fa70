"""Small sweep grids shared by the sweep tests."""

SMALL = """
[workload]
kind = "chat"
requests = 50
seed = 3

[slo]
ttft = 1.0
tpot_ms = 50.0

[grid]
gpu = ["A100-80GB"]
system = ["static", "orca-oracle"]
max_bs = [16, 128]
rate = [4, 16]

[goodput]
enabled = GOODPUT
"""


def small(goodput: bool = False) -> str:
    return SMALL.replace("GOODPUT", "true" if goodput else "false")

"""--max-output: a cap on generated output lengths (seed L02 exercise 8's drain)."""

from __future__ import annotations

import numpy as np
import pytest

from batchlab.errors import InputError
from batchlab.workload import make_workload


def test_the_cap_cuts_only_the_tail_and_says_so():
    w = make_workload("chat", 3000, 128.0, 0)
    capped = w.with_max_output(2048)
    longer = w.output > 2048
    assert longer.sum() == 12 and capped.output.max() == 2048
    assert (capped.output[~longer] == w.output[~longer]).all() and (capped.prompt == w.prompt).all()
    assert capped.notes[-1] == "outputs capped at 2048 tokens (--max-output): 12 of 3000 cut"
    # the 600-request sample's longest output is below the cap: nothing changes
    small = make_workload("chat", 600, 128.0, 0)
    assert np.array_equal(small.with_max_output(2048).output, small.output)


def test_bad_caps_and_content_workloads_are_refused():
    w = make_workload("chat", 10, 1.0, 0)
    for bad in (0, -3, 2.5, True):
        with pytest.raises(InputError, match="max_output"):
            w.with_max_output(bad)
    with pytest.raises(InputError, match="max_output"):
        make_workload("sessions", 20, 1.0, 0).with_max_output(64)


def test_the_cli_flag(capsys):
    import json

    from batchlab.cli import main

    assert main(["simulate", "--num-prompts", "40", "--max-output", "16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["total_output_tokens"] <= 40 * 16
    assert any("capped at 16" in note for note in data["workload"]["notes"])
    assert main(["simulate", "--num-prompts", "40", "--max-output", "0"]) == 2
    assert "--max-output" in capsys.readouterr().err

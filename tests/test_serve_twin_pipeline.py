"""`batchlab serve --simulate --pp`: the twin's wall-clock loop runs one step at a time, so a
pipelined layout (a batch per stage in flight) is refused with exit 2 naming the flag, before
anything listens; one stage is the twin it always was."""

from __future__ import annotations

import pytest

from batchlab import cli


@pytest.mark.parametrize("spelling", ["--pp", "--pipeline-parallel-size"])
@pytest.mark.parametrize("simulate", [["--simulate"], []])
def test_a_pipelined_twin_exits_2_naming_the_flag_and_why(spelling, simulate, capsys, monkeypatch):
    import batchlab.serve.twin_server as twin_server

    def listening(*args, **kwargs):
        raise AssertionError("a refused twin must not serve")

    monkeypatch.setattr(twin_server, "serve_twins", listening)
    assert cli.main(["serve", *simulate, spelling, "2", "--tp", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "field '--pipeline-parallel-size'" in err[0] and "one step at a time" in err[0]
    assert "simulate --pp" in err[0]


def test_one_stage_is_taken_and_means_no_pipeline():
    args = cli.build_parser(("serve",)).parse_args(["serve", "--simulate", "--pp", "1"])
    assert args.pp == 1
    assert cli.build_parser(("serve",)).parse_args(["serve", "--simulate"]).pp == 1

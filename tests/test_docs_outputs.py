"""Every output the docs show is what the command prints today.

The docs show a command's output as a `console` block (`$ batchlab ...`, then what it prints);
benchmarks/docs_outputs.py finds them, runs them and compares. Here every unmarked block is run
(about a second each); the doc marks the others `slow` (the script runs them), `timing` or
`server`. `python benchmarks/docs_outputs.py --update` rewrites the stale ones for review.
"""

import importlib.util
import os
import re
import sys
from unittest import mock

import pytest

from helpers import ROOT, run_cli

_spec = importlib.util.spec_from_file_location("docs_outputs", ROOT / "benchmarks" / "docs_outputs.py")
docs_outputs = importlib.util.module_from_spec(_spec)
sys.modules["docs_outputs"] = docs_outputs   # dataclasses look their module up there
_spec.loader.exec_module(docs_outputs)

ALL = [b for doc in docs_outputs.docs([]) for b in docs_outputs.blocks(doc)]
QUICK = [b for b in ALL if not b.marks]


def test_the_docs_show_outputs():
    """The checker finds the docs' console blocks (an empty list would pass every check)."""
    assert len(ALL) >= 20 and len(QUICK) >= 8
    assert {b.doc.name for b in QUICK} >= {"knobs.md", "parallel.md", "models.md", "fleets.md", "tick.md"}


RUN_AS_THE_SCRIPT_DOES = docs_outputs.run


def run_here(command) -> list[str]:
    """docs_outputs.run, with a `batchlab` command run through the CLI's main() in this process
    (helpers.run_cli) in the environment the script gives it: a second's start-up saved per
    command. Scripts under benchmarks/ still run as the script runs them."""
    settings, argv = command.argv()
    if argv[1:3] != ["-m", "batchlab.cli"]:
        return RUN_AS_THE_SCRIPT_DOES(command)
    env = {k: v for k, v in os.environ.items() if k not in docs_outputs.PIPED_UNSET} | settings
    with mock.patch.dict(os.environ, env, clear=True):
        done = run_cli(*argv[3:])
    return docs_outputs.tidy((done.stdout + done.stderr).split("\n"))


@pytest.mark.parametrize("block", QUICK, ids=[b.name for b in QUICK])
def test_output_is_what_the_command_prints(block, monkeypatch):
    monkeypatch.setattr(docs_outputs, "run", run_here)
    found = docs_outputs.stale(block)
    assert not found, ("the doc's output is stale (python benchmarks/docs_outputs.py --update rewrites it):\n"
                       + "\n".join(docs_outputs.difference(block, c, now) for c, now in found))


def test_every_shown_command_is_in_a_console_block():
    """One convention: a `$ batchlab` line outside a console block would never be checked."""
    fence = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
    for doc in docs_outputs.docs([]):
        for kind, body in fence.findall(doc.read_text(encoding="utf-8")):
            if kind != "console":
                assert not re.search(r"^\$ ", body, re.M), f"{doc.name}: a '$ ' command outside a console block"


def test_a_stale_output_is_found_and_rewritten(tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text("Text.\n\n```console\n$ batchlab \\\n    --version\nbatchlab 0.0\n"
                   "$ batchlab tick --policy nope\n```\n\nMore.\n", encoding="utf-8")
    [block] = docs_outputs.blocks(doc)
    assert [c.text for c in block.commands] == ["batchlab --version", "batchlab tick --policy nope"]
    found = docs_outputs.stale(block)
    assert [c.text for c, _ in found] == [c.text for c in block.commands]
    assert "-batchlab 0.0" in docs_outputs.difference(block, *found[0])
    assert "error: argument --policy" in found[1][1][-1]     # standard error is part of the output
    docs_outputs.rewrite(block, docs_outputs.by_index(block, found))
    text = doc.read_text(encoding="utf-8")
    assert "batchlab 0.0" not in text and text.startswith("Text.\n\n```console\n$ batchlab \\\n    --version\nbatchlab ")
    assert text.endswith("```\n\nMore.\n")
    [again] = docs_outputs.blocks(doc)
    assert docs_outputs.stale(again) == []


def test_marks_and_malformed_blocks(tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text("<!-- docs-output: slow timing -->\n```console\n$ batchlab --version\n```\n", encoding="utf-8")
    assert docs_outputs.blocks(doc)[0].marks == {"slow", "timing"}
    doc.write_text("<!-- docs-output: quick -->\n```console\n$ batchlab --version\n```\n", encoding="utf-8")
    with pytest.raises(ValueError, match="unknown docs-output mark"):
        docs_outputs.blocks(doc)
    doc.write_text("```console\nbatchlab --version\n```\n", encoding="utf-8")
    with pytest.raises(ValueError, match="starts with"):
        docs_outputs.blocks(doc)
    doc.write_text("```console\n$ python -c 1\n```\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not a batchlab command nor a benchmarks/ script"):
        docs_outputs.blocks(doc)[0].commands[0].argv()


def test_an_indented_block_with_repeated_commands_is_rewritten_in_place(tmp_path):
    """A block inside a list item keeps its indent; two equal commands are each rewritten."""
    doc = tmp_path / "page.md"
    doc.write_text("- item\n\n  ```console\n  $ batchlab --version\n  old\n  $ batchlab --version\n  older\n"
                   "  ```\n- next\n", encoding="utf-8")
    [block] = docs_outputs.blocks(doc)
    assert block.indent == "  " and [c.shown for c in block.commands] == [["old"], ["older"]]
    docs_outputs.rewrite(block, docs_outputs.by_index(block, docs_outputs.stale(block)))
    lines = doc.read_text(encoding="utf-8").split("\n")
    assert lines[3] == lines[5] == "  $ batchlab --version"
    assert lines[4] == lines[6] and lines[4].startswith("  batchlab ") and lines[7:] == ["  ```", "- next", ""]

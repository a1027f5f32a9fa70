"""`batchlab validate` reports a child's failure (the server it starts) in one line."""

from __future__ import annotations

import pytest

from batchlab.calibrate import live
from batchlab.errors import InputError

TRACEBACK = ("exited: Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
             "    boom()\nValueError: the port is taken\n")


def test_a_child_servers_traceback_is_one_line(monkeypatch):
    def failing(*args, **kwargs):
        raise live.ServeFailed(TRACEBACK)

    monkeypatch.setattr(live, "ServeProcess", failing)
    with pytest.raises(InputError) as caught, live.mini_server("mini", "paged", 65536, 0):
        pass
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("validate: the mini server exited: Traceback") and message.endswith(
        "ValueError: the port is taken")


@pytest.mark.parametrize("text, line", [("", ""), ("one line\n", "one line"), ("a\n\n  b  \n", "a ... b")])
def test_last_line(text, line):
    assert live.last_line(text) == line

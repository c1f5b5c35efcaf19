"""A throwaway PgBouncer in front of a test's PostgreSQL (run as the `postgres` user when we are root:
PgBouncer refuses to run as root)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.pg import PASSWORD, PgServer, free_port
from tests.service_helpers import terminate

CONFIG = """\
[databases]
* = host=127.0.0.1 port={pg_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = scram-sha-256
auth_file = {folder}/userlist.txt
pool_mode = {mode}
default_pool_size = {pool}
max_db_connections = {pool}
max_client_conn = 2000
stats_users = hpo
log_connections = 0
log_disconnections = 0
logfile = {folder}/pgbouncer.log
pidfile = {folder}/pgbouncer.pid
"""


@dataclass
class Bouncer:
    process: subprocess.Popen[bytes]
    folder: Path
    port: int

    def url(self, database: str) -> str:
        return f"postgresql://hpo:{PASSWORD}@127.0.0.1:{self.port}/{database}"

    @property
    def log(self) -> str:
        path = self.folder / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""


def start_bouncer(server: PgServer, *, pool: int, mode: str = "transaction") -> Bouncer:
    """PgBouncer on a free port: every database of ``server``, at most ``pool`` server connections
    per database, ``mode`` pooling; the `hpo` role may read its SHOW commands."""
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    if not Path(binary).exists():
        raise FileNotFoundError("pgbouncer not found (Debian: apt-get install pgbouncer)")
    folder = Path(tempfile.mkdtemp(prefix="hpo-pgbouncer-"))
    port = free_port()
    (folder / "userlist.txt").write_text(f'"hpo" "{PASSWORD}"\n')
    ini = folder / "pgbouncer.ini"
    ini.write_text(CONFIG.format(pg_port=server.port, port=port, folder=folder, mode=mode, pool=pool))
    cmd = [binary, str(ini)]
    if os.geteuid() == 0:
        for path in (folder, folder / "userlist.txt", ini):
            shutil.chown(path, "postgres", "postgres")
        cmd = ["runuser", "-u", "postgres", "--", *cmd]
    # its log goes to the file too: a pipe nobody reads would fill and stop PgBouncer mid-test
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bouncer = Bouncer(process, folder, port)
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"pgbouncer exited: {bouncer.log[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return bouncer
        if time.monotonic() > deadline:
            raise TimeoutError(f"pgbouncer did not listen on {port}: {bouncer.log[-2000:]}")
        time.sleep(0.1)


def stop_bouncer(bouncer: Bouncer) -> None:
    terminate(bouncer.process, timeout=10)
    shutil.rmtree(bouncer.folder, ignore_errors=True)

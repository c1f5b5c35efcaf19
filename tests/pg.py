"""A throwaway PostgreSQL server for tests (run as the `postgres` user when we are root)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

PASSWORD = "Pg-s3cret-Zq81xw"


def find_bin() -> Path | None:
    for root in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (root / "initdb").exists():
            return root
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    bindir: Path
    datadir: Path
    port: int
    options: str = ""  # more server settings, e.g. "-c shared_preload_libraries=pg_stat_statements"

    @property
    def url(self) -> str:
        return f"postgresql://hpo:{PASSWORD}@127.0.0.1:{self.port}/hpo"

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)

    def pg_ctl(self, action: str, *extra: str) -> None:
        """``pg_ctl ACTION`` (start, stop, restart) with ``extra`` options such as ``-m immediate``."""
        opts = f"-p {self.port} -k {self.datadir} -c listen_addresses=127.0.0.1 -c max_connections=200 {self.options}"
        log = str(self.datadir / "log.txt")
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-o", opts, "-w", "-l", log, action, *extra)

    def psql(self, sql: str, db: str = "postgres") -> None:
        self._run(
            str(self.bindir / "psql"),
            "-h",
            str(self.datadir),
            "-p",
            str(self.port),
            "-U",
            "postgres",
            "-d",
            db,
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        )

    def create_database(self, name: str) -> str:
        self.psql(f"CREATE DATABASE {name} OWNER hpo")
        return f"postgresql://hpo:{PASSWORD}@127.0.0.1:{self.port}/{name}"


def start_server(options: str = "") -> PgServer:
    bindir = find_bin()
    if bindir is None:
        raise FileNotFoundError("PostgreSQL server binaries (initdb) not found")
    datadir = Path(tempfile.mkdtemp(prefix="hpo-pg-"))
    if os.geteuid() == 0:
        shutil.chown(datadir, "postgres", "postgres")
    server = PgServer(bindir, datadir, free_port(), options)
    server._run(
        str(bindir / "initdb"),
        "-D",
        str(datadir),
        "-U",
        "postgres",
        "--auth-local=trust",
        "--auth-host=scram-sha-256",
        "-E",
        "UTF8",
    )
    start_on_a_free_port(server)
    server.psql(f"CREATE ROLE hpo LOGIN PASSWORD '{PASSWORD}'")
    server.psql("CREATE DATABASE hpo OWNER hpo")
    return server


def start_on_a_free_port(server: PgServer, tries: int = 3) -> None:
    """``pg_ctl start``, on a new free port when it fails: the port was free when drawn, and another
    process can take it before the server binds it (once in CI, a whole xdist process's PostgreSQL
    tests errored). The last failure raises with pg_ctl's output and the server's log."""
    for attempt in range(1, tries + 1):
        try:
            server.pg_ctl("start")
            return
        except subprocess.CalledProcessError as err:
            log = server.datadir / "log.txt"
            said = f"{err.stdout}{err.stderr}{log.read_text(errors='replace')[-3000:] if log.exists() else ''}"
            if attempt == tries:
                raise RuntimeError(f"PostgreSQL did not start on port {server.port} ({tries} tries): {said}") from err
            server.port = free_port()


def stop_server(server: PgServer) -> None:
    try:
        server.pg_ctl("stop")
    finally:
        shutil.rmtree(server.datadir, ignore_errors=True)

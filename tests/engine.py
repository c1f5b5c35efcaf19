"""A Docker engine of the test's own and the images `make test-containers` needs, built from Debian
packages (no image registry is reachable here): a Debian base standing in for the Dockerfile's
``BASE_IMAGE``, a PostgreSQL stand-in that honours the official image's contract, and the project's
image from the shipped Dockerfile. The engine listens on its own socket under its own data root and
is stopped by its pid; nothing else is contacted but the package index the host's pip is set up for."""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from tests.pg import free_port
from tests.service_helpers import terminate

ROOT = Path(__file__).parent.parent
BASE = "hpo-test/debian:bookworm"
POSTGRES = "hpo-test/postgres:15"
PACKAGES = "python3,python3-venv,ca-certificates,postgresql-15"
CACHE = Path(os.environ.get("HPO_CONTAINER_CACHE", Path.home() / ".cache" / "hpo-test-containers"))


@dataclass
class Engine:
    root: Path
    proc: subprocess.Popen[bytes] | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": f"unix://{self.root}/docker.sock"}

    def docker(self, *args: str, timeout: float = 600, check: bool = True, merged: bool = False, **kw: object) -> str:
        """``docker ARGS``' stdout, with its stderr when ``merged`` (``docker logs`` replays a container's
        stderr there)."""
        done = subprocess.run(
            ["docker", *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merged else subprocess.PIPE,
            text=True,
            timeout=timeout,
            **kw,  # type: ignore[call-overload]
        )
        if check and done.returncode != 0:
            raise AssertionError(f"docker {' '.join(args[:3])} failed:\n{done.stdout[-3000:]}\n{done.stderr or ''}")
        return str(done.stdout)

    def has_image(self, name: str) -> bool:
        done = subprocess.run(["docker", "image", "inspect", name], env=self.env, capture_output=True, check=False)
        return done.returncode == 0

    def timed(self, name: str, *args: str, timeout: float = 1800) -> str:
        start = time.monotonic()
        out = self.docker(*args, timeout=timeout)
        self.timings[name] = time.monotonic() - start
        return out


@contextmanager
def engine() -> Iterator[Engine]:
    """dockerd on a socket and data root of its own (short paths: containerd's sockets live there)."""
    for tool in ("dockerd", "docker", "docker-compose", "debootstrap"):
        if shutil.which(tool) is None:
            raise FileNotFoundError(f"{tool} not found (make test-containers installs it)")
    keep = os.environ.get("HPO_TEST_ENGINE_ROOT")  # a data root kept between runs (its images stay built)
    if not keep:
        check_room(Path("/tmp"))
    root = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="hpo-engine-", dir="/tmp"))
    root.mkdir(parents=True, exist_ok=True)
    log = (root / "dockerd.log").open("wb")
    cmd = ["dockerd", "--data-root", f"{root}/data", "--exec-root", f"{root}/exec", "--pidfile", f"{root}/pid"]
    cmd += ["-H", f"unix://{root}/docker.sock", "--bridge", "none"]  # no docker0: another engine may own it
    eng = Engine(root, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
    try:
        deadline = time.monotonic() + 60
        while eng.docker("info", check=False, timeout=30) == "":
            assert eng.proc is not None and eng.proc.poll() is None, (root / "dockerd.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "dockerd did not answer in 60 s"
            time.sleep(0.5)
        yield eng
    finally:
        assert eng.proc is not None
        terminate(eng.proc, timeout=60)
        log.close()
        unmount_under(root)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


# Measured by sampling `df` through `make test-containers` (2026-12-06): the build's peak is 8.6 GB
# (8.0 GiB: the 6.8 GB image, and its largest layer held twice while the classic builder commits it),
# the stack's run adds nothing that shows; on a fresh machine the Debian base's tarball (0.6 GB,
# cached in CACHE) comes first.
ROOM_GIB = 9


def check_room(folder: Path) -> None:
    """Fail in one line before a build that would run out of disk (a full disk reads as a pip error)."""
    free = shutil.disk_usage(folder).free / 2**30
    if free < ROOM_GIB:
        raise OSError(
            f"{free:.1f} GiB free under {folder}; building the image needs about {ROOM_GIB} GiB: "
            "free some space or set HPO_TEST_ENGINE_ROOT to a folder on a roomier disk"
        )


def unmount_under(root: Path) -> None:
    """What a stopped dockerd leaves mounted under its roots (its network namespace), deepest first."""
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for point in sorted((m for m in mounts if m.startswith(f"{root}/")), reverse=True):
        subprocess.run(["umount", point], capture_output=True, check=False)


def debian_rootfs_tar(timings: dict[str, float]) -> Path:
    """A minbase bookworm with Python and PostgreSQL, as a tarball (cached outside the checkout)."""
    tar = CACHE / "bookworm-minbase.tar"
    if tar.exists():
        return tar
    start = time.monotonic()
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hpo-rootfs-", dir="/tmp") as rootfs:
        subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={PACKAGES}", "bookworm", rootfs, "http://deb.debian.org/debian"],
            check=True, capture_output=True, timeout=900,
        )  # fmt: skip
        partial_tar = tar.with_suffix(".part")
        subprocess.run(["tar", "-C", rootfs, "-cf", str(partial_tar), "."], check=True, timeout=300)
        partial_tar.rename(tar)
    timings["Debian base (debootstrap)"] = time.monotonic() - start
    return tar


@contextmanager
def package_indexes() -> Iterator[list[str]]:
    """The host pip's local index folders (``file://`` URLs in its config), each served on 127.0.0.1
    for the length of the build, so the image's pip finds the pinned torch on this disk."""
    done = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False)
    urls: list[str] = []
    for line in done.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.endswith("index-url"):
            urls += [u for u in value.strip("'\" ").split() if u not in urls]
    servers, served = [], []
    for url in urls:
        if not url.startswith("file://"):
            served.append(url)
            continue
        folder = Path(url.removeprefix("file://")).parent
        handler = partial(QuietHandler, directory=str(folder))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        served.append(f"http://127.0.0.1:{server.server_address[1]}/{Path(url).name}")
    try:
        yield served
    finally:
        for server in servers:
            server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def base_image(eng: Engine, indexes: list[str]) -> str:
    """The Debian base, plus what a corporate base image would carry here: the host's CA bundle (the
    package index is reached through a TLS proxy) and a pip.conf naming the served local indexes."""
    raw = "hpo-test/debian-raw:bookworm"
    if eng.has_image(BASE):  # a kept engine root (HPO_TEST_ENGINE_ROOT)
        return BASE
    with open(debian_rootfs_tar(eng.timings), "rb") as tar:
        eng.docker("import", "-", raw, stdin=tar)
    with tempfile.TemporaryDirectory() as ctx:
        shutil.copy("/etc/ssl/certs/ca-certificates.crt", f"{ctx}/ca-certificates.crt")
        extra = f"extra-index-url = {' '.join(indexes)}\n" if indexes else ""
        Path(ctx, "pip.conf").write_text(f"[global]\ncert = /etc/ssl/certs/ca-certificates.crt\ntimeout = 180\n{extra}")
        Path(ctx, "Dockerfile").write_text(
            f"FROM {raw}\nCOPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\nCOPY pip.conf /etc/pip.conf\n"
        )
        eng.docker("build", "-q", "-t", BASE, ctx)
    return BASE


def postgres_image(eng: Engine) -> str:
    context = ROOT / "tests" / "containers" / "postgres"
    eng.docker("build", "-q", "--build-arg", f"BASE_IMAGE={BASE}", "-t", POSTGRES, str(context))
    return POSTGRES


def build_context(dest: Path) -> Path:
    """The checkout's files as git sees them (tracked and new, not ignored): what a clone would build."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def project_image(eng: Engine, context: Path, tag: str, name: str) -> None:
    eng.timed(
        name, "build", "--network", "host", "--build-arg", f"BASE_IMAGE={BASE}", "--build-arg", "FETCH_WEIGHTS=0",
        "-t", tag, str(context),
    )  # fmt: skip

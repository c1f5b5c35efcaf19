"""A one-node Slurm cluster of the test's own (Debian's slurmctld, slurmd and munge; root only):
its own munge key and socket, its own ports, state and spool folders and ``slurm.conf`` under a
temporary folder. Clients find it through ``SLURM_CONF``; it is stopped by its pid files."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.pg import free_port

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel")


def missing_tools() -> list[str]:
    return [tool for tool in DAEMONS if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists()]


@dataclass
class SlurmCluster:
    root: Path

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *cmd: str, check: bool = True) -> str:
        done = subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=60)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: {done.stderr.strip()}")
        return done.stdout

    def tasks(self, job: str) -> dict[str, str]:
        """Array task id (``12_1``) → state (RUNNING, PENDING, ...), for the tasks still queued."""
        out = self.run("squeue", "-h", "-r", "-j", job, "-o", "%i %T", check=False)
        return dict(line.split()[:2] for line in out.splitlines() if line.strip())

    def log(self, name: str) -> str:
        path = self.root / "log" / name
        return path.read_text() if path.exists() else ""


def _sbin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def start_cluster() -> SlurmCluster:
    if os.geteuid() != 0:
        raise PermissionError("a Slurm cluster of the test's own needs root (SlurmUser=root)")
    root = Path(tempfile.mkdtemp(prefix="hpo-slurm-"))
    root.chmod(0o755)
    for sub in ("key", "sock", "state", "spool", "log"):
        (root / sub).mkdir()
    for sub, mode in (("key", 0o700), ("sock", 0o755)):
        shutil.chown(root / sub, "munge", "munge")
        (root / sub).chmod(mode)
    as_munge = ["runuser", "-u", "munge", "--"]
    subprocess.run([*as_munge, _sbin("mungekey"), "-c", "-k", f"{root}/key/munge.key"], check=True, timeout=30)
    munged = [_sbin("munged"), f"--socket={root}/sock/munge.socket", f"--key-file={root}/key/munge.key"]
    munged += [f"--pid-file={root}/key/munged.pid", f"--log-file={root}/key/munged.log", f"--seed-file={root}/key/seed"]
    subprocess.run([*as_munge, *munged], check=True, timeout=30)
    memory_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 * 8 // 10
    cluster = SlurmCluster(root)
    cluster.conf.write_text(
        "\n".join(
            [
                "ClusterName=hpotest",
                "SlurmctldHost=localhost",
                "SlurmUser=root",
                "SlurmdUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={root}/sock/munge.socket",
                f"SlurmctldPort={free_port()}",
                f"SlurmdPort={free_port()}",
                f"StateSaveLocation={root}/state",
                f"SlurmdSpoolDir={root}/spool",
                f"SlurmctldPidFile={root}/slurmctld.pid",
                f"SlurmdPidFile={root}/slurmd.pid",
                f"SlurmctldLogFile={root}/log/slurmctld.log",
                f"SlurmdLogFile={root}/log/slurmd.log",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "ReturnToService=2",
                "KillWait=30",  # a stopped worker's SIGTERM path has this long before SIGKILL
                "MpiDefault=none",
                f"NodeName=localhost CPUs={os.cpu_count()} RealMemory={memory_mb} State=UNKNOWN",
                "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
                "",
            ]
        )
    )
    subprocess.run([_sbin("slurmctld")], env=cluster.env, check=True, timeout=60)
    subprocess.run([_sbin("slurmd"), "-N", "localhost"], env=cluster.env, check=True, timeout=60)
    deadline = time.monotonic() + 60
    while "idle" not in cluster.run("sinfo", "-h", "-o", "%T", check=False):
        if time.monotonic() > deadline:
            stop_cluster(cluster)
            raise RuntimeError(f"the test's Slurm node never became idle: {cluster.log('slurmctld.log')[-2000:]}")
        time.sleep(0.5)
    return cluster


def stop_cluster(cluster: SlurmCluster) -> None:
    cluster.run("scancel", "--user", "root", check=False)  # SIGTERM: the workers stop their trials
    deadline = time.monotonic() + 45
    while cluster.run("squeue", "-h", check=False).strip() and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid_file in ("slurmd.pid", "slurmctld.pid", "key/munged.pid"):
        path = cluster.root / pid_file
        if path.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(path.read_text().strip()), signal.SIGTERM)
    time.sleep(1.0)
    shutil.rmtree(cluster.root, ignore_errors=True)

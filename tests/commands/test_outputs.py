"""One rule for every file or folder a user names with ``-o``, through the real CLI: a folder given
as a file, a file given as a folder, a place nobody can write (/proc, a path under a file, a folder
without write permission) each stop in one line naming the path and the fix, before any work and
without a traceback; missing parent folders are created; what is written is written whole, with
nothing left beside it; and each command keeps its own rule about overwriting."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from hpo.errors import HpoError
from hpo.outputs import output_errors, writing
from hpo.service.export import fixed_spec
from hpo.service.storage import open_storage
from hpo.service.study import create_or_resume, require_spec
from hpo.spec.loading import load_spec
from hpo.spec.params import Params
from hpo.spec.sampling import SamplingConfig
from hpo.spec.spec import spec_from_dict
from hpo.training.model import info_for, network_for
from tests.cli import run_cli
from tests.planning.test_init import two_classes
from tests.service_helpers import hpo, write_spec
from tests.study_builders import add, random_params

NAME = "mine"
SEARCH = {  # what tests.study_builders draws trials from
    "lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
    "batch_size": {"type": "categorical", "choices": [16, 32]},
    "schedule": {"type": "categorical", "choices": ["linear", "cosine"]},
    "guidance_scale": {"type": "float", "low": 1.0, "high": 3.0},
}
FILES = {"init": "spec.yaml", "narrow": "next.yaml", "report": "r.html", "sample": "grid.png"}
FOLDERS = {"export": "out", "train": "run", "doctor": "doctor"}


@dataclass(frozen=True)
class World:
    """A study to narrow, report, export and sample (its best trial has EMA weights: a fresh tiny
    network, no training), and a folder of images to init from."""

    url: str
    artifacts: Path
    images: Path

    def args(self, command: str, out: Path) -> list[str]:
        """The cheapest real invocation of ``command`` writing ``out``; train and doctor get no spec:
        the output is checked before one is looked for."""
        opts = ["--storage", self.url, "--artifacts", str(self.artifacts)]
        return {
            "init": ["init", str(self.images), "-o", str(out), "--gpu-memory", "24"],
            "narrow": ["narrow", NAME, "-o", str(out), "--storage", self.url],
            "report": ["report", NAME, "-o", str(out), *opts],
            "sample": ["sample", NAME, "-n", "1", "-o", str(out), "--threads", "1", *opts],
            "export": ["export", NAME, "-o", str(out), *opts],
            "train": ["train", "-o", str(out)],
            "doctor": ["doctor", "nosuch.yaml", "-o", str(out)],
        }[command]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    folder = tmp_path_factory.mktemp("outputs")
    url = f"sqlite:///{folder / 'hpo.db'}"
    study, _ = create_or_resume(load_spec(write_spec(folder, study={"name": NAME}, search=SEARCH)), open_storage(url))
    rng = np.random.default_rng(0)
    for _ in range(12):
        p = random_params(rng)
        add(study, p, value=5 + (np.log10(p["lr"]) + 3) ** 2, curve=[1.0] * 4)
    sampling = SamplingConfig(guidance_scale=1.5, steps=2)
    params: Params = {"lr": 1e-3, "batch_size": 16, "schedule": "linear", "guidance_scale": 1.5}
    cfg = spec_from_dict(fixed_spec(require_spec(study), params, sampling)).train
    artifacts = folder / "artifacts"
    artifacts.mkdir()
    net = network_for(cfg, info_for(cfg, channels=1, image_size=8, num_classes=10))
    torch.save(net.state_dict(), artifacts / "ema.pt")
    add(study, params, value=1.0, curve=[1.0] * 4, sampling=sampling.as_dict(), ema_checkpoint="ema.pt")
    return World(url, artifacts, two_classes(folder / "images", per_class=40))


def everything_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def refused(world: World, command: str, out: Path, *fragments: str) -> str:
    """Run ``command`` writing ``out``: it must stop with exit 2 and one line naming ``out`` (and each
    fragment), no traceback; returns the line."""
    code, stdout, stderr = run_cli(world.args(command, out))
    assert code == 2, (code, stdout, stderr)
    assert stderr.startswith("error: ") and stderr.count("\n") == 1, stderr
    assert str(out) in stderr and all(f in stderr for f in fragments), stderr
    assert "Traceback" not in stdout + stderr
    return stderr


@pytest.mark.parametrize("command", sorted(FILES))
def test_a_folder_given_as_the_file_is_refused_in_one_line(world: World, command: str, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    line = refused(world, command, tmp_path / "data", "is a folder; name a file inside it, e.g. ")
    assert f"{tmp_path / 'data'}/" in line and "--force" not in line
    assert everything_in(tmp_path) == ["data"]


@pytest.mark.parametrize("command", sorted(FOLDERS))
def test_a_file_given_as_the_folder_is_refused_in_one_line(world: World, command: str, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    refused(world, command, tmp_path / "notes.txt", "is a file; name ", "folder")
    assert everything_in(tmp_path) == ["notes.txt"] and (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("command", sorted({**FILES, **FOLDERS}))
def test_a_place_nobody_can_write_is_refused_in_one_line(world: World, command: str) -> None:
    out = Path("/proc") / "hpo-test" / {**FILES, **FOLDERS}[command]
    refused(world, command, out, "cannot write", "choose a writable place")


@pytest.mark.parametrize("command", sorted({**FILES, **FOLDERS}))
def test_a_path_under_a_file_is_refused_in_one_line(world: World, command: str, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    out = tmp_path / "notes.txt" / {**FILES, **FOLDERS}[command]
    refused(world, command, out, f"{tmp_path / 'notes.txt'} is a file, not a folder; choose another place")
    assert everything_in(tmp_path) == ["notes.txt"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through permissions")
@pytest.mark.parametrize("command", ["narrow", "export"])
def test_a_folder_without_write_permission_is_refused_in_one_line(world: World, command: str, tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        refused(world, command, locked / "new" / {**FILES, **FOLDERS}[command], "Permission denied", "writable place")
    finally:
        locked.chmod(0o700)
    assert everything_in(tmp_path) == ["locked"]


WRITTEN = {
    "init": ["spec.yaml"],
    "narrow": ["next.yaml"],
    "report": ["r.html"],
    "sample": ["grid.png"],
    "export": ["out", "out/ema.safetensors", "out/sampling.json", "out/spec.yaml"],
}


@pytest.mark.parametrize("command", sorted(WRITTEN))
def test_missing_parent_folders_are_created_and_nothing_is_left_beside_the_output(
    world: World, command: str, tmp_path: Path
) -> None:
    out = tmp_path / "new" / "deeper" / WRITTEN[command][0]
    code, _, stderr = run_cli(world.args(command, out))
    assert code == 0, stderr
    assert everything_in(tmp_path) == ["new", "new/deeper", *(f"new/deeper/{p}" for p in WRITTEN[command])]
    if command == "sample":
        assert Image.open(out).size == (8, 8)  # one 8 px sample (a grid of one has no padding)


def test_init_overwrites_an_existing_spec_only_with_force_and_a_folder_never(world: World, tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("mine\n")
    refused(world, "init", spec, "exists; pass --force to overwrite it, or choose another -o")
    assert spec.read_text() == "mine\n"
    code, _, err = run_cli([*world.args("init", spec), "--force"])
    assert code == 0, err
    assert spec.read_text() != "mine\n" and everything_in(tmp_path) == ["spec.yaml"]
    (tmp_path / "objects").mkdir()
    code, _, err = run_cli([*world.args("init", tmp_path / "objects"), "--force"])
    assert code == 2 and "is a folder; name a file inside it" in err and "--force" not in err


@pytest.mark.parametrize("command", ["narrow", "report", "sample"])
def test_commands_without_force_overwrite_an_existing_file_whole(world: World, command: str, tmp_path: Path) -> None:
    out = tmp_path / FILES[command]
    out.write_text("old")
    code, _, err = run_cli(world.args(command, out))
    assert code == 0, err
    assert out.read_bytes() != b"old" and everything_in(tmp_path) == [out.name]


def test_export_takes_an_existing_empty_folder_and_refuses_a_full_one(world: World, tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    code, _, err = run_cli(world.args("export", tmp_path / "out"))
    assert code == 0, err
    refused(world, "export", tmp_path / "out", "is not empty; name a new or empty folder")


def test_sample_refuses_a_grid_name_pil_cannot_save_before_loading_anything(world: World, tmp_path: Path) -> None:
    refused(world, "sample", tmp_path / "grid", f"e.g. {tmp_path / 'grid.png'}")
    assert everything_in(tmp_path) == []


def test_the_installed_command_prints_one_line_not_a_traceback(world: World, tmp_path: Path) -> None:
    """The reported case, in a process of its own: ``hpo narrow STUDY -o data`` with ``data`` a folder."""
    (tmp_path / "data").mkdir()
    done = hpo(*world.args("narrow", Path("data")), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr + done.stdout
    assert done.stderr == "error: data is a folder; name a file inside it, e.g. data/next.yaml\n"


def test_a_library_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "grid.png"
    target.write_bytes(b"old grid")
    with pytest.raises(ValueError, match="half"), writing(target) as tmp:
        tmp.write_bytes(b"half")
        raise ValueError("half written")
    assert target.read_bytes() == b"old grid" and everything_in(tmp_path) == ["grid.png"]
    with writing(target) as tmp:
        Image.new("RGB", (2, 2)).save(tmp)  # PIL picks PNG by the temporary's suffix
    assert Image.open(target).format == "PNG" and everything_in(tmp_path) == ["grid.png"]


def test_a_write_error_about_the_output_is_one_line_and_others_pass_on(tmp_path: Path) -> None:
    out = Path("/proc/hpo-test/r.html")
    unwritable = r"^cannot write /proc/hpo-test/r.html: .* \(in /proc\); choose a writable place$"
    with pytest.raises(HpoError, match=unwritable), output_errors(out):
        out.parent.mkdir(parents=True)  # a folder above the output
    with pytest.raises(FileNotFoundError), output_errors(tmp_path / "r.html"):
        (tmp_path / "elsewhere" / "grid.png").read_bytes()  # a file the writer reads: not the output's fault

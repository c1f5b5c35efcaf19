"""A legacy spec key beside its new home is refused in one line by a real `hpo` process."""

from __future__ import annotations

from pathlib import Path

from tests.spec.test_spec_corpus import setting, write_case


def test_a_legacy_key_beside_its_new_home_is_one_line_through_a_real_process(tmp_path: Path) -> None:
    from tests.service_helpers import hpo

    spec = write_case(tmp_path, setting("train", "ddim_eta", 0.5))
    done = hpo("launch", str(spec), "--detach", url=f"sqlite:///{tmp_path / 'x.db'}", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: {spec}: train.ddim_eta: is also set as sampling.eta; keep one")
    assert done.stderr.count("\n") == 1 and not (tmp_path / "x.db").exists()

"""An export's provenance is one typed payload: written as the keys ``sampling.json`` always had, in
their order, and read back to ``None`` (never a traceback) from a malformed or foreign file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpo.errors import HpoError
from hpo.records.export import Provenance
from hpo.service.export import SAMPLING, SPEC, WEIGHTS, read_export


def test_provenance_writes_the_keys_sampling_json_always_had_in_their_order() -> None:
    plain = Provenance(study="bikes-64", trial=3, value=12.5, metric_name="FID")
    assert list(plain.as_dict()) == ["study", "trial", "value", "metric_name"]
    budget = Provenance(study="s", trial=1, value=9.0, metric_name="FID", max_nfe=40, budget="+0.3 for 40 NFE")
    assert list(budget.as_dict()) == ["study", "trial", "value", "metric_name", "max_nfe", "budget"]
    assert Provenance.read({**budget.as_dict(), "sampling": {}, "network": {}}) == budget


def test_a_malformed_or_foreign_provenance_reads_as_none() -> None:
    assert Provenance.read({"study": "s", "trial": "three", "value": 1.0, "metric_name": "FID"}) is None
    assert Provenance.read({"sampling": {}, "network": {}}) is None
    assert Provenance.read(["not", "a", "mapping"]) is None


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        json.dumps(["a", "list"]),
        json.dumps({"sampling": {}, "study": "s", "trial": 1, "value": 1.0, "metric_name": "FID"}),  # no network
        json.dumps({"sampling": {}, "network": {"channels": 3, "wings": 2}}),
        json.dumps({"sampling": {"guidance_scale": 1.0}, "network": {}, "study": "s"}),
    ],
)
def test_an_export_with_a_malformed_or_newer_sampling_json_is_refused_in_one_line(tmp_path: Path, text: str) -> None:
    for name in (WEIGHTS, SPEC):
        (tmp_path / name).write_text("")
    (tmp_path / SAMPLING).write_text(text)
    with pytest.raises(HpoError) as refused:
        read_export(tmp_path)
    assert len(str(refused.value).splitlines()) == 1 and SAMPLING in str(refused.value)

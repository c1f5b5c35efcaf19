"""An export's provenance is one typed payload: written as the keys ``sampling.json`` always had, in
their order, and read back to ``None`` (never a traceback) from a malformed or foreign file."""

from __future__ import annotations

from hpo.records.export import Provenance


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

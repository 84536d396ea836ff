"""The pydantic payload converter is built once per process (rewind/temporal/payloads.py): the
SDK builds a data converter of its own class for every workflow activation, and each built
a new converter."""

from __future__ import annotations

from temporalio.converter import DataConverter

from rewind.temporal.payloads import data_converter, shared_pydantic_converter
from workflows.vocabulary.contracts import Usage


def test_every_data_converter_shares_one_pydantic_converter(tmp_path) -> None:
    cls = shared_pydantic_converter()
    first = cls()
    converters = first.converters
    assert cls() is first and first.converters is converters  # not built again
    ours = data_converter(f"file://{tmp_path}")
    assert ours.payload_converter_class is cls
    # What the SDK's worker does per activation: a DataConverter of the same class.
    sdk = DataConverter(payload_converter_class=ours.payload_converter_class)
    usage = Usage(prompt_tokens=1, completion_tokens=2, total_tokens=3)
    assert sdk.payload_converter.from_payloads(ours.payload_converter.to_payloads([usage]), [Usage]) == [usage]

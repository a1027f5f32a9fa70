"""One spelling per knob: '-' in values ('_' read as it), vLLM's names beside the seeds', and
length-prediction fields refused where the order does not read them."""

from __future__ import annotations

import pytest

from batchlab.errors import InputError
from batchlab.scheduler.config import SchedulerConfig
from batchlab.scheduler.order import QueueOrder
from batchlab.experiments.systems import parse_system


def test_values_are_spelled_with_dashes_and_underscores_are_read_as_them():
    old = parse_system("orca-oracle:prefill=prefill_first:order=sjf_predicted:predict_sigma=1:memory=reservation_max")
    new = parse_system("orca-oracle:prefill=prefill-first:order=sjf-predicted:predict_sigma=1:memory=reservation-max")
    assert (old.prefill, old.order, old.memory) == ("prefill-first", "sjf-predicted", "reservation-max")
    assert old.scheduler_config() == new.scheduler_config()
    assert SchedulerConfig(prefill="prefill_first").prefill == "prefill-first"
    assert QueueOrder("sjf_predicted").name == "sjf-predicted"


def test_the_seat_limit_by_any_of_its_names():
    specs = ("orca-oracle:max_bs=64", "orca-oracle:max_num_seqs=64", "orca-oracle:max-num-seqs=64",
             "orca-oracle:max_active=64")
    assert {parse_system(s).max_bs for s in specs} == {64}
    with pytest.raises(InputError, match="set twice"):
        parse_system("orca-oracle:max_bs=64:max_active=32")


@pytest.mark.parametrize("spec, field", [
    ("orca-oracle:order=sjf:predict_sigma=1", "predict_sigma"),
    ("orca-oracle:order=fcfs:predict_sigma=0.5", "predict_sigma"),
    ("orca-oracle:order=sjf-predicted:aging_rate=10", "aging_rate"),
])
def test_a_field_the_order_would_ignore_is_refused(spec, field):
    with pytest.raises(InputError, match=f"field '{field}'"):
        parse_system(spec)


def test_fields_the_order_reads_are_taken():
    assert parse_system("orca-oracle:order=aging:predict_sigma=1:aging_rate=200").aging_rate == 200
    assert parse_system("paged-prefix:order=lpm:aging_rate=5").order == "lpm"

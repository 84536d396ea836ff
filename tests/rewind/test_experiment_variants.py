"""`--variant NAME:key=value,...` as `rewind experiment` reads it, and the answer
normalisation its agreement counts use."""

from __future__ import annotations

import pytest

from checkpoint_bridge.views.experiment_table import normalise_answer
from rewind.experiments import parse_variant
from workflows.vocabulary.errors import UsageError


def test_a_variant_names_what_a_fork_changes(tmp_path) -> None:
    (tmp_path / "p.txt").write_text("Be technical.")
    v = parse_variant("tech:model=gpt-4o,system_prompt=@p.txt,tools=search+save,temperature=0.7,seed=3,depth=2,tone=dry",
                      base=tmp_path)
    assert (v.name, v.model, v.system_prompt, v.tools) == ("tech", "gpt-4o", "Be technical.", ["search", "save"])
    assert (v.temperature, v.seed, v.variables) == (0.7, 3, {"depth": 2, "tone": "dry"})
    assert v.llm_overrides(1) == {"temperature": 0.7, "seed": 3} and v.llm_overrides(3)["seed"] == 5
    assert parse_variant("same:").model_dump(exclude_defaults=True) == {"name": "same"}


def test_a_variant_can_change_what_a_sub_agent_runs_with() -> None:
    v = parse_variant("v1:sub.research_company.model=m2,sub.research_company.system_prompt=Be brief.,sub.writer.model=m3")
    assert v.subagents == {"research_company": {"model": "m2", "system_prompt": "Be brief."}, "writer": {"model": "m3"}}
    assert v.variables == {} and v.model is None


@pytest.mark.parametrize("text, needle", [
    ("model=x", "needs a name first"),
    ("bad name:model=x", "variant name"),
    ("a:model", "is not key=value"),
    ("a:temperature=hot", "is not a number"),
    ("a:temperature=9", "temperature"),
    ("a:seed=1.5", "is not a whole number"),
    ("a:system_prompt=@missing.txt", "cannot read the system prompt file"),
    ("a:sub.research_company.temperature=1", "sub.AGENT.model or sub.AGENT.system_prompt"),
    ("a:sub..model=m", "sub.AGENT.model"),
    ("a:sub.bad/name.model=m", "agent id"),
])
def test_a_bad_variant_is_one_clear_error(text, needle, tmp_path) -> None:
    with pytest.raises(UsageError, match=needle):
        parse_variant(text, base=tmp_path)


def test_answers_agree_whatever_their_case_spacing_and_punctuation() -> None:
    assert normalise_answer("Yes,  it WORKS!") == normalise_answer("yes it works") == "yes it works"
    assert normalise_answer("B says yes") != normalise_answer("B says no!")

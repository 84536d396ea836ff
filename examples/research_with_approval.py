"""The research agent's tools, with `save_report` waiting for a person's approval.

    rewind worker --tool-modules examples.research_with_approval
    rewind pending                          # the report call, with its arguments
    rewind approve RUN CALL [--reason T]    # or: rewind reject RUN CALL --reason T

`rewind demo --approve` runs the demo with these tools and shows how to decide.
The tools are the same functions as in examples.research_agent; only the
declaration of `save_report` differs.
"""

from __future__ import annotations

from examples.research_agent import save_report as _save_report
from examples.research_agent import search_company  # noqa: F401 - registered from this module too
from rewind import tool

save_report = tool(_save_report.fn, name="save_report", description=_save_report.spec.description,
                   side_effects=True, timeout_s=_save_report.spec.timeout_s, needs_approval=True)

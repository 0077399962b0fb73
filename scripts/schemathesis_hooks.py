"""schemathesis hooks for scripts/contract (named in scripts/schemathesis.toml).

One rule of the API cannot be written in JSON Schema: a reservation names
each item on one line only (`uniqueItems` compares whole lines, not their
`item`). A body generated as valid that repeats an item is rightly refused
with 422, which schemathesis would report as a valid request rejected; so
such bodies keep the first line of each item. Bodies generated as invalid
are left as they are.
"""

import schemathesis
from schemathesis.core.parameters import ParameterLocation

CREATE = "POST /v1/shops/{shop}/reservations"


@schemathesis.hook
def map_case(context, case):
    body = case.body
    if case.operation.label != CREATE or not isinstance(body, dict) or not isinstance(body.get("lines"), list):
        return case
    if case.meta is not None and case.meta.is_negative_at(ParameterLocation.BODY):
        return case
    seen = set()
    lines = []
    for line in body["lines"]:
        item = line.get("item") if isinstance(line, dict) else None
        if isinstance(item, str):
            if item in seen:
                continue
            seen.add(item)
        lines.append(line)
    if len(lines) != len(body["lines"]):
        case.body = {**body, "lines": lines}
    return case

"""The evidence document format, `registry.evidence/1` (docs/evidence-format.md), one job a module.

- `errors`: EvidenceError and the field kit bound to it, which refuses a
  client's summary statistic by name;
- `leaves`: a parity leaf (one side or two) and the contradictions it may not hold;
- `schemas`: the fields of each of the five item kinds;
- `derived`: the statistics the registry derives from an item's raw measurements;
- `items`: one item, checked against its schema and given its `derived` dict;
- `document`: a whole document, from a file or text.
"""

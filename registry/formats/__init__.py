"""The registry's vocabulary: what every layer above shares, and nothing that measures, stores or decides.

- `documents`: the one reader for a file a user hands the registry (regular
  file, size limit, UTF-8, strict JSON, depth and surrogate checks);
- `fields`: the one kit of field checkers, bound by each parser to its own
  error class;
- `names`: the naming rule for ids and the stream names built from them;
- `digests`, `dtypes`, `kinds`, `text`: SHA-256 digests, tensor element
  types, artifact kinds, text that UTF-8 can hold;
- `ranks`, `stats`: the rank/interval statistics the contract checks and the
  evidence format derives;
- `evidence`: the evidence document format (`registry.evidence/1`).

The bottom layer (docs/architecture.md, "Layers"): it imports nothing from the
registry's other packages, no database and no torch, and this package's own
import loads none of its modules, so a reader of lock files stays light.
"""

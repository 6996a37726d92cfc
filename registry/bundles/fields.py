"""The field readers of bundle manifests and lock files: the shared kit (registry.formats.fields) in JSON's words.

Both are JSON documents read through registry.formats.documents; their
fields are checked by the kit every document parser shares, bound to
`BundleFieldError`, so a bad bundle or lock file is refused in JSON's terms
(an object, a number) and never in a workload manifest's YAML ones.
`parse_manifest` and `read_lock` name the file in front of the field.
"""
from __future__ import annotations

from registry.formats.errors import UserError
from registry.formats.fields import FieldKit


class BundleFieldError(UserError):
    """A field of a bundle manifest or lock file that is not what it declares: `path: problem`."""


# The kit every bundle and lock parser checks its fields with (`f.mapping`, `f.required`, ...); a block is
# "an object", as JSON calls it.
FIELDS = FieldKit(BundleFieldError)

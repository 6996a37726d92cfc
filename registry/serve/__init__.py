"""`registry serve`: the HTTP API over app/'s use cases, its live view, and the client workers use (docs/serve.md)."""

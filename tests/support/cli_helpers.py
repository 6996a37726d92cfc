"""What every CLI test asks of a command: the log's head around it, and a refusal in one line."""
from __future__ import annotations

from store_helpers import head_of


def head(cli) -> int:
    """The head of the log of the registry `cli` runs on (to show a refused command appended nothing)."""
    return head_of(cli.url)


def one_line_refusal(result, *fragments: str) -> str:
    """The one line a refused command printed: exit 1, no traceback, one line of output,
    `error: ` and the problem, naming every fragment."""
    assert result.exit_code == 1, (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]

"""Read models folded from the event log."""

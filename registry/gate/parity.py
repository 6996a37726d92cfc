"""Rule 3, exact tier: parity evidence decides, leaf by leaf, by an explicit table.

A leaf passes only when the evidence *shows* it good; every other state
quarantines (the evidence shows a failure) or holds (it shows neither). The
table, row for row, is in docs/gate.md ("Parity decision table"). Each check
below returns outcomes (PASS, FAIL or UNDECIDED with a reason); a leaf is
quarantined when any outcome fails, else held when any is undecided.

- Layout, under both policies: the leaf must record the reference's and the
  candidate's dtype, shape and strides, and they must be equal. A difference
  fails, naming it. A one-sided leaf (one dtype and shape, written before
  leaves recorded both sides) cannot show them equal and holds.
- byte_equal policy: the leaf must be byte-equal.
- tolerance policy: a byte-equal leaf passes. Integer and bool leaves need
  byte equality. A floating leaf uses the tolerance the contract declares for
  the reference dtype (never a default) and passes only if
    (a) its NaN/inf pattern is shown to match the reference's (a candidate NaN
        is never "close": a comparator once reported max_abs_error=nan with
        allclose True),
    (b) max_abs_error was recorded (null means not measured, never "fine"),
    (c) max_abs_error <= max_abs when max_abs is declared (rtol alone lets a
        3.3e6-magnitude reference hide an error of 32768), and
    (d) every finite element is within atol + rtol*|ref|: shown when
        max_abs_error <= atol, or when the comparator counted zero elements
        outside a tolerance at least as strict as the declared one; refuted
        when it counted elements outside a tolerance at least as loose.

The gate sees only leaves that `parse_item` accepted, so a leaf that
contradicts itself (byte-equal with another dtype, a count outside atol with
an error within it, ...) never reaches this table: it is invalid evidence
and holds.
"""
from __future__ import annotations

from typing import Any

from registry.contracts import ContractError, ParityPolicy, Tolerance
from registry.formats.dtypes import is_floating_dtype
from registry.formats.evidence.leaves import is_two_sided, layout_differences
from registry.gate.ledger import Ledger
from registry.gate.model import Recorded
from registry.gate.text import num

# NO_TOLERANCE is undecided for a reason of its own: the contract, not the evidence, lacks something.
PASS, FAIL, UNDECIDED, NO_TOLERANCE = "pass", "fail", "undecided", "no_tolerance"
Outcome = tuple[str, str]

ONE_SIDED = (
    "the leaf records one dtype and shape, not the reference's and the candidate's "
    "(evidence written before two-sided leaves), so their layouts are not shown equal; "
    "re-evaluate to record both sides"
)


def check_parity(policy: ParityPolicy, recorded: Recorded | None, ledger: Ledger) -> None:
    if recorded is None:
        ledger.add(
            "parity.missing", "held",
            "no parity evidence: the exact tier needs every output leaf compared with the reference",
        )
        return
    item = ledger.admit(recorded, "parity")
    if item is None:
        return
    for leaf in item["leaves"]:
        outcomes = _layout(leaf)
        if leaf["byte_equal"]:
            pass  # bytes shown equal: nothing more to show under either policy
        elif policy.policy == "byte_equal":
            outcomes += _bytes_differ(leaf)
        else:
            outcomes += _tolerance(policy, leaf, ledger)
        _record(policy, leaf, outcomes, ledger)


def _record(policy: ParityPolicy, leaf: dict[str, Any], outcomes: list[Outcome], ledger: Ledger) -> None:
    """One finding per leaf: quarantined if anything failed, else held for the first kind of doubt."""
    failures = [reason for state, reason in outcomes if state == FAIL]
    doubts = [reason for state, reason in outcomes if state == UNDECIDED]
    missing = [reason for state, reason in outcomes if state == NO_TOLERANCE]
    if failures:
        ledger.add("parity.failed", "quarantined",
                   f"parity ({policy.policy}) failed on leaf {leaf['name']}: " + "; ".join(failures))
    elif missing:
        ledger.add("parity.no_tolerance", "held", missing[0])
    elif doubts:
        ledger.add("parity.undecidable", "held",
                   f"parity ({policy.policy}) cannot be decided for leaf {leaf['name']} from the evidence: "
                   + "; ".join(doubts))


def _layout(leaf: dict[str, Any]) -> list[Outcome]:
    """Whether the candidate's dtype, shape and strides are shown equal to the reference's."""
    if is_two_sided(leaf):
        return [(FAIL, difference) for difference in layout_differences(leaf)]
    outcomes = [(UNDECIDED, ONE_SIDED)]
    if leaf.get("strides_equal") is False:
        outcomes.append((FAIL, "strides differ from the reference"))
    return outcomes


def _bytes_differ(leaf: dict[str, Any]) -> list[Outcome]:
    error = leaf.get("max_abs_error")
    outcomes = [(FAIL, f"max_abs_error {num(error)}" if error is not None else "bytes differ")]
    nonfinite = _nonfinite(leaf)
    if nonfinite[0] == FAIL:
        outcomes.append(nonfinite)
    return outcomes


def _tolerance(policy: ParityPolicy, leaf: dict[str, Any], ledger: Ledger) -> list[Outcome]:
    """Outcomes for a leaf that is not byte-equal under the tolerance policy."""
    dtype = leaf["reference_dtype"] if is_two_sided(leaf) else leaf["dtype"]
    if not is_floating_dtype(dtype):
        return [(FAIL, f"{dtype} is not a floating dtype, so it needs byte equality")]
    try:
        tol = policy.tolerance_for(dtype)
    except ContractError as exc:
        return [(NO_TOLERANCE, f"{exc} (leaf {leaf['name']}); parity.policy is tolerance and no tolerance is invented")]
    path = f"parity.tolerances.{dtype.removeprefix('torch.')}"
    outcomes = [_nonfinite(leaf)]
    error = leaf.get("max_abs_error")
    if error is None:
        outcomes.append((UNDECIDED, "max_abs_error was not measured, so no element is shown within the tolerance"))
    elif tol.max_abs is not None:
        margin = ledger.margin(f"max_abs_error:{leaf['name']}", error, tol.max_abs, higher_is_better=False)
        if not margin.passed:
            outcomes.append((FAIL, f"max_abs_error {num(error)} exceeds {path}.max_abs {num(tol.max_abs)}"))
    if error is None or error > tol.atol:
        state, reason = _counted(leaf, tol, path)
        if error is not None and state == UNDECIDED:
            reason = f"max_abs_error {num(error)} exceeds {path}.atol {num(tol.atol)} and {reason}"
        if error is not None or state == FAIL:  # a null error is already undecided; a count can still refute
            outcomes.append((state, reason))
    return outcomes


def _nonfinite(leaf: dict[str, Any]) -> Outcome:
    """Whether the candidate's NaN/inf pattern is shown to match the reference's.

    max_abs_error covers finite values only, so a NaN the comparator did not
    compare is a question the evidence must answer, not a pass by silence.
    """
    if leaf.get("nonfinite_mismatch"):
        return FAIL, "NaN/inf positions or signs differ from the reference"
    for flag, label in (("nan", "NaN"), ("inf", "inf")):
        reference = leaf.get(f"reference_has_{flag}")
        if leaf[f"has_{flag}"] and reference is False:
            return FAIL, f"the candidate has {label} where the reference has none"
        if reference and not leaf[f"has_{flag}"]:
            return FAIL, f"the reference has {label} where the candidate has none"
    if leaf.get("nonfinite_mismatch") is False:
        return PASS, ""
    if leaf["has_nan"] or leaf["has_inf"] or leaf.get("reference_has_nan") or leaf.get("reference_has_inf"):
        return UNDECIDED, "NaN/inf values are present but their positions were not compared (no nonfinite_mismatch)"
    if leaf.get("reference_has_nan") is None or leaf.get("reference_has_inf") is None:
        return UNDECIDED, "neither nonfinite_mismatch nor the reference's NaN/inf flags were recorded"
    return PASS, ""


def _counted(leaf: dict[str, Any], tol: Tolerance, path: str) -> Outcome:
    """What the comparator's outside_tolerance count shows about atol + rtol*|ref| under the declared tolerance."""
    recorded, outside = leaf.get("tolerance"), leaf.get("outside_tolerance")
    if recorded is None or outside is None:
        return UNDECIDED, "the comparator recorded no outside_tolerance count"
    stricter = recorded["atol"] <= tol.atol and recorded["rtol"] <= tol.rtol
    looser = recorded["atol"] >= tol.atol and recorded["rtol"] >= tol.rtol
    if outside == 0 and stricter:
        return PASS, ""
    if outside > 0 and looser:
        return FAIL, (
            f"{outside} element(s) outside atol {num(recorded['atol'])} + rtol {num(recorded['rtol'])}*|ref| "
            f"({path} declares atol {num(tol.atol)}, rtol {num(tol.rtol)})"
        )
    return UNDECIDED, (
        f"the comparator counted {outside} outside atol {num(recorded['atol'])}, "
        f"rtol {num(recorded['rtol'])}, not the declared atol {num(tol.atol)}, rtol {num(tol.rtol)}"
    )

"""Rule 3, exact tier: parity evidence decides, leaf by leaf.

- byte_equal policy: every leaf must be byte-equal (bytes, hence dtype, shape
  and NaN payloads) with equal strides.
- tolerance policy: integer and bool leaves still need byte equality. A
  floating leaf uses the tolerance the contract declares for its dtype (never
  a default) and passes only if
    (a) its NaN/inf pattern matches the reference (a candidate NaN is never
        "close": a comparator once reported max_abs_error=nan with
        allclose True),
    (b) max_abs_error <= max_abs when max_abs is declared (rtol alone lets a
        3.3e6-magnitude reference hide an error of 32768), and
    (c) every finite element is within atol + rtol*|ref|. The evidence shows
        (c) when max_abs_error <= atol, or when the comparator counted zero
        elements outside a tolerance at least as strict as the declared one;
        it refutes (c) when it counted elements outside a tolerance at least
        as loose. Anything else cannot be decided and holds.
"""
from __future__ import annotations

from typing import Any

from registry.contracts import ContractError, ParityPolicy, Tolerance, is_floating_dtype
from registry.gate.ledger import Ledger
from registry.gate.model import Recorded
from registry.gate.text import num

PASS, FAIL, UNDECIDED = "pass", "fail", "undecided"


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
        if policy.policy == "byte_equal":
            problems = _byte_equal_problems(leaf)
            if problems:
                ledger.add("parity.failed", "quarantined", _failed(policy, leaf, problems))
        else:
            _judge_tolerance_leaf(policy, leaf, ledger)


def _byte_equal_problems(leaf: dict[str, Any]) -> list[str]:
    problems = []
    if not leaf["byte_equal"]:
        error = leaf["max_abs_error"]
        problems.append(f"max_abs_error {num(error)}" if error is not None else "bytes differ")
        nonfinite = _nonfinite_state(leaf)
        if nonfinite[0] == FAIL:
            problems.append(nonfinite[1])
    if leaf.get("strides_equal") is False:
        problems.append("strides differ from the reference")
    return problems


def _judge_tolerance_leaf(policy: ParityPolicy, leaf: dict[str, Any], ledger: Ledger) -> None:
    if leaf["byte_equal"]:
        return
    dtype = leaf["dtype"]
    if not is_floating_dtype(dtype):
        ledger.add("parity.failed", "quarantined", _failed(
            policy, leaf, [f"{dtype} is not a floating dtype, so it needs byte equality"],
        ))
        return
    try:
        tol = policy.tolerance_for(dtype)
    except ContractError as exc:
        ledger.add(
            "parity.no_tolerance", "held",
            f"{exc} (leaf {leaf['name']}); parity.policy is tolerance and no tolerance is invented",
        )
        return
    path = f"parity.tolerances.{dtype.removeprefix('torch.')}"
    outcomes = [_nonfinite_state(leaf)]
    error = leaf["max_abs_error"]
    if tol.max_abs is not None and error is not None:
        margin = ledger.margin(f"max_abs_error:{leaf['name']}", error, tol.max_abs, higher_is_better=False)
        if not margin.passed:
            outcomes.append((FAIL, f"max_abs_error {num(error)} exceeds {path}.max_abs {num(tol.max_abs)}"))
    outcomes.append(_elementwise_state(leaf, tol, path))
    failures = [reason for state, reason in outcomes if state == FAIL]
    doubts = [reason for state, reason in outcomes if state == UNDECIDED]
    if failures:
        ledger.add("parity.failed", "quarantined", _failed(policy, leaf, failures))
    elif doubts:
        ledger.add(
            "parity.undecidable", "held",
            f"parity (tolerance) cannot be decided for leaf {leaf['name']} from the evidence: "
            + "; ".join(doubts),
        )


def _nonfinite_state(leaf: dict[str, Any]) -> tuple[str, str]:
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


def _elementwise_state(leaf: dict[str, Any], tol: Tolerance, path: str) -> tuple[str, str]:
    """Whether every finite element is within atol + rtol*|ref| under the declared tolerance."""
    error = leaf["max_abs_error"]
    if error is None or error <= tol.atol:
        return PASS, ""
    recorded, outside = leaf.get("tolerance"), leaf.get("outside_tolerance")
    if recorded is not None and outside is not None:
        stricter = recorded["atol"] <= tol.atol and recorded["rtol"] <= tol.rtol
        looser = recorded["atol"] >= tol.atol and recorded["rtol"] >= tol.rtol
        if outside == 0 and stricter:
            return PASS, ""
        if outside > 0 and looser:
            return FAIL, (
                f"{outside} element(s) outside atol {num(recorded['atol'])} + rtol {num(recorded['rtol'])}*|ref| "
                f"({path} declares atol {num(tol.atol)}, rtol {num(tol.rtol)})"
            )
        counted = (
            f"the comparator counted {outside} outside atol {num(recorded['atol'])}, "
            f"rtol {num(recorded['rtol'])}, not the declared atol {num(tol.atol)}, rtol {num(tol.rtol)}"
        )
    else:
        counted = "the comparator recorded no outside_tolerance count"
    return UNDECIDED, f"max_abs_error {num(error)} exceeds {path}.atol {num(tol.atol)} and {counted}"


def _failed(policy: ParityPolicy, leaf: dict[str, Any], problems: list[str]) -> str:
    return f"parity ({policy.policy}) failed on leaf {leaf['name']}: " + "; ".join(problems)

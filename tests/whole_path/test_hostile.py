"""Hostile evidence files and manifests through the real CLI, against a real registry.

Every input must end one of two ways: refused (exit 1, one line on stderr,
the log unchanged) or stored faithfully (exit 0, and what is read back equals
what was sent). Never a traceback, never another exit code, never a log that
fails `verify`. Inputs: wrong types, huge values, every spelling of NaN and
infinity a JSON or YAML reader might take, huge integers (past float's range
and past Python's own limit on integer conversion), nesting past the
documented depth, lone UTF-16 surrogates, duplicate keys, unicode, SQL in
names, NUL characters, bytes that are not UTF-8, byte-order marks, a 10 MB
payload, documents past the documented maximum size, and paths that are not
regular files (a FIFO, /dev/zero, a directory).
"""
from __future__ import annotations

import copy
import json
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from registry.cli.main import main
from registry.contracts import load_manifest
from registry.formats.documents import MAX_DEPTH, MAX_EVIDENCE_BYTES, MAX_INTEGER_DIGITS, MAX_MANIFEST_BYTES
from store_helpers import opened

FORMAT = "registry.evidence/1"
REGISTERED = ("k1", "κ漢😀-1")  # artifacts the registry under test knows
SQL = "'; DROP TABLE events; --"
# The same statement as a name can hold it (docs/names.md: a letter or digit first, no whitespace).
SQL_NAME = "x';DROP/**/TABLE/**/events;--"
NAMES = (*REGISTERED, SQL, "", " ", "k1\u0000", "unknown", "w" * 300, "é" * 201, "a\nb", "\u202eevil")
# Every way a reader might spell a non-finite number; none is a number the registry accepts.
JSON_NONFINITE = ("NaN", "-NaN", "+NaN", "nan", "Infinity", "-Infinity", "+Infinity", "inf", "-inf", "1e999",
                  "-1e999", "1E400", "Infinity1")
YAML_NONFINITE = (".nan", ".NaN", ".NAN", "NaN", "nan", ".inf", "-.inf", "+.inf", ".Inf", "-.Inf", ".INF", "inf",
                  "Infinity", "1e999", "1.0e999", "-1.0e999", "1.0E+999")
# Huge integers: past float's range (401 digits), at and past the registry's digit limit,
# and past Python's own limit on converting integer text (4300 digits).
HUGE_INTEGERS = ("9" * 401, "-" + "9" * 401, "9" * MAX_INTEGER_DIGITS, "9" * (MAX_INTEGER_DIGITS + 1), "9" * 5001)
# Strings holding a lone UTF-16 surrogate, as JSON and YAML escapes spell them.
SURROGATES = ('"\\ud800"', '"a\\udfffb"', '"\\udc80\\ud800"')
# Other tokens that are not plain JSON/YAML numbers, or are numbers in disguise.
JSON_TOKENS = (*JSON_NONFINITE, *HUGE_INTEGERS, *SURROGATES, "0x10", "+1", "01", ".5", "1.", "-0", "1e-400")
YAML_TOKENS = (*YAML_NONFINITE, *HUGE_INTEGERS, *SURROGATES, "0x10", "0o17", "017", "1_000", "~", "2020-01-01",
               "!!binary aGk=", "*undefined", "&a 1", "!!python/name:os.system", "1.0e300", '"1.2"')
EXAMPLES = {"sqlite": 80, "postgres": 25}
MANIFEST_EXAMPLES = {"sqlite": 60, "postgres": 20}
TEN_MB = 10 * 1024 * 1024


@dataclass(frozen=True)
class Token:
    """A raw token written into the file text as-is (where a value would go)."""

    text: str


def render(value, tokens: dict[str, str], counter: list[int]):
    """Replace Tokens by unique placeholder strings, remembered in `tokens`."""
    if isinstance(value, Token):
        counter[0] += 1
        placeholder = f"@@token{counter[0]}@@"
        tokens[placeholder] = value.text
        return placeholder
    if isinstance(value, dict):
        return {key: render(item, tokens, counter) for key, item in value.items()}
    if isinstance(value, list):
        return [render(item, tokens, counter) for item in value]
    return value


def to_json_text(document, ensure_ascii: bool) -> str:
    tokens: dict[str, str] = {}
    text = json.dumps(render(document, tokens, [0]), ensure_ascii=ensure_ascii)
    for placeholder, token in tokens.items():
        text = text.replace(f'"{placeholder}"', token)
    return text


def to_yaml_text(manifest) -> str:
    tokens: dict[str, str] = {}
    text = yaml.safe_dump(render(manifest, tokens, [0]), allow_unicode=True, sort_keys=False)
    for placeholder, token in tokens.items():
        text = re.sub(rf"'?{re.escape(placeholder)}'?", lambda _: token, text)
    return text


# -- strategies ---------------------------------------------------------------------

texts = st.one_of(st.sampled_from(NAMES), st.text(max_size=20))
finite = st.floats(allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=5e-324, max_value=1.7e308)
counts = st.one_of(st.integers(0, 10), st.integers(0, 10**30))


def nested_list(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


hostile = st.one_of(
    st.sampled_from(JSON_TOKENS).map(Token),
    st.none(), st.booleans(), st.integers(), st.integers(-(10**40), 10**40), finite, texts,
    st.lists(st.one_of(finite, st.integers(), texts), max_size=4),
    st.dictionaries(texts, st.one_of(finite, texts), max_size=3),
    st.integers(1, 200).map(nested_list),
    st.integers(MAX_DEPTH - 4, MAX_DEPTH + 2).map(nested_list),  # around the documented depth
    st.integers(300, 1200).map(lambda digits: 10**digits),  # huge integers written by json itself
)
unknown_fields = st.sampled_from(("speedup", "worst_ssim", "median", "derived", "match", "extra", "kind", "", "é"))


def times(size):
    return st.lists(st.one_of(positive, st.just(1.0)), min_size=size, max_size=size)


@st.composite
def benchmark_items(draw):
    pairs = draw(st.integers(1, 12))
    paired = draw(st.booleans())
    item = {"kind": "benchmark", "protocol": "paired" if paired else "sequential", "device": draw(texts),
            "timer": draw(st.sampled_from(("cuda_event", "perf_counter", "interpreter", "emulator"))),
            "baseline_s": draw(times(pairs)), "candidate_s": draw(times(pairs))}
    if paired:
        item["schedule"] = draw(st.lists(st.sampled_from(("BC", "CB")), min_size=pairs, max_size=pairs))
    if draw(st.booleans()):
        item["notes"] = draw(texts)
    return item


leaves = st.fixed_dictionaries({
    "name": texts, "dtype": st.sampled_from(("bfloat16", "float32", "int8")),
    "shape": st.lists(st.integers(0, 2**40), max_size=4), "byte_equal": st.booleans(),
    "max_abs_error": st.one_of(st.none(), st.floats(0, 1e308)),
    "max_rel_error": st.one_of(st.none(), st.floats(0, 1e308)),
    "has_nan": st.booleans(), "has_inf": st.booleans(),
})
items = st.one_of(
    st.fixed_dictionaries({"kind": st.just("execution"), "candidate_calls": counts, "fallbacks": counts},
                          optional={"requested_backend": texts, "effective_backend": texts}),
    benchmark_items(),
    st.fixed_dictionaries({"kind": st.just("parity"), "leaves": st.lists(leaves, min_size=1, max_size=3)},
                          optional={"policy": st.sampled_from(("byte_equal", "tolerance"))}),
    st.fixed_dictionaries({"kind": st.just("perceptual"), "frame_set": texts, "seed": st.integers(),
                           "ssim": st.one_of(st.none(), st.lists(st.floats(-1, 1), min_size=3, max_size=3)),
                           "lpips": st.one_of(st.none(), st.lists(st.floats(0, 1e6), min_size=3, max_size=3)),
                           "vbench": st.one_of(st.none(), st.floats(0, 1)), "stage_status": texts}),
    st.fixed_dictionaries({"kind": st.just("failure"), "stage": texts, "error": texts}),
)


@st.composite
def documents(draw):
    """A document, usually valid, then 0-2 hostile edits: a field set to a hostile value, added or removed."""
    document = {"format": FORMAT, "artifact": draw(st.sampled_from(REGISTERED * 4 + NAMES)),
                "evidence": draw(st.lists(items, min_size=1, max_size=3))}
    if draw(st.booleans()):
        document["run"] = draw(texts)
    targets = [document, *document["evidence"]]
    for _ in range(draw(st.sampled_from((0, 0, 1, 2)))):
        target = draw(st.sampled_from(targets))
        key = draw(st.one_of(st.sampled_from(sorted(target)), unknown_fields))
        if draw(st.integers(0, 4)) == 0:
            target.pop(key, None)
        else:
            target[key] = draw(hostile)
    return document


def duplicate_a_key(text: str, key: str, value: str) -> str:
    """The JSON text with `"key": value, ` inserted before the first `"key": `: one object, the key twice."""
    marker = f'"{key}": '
    return text.replace(marker, f"{marker}{value}, {marker}", 1)


@st.composite
def evidence_files(draw) -> tuple[bytes, dict | None]:
    """File bytes, and the document they encode when they encode one whole (else None)."""
    shape = draw(st.integers(0, 11))
    if shape == 0:
        return draw(st.binary(max_size=64)), None
    if shape == 1:
        return to_json_text(draw(hostile), ensure_ascii=False).encode("utf-8", "surrogatepass"), None
    document = draw(documents())
    text = to_json_text(document, ensure_ascii=draw(st.booleans()))
    if shape == 2:
        return text[: draw(st.integers(0, len(text)))].encode("utf-8", "surrogatepass"), None
    if shape == 3:
        return ("\ufeff" + text).encode("utf-8", "surrogatepass"), None
    if shape == 4:  # a key twice in one object: a JSON reader would keep the last silently
        key = draw(st.sampled_from(("artifact", "kind", "format", "evidence")))
        return duplicate_a_key(text, key, json.dumps(draw(st.sampled_from(("ghost", "k1", "execution"))))).encode(
            "utf-8", "surrogatepass"), None
    if shape == 5:
        return text.encode(draw(st.sampled_from(("utf-16", "utf-32", "utf-16-le"))), "surrogatepass"), None
    return text.encode("utf-8", "surrogatepass"), document


@st.composite
def manifests(draw) -> dict:
    workloads = st.sampled_from(("w", SQL, "κ漢😀", "a" * 300, "x\u0000"))
    manifest: dict = {"workload": draw(st.one_of(workloads, texts))}
    if draw(st.booleans()):
        manifest["sampling"] = {"height": draw(st.integers(1, 4096)), "width": draw(st.integers(1, 4096)),
                                "frames": draw(st.integers(1, 200)), "seed": draw(st.integers(0, 2**31))}
    if draw(st.booleans()):
        manifest["fidelity"] = {"tier": "perceptual", "min_ssim": draw(st.floats(0, 1)), "frame_set": draw(texts)}
    if draw(st.booleans()):
        manifest["speed"] = {"min_speedup": draw(st.floats(1, 100)),
                             "runs_per_arm": draw(st.one_of(st.integers(2, 100), st.integers(10**5, 10**20))),
                             "protocol": draw(st.sampled_from(("paired", "sequential")))}
    if draw(st.booleans()):
        manifest["tags"] = draw(st.lists(texts, max_size=4))
    for _ in range(draw(st.integers(0, 2))):
        blocks = [manifest, *(value for value in manifest.values() if isinstance(value, dict) and value)]
        target = draw(st.sampled_from(blocks))
        key = draw(st.one_of(st.sampled_from(sorted(target)), st.sampled_from(("extra", "tier", "min_lpips", ""))))
        target[key] = draw(st.one_of(st.sampled_from(YAML_TOKENS).map(Token), hostile.filter(
            lambda v: not isinstance(v, Token))))
    return manifest


# -- the registry under test and the oracle -----------------------------------------

class Registry:
    """The registry under attack: `url` is a copy of the worker's migrated template (what `registry init` makes),
    given workload `w` and the artifacts in `REGISTERED` through the CLI."""

    def __init__(self, url: str, workdir: Path):
        self.url, self.workdir, self.runner = url, workdir, CliRunner()
        self.store = None
        manifest = workdir / "base.yaml"
        manifest.write_text("workload: w\n", encoding="utf-8")
        assert self.cli("workload", "declare", str(manifest)).exit_code == 0
        for artifact in REGISTERED:
            registered = self.cli("artifact", "register", artifact, "--workload", "w", "--kind", "fused_kernel")
            assert registered.exit_code == 0
        self.store = opened(url).store
        self.outcomes = {"stored": 0, "refused": 0}

    def cli(self, *args):
        return self.runner.invoke(main, ["--db", self.url, "--actor", "hostile", *args])

    def head(self) -> tuple[int, str | None]:
        events = self.store.read_all(after_position=max(0, self.store.head_position() - 1))
        return (events[-1].position, events[-1].hash) if events else (0, None)

    def run(self, data: bytes, *command: str):
        """Run `command FILE --json` on `data`; check the refusal contract; return the result if it succeeded."""
        path = self.workdir / "input"
        path.write_bytes(data)
        return self.run_on(path, *command, shown=data[:200])

    def run_on(self, path: Path | str, *command: str, shown=None):
        """Run `command PATH --json`; check the refusal contract; return the result if it succeeded."""
        shown = path if shown is None else shown
        before = self.head()
        result = self.cli(*command, str(path), "--json")
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            f"traceback: {result.exception!r} for {shown!r}"
        )
        assert result.exit_code in (0, 1), f"exit {result.exit_code} for {shown!r}"
        if result.exit_code == 1:
            assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, repr(result.stderr)
            assert self.head() == before, "a refused input changed the log"
            self.outcomes["refused"] += 1
            return None
        self.outcomes["stored"] += 1
        return json.loads(result.stdout)

    def check_evidence(self, data: bytes, document: dict | None) -> None:
        result = self.run(data, "evidence", "import")
        if result is None:
            return
        assert document is not None, f"stored something that is not a whole document: {data[:200]!r}"
        positions = result["positions"]
        stored = self.store.read_all(after_position=positions[0] - 1, up_to_position=positions[-1])
        assert [e.position for e in stored] == positions and len(stored) == len(document["evidence"])
        for event, sent in zip(stored, document["evidence"]):
            assert event.stream == f"artifact:{document['artifact']}"
            assert event.payload["artifact"] == document["artifact"] and event.payload["run"] == document.get("run")
            if sent["kind"] == "failure":
                assert (event.type, event.payload["stage"], event.payload["error"]) == \
                    ("EvaluationFailed", sent["stage"], sent["error"])
            else:
                kept = {key: value for key, value in event.payload["item"].items() if key != "derived"}
                assert kept == sent

    def check_manifest(self, text: str) -> None:
        result = self.run(text.encode("utf-8", "surrogatepass"), "workload", "declare")
        if result is None:
            return
        contract = load_manifest(self.workdir / "input")
        declared = self.store.read_stream(f"workload:{result['workload']}")[-1].payload
        assert result["workload"] == contract.workload
        assert declared["contract"] == contract.canonical()
        assert declared["contract_hash"] == result["contract_hash"] == contract.content_hash()
        assert declared["contract_version"] == result["contract_version"]


@pytest.fixture
def registry(migrated_backend_url, tmp_path):
    built = Registry(migrated_backend_url, tmp_path)
    yield built
    assert built.store.verify().intact
    built.store.engine.dispose()


def backend(registry: Registry) -> str:
    return "postgres" if registry.store.dialect == "postgresql" else "sqlite"


def run_examples(strategy, check, count: int) -> None:
    """Run `count` generated examples; derandomized so CI sees the same mix every run
    (both stored and refused documents), while the mix itself stays broad."""
    @settings(max_examples=count, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(strategy)
    def examples(value):
        check(value)

    examples()


# -- tests ----------------------------------------------------------------------------

def test_hostile_evidence_files_are_refused_or_stored_faithfully(registry):
    run_examples(evidence_files(), lambda drawn: registry.check_evidence(*drawn), EXAMPLES[backend(registry)])
    assert registry.outcomes["stored"] > 0 and registry.outcomes["refused"] > 0, registry.outcomes


def test_hostile_manifests_are_refused_or_stored_faithfully(registry):
    run_examples(manifests().map(to_yaml_text), registry.check_manifest, MANIFEST_EXAMPLES[backend(registry)])
    assert registry.outcomes["stored"] > 0 and registry.outcomes["refused"] > 0, registry.outcomes


def test_every_nan_and_infinity_spelling_is_refused(registry):
    for token in JSON_NONFINITE:
        document = {"format": FORMAT, "artifact": "k1",
                    "evidence": [{"kind": "benchmark", "protocol": "sequential", "device": "d", "timer": "perf_counter",
                                  "baseline_s": [1.0, Token(token)], "candidate_s": [1.0, 1.0]}]}
        assert registry.run(to_json_text(document, ensure_ascii=True).encode(), "evidence", "import") is None, token
    for token in YAML_NONFINITE:
        text = to_yaml_text({"workload": "w", "speed": {"min_speedup": Token(token), "runs_per_arm": 4,
                                                         "protocol": "paired"}})
        assert registry.run(text.encode(), "workload", "declare") is None, token
    assert registry.outcomes == {"stored": 0, "refused": len(JSON_NONFINITE) + len(YAML_NONFINITE)}


def test_sql_and_unicode_in_names_are_stored_as_data(registry):
    registry.check_manifest(f"workload: \"{SQL_NAME}\"\ntags: [\"κ漢😀\", \"{SQL}\"]\n")
    document = {"format": FORMAT, "artifact": "κ漢😀-1", "run": SQL_NAME,
                "evidence": [{"kind": "execution", "candidate_calls": 1, "fallbacks": 0, "requested_backend": SQL}]}
    registry.check_evidence(json.dumps(document, ensure_ascii=False).encode(), document)
    assert registry.outcomes == {"stored": 2, "refused": 0}
    assert registry.store.read_stream(f"workload:{SQL_NAME}")[0].payload["contract"]["tags"] == sorted(["κ漢😀", SQL])


def test_names_postgres_cannot_hold_are_refused_on_both_backends(registry):
    """A NUL, or an idempotency key over the log's 200 characters, is refused alike on both backends."""
    execution = [{"kind": "execution", "candidate_calls": 1, "fallbacks": 0}]
    for artifact, run in (("k1", "a\u0000b"), ("k1", "r" * 300), ("k1\u0000", None)):
        document = {"format": FORMAT, "artifact": artifact, "run": run, "evidence": execution}
        assert registry.run(json.dumps(document).encode(), "evidence", "import") is None, (artifact, run)
    assert registry.run(b'workload: "w\\0"\n', "workload", "declare") is None
    assert registry.outcomes == {"stored": 0, "refused": 4}


def test_a_10_mb_evidence_payload(registry):
    document = {"format": FORMAT, "artifact": "k1", "run": "big",
                "evidence": [{"kind": "benchmark", "protocol": "sequential", "device": "d", "timer": "perf_counter",
                              "baseline_s": [1.0, 1.1], "candidate_s": [0.9, 0.95], "notes": "é" * (TEN_MB // 2)}]}
    data = json.dumps(document, ensure_ascii=False).encode()
    assert len(data) > TEN_MB
    registry.check_evidence(data, document)
    registry.check_evidence(data, document)  # resent: the same run is recorded once
    assert sum(registry.outcomes.values()) == 2


def test_a_1_mb_manifest(registry):
    # 1 MB, not 10: the manifest's YAML reader is pure Python and takes about 14 s over 10 MB here.
    tags = [f"{i:07d}" + "x" * 1000 for i in range(2**20 // 1000)]
    registry.check_manifest(yaml.safe_dump({"workload": "big", "tags": tags}))
    assert registry.outcomes == {"stored": 1, "refused": 0}


def test_extreme_but_finite_times_are_refused_in_exactly_one_line(migrated_sqlite_url, tmp_path):
    document = {"format": FORMAT, "artifact": "k1",
                "evidence": [{"kind": "benchmark", "protocol": "sequential", "device": "d", "timer": "perf_counter",
                              "baseline_s": [1.7e308, 1.7e308], "candidate_s": [1e-300, 1e-300]}]}
    registry = Registry(migrated_sqlite_url, tmp_path)
    with warnings.catch_warnings(record=True) as caught:  # what a real process would print to stderr
        warnings.simplefilter("always")
        registry.run(json.dumps(document).encode(), "evidence", "import")
    assert [str(w.message) for w in caught] == []


DEEP = 100_000  # far past the interpreter's recursion limit


def test_extremely_deep_evidence_is_refused_in_one_line(migrated_sqlite_url, tmp_path):
    deep = "[" * DEEP + "]" * DEEP
    registry = Registry(migrated_sqlite_url, tmp_path)
    assert registry.run(f'{{"format": "{FORMAT}", "evidence": {deep}}}'.encode(), "evidence", "import") is None


def test_extremely_deep_manifest_is_refused_in_one_line(migrated_sqlite_url, tmp_path):
    deep = "[" * DEEP + "]" * DEEP
    registry = Registry(migrated_sqlite_url, tmp_path)
    assert registry.run(f"workload: w\ntags: {deep}\n".encode(), "workload", "declare") is None


# -- hostile documents beyond what the generators above write ------------------------------

COMMANDS = (("evidence", "import"), ("workload", "declare"))


def test_paths_that_are_not_regular_files_are_refused_before_reading(migrated_sqlite_url, tmp_path):
    """A FIFO would block a reader and /dev/zero never ends: both are refused by kind, not read."""
    registry = Registry(migrated_sqlite_url, tmp_path)
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    for command in COMMANDS:
        for path in (fifo, "/dev/zero"):
            assert registry.run_on(path, *command) is None, (command, path)
        result = registry.cli(*command, str(fifo))
        assert "a FIFO (named pipe), not a regular file" in result.stderr
        assert "/dev/zero: a character device, not a regular file" in registry.cli(*command, "/dev/zero").stderr


def test_documents_over_the_documented_maximum_are_refused_by_their_size(migrated_sqlite_url, tmp_path):
    registry = Registry(migrated_sqlite_url, tmp_path)
    for command, limit in zip(COMMANDS, (MAX_EVIDENCE_BYTES, MAX_MANIFEST_BYTES)):
        huge = tmp_path / f"huge-{command[0]}"
        with huge.open("wb") as handle:
            handle.truncate(limit + 1)  # sparse: only its size could be read cheaply, and only its size is
        assert registry.run_on(huge, *command) is None
        assert "MiB, over the" in registry.cli(*command, str(huge)).stderr


def test_duplicate_keys_are_refused_in_evidence_as_in_manifests(registry):
    """The reported case: the first `artifact` names a ghost, the second a real artifact (and a count of 5, then 0)."""
    document = {"format": FORMAT, "artifact": "k1",
                "evidence": [{"kind": "execution", "candidate_calls": 0, "fallbacks": 0}]}
    text = json.dumps(document)
    for duplicated in (duplicate_a_key(text, "artifact", '"ghost"'), duplicate_a_key(text, "candidate_calls", "5")):
        assert registry.run(duplicated.encode(), "evidence", "import") is None
    assert registry.run(b"workload: w\nworkload: v\n", "workload", "declare") is None
    assert registry.outcomes == {"stored": 0, "refused": 3}


def test_huge_integers_surrogates_and_deep_nesting_are_one_line_refusals(registry):
    base = {"format": FORMAT, "artifact": "k1",
            "evidence": [{"kind": "benchmark", "protocol": "sequential", "device": "d", "timer": "perf_counter",
                          "baseline_s": [1.0, 1.0], "candidate_s": [1.0, 1.0]}]}
    for token in (*HUGE_INTEGERS, *SURROGATES, "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)):
        document = copy.deepcopy(base)
        document["evidence"][0]["baseline_s"][1] = Token(token)
        assert registry.run(to_json_text(document, ensure_ascii=True).encode(), "evidence", "import") is None, token
        manifest = {"workload": "w", "speed": {"min_speedup": Token(token), "runs_per_arm": 4, "protocol": "paired", "decision": "point"}}
        assert registry.run(to_yaml_text(manifest).encode(), "workload", "declare") is None, token
    assert registry.outcomes["stored"] == 0

"""Every file the registry writes, with a link planted at every name it uses.

Each writer (lock, attest, report --out, keys init, a bundle manifest, the
demo's strips, report, lock and bundle folders, the shared writer itself)
is run with a symbolic link at its output name, a dangling link there, and a
link at the temporary name the writers used before (`NAME.partial`), each
pointing at a victim: another registry's database and a plain file. The
victim must keep its bytes, nothing may appear where a dangling link points,
and a link at the output name is refused in one line even with --force.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from registry.bundles.manifest import BundleError
from registry.formats.errors import UserError
from registry.formats.output_files import write_new, write_output
from ship_helpers import declare, make_bundle, ship
from cli_helpers import one_line_refusal


@pytest.fixture
def victims(registry_cli, tmp_path):
    """A copy of a registry database and a plain file, each with its bytes, and a name that must stay absent."""
    database = tmp_path / "other-registry.db"
    shutil.copyfile(registry_cli.url.removeprefix("sqlite:///"), database)
    plain = tmp_path / "precious.txt"
    plain.write_text("keep me\n")
    return {database: database.read_bytes(), plain: plain.read_bytes()}, tmp_path / "absent" / "nowhere"


def untouched(victims) -> None:
    kept, absent = victims
    for path, content in kept.items():
        assert not path.is_symlink() and path.read_bytes() == content, path
    assert not os.path.lexists(absent)


def plant(name: Path, target: Path) -> None:
    if os.path.lexists(name):
        name.unlink()
    name.symlink_to(target)


def cases(victims):
    kept, absent = victims
    return [*kept, absent]


@pytest.fixture
def promoted(registry_cli):
    declare(registry_cli)
    ship(registry_cli, registry_cli.tmp / "bundles", "fast", 1.5)
    key = registry_cli.tmp / "signing.key"
    assert registry_cli("keys", "init", str(key)).exit_code == 0
    registry_cli.key = key
    return registry_cli


COMMANDS = {
    "lock": lambda cli, out: ("lock", "--workload", "wan", "--key", str(cli.key), "--out", str(out)),
    "attest": lambda cli, out: ("attest", "fast", "--key", str(cli.key), "--out", str(out)),
    "report": lambda cli, out: ("report", "--format", "json", "--out", str(out)),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_link_at_the_output_name_is_refused_even_with_force(promoted, victims, command):
    out = promoted.tmp / f"{command}.out"
    for target in cases(victims):
        plant(out, target)
        for force in ((), ("--force",)):
            one_line_refusal(promoted(*COMMANDS[command](promoted, out), *force), "is a symbolic link")
            untouched(victims)
            assert out.is_symlink() and os.readlink(out) == str(target)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_link_at_the_old_temporary_name_is_never_written_through(promoted, victims, command):
    out = promoted.tmp / f"{command}.out"
    for target in cases(victims):
        partial = out.with_name(out.name + ".partial")
        plant(partial, target)
        result = promoted(*COMMANDS[command](promoted, out), "--force")
        assert result.exit_code == 0, result.output
        assert out.is_file() and not out.is_symlink() and out.stat().st_size > 0
        assert partial.is_symlink()
        untouched(victims)
    leftovers = [p.name for p in promoted.tmp.iterdir() if p.name.startswith(f".{out.name}.")]
    assert leftovers == []


def test_keys_init_never_writes_through_a_link_at_either_name(promoted, victims):
    for suffix in ("", ".pub"):
        for target in cases(victims):
            key = promoted.tmp / f"new{len(suffix)}.key"
            for stale in (key, Path(f"{key}.pub")):
                if os.path.lexists(stale):
                    stale.unlink()
            plant(Path(f"{key}{suffix}"), target)
            one_line_refusal(promoted("keys", "init", str(key)), "already exists")
            untouched(victims)
            assert not os.path.lexists(key if suffix else Path(f"{key}.pub"))


def test_the_shared_writer_refuses_a_link_and_a_registry_and_writes_a_new_file(victims, tmp_path):
    kept, absent = victims
    database = next(iter(kept))
    with pytest.raises(UserError, match="SQLite database"):
        write_output(database, "x", force=True)
    hard = tmp_path / "hard-link-to-registry"
    os.link(database, hard)
    with pytest.raises(UserError, match="SQLite database"):
        write_output(hard, "x", force=True)
    for target in cases(victims):
        link = tmp_path / "link"
        plant(link, target)
        with pytest.raises(UserError, match="symbolic link"):
            write_output(link, "x", force=True)
        with pytest.raises(UserError, match="already exists"):
            write_new(link, b"x", mode=0o600)
    untouched(victims)
    fresh = write_new(tmp_path / "fresh", b"secret", mode=0o600)
    assert fresh.read_bytes() == b"secret" and fresh.stat().st_mode & 0o777 == 0o600


def test_a_bundle_manifest_is_never_written_through_a_link(tmp_path, victims):
    directory = make_bundle(tmp_path, "bundle")
    for target in cases(victims):
        plant(directory / "bundle.json", target)
        with pytest.raises(BundleError, match="symbolic link|symlink"):
            make_bundle_manifest(directory)
        untouched(victims)


def make_bundle_manifest(directory: Path) -> None:
    from registry.bundles import write_manifest
    from ship_helpers import INPUT, window

    write_manifest(directory, entry_point={"file": "op.py", "symbol": "replacement"},
                   replaces={"fingerprint": "sha256:x", "inputs": [INPUT], "outputs": [INPUT]},
                   compatibility=window())


def test_the_demo_writers_never_write_through_a_link(tmp_path, victims):
    from registry.app.demo_bundles import BUNDLES, write_kernel_bundle
    from registry.app.strips import write_strip

    frames = np.zeros((2, 4, 4, 3), dtype=np.uint8)
    for target in cases(victims):
        strip = tmp_path / "strip.png"
        plant(strip, target)
        with pytest.raises(UserError, match="symbolic link"):
            write_strip(strip, frames, frames, [1.0, 1.0], "t")
        untouched(victims)
    (tmp_path / BUNDLES).mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.py").write_text("kept\n")
    plant(tmp_path / BUNDLES / "modln", elsewhere)
    with pytest.raises(UserError, match="symbolic link"):
        write_kernel_bundle(tmp_path, "modln")
    assert [p.name for p in elsewhere.iterdir()] == ["keep.py"]


def test_bundle_create_and_hook_secret_never_write_through_a_link(registry_cli, victims):
    """The CLI's own writers of a bundle manifest and a webhook secret refuse a link at their name, --force or not."""
    import json

    from ship_helpers import window

    directory = registry_cli.tmp / "made"
    directory.mkdir()
    (directory / "op.py").write_text("def replacement(x):\n    return x\n")
    compatibility = registry_cli.tmp / "window.json"
    compatibility.write_text(json.dumps(window()))
    create = ("bundle", "create", str(directory), "--entry", "op.py:replacement", "--replaces", "op:rms_norm",
              "--compatibility", str(compatibility))
    for target in cases(victims):
        plant(directory / "bundle.json", target)
        for force in ((), ("--force",)):
            one_line_refusal(registry_cli(*create, *force), "symbolic link")
            untouched(victims)
        secret = registry_cli.tmp / "hook.secret"
        plant(secret, target)
        one_line_refusal(registry_cli("hook", "secret", str(secret)), "already exists")
        untouched(victims)

"""Appending and checkpointing: what a stored row holds of its arguments, and signed checkpoints made on
demand, every N events and every T seconds, each consistent with the one before it."""

from __future__ import annotations

import base64
import hashlib
import json
from datetime import timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from audit import keys, merkle
from audit.checkpoint import Checkpoint, CheckpointError, parse_and_verify, sign
from audit.models import AuditCheckpoint, AuditEvent, EventKind
from audit.services import (
    REDACTED,
    AuditUnavailable,
    DatabaseNodeStore,
    checkpoint_if_due,
    checkpoint_public_key,
    do_make_checkpoint,
    node_key,
    record,
)
from tests.audit.helpers import append_events, change_behind_the_models_back, mirror_lines, signed

pytestmark = pytest.mark.django_db

ONE_MEGABYTE = 1024 * 1024


# --- what a row holds ------------------------------------------------------------------------------


def test_a_token_and_an_authorization_are_redacted_in_the_stored_row_and_its_mirror_line(mirror_path):
    raw_token = "fmcp_" + "s" * 43
    event = record(
        EventKind.TOOL_CALL,
        tool="test.secrets",
        arguments={"token": raw_token, "authorization": f"Bearer {raw_token}", "label": "ci"},
    )

    stored = AuditEvent.objects.get(seq=event.seq)
    assert stored.arguments == {"token": REDACTED, "authorization": REDACTED, "label": "ci"}
    assert raw_token not in stored.arguments_json
    assert raw_token not in mirror_path.read_text()


def test_a_secret_nested_in_a_list_is_redacted_in_the_stored_row(mirror_path):
    event = record(EventKind.TOOL_CALL, arguments={"clients": [{"name": "a", "Token": "fmcp_nested-secret"}]})

    stored = AuditEvent.objects.get(seq=event.seq)
    assert stored.arguments == {"clients": [{"name": "a", "Token": REDACTED}]}
    assert "fmcp_nested-secret" not in mirror_path.read_text()


def test_a_one_megabyte_argument_is_stored_as_its_sha256_and_length(mirror_path):
    document = "<project>" + "x" * (ONE_MEGABYTE - len("<project></project>")) + "</project>"

    event = record(EventKind.TOOL_CALL, tool="test.upload", arguments={"xml": document, "name": "plant"})

    stored = AuditEvent.objects.get(seq=event.seq)
    assert stored.arguments == {
        "xml": {"sha256": hashlib.sha256(document.encode()).hexdigest(), "length": ONE_MEGABYTE},
        "name": "plant",
    }
    assert len(stored.arguments_json) < 200
    assert mirror_path.stat().st_size < 1000


def test_a_one_megabyte_argument_name_is_not_stored_whole(mirror_path):
    name = "n" * ONE_MEGABYTE

    event = record(EventKind.TOOL_CALL, tool="test.upload", arguments={name: 1})

    stored = AuditEvent.objects.get(seq=event.seq)
    assert len(stored.arguments_json) < 1000
    assert mirror_path.stat().st_size < 2000


def test_a_one_megabyte_list_argument_of_short_items_is_not_stored_whole(mirror_path):
    rows = ["x" * 100] * (ONE_MEGABYTE // 100)

    event = record(EventKind.TOOL_CALL, tool="test.upload", arguments={"rows": rows, "name": "plant"})

    stored = AuditEvent.objects.get(seq=event.seq)
    assert stored.arguments["name"] == "plant"
    assert len(stored.arguments_json) < 1000
    assert mirror_path.stat().st_size < 2000


def test_a_row_stores_its_arguments_as_canonical_json():
    event = record(EventKind.TOOL_CALL, arguments={"b": 1, "a": "é"})

    assert AuditEvent.objects.get(seq=event.seq).arguments_json == '{"a":"é","b":1}'


def test_an_unknown_event_kind_is_refused_before_anything_is_written():
    with pytest.raises(ValueError, match="not an audit event kind"):
        record("tool_called")

    assert AuditEvent.objects.count() == 0


def test_appended_events_form_a_chain_from_the_genesis_mac(mirror_path):
    events = append_events(3)

    assert [event.seq for event in events] == [1, 2, 3]
    assert events[0].prev_mac == "0" * 64
    assert [event.prev_mac for event in events[1:]] == [event.mac for event in events[:-1]]
    assert [json.loads(line)["mac"] for line in mirror_lines(mirror_path)] == [event.mac for event in events]


# --- checkpoints: the signature ---------------------------------------------------------------------


def test_a_checkpoint_is_signed_over_the_trees_size_and_root_by_the_servers_key():
    append_events(5)

    checkpoint = do_make_checkpoint()

    assert signed(checkpoint) == Checkpoint(origin=keys.origin(), size=5, root=merkle.root(5, DatabaseNodeStore()))
    assert bytes(checkpoint.root) == merkle.root(5, DatabaseNodeStore())


def test_a_checkpoint_verifies_with_the_published_verifier_key():
    append_events(3)
    checkpoint = do_make_checkpoint()

    # The name and the key id hold no "+"; the base64 key material may.
    name, key_id, material = checkpoint_public_key()["verifier_key"].split("+", 2)
    decoded = base64.b64decode(material)
    assert decoded[0] == 1  # the Ed25519 algorithm byte of the signed-note spec
    published = Ed25519PublicKey.from_public_bytes(decoded[1:])

    assert parse_and_verify(checkpoint.note, name, published).size == 3
    assert key_id == hashlib.sha256(name.encode() + b"\n" + decoded).digest()[:4].hex()


def _change_size(note: str) -> str:
    origin, size, rest = note.split("\n", 2)
    return f"{origin}\n{int(size) + 1}\n{rest}"


def _change_root(note: str) -> str:
    origin, size, root, rest = note.split("\n", 3)
    other = base64.b64encode(hashlib.sha256(base64.b64decode(root)).digest()).decode()
    return f"{origin}\n{size}\n{other}\n{rest}"


def _change_origin(note: str) -> str:
    return "forge-mcp/audit/another-log" + note[note.index("\n") :]


def _flip_a_signature_bit(note: str) -> str:
    body, line = note.rstrip("\n").rsplit("\n", 1)
    prefix, encoded = line.rsplit(" ", 1)
    blob = bytearray(base64.b64decode(encoded))
    blob[-1] ^= 1
    return f"{body}\n{prefix} {base64.b64encode(bytes(blob)).decode()}\n"


def _resign_with_another_key(note: str) -> str:
    checkpoint = parse_and_verify(note, keys.KEY_NAME, keys.public_key())
    return sign(checkpoint, keys.KEY_NAME, Ed25519PrivateKey.generate())


def _drop_the_signature(note: str) -> str:
    return note[: note.index("\n\n") + 1]


TAMPERINGS = {
    "size changed": _change_size,
    "root changed": _change_root,
    "origin changed": _change_origin,
    "signature bit flipped": _flip_a_signature_bit,
    "signed by another key of the same name": _resign_with_another_key,
    "signature dropped": _drop_the_signature,
}


@pytest.mark.parametrize("tamper", TAMPERINGS.values(), ids=TAMPERINGS.keys())
def test_a_tampered_checkpoint_note_is_refused(tamper):
    append_events(4)
    note = do_make_checkpoint().note
    tampered = tamper(note)
    assert tampered != note

    with pytest.raises(CheckpointError):
        parse_and_verify(tampered, keys.KEY_NAME, keys.public_key(), origin=keys.origin())


# --- checkpoints: when they are made ----------------------------------------------------------------


def test_a_checkpoint_is_made_automatically_every_n_events(settings):
    settings.FORGE_AUDIT_CHECKPOINT_EVENTS = 5

    append_events(12)

    checkpoints = list(AuditCheckpoint.objects.all())
    assert [checkpoint.size for checkpoint in checkpoints] == [5, 10]
    assert [signed(checkpoint).root for checkpoint in checkpoints] == [
        merkle.root(5, DatabaseNodeStore()),
        merkle.root(10, DatabaseNodeStore()),
    ]


def test_no_checkpoint_is_made_automatically_when_the_event_cadence_is_off(settings):
    settings.FORGE_AUDIT_CHECKPOINT_EVENTS = 0

    append_events(12)

    assert not AuditCheckpoint.objects.exists()


def test_a_new_checkpoint_is_consistent_with_the_previous_one(settings):
    settings.FORGE_AUDIT_CHECKPOINT_EVENTS = 0
    append_events(3)
    first = signed(do_make_checkpoint())
    append_events(8)
    second = signed(do_make_checkpoint())

    proof = merkle.consistency_proof(first.size, second.size, DatabaseNodeStore())

    assert (first.size, second.size) == (3, 11)
    assert merkle.verify_consistency(first.size, second.size, first.root, second.root, proof)


def test_no_checkpoint_is_made_when_nothing_was_appended_since_the_last(settings):
    settings.FORGE_AUDIT_CHECKPOINT_EVENTS = 0
    append_events(2)
    do_make_checkpoint()

    assert do_make_checkpoint() is None
    assert AuditCheckpoint.objects.count() == 1


def test_no_checkpoint_is_made_of_an_empty_log():
    assert do_make_checkpoint() is None
    assert not AuditCheckpoint.objects.exists()


def test_checkpoint_if_due_makes_the_first_checkpoint_at_once(settings):
    settings.FORGE_AUDIT_CHECKPOINT_EVENTS = 0
    settings.FORGE_AUDIT_CHECKPOINT_SECONDS = 300
    append_events(2)

    checkpoint = checkpoint_if_due()

    assert checkpoint is not None and checkpoint.size == 2


def test_checkpoint_if_due_waits_until_the_last_checkpoint_is_older_than_the_cadence(settings):
    settings.FORGE_AUDIT_CHECKPOINT_EVENTS = 0
    settings.FORGE_AUDIT_CHECKPOINT_SECONDS = 300
    append_events(2)
    last = do_make_checkpoint()
    append_events(3)

    assert checkpoint_if_due(now=last.created_at + timedelta(seconds=299)) is None
    due = checkpoint_if_due(now=last.created_at + timedelta(seconds=300))

    assert due is not None and due.size == 5
    assert [checkpoint.size for checkpoint in AuditCheckpoint.objects.all()] == [2, 5]


def test_checkpoint_if_due_makes_nothing_when_no_event_was_appended_since(settings):
    settings.FORGE_AUDIT_CHECKPOINT_EVENTS = 0
    settings.FORGE_AUDIT_CHECKPOINT_SECONDS = 300
    append_events(2)
    last = do_make_checkpoint()

    assert checkpoint_if_due(now=last.created_at + timedelta(hours=1)) is None
    assert AuditCheckpoint.objects.count() == 1


def test_checkpoint_if_due_makes_nothing_when_the_seconds_cadence_is_off(settings):
    settings.FORGE_AUDIT_CHECKPOINT_EVENTS = 0
    settings.FORGE_AUDIT_CHECKPOINT_SECONDS = 0
    append_events(2)

    assert checkpoint_if_due() is None
    assert not AuditCheckpoint.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_no_checkpoint_is_signed_over_a_tree_inconsistent_with_the_last_one(settings):
    settings.FORGE_AUDIT_CHECKPOINT_EVENTS = 0
    append_events(4)
    do_make_checkpoint()
    # The perfect subtree over events 1-4 is part of every later root: change it behind the model's back.
    other = hashlib.sha256(b"another subtree").digest()
    change_behind_the_models_back("UPDATE audit_audittreenode SET hash = %s WHERE key = %s", [other, node_key(2, 0)])
    append_events(2)

    with pytest.raises(AuditUnavailable, match="inconsistent with checkpoint 4"):
        do_make_checkpoint()

    assert [checkpoint.size for checkpoint in AuditCheckpoint.objects.all()] == [4]

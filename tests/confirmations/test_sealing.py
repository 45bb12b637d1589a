"""Protection of contract records (confirmations.sealing): the canonical form of identities and intents,
artifacts encrypted and bound to their contract and kind, record MACs bound to the store, and the secret
files kept outside the database."""

from __future__ import annotations

import stat
import uuid

import pytest
from django.conf import settings

from confirmations import sealing


def test_canonical_json_is_sorted_compact_utf8():
    assert sealing.canonical_json({"b": [1, True, None], "a": "é"}) == '{"a":"é","b":[1,true,null]}'.encode()


def test_canonical_json_normalizes_keys_and_values_to_nfc():
    decomposed = {"Ka\u0308se": "Cafe\u0301"}
    assert sealing.canonical_json(decomposed) == sealing.canonical_json({"K\u00e4se": "Caf\u00e9"})


def test_canonical_json_is_the_same_whatever_the_order_of_keys():
    assert sealing.canonical_json({"a": 1, "b": {"d": 2, "c": 3}}) == sealing.canonical_json(
        {"b": {"c": 3, "d": 2}, "a": 1}
    )


@pytest.mark.parametrize("value", [0.5, {"nested": [1, 2.0]}, {"set": {1, 2}}, b"bytes", {"when": object()}])
def test_canonical_json_refuses_floats_and_values_without_a_canonical_form(value):
    with pytest.raises(sealing.NotCanonical):
        sealing.canonical_json(value)


def test_a_sealed_artifact_opens_for_its_contract_and_kind():
    contract = str(uuid.uuid4())
    sealed = sealing.seal(contract, "intent", b"the intent")
    assert b"the intent" not in sealed
    assert sealing.unseal(contract, "intent", sealed) == b"the intent"


def test_sealing_the_same_plaintext_twice_gives_different_ciphertexts():
    contract = str(uuid.uuid4())
    assert sealing.seal(contract, "intent", b"same") != sealing.seal(contract, "intent", b"same")


def test_a_sealed_artifact_does_not_open_for_another_contract():
    sealed = sealing.seal(str(uuid.uuid4()), "snapshot", b"content")
    with pytest.raises(sealing.ContractTampered):
        sealing.unseal(str(uuid.uuid4()), "snapshot", sealed)


def test_a_sealed_artifact_does_not_open_as_another_kind():
    contract = str(uuid.uuid4())
    sealed = sealing.seal(contract, "snapshot", b"content")
    with pytest.raises(sealing.ContractTampered):
        sealing.unseal(contract, "intent", sealed)


@pytest.mark.parametrize("sealed", [b"", b"short", b"\x00" * 40])
def test_a_damaged_or_empty_artifact_does_not_open(sealed):
    with pytest.raises(sealing.ContractTampered):
        sealing.unseal(str(uuid.uuid4()), "snapshot", sealed)


def test_a_record_mac_changes_with_any_part_of_the_record():
    parts = {"state": "PREPARED", "version": 2}
    assert sealing.mac(parts) != sealing.mac({**parts, "version": 3})
    sealing.check_mac(parts, sealing.mac(parts), "record")
    with pytest.raises(sealing.ContractTampered):
        sealing.check_mac({**parts, "state": "VERIFIED"}, sealing.mac(parts), "record")


def test_the_contract_secrets_are_files_only_their_owner_can_read():
    sealing.store_id()
    sealing.mac({})
    sealing.seal(str(uuid.uuid4()), "intent", b"x")
    for name in ("contract-store-id", "contract-hmac-key", "artifact-key"):
        mode = stat.S_IMODE((settings.FORGE_SECRETS_DIR / name).stat().st_mode)
        assert mode == 0o600, name


def test_two_keys_that_are_the_same_text_once_normalized_are_refused():
    with pytest.raises(sealing.NotCanonical):
        sealing.canonical_json({"caf\u00e9": 1, "cafe\u0301": 2})

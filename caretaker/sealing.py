"""The caretaker's seals: an HMAC, with a key kept in a file outside the database, over the rows that grant
trust (the activation, the accepted roster). A row edited behind Forge's back no longer matches its seal and
reads as absent: it cannot activate the caretaker nor move the accepted roster's sequence back.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from django.conf import settings

from forge_core.canonical import canonical_json
from forge_core.env import secret_file


@cache
def _key_in(folder: Path) -> bytes:
    return secret_file(folder, "caretaker-hmac-key", 32).encode()


def seal(parts: Mapping[str, Any]) -> str:
    return hmac.new(_key_in(settings.FORGE_SECRETS_DIR), canonical_json(parts).encode(), hashlib.sha256).hexdigest()


def is_sealed(parts: Mapping[str, Any], stored: str) -> bool:
    return bool(stored) and hmac.compare_digest(seal(parts), stored)

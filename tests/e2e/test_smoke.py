import httpx
import pytest

pytestmark = pytest.mark.live


def test_forge_server_answers_health_and_readiness(forge_server):
    assert httpx.get(f"{forge_server.base}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{forge_server.base}/readyz").json()
    assert ready["checks"] == {"database": True, "channel_layer": True}

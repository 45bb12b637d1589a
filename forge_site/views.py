"""Process health endpoints for load balancers and supervisors."""

from __future__ import annotations

import asyncio
import logging

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import DatabaseError, connection
from django.http import JsonResponse

logger = logging.getLogger("forge.health")


def healthz(request) -> JsonResponse:
    """The process is up and answering."""
    return JsonResponse({"status": "ok"})


def _database_answers() -> bool:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            return cursor.fetchone() == (1,)
    except DatabaseError:
        logger.warning("readiness: database does not answer", exc_info=True)
        return False


async def _channel_layer_answers() -> bool:
    layer = get_channel_layer()
    if layer is None:
        return False
    try:
        channel = await layer.new_channel()
        await layer.send(channel, {"type": "readyz.ping"})
        async with asyncio.timeout(2):
            return (await layer.receive(channel)).get("type") == "readyz.ping"
    except Exception:  # any failure of the layer means "not ready"; the log says which
        logger.warning("readiness: channel layer does not answer", exc_info=True)
        return False


async def readyz(request) -> JsonResponse:
    """The database and the channel layer both answer."""
    checks = {
        "database": await sync_to_async(_database_answers)(),
        "channel_layer": await _channel_layer_answers(),
    }
    ready = all(checks.values())
    return JsonResponse({"status": "ready" if ready else "not ready", "checks": checks}, status=200 if ready else 503)

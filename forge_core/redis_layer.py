"""The Redis channel layer of a scale-out deployment (`REDIS_URL`): channels-redis's, with a group send in two
round trips to Redis instead of four.

A decision made in one process reaches the waiting call in another through a group send (docs/PERFORMANCE.md,
section 14): channels-redis trims the group's expired members, reads its members, trims each member's expired
messages and then adds the message to each, each a round trip of its own, with the sender's event loop shared
with the request threads between them. Here the first two go in one pipeline and the last two in one script
(trim, then the capacity check and the add, per member, as channels-redis's own script adds): the same
commands in the same order, the trim and the add of a member now atomic where they were not.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from channels_redis import core  # type: ignore[import-untyped]  # no annotations or stubs

logger = logging.getLogger("forge.live")

# KEYS: the members' message keys; ARGV: a message per key, a capacity per key, then the time (the score of the
# message), the expiry of a key in seconds and the score under which a key's messages have expired.
GROUP_SEND = """
local over_capacity = 0
local current_time = ARGV[#ARGV - 2]
local expiry = ARGV[#ARGV - 1]
local expired_before = ARGV[#ARGV]
for i = 1, #KEYS do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], 0, expired_before)
    if redis.call('ZCOUNT', KEYS[i], '-inf', '+inf') < tonumber(ARGV[i + #KEYS]) then
        redis.call('ZADD', KEYS[i], current_time, ARGV[i])
        redis.call('EXPIRE', KEYS[i], expiry)
    else
        over_capacity = over_capacity + 1
    end
end
return over_capacity
"""


class RedisChannelLayer(core.RedisChannelLayer):
    """channels-redis's layer (`channels_redis.core.RedisChannelLayer`) whose `group_send` makes two round trips."""

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        assert self.require_valid_group_name(group), "Group name not valid"
        key = self._group_key(group)
        connection = self.connection(self.consistent_hash(group))
        pipe = connection.pipeline(transaction=False)
        pipe.zremrangebyscore(key, min=0, max=int(time.time()) - self.group_expiry)
        pipe.zrange(key, 0, -1)
        _, members = await pipe.execute()
        by_connection, messages, capacities = self._map_channel_keys_to_connection(
            [member.decode("utf8") for member in members], message
        )
        for index, keys in by_connection.items():
            args = [
                *(messages[key] for key in keys),
                *(capacities[key] for key in keys),
                time.time(),
                self.expiry,
                int(time.time()) - int(self.expiry),
            ]
            over_capacity = await self.connection(index).eval(GROUP_SEND, len(keys), *keys, *args)
            if over_capacity > 0:
                logger.info("%s of %s channels over capacity in group %s", over_capacity, len(members), group)

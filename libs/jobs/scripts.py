"""The Lua scripts of the job store (libs.jobs.store): each is one atomic step, so Redis orders every
change to a job against every other. Arguments are listed above each script."""

from __future__ import annotations

from typing import Final

# KEYS: idempotency key ("" none), job, text, index, queue. ARGV: id, fingerprint, ttl, now, text, then field pairs.
CREATE: Final = """
if KEYS[1] ~= '' then
  local held = redis.call('GET', KEYS[1])
  if held then return {0, held} end
  redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. ARGV[2], 'EX', ARGV[3])
end
redis.call('HSET', KEYS[2], unpack(ARGV, 6))
redis.call('EXPIRE', KEYS[2], ARGV[3])
redis.call('SET', KEYS[3], ARGV[5], 'EX', ARGV[3])
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[1])
redis.call('HSET', KEYS[2], 'entry', redis.call('XADD', KEYS[5], '*', 'job', ARGV[1]))
return {1, ARGV[1]}
"""
# KEYS: job. ARGV: owner, now. Returns the state (running when taken).
TAKE: Final = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 'missing' end
if state ~= 'queued' and state ~= 'running' then return state end
redis.call('HSET', KEYS[1], 'state', 'running', 'owner', ARGV[1], 'updated_s', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'attempts', 1)
return 'running'
"""
# KEYS: job, pcm value, text, words value. ARGV: owner, sentences_done before, audio, ttl, now, chars_done, samples, words.
COMMIT: Final = """
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
if redis.call('HGET', KEYS[1], 'sentences_done') ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[2], ARGV[3], 'EX', ARGV[4])
redis.call('SET', KEYS[4], ARGV[8], 'EX', ARGV[4])
redis.call('HSET', KEYS[1], 'sentences_done', ARGV[2] + 1, 'chars_done', ARGV[6], 'updated_s', ARGV[5])
redis.call('HINCRBY', KEYS[1], 'audio_samples', ARGV[7])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('EXPIRE', KEYS[3], ARGV[4])
return 1
"""
# KEYS: job. ARGV: owner, state, error, now, ttl. Only the owner of a running job ends it.
FINISH: Final = """
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'error', ARGV[3], 'updated_s', ARGV[4], 'owner', '')
if ARGV[2] == 'succeeded' then redis.call('HSET', KEYS[1], 'chars_done', redis.call('HGET', KEYS[1], 'text_chars')) end
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""
# KEYS: queue. ARGV: group, consumer, entry id. XCLAIM alone would take the entry from whoever holds it.
RENEW: Final = """
local pending = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[3], ARGV[3], 1)
if #pending == 0 or pending[1][2] ~= ARGV[2] then return 0 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'JUSTID')
return 1
"""
# KEYS: job, queue. ARGV: now, ttl. Cancels a job that has not ended; returns the state it is left in.
# A queued job's stream entry goes too, so the queue's depth drops at once (a taken one is acknowledged
# by its runner).
CANCEL: Final = """
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return 'missing' end
if state == 'queued' or state == 'running' then
  redis.call('HSET', KEYS[1], 'state', 'cancelled', 'error', 'cancelled by the client', 'updated_s', ARGV[1], 'owner', '')
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  local entry = redis.call('HGET', KEYS[1], 'entry')
  if state == 'queued' and entry then redis.call('XDEL', KEYS[2], entry) end
  return 'cancelled'
end
return state
"""

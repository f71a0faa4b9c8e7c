-- End the run in progress of a job and promote the occurrence queued behind it, if any.
--
-- Keys
--   KEYS[1]  `<prefix><job>` (by default `ddd_celery:run:<job>`): a hash that exists while a
--            run is in progress, expiring (PEXPIRE) when that run's time to live has passed;
--              running  the occurrence in progress, in epoch milliseconds
--              queued   the occurrence waiting behind it, in epoch milliseconds (at most one)
-- Arguments
--   ARGV[1]  the occurrence whose run ends, in epoch milliseconds.
--   ARGV[2]  the time to live of the promoted run, in milliseconds (positive).
-- Returns
--   the promoted occurrence in epoch milliseconds, now the run in progress for ARGV[2] ms;
--   nil when nothing was queued (the hash is deleted), or when ARGV[1] is no longer the run
--   in progress because it expired (nothing changes).
--   Sent again with the same arguments (redis-py re-sends after a socket timeout, the first
--   reply lost), it answers as the first did: the hash's `promoted_from` names the run whose end
--   promoted the one in progress, so that end gets the promoted occurrence again, to send it.
local slot = redis.call('HMGET', KEYS[1], 'running', 'queued', 'promoted_from')
if slot[1] ~= ARGV[1] then
  if slot[3] == ARGV[1] then
    return tonumber(slot[1]) -- sent again: this end already promoted the run in progress
  end
  return false
end
if not slot[2] then
  redis.call('DEL', KEYS[1])
  return false
end
redis.call('HSET', KEYS[1], 'running', slot[2], 'promoted_from', ARGV[1])
redis.call('HDEL', KEYS[1], 'queued')
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return tonumber(slot[2])

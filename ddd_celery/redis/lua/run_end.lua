-- End a run on the worker: keep its last run (as last_run_write.lua), then end the run in
-- progress and promote the occurrence queued behind it (as run_finish.lua). One round trip.
--
-- Keys
--   KEYS[1]  the run state, `<prefix><job>` (see run_finish.lua).
--   KEYS[2]  the last run, `<prefix><job>` (see last_run_write.lua); any key name when no
--            record is kept (never read).
-- Arguments
--   ARGV[1]  the occurrence whose run ends, in epoch milliseconds.
--   ARGV[2]  the time to live of the promoted run, in milliseconds (positive).
--   ARGV[3]  '1' to keep the record ARGV[4].
--   ARGV[4]  the record of the run, JSON.
-- Returns
--   the promoted occurrence in epoch milliseconds, or nil, as run_finish.lua (sent again, it
--   answers the same: see `promoted_from` there).
if ARGV[3] == '1' then
  local current = redis.call('HGET', KEYS[2], 'at')
  if not current or tonumber(current) <= tonumber(ARGV[1]) then
    redis.call('HSET', KEYS[2], 'at', ARGV[1], 'run', ARGV[4])
  end
end
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

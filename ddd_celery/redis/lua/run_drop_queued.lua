-- Remove the occurrence queued behind a job's run in progress (a scheduler stopping).
--
-- Keys
--   KEYS[1]  `<prefix><job>` (by default `ddd_celery:run:<job>`): a hash that exists while a
--            run is in progress, expiring (PEXPIRE) when that run's time to live has passed;
--              running  the occurrence in progress, in epoch milliseconds
--              queued   the occurrence waiting behind it, in epoch milliseconds (at most one)
-- Arguments
--   none.
-- Returns
--   the removed occurrence in epoch milliseconds, or nil when none waited. The run in
--   progress and its time to live are left as they were.
local queued = redis.call('HGET', KEYS[1], 'queued')
if not queued then
  return false
end
redis.call('HDEL', KEYS[1], 'queued')
return tonumber(queued)

-- Record a job's checkpoint unless a later one is recorded: a checkpoint only moves forward.
--
-- Keys
--   KEYS[1]  `<prefix><job>` (by default `ddd_celery:checkpoint:<job>`): a string holding the
--            last occurrence handled, in epoch milliseconds (a decimal integer); no expiry,
--            since a checkpoint must cross a restart.
-- Arguments
--   ARGV[1]  the occurrence handled, in epoch milliseconds.
-- Returns
--   1 when written; 0 when the recorded instant is the same or later (unchanged).
local current = redis.call('GET', KEYS[1])
if current and tonumber(current) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
return 1

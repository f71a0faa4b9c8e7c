-- Claim an occurrence of a job: start it, queue it behind the run in progress, or refuse it.
--
-- Keys
--   KEYS[1]  `<prefix><job>` (by default `ddd_celery:run:<job>`): a hash that exists while a
--            run is in progress, expiring (PEXPIRE) when that run's time to live has passed;
--              running  the occurrence in progress, in epoch milliseconds
--              queued   the occurrence waiting behind it, in epoch milliseconds (at most one)
--            The queued occurrence expires with the run it waits behind.
-- Arguments
--   ARGV[1]  the occurrence, in epoch milliseconds.
--   ARGV[2]  '1' to queue it when a run is in progress, '0' to refuse it.
--   ARGV[3]  the time to live of a run started now, in milliseconds (positive).
-- Returns
--   'started' (it is now the run in progress), 'queued' (it waits behind the run in
--   progress) or 'busy' (a run is in progress and, when queueing, another already waits).
--   A claim of the occurrence in progress or queued answers as its first send did: only the
--   holder of the occurrence's lock claims it, so that is this claim sent again (redis-py
--   resends a script whose reply was late).
local slot = redis.call('HMGET', KEYS[1], 'running', 'queued')
if not slot[1] then
  redis.call('HSET', KEYS[1], 'running', ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 'started'
end
if slot[1] == ARGV[1] then
  return 'started'
end
if slot[2] == ARGV[1] then
  return 'queued'
end
if ARGV[2] == '1' and not slot[2] then
  redis.call('HSET', KEYS[1], 'queued', ARGV[1])
  return 'queued'
end
return 'busy'

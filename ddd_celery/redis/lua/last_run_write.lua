-- Keep the record of a job's latest occurrence: one of an earlier occurrence never replaces it.
--
-- Keys
--   KEYS[1]  `<prefix><job>` (by default `ddd_celery:last-run:<job>`): a hash with
--              at   the occurrence recorded, in epoch milliseconds (a decimal integer)
--              run  its record, a JSON object (job, context, scheduled_at, outcome, started_at,
--                   duration_ms, error_code, error_type, correlation_id, tenant_id)
--            No expiry: a job that runs once a month still shows its last outcome.
-- Arguments
--   ARGV[1]  the occurrence of the record, in epoch milliseconds.
--   ARGV[2]  the record, JSON.
-- Returns
--   1 when kept, replacing a record of the same or an earlier occurrence; 0 when a later
--   occurrence is recorded (unchanged).
local current = redis.call('HGET', KEYS[1], 'at')
if current and tonumber(current) > tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'at', ARGV[1], 'run', ARGV[2])
return 1

-- Add a queued job, unless its tenant already has a job with its idempotency key.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P job:<id>, the new job's hash.
--   KEYS[2]  P key:<n>:<tenant>:<idempotency key> (rules.scoped_idempotency_key), when the
--            job has a key: the id of its job.
--   Also P list:all, P list:status:queued, P list:name:<name>, P list:tenant:<tenant> (when
--   it has one), P stats, P stats:name, P queue:<queue> and P pending or P dispatched.
-- Arguments
--   ARGV[2..11]  id, name, queue, payload (JSON), enqueued_at, run_at, max_attempts,
--                enqueued_by (JSON), tenant ('' for none), idempotency key ('' for none).
--   ARGV[12]     '1' when the caller publishes its wake-up now (P dispatched, at enqueued_at),
--                '0' when the relay must (P pending, by run_at).
-- Returns
--   the id of the job kept: the new one, or the one enqueued earlier with the same key (or
--   with the same id), in which case nothing changes.
local id = ARGV[2]
if KEYS[2] then
  local earlier = redis.call('GET', KEYS[2])
  if earlier and redis.call('EXISTS', job_key(earlier)) == 1 then
    return earlier
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return id
end
local fields = {'id', id, 'name', ARGV[3], 'queue', ARGV[4], 'payload', ARGV[5],
  'enqueued_at', ARGV[6], 'run_at', ARGV[7], 'attempts', 0, 'max_attempts', ARGV[8],
  'enqueued_by', ARGV[9], 'tenant', ARGV[10]}
if KEYS[2] then
  fields[#fields + 1] = 'idempotency_key'
  fields[#fields + 1] = ARGV[11]
  redis.call('SET', KEYS[2], id)
end
local job = {id = id, name = ARGV[3], queue = ARGV[4], enqueued_at = ARGV[6], tenant = ARGV[10]}
for _, key in ipairs(listings(job)) do
  redis.call('ZADD', key, 0, member(job))
end
move(job, 'queued', fields)
redis.call('ZADD', P .. 'queue:' .. ARGV[4], ARGV[7], id)
if ARGV[12] == '1' then
  redis.call('ZADD', P .. 'dispatched', ARGV[6], id)
else
  redis.call('ZADD', P .. 'pending', ARGV[7], id)
end
return id

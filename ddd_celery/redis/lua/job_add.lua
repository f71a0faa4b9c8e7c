-- Add a queued job, unless its tenant already has a job with its idempotency key.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P job:<id>, the new job's hash.
--   Also P key:<tenant>:<idempotency key> when the job has a key (the id of its job),
--   P enqueued, P status:queued, P stats, P queue:<queue> and P pending or P dispatched.
-- Arguments
--   ARGV[2]  a JSON array of strings: id, name, queue, enqueued_at, run_at, max_attempts,
--            tenant ('' for none), idempotency key (null for none), and '1' when the caller
--            publishes its wake-up now (P dispatched, at enqueued_at), '0' when the relay must
--            (P pending, by run_at). One argument, not nine: redis-py packs each in Python.
--   ARGV[3]  the payload (JSON), ARGV[4] enqueued_by (JSON), stored as they are.
-- Returns
--   the id of the job kept: the new one, or the one enqueued earlier with the same key (or
--   with the same id), in which case nothing changes.
local a = cjson.decode(ARGV[2])
local id, queue, enqueued_at, run_at, key = a[1], a[3], a[4], a[5], a[8]
local key_key = key ~= cjson.null and (P .. 'key:' .. a[7] .. ':' .. key) or nil
if key_key then
  local earlier = redis.call('GET', key_key)
  if earlier and redis.call('EXISTS', job_key(earlier)) == 1 then
    return earlier
  end
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return id
end
local fields = {'id', id, 'name', a[2], 'queue', queue, 'payload', ARGV[3],
  'enqueued_at', enqueued_at, 'run_at', run_at, 'attempts', 0, 'max_attempts', a[6],
  'enqueued_by', ARGV[4], 'tenant', a[7]}
if key_key then
  fields[#fields + 1] = 'idempotency_key'
  fields[#fields + 1] = key
  redis.call('SET', key_key, id)
end
move({id = id, queue = queue, enqueued_at = enqueued_at}, 'queued', fields)
redis.call('ZADD', P .. 'enqueued', enqueued_at, id)
redis.call('ZADD', P .. 'queue:' .. queue, run_at, id)
if a[9] == '1' then
  redis.call('ZADD', P .. 'dispatched', enqueued_at, id)
else
  redis.call('ZADD', P .. 'pending', run_at, id)
end
return id

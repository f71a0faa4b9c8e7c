-- Write `count` generated jobs straight into a RedisJobStore's keys, for
-- bench/bench_operations.py: filling a million jobs through the store's scripts (add, claim,
-- complete: three round trips a job) takes minutes, this a few seconds a hundred thousand.
--
-- The layout is RedisJobStore's (ddd_celery/redis/lua/job_lib.lua), P = ARGV[1]:
--   P job:<id>                  hash, the record (the fields job_lib.lua lists)
--   P list:all, P list:status:<status>, P list:name:<name>, P list:tenant:<tenant>
--                               the listing, score 0, member `<enqueued_at + ORIGIN_MS, 15
--                               digits>:<id>`
--   P finished:<status>         a finished job, by finished_at
--   P pending, P queue:<queue>  a claimable job (queued, failed), by run_at
--   P leases                    a running job, by lease expiry
--   P stats, P stats:name       `<queue>|<status>`, `<name>|<status>` -> how many
-- The bench reads a sample of what it wrote back through the store, so a change of the layout
-- fails the bench instead of measuring something else.
--
-- Arguments
--   ARGV[2]  the first job's index; ARGV[3] how many jobs.
--   ARGV[4]  the mix: `list` (every state, job i's LIST_STATES[i % 20 + 1], its name
--            bench.job-<i // 20 % 10>, its tenant tenant-<i // 40 % 10>), `purge` (succeeded,
--            one in five cancelled) or `dead`; the ids are `<mix>-<index, 9 digits>`.
--   ARGV[5]  the first job's enqueued_at, epoch ms (job i is enqueued i ms later).
--   ARGV[6]  now, epoch ms: a scheduled job runs a day after it, a lease expires an hour after.
--   ARGV[7]  how long after it was enqueued a finished job finished, ms.
-- Returns the number of jobs written.
local P = ARGV[1]
local first, count = tonumber(ARGV[2]), tonumber(ARGV[3])
local mix, base, now = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local took = tonumber(ARGV[7])
local ORIGIN_MS = 62135596800000
local QUEUE = 'bench'
local FINISHED = {succeeded = true, dead = true, cancelled = true}
-- the list mix, by index modulo 20: half succeeded, then 2 each of the other states but one
local LIST_STATES = {'succeeded', 'succeeded', 'succeeded', 'succeeded', 'succeeded',
  'succeeded', 'succeeded', 'succeeded', 'succeeded', 'succeeded', 'cancelled', 'cancelled',
  'dead', 'dead', 'ready', 'ready', 'scheduled', 'scheduled', 'failed', 'running'}
local stats, by_name = {}, {}

local function add(counts, field)
  counts[field] = (counts[field] or 0) + 1
end

for i = first, first + count - 1 do
  local id = string.format('%s-%09d', mix, i)
  local state
  if mix == 'list' then
    state = LIST_STATES[i % 20 + 1]
  elseif mix == 'purge' then
    state = (i % 5 == 4) and 'cancelled' or 'succeeded'
  else
    state = 'dead'
  end
  local name = 'bench.job-' .. (math.floor(i / 20) % 10)
  local tenant = mix == 'list' and ('tenant-' .. (math.floor(i / 40) % 10)) or ''
  local enqueued_at = base + i
  local status, run_at = state, enqueued_at
  if state == 'ready' or state == 'scheduled' then
    status = 'queued'
    if state == 'scheduled' then
      run_at = now + 86400000
    end
  elseif state == 'failed' then
    run_at = now + 3600000
  end
  local enqueued_by = cjson.encode({correlation_id = id, actor = 'system:bench',
    tenant_id = tenant == '' and cjson.null or tenant, traceparent = cjson.null})
  local fields = {'id', id, 'name', name, 'queue', QUEUE, 'status', status, 'payload',
    '{"month":"2026-10"}', 'enqueued_at', enqueued_at, 'run_at', run_at, 'attempts',
    (status == 'queued' or status == 'cancelled') and 0 or 1, 'max_attempts', 3,
    'enqueued_by', enqueued_by, 'tenant', tenant}
  local function set(field, value)
    fields[#fields + 1] = field
    fields[#fields + 1] = value
  end
  if status ~= 'queued' and status ~= 'cancelled' then
    local attempt = {number = 1, started_at = tostring(enqueued_at), worker = 'celery@bench',
      outcome = 'running'}
    if status ~= 'running' then
      attempt.ended_at = tostring(enqueued_at + took)
      attempt.outcome = status == 'succeeded' and 'succeeded' or 'failed'
    end
    if status == 'failed' or status == 'dead' then
      attempt.error_code, attempt.error_type = 'UNEXPECTED_ERROR', 'RuntimeError'
      set('last_error_code', 'UNEXPECTED_ERROR')
      set('last_error_type', 'RuntimeError')
    end
    set('history', cjson.encode({attempt}))
  end
  local m = string.format('%015d', enqueued_at + ORIGIN_MS) .. ':' .. id
  if FINISHED[status] then
    set('finished_at', enqueued_at + took)
    redis.call('ZADD', P .. 'finished:' .. status, enqueued_at + took, id)
  elseif status == 'running' then
    set('lease_token', 'lease-' .. id)
    set('lease_expires_at', now + 3600000)
    redis.call('ZADD', P .. 'leases', now + 3600000, id)
  else
    redis.call('ZADD', P .. 'pending', run_at, id)
    redis.call('ZADD', P .. 'queue:' .. QUEUE, run_at, id)
  end
  redis.call('HSET', P .. 'job:' .. id, unpack(fields))
  redis.call('ZADD', P .. 'list:all', 0, m)
  redis.call('ZADD', P .. 'list:status:' .. status, 0, m)
  redis.call('ZADD', P .. 'list:name:' .. name, 0, m)
  if tenant ~= '' then
    redis.call('ZADD', P .. 'list:tenant:' .. tenant, 0, m)
  end
  add(stats, QUEUE .. '|' .. status)
  add(by_name, name .. '|' .. status)
end
for field, n in pairs(stats) do
  redis.call('HINCRBY', P .. 'stats', field, n)
end
for field, n in pairs(by_name) do
  redis.call('HINCRBY', P .. 'stats:name', field, n)
end
return count

-- The helpers every job_*.lua script starts with (RedisJobStore prepends this file to each).
--
-- Key layout of RedisJobStore, every key under the prefix P given as ARGV[1]
-- (by default `ddd_celery:bg:`); instants are epoch milliseconds (decimal integers):
--   P job:<id>          hash, the record of a job:
--                         id, name, queue, status, payload (JSON), enqueued_at, run_at,
--                         attempts, max_attempts, enqueued_by (JSON: correlation_id, actor,
--                         tenant_id, traceparent), tenant (the tenant id, or '' for none),
--                         and when set: idempotency_key, progress (JSON), checkpoint (JSON),
--                         last_error_code, last_error_type, lease_token, lease_expires_at,
--                         finished_at
--   P pending           zset, claimable jobs (queued, failed) the relay must publish, by run_at
--   P dispatched        zset, claimable jobs published and not claimed yet, by dispatch instant
--   P leases            zset, running jobs, by lease expiry
--   P queue:<queue>     zset, the claimable jobs of a queue, by run_at (claim_due)
--   P finished          zset, succeeded, dead and cancelled jobs, by finished_at
--   P enqueued          zset, every job, by enqueued_at (list_jobs)
--   P status:<status>   zset, the jobs in a status, by enqueued_at (list_jobs by status)
--   P key:<tenant>:<k>  string, the id of the job enqueued with idempotency key k by tenant
--                       (the tenant id or '' for none), deleted when that job is purged
--   P stats             hash, `<queue>|<status>` -> how many jobs; a count of 0 is deleted
-- No key expires: a job lives until purge_finished deletes it. Every key of a store shares
-- the prefix: with a hash tag in it (`ddd_celery:{bg}:`) they share a Redis Cluster slot.
local P = ARGV[1]

local function job_key(id)
  return P .. 'job:' .. id
end

-- The fields a script decides on, or nil for an unknown job.
local function read_job(id)
  local f = redis.call('HMGET', job_key(id), 'status', 'queue', 'enqueued_at', 'attempts',
    'max_attempts', 'lease_token', 'tenant', 'idempotency_key', 'name', 'run_at')
  if not f[1] then
    return nil
  end
  return {
    id = id, status = f[1], queue = f[2], enqueued_at = f[3], attempts = tonumber(f[4]),
    max_attempts = tonumber(f[5]), lease_token = f[6], tenant = f[7], idempotency_key = f[8],
    name = f[9], run_at = tonumber(f[10]),
  }
end

-- Whether `filter` reaches the job: '*' reaches every job, '=<tenant>' the tenant's.
local function reaches(job, filter)
  return filter == '*' or filter == '=' .. job.tenant
end

local function count(queue, status, by)
  local field = queue .. '|' .. status
  if redis.call('HINCRBY', P .. 'stats', field, by) <= 0 then
    redis.call('HDEL', P .. 'stats', field)
  end
end

-- Move a job to status `to` (from none when it is new), in its record, its status index and
-- the stats; `fields` (optional, a flat list of field, value) are set in the same HSET.
local function move(job, to, fields)
  if job.status then
    count(job.queue, job.status, -1)
    redis.call('ZREM', P .. 'status:' .. job.status, job.id)
  end
  count(job.queue, to, 1)
  redis.call('ZADD', P .. 'status:' .. to, job.enqueued_at, job.id)
  redis.call('HSET', job_key(job.id), 'status', to, unpack(fields or {}))
  job.status = to
end

-- Take the job out of the indexes of its status: P leases for a running job, the indexes of
-- claimable jobs otherwise (a running job is in no other, a claimable one never in P leases:
-- claim and every end of a lease go through here).
local function unindex(job)
  if job.status == 'running' then
    redis.call('ZREM', P .. 'leases', job.id)
    return
  end
  redis.call('ZREM', P .. 'pending', job.id)
  redis.call('ZREM', P .. 'dispatched', job.id)
  redis.call('ZREM', P .. 'queue:' .. job.queue, job.id)
end

-- Make the job claimable from `run_at`, waiting for the relay to publish it.
local function make_claimable(job, run_at)
  redis.call('ZADD', P .. 'pending', run_at, job.id)
  redis.call('ZADD', P .. 'queue:' .. job.queue, run_at, job.id)
  redis.call('HSET', job_key(job.id), 'run_at', run_at)
end

local function drop_lease(job)
  redis.call('HDEL', job_key(job.id), 'lease_token', 'lease_expires_at')
end

local function finish(job, to, now)
  unindex(job)
  if job.status == 'running' then
    drop_lease(job)
  end
  move(job, to, {'finished_at', now})
  redis.call('ZADD', P .. 'finished', now, job.id)
end

-- A claimable job's record, read whole for a claim: the fields a script decides on (as
-- read_job gives them), and every field by name; nil for an unknown job.
local function read_record(id)
  local flat = redis.call('HGETALL', job_key(id))
  if #flat == 0 then
    return nil
  end
  local r = {}
  for i = 1, #flat, 2 do
    r[flat[i]] = flat[i + 1]
  end
  local job = {
    id = id, status = r.status, queue = r.queue, enqueued_at = r.enqueued_at,
    attempts = tonumber(r.attempts), max_attempts = tonumber(r.max_attempts),
    lease_token = r.lease_token, tenant = r.tenant, idempotency_key = r.idempotency_key,
    name = r.name, run_at = tonumber(r.run_at),
  }
  return job, r
end

-- The fields of a record that hold JSON, spliced into a claim's reply as they are.
local JSON_FIELDS = {'payload', 'enqueued_by', 'progress', 'checkpoint'}

-- Claim a claimable job (its record `r` from read_record) for an attempt under lease `token`
-- until `expires`. Returns its record after the claim as one JSON object: its JSON fields as
-- JSON values, the others as strings; one bulk string that Python reads with one json.loads,
-- far faster than an HGETALL reply of thirty whose JSON fields are parsed one by one.
local function claim(job, r, token, expires)
  unindex(job)
  redis.call('ZADD', P .. 'leases', expires, job.id)
  local attempts = job.attempts + 1
  move(job, 'running', {'attempts', attempts, 'lease_token', token, 'lease_expires_at', expires})
  r.status, r.attempts, r.lease_token, r.lease_expires_at =
    'running', tostring(attempts), token, tostring(expires)
  local parts = {}
  for _, field in ipairs(JSON_FIELDS) do
    if r[field] then
      parts[#parts + 1] = '"' .. field .. '":' .. r[field]
      r[field] = nil
    end
  end
  parts[#parts + 1] = '"record":' .. cjson.encode(r)
  return '{' .. table.concat(parts, ',') .. '}'
end

-- The running job `id` when `token` is its lease, or nil (the lease is lost).
local function leased(id, token)
  local job = read_job(id)
  if job and job.status == 'running' and job.lease_token == token then
    return job
  end
  return nil
end

local function claimable(job)
  return job.status == 'queued' or job.status == 'failed'
end

-- (the script proper follows)

-- The helpers every job_*.lua script starts with (RedisJobStore prepends this file to each).
--
-- Key layout of RedisJobStore, every key under the prefix P given as ARGV[1]
-- (by default `ddd_celery:bg:`); instants are epoch milliseconds (decimal integers):
--   P job:<id>          hash, the record of a job:
--                         id, name, queue, status, payload (JSON), enqueued_at, run_at,
--                         attempts, max_attempts, enqueued_by (JSON: correlation_id, actor,
--                         tenant_id, traceparent), tenant (the tenant id, or '' for none),
--                         and when set: idempotency_key, progress (JSON), checkpoint (JSON),
--                         last_error_code, last_error_type (deleted at success), lease_token,
--                         lease_expires_at, finished_at, last_lease_token and last_lease_end
--                         (the lease that ended last and how: complete, fail, release,
--                         cancel, expire; a report it repeats is answered as done),
--                         redispatches (re-sends since the job became claimable)
--   P pending           zset, claimable jobs (queued, failed) the relay must publish, by run_at
--   P dispatched        zset, claimable jobs published and not claimed yet, scored by the
--                       instant they are due for a re-send minus redispatch_after_ms (so the
--                       first re-send comes redispatch_after_ms after the dispatch, as
--                       take_due's ARGV[3] reads it; later ones wait 2, 4, 8 times that)
--   P leases            zset, running jobs, by lease expiry
--   P queue:<queue>     zset, the claimable jobs of a queue, by run_at (claim_due)
--   P finished          zset, succeeded, dead and cancelled jobs, by finished_at
--   P enqueued          zset, every job, by enqueued_at (list_jobs)
--   P status:<status>   zset, the jobs in a status, by enqueued_at (list_jobs by status)
--   P key:<n>:<tenant>:<k>  string, the id of the job enqueued with idempotency key k by
--                       tenant (the tenant id or '' for none), n the tenant's length in bytes
--                       (rules.scoped_idempotency_key: no two pairs share a key); deleted when
--                       that job is purged
--   P stats             hash, `<queue>|<status>` -> how many jobs; a count of 0 is deleted
--   P claimed:<token>   list, the ids a claim_due named <token> claimed, in order, so that call
--                       repeated answers them again; expires after the lease
--   P taken:<token>     string, the flat reply (id, name, queue...) of the take_due named
--                       <token> as a JSON array, so that call repeated answers it again;
--                       expires after a minute
-- No other key expires: a job lives until purge_finished deletes it. Every key of a store
-- shares the prefix: with a hash tag in it (`ddd_celery:{bg}:`) they share a Redis Cluster
-- slot. An index entry whose job hash is gone (evicted, deleted by hand) is skipped and dropped.
local P = ARGV[1]

local function job_key(id)
  return P .. 'job:' .. id
end

-- The fields a script decides on, or nil for an unknown job.
local function read_job(id)
  local f = redis.call('HMGET', job_key(id), 'status', 'queue', 'enqueued_at', 'attempts',
    'max_attempts', 'lease_token', 'tenant', 'idempotency_key', 'name', 'run_at', 'redispatches')
  if not f[1] then
    return nil
  end
  return {
    id = id, status = f[1], queue = f[2], enqueued_at = f[3], attempts = tonumber(f[4]),
    max_attempts = tonumber(f[5]), lease_token = f[6], tenant = f[7], idempotency_key = f[8],
    name = f[9], run_at = tonumber(f[10]), redispatches = tonumber(f[11]) or 0,
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

-- Make the job claimable from `run_at`, waiting for the relay to publish it; its count of
-- re-sends starts over.
local function make_claimable(job, run_at)
  redis.call('ZADD', P .. 'pending', run_at, job.id)
  redis.call('ZADD', P .. 'queue:' .. job.queue, run_at, job.id)
  redis.call('HSET', job_key(job.id), 'run_at', run_at)
  redis.call('HDEL', job_key(job.id), 'redispatches')
end

-- End the running job's lease, noting it and `how` it ended (complete, fail, release, cancel,
-- expire), so a report its attempt sends twice is answered as the first was.
local function drop_lease(job, how)
  redis.call('HDEL', job_key(job.id), 'lease_token', 'lease_expires_at')
  redis.call('HSET', job_key(job.id), 'last_lease_token', job.lease_token, 'last_lease_end', how)
end

-- `how` says how a running job's lease ended (see drop_lease).
local function finish(job, to, now, how)
  unindex(job)
  if job.status == 'running' then
    drop_lease(job, how)
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

-- A claim's reply: the record `r` as one JSON object, its JSON fields as JSON values, the
-- others as strings; one bulk string that Python reads with one json.loads, far faster than an
-- HGETALL reply of thirty whose JSON fields are parsed one by one.
local function claim_reply(r)
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

-- Claim a claimable job (its record `r` from read_record) for an attempt under lease `token`
-- until `expires`; its record after the claim (claim_reply).
local function claim(job, r, token, expires)
  unindex(job)
  redis.call('ZADD', P .. 'leases', expires, job.id)
  local attempts = job.attempts + 1
  move(job, 'running', {'attempts', attempts, 'lease_token', token, 'lease_expires_at', expires})
  redis.call('HDEL', job_key(job.id), 'last_lease_token', 'last_lease_end')
  r.status, r.attempts, r.lease_token, r.lease_expires_at =
    'running', tostring(attempts), token, tostring(expires)
  r.last_lease_token, r.last_lease_end = nil, nil
  return claim_reply(r)
end

-- A claim repeated by the attempt already running the job (same lease token, its first reply
-- lost): the same lease, its expiry moved to `expires`, the attempt not counted again.
local function claim_again(job, r, expires)
  redis.call('ZADD', P .. 'leases', expires, job.id)
  redis.call('HSET', job_key(job.id), 'lease_expires_at', expires)
  r.lease_expires_at = tostring(expires)
  return claim_reply(r)
end
-- The running job `id` when `token` is its lease, or nil (the lease is lost).
local function leased(id, token)
  local job = read_job(id)
  if job and job.status == 'running' and job.lease_token == token then
    return job
  end
  return nil
end

-- Whether the job's last lease was `token` and ended `how`: a report that attempt repeats.
local function concluded(id, token, how)
  local f = redis.call('HMGET', job_key(id), 'lease_token', 'last_lease_token', 'last_lease_end')
  return not f[1] and f[2] == token and f[3] == how
end

-- RPUSH every value of `values` to `key`, in chunks (unpack has a limit), and keep the key
-- `ttl_ms`; nothing when there is none.
local function push_all(key, values, ttl_ms)
  for i = 1, #values, 1000 do
    redis.call('RPUSH', key, unpack(values, i, math.min(i + 999, #values)))
  end
  if #values > 0 then
    redis.call('PEXPIRE', key, ttl_ms)
  end
end

local function claimable(job)
  return job.status == 'queued' or job.status == 'failed'
end

-- (the script proper follows)

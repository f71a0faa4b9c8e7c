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
--                         redispatches (re-sends since the job became claimable), history
--                         (JSON array of its last ATTEMPTS_KEPT attempts, oldest first, each
--                         {number, started_at, worker, outcome, ended_at, error_code,
--                         error_type}, instants as decimal text; a claim appends one, running,
--                         and the end of its lease ends it)
--   P pending           zset, claimable jobs (queued, failed) the relay must publish, by run_at
--   P dispatched        zset, claimable jobs published and not claimed yet, scored by the
--                       instant they are due for a re-send minus redispatch_after_ms (so the
--                       first re-send comes redispatch_after_ms after the dispatch, as
--                       take_due's ARGV[3] reads it; later ones wait 2, 4, 8 times that)
--   P leases            zset, running jobs, by lease expiry
--   P queue:<queue>     zset, the claimable jobs of a queue, by run_at (claim_due)
--   P finished:<status> zset, the succeeded, dead or cancelled jobs, by finished_at (a purge
--                       reads the oldest first)
--   P list:all, P list:status:<status>, P list:name:<name>, P list:tenant:<tenant>
--                       zsets of the listing (list_page), every job, or those of a status, a
--                       job name or a tenant (none for a job without one); every score 0, each
--                       member `<e>:<id>`, e the job's enqueued_at in ms since 0001-01-01
--                       (epoch ms + ORIGIN_MS) in 15 digits: in lexical order they are ordered
--                       by (enqueued_at, id), so a page is one ZREVRANGEBYLEX from its cursor
--                       (a member) whatever the size of the set
--   P key:<n>:<tenant>:<k>  string, the id of the job enqueued with idempotency key k by
--                       tenant (the tenant id or '' for none), n the tenant's length in bytes
--                       (rules.scoped_idempotency_key: no two pairs share a key); deleted when
--                       that job is purged
--   P stats             hash, `<queue>|<status>` -> how many jobs; a count of 0 is deleted
--   P stats:name        hash, `<name>|<status>` -> how many jobs, the same jobs by job name
--   P claimed:<token>   list, the ids a claim_due named <token> claimed, in order, so that call
--                       repeated answers them again; expires after the lease
--   P taken:<token>     string, the flat reply (id, name, queue...) of the take_due named
--                       <token> as a JSON array, so that call repeated answers it again;
--                       expires after a minute
--   P purged:<token>    string, the reply of the purge batch named <token>, kept a minute
-- No other key expires: a job lives until purge_finished deletes it. Every key of a store
-- shares the prefix: with a hash tag in it (`ddd_celery:{bg}:`) they share a Redis Cluster
-- slot. An index entry whose job hash is gone (evicted, deleted by hand) is skipped and dropped.
--
-- The layout before the listing indexes (a store written by an earlier version) kept instead
-- P enqueued and P status:<status> (ids by enqueued_at) and P finished (ids by finished_at),
-- and no P stats:name. Such a job is "adopted" (adopt below) the first time a script moves it,
-- or by RedisJobStore.reindex (job_reindex.lua), which walks P enqueued until it is empty.
local P = ARGV[1]

-- ms from 0001-01-01 to the epoch: every instant Python holds gives a listing member of 15
-- digits at most, none negative.
local ORIGIN_MS = 62135596800000
-- ATTEMPTS_KEPT of ddd_celery/background/store.py: how many attempts a job's history keeps.
local ATTEMPTS_KEPT = 25
local FINISHED = {succeeded = true, dead = true, cancelled = true}
-- The outcome of an attempt (AttemptState) by how its lease ended (drop_lease).
local OUTCOME_OF_END = {complete = 'succeeded', fail = 'failed', release = 'released',
  cancel = 'cancelled', expire = 'interrupted'}
-- The statuses of the earlier layout's P status:<status>.
local STATUSES = {'queued', 'running', 'succeeded', 'failed', 'dead', 'cancelled'}

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

-- The job's member in the listing indexes (see the layout): ordered by (enqueued_at, id).
local function member_at(enqueued_at, id)
  return string.format('%015d', tonumber(enqueued_at) + ORIGIN_MS) .. ':' .. id
end

local function member(job)
  return member_at(job.enqueued_at, job.id)
end

-- The listing indexes a job is in whatever its status: every job's, its name's, its tenant's.
local function listings(job)
  local keys = {P .. 'list:all', P .. 'list:name:' .. job.name}
  if job.tenant ~= '' then
    keys[#keys + 1] = P .. 'list:tenant:' .. job.tenant
  end
  return keys
end

local function bump(key, field, by)
  if redis.call('HINCRBY', key, field, by) <= 0 then
    redis.call('HDEL', key, field)
  end
end

local function count(job, status, by)
  bump(P .. 'stats', job.queue .. '|' .. status, by)
  bump(P .. 'stats:name', job.name .. '|' .. status, by)
end

-- Put a job written by the earlier layout (in P enqueued, P status:<status>, P finished) into
-- this one's indexes and P stats:name, as if it had been added now; P stats, which the
-- earlier layout kept the same way, is left as it is.
local function adopt(job)
  local m = member(job)
  for _, key in ipairs(listings(job)) do
    redis.call('ZADD', key, 0, m)
  end
  redis.call('ZADD', P .. 'list:status:' .. job.status, 0, m)
  bump(P .. 'stats:name', job.name .. '|' .. job.status, 1)
  if FINISHED[job.status] then
    local finished_at = redis.call('HGET', job_key(job.id), 'finished_at')
    redis.call('ZADD', P .. 'finished:' .. job.status, finished_at or job.enqueued_at, job.id)
  end
  redis.call('ZREM', P .. 'enqueued', job.id)
  redis.call('ZREM', P .. 'status:' .. job.status, job.id)
  redis.call('ZREM', P .. 'finished', job.id)
end

-- Whether the job is in this layout's indexes (a job of the earlier one is not, until adopted).
local function listed(job)
  return redis.call('ZSCORE', P .. 'list:all', member(job)) ~= false
end

-- Move a job to status `to` (from none when it is new: add lists it first), in its record, its
-- status index and the stats; `fields` (optional, a flat list of field, value) are set in the
-- same HSET. A job of the earlier layout is adopted first.
local function move(job, to, fields)
  local m = member(job)
  if job.status then
    if not listed(job) then
      adopt(job)
    end
    count(job, job.status, -1)
    redis.call('ZREM', P .. 'list:status:' .. job.status, m)
    if FINISHED[job.status] then
      redis.call('ZREM', P .. 'finished:' .. job.status, job.id)
    end
  end
  count(job, to, 1)
  redis.call('ZADD', P .. 'list:status:' .. to, 0, m)
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

-- End the last attempt of the job's history, when it still runs: `how` its lease ended (see
-- drop_lease), at `now`, with the error `code` and `err_type` when given.
local function end_attempt(job, how, now, code, err_type)
  local text = redis.call('HGET', job_key(job.id), 'history')
  if not text then
    return
  end
  local history = cjson.decode(text)
  local last = history[#history]
  if not last or last.outcome ~= 'running' then
    return
  end
  last.outcome, last.ended_at = OUTCOME_OF_END[how], tostring(now)
  if code then
    last.error_code, last.error_type = code, err_type
  end
  redis.call('HSET', job_key(job.id), 'history', cjson.encode(history))
end

-- End the running job's lease at `now`, noting it and `how` it ended (complete, fail, release,
-- cancel, expire), so a report its attempt sends twice is answered as the first was; its
-- attempt ends in the history, with the error `code` and `err_type` when given.
local function drop_lease(job, how, now, code, err_type)
  redis.call('HDEL', job_key(job.id), 'lease_token', 'lease_expires_at')
  redis.call('HSET', job_key(job.id), 'last_lease_token', job.lease_token, 'last_lease_end', how)
  end_attempt(job, how, now, code, err_type)
end

-- `how` says how a running job's lease ended (see drop_lease), with the error `code` and
-- `err_type` of its attempt when given.
local function finish(job, to, now, how, code, err_type)
  unindex(job)
  if job.status == 'running' then
    drop_lease(job, how, now, code, err_type)
  end
  move(job, to, {'finished_at', now})
  redis.call('ZADD', P .. 'finished:' .. to, now, job.id)
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
local JSON_FIELDS = {'payload', 'enqueued_by', 'progress', 'checkpoint', 'history'}

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

-- The job's history (the JSON text `text`, or none) with a new attempt, running: number
-- `number`, started `now` on `worker` ('' for none, '=<worker>' for one); the oldest dropped
-- beyond ATTEMPTS_KEPT.
local function begin_attempt(text, number, now, worker)
  local history = text and cjson.decode(text) or {}
  history[#history + 1] = {
    number = number, started_at = tostring(now), outcome = 'running',
    worker = worker == '' and cjson.null or string.sub(worker, 2),
  }
  while #history > ATTEMPTS_KEPT do
    table.remove(history, 1)
  end
  return cjson.encode(history)
end

-- Claim a claimable job (its record `r` from read_record) at `now` for an attempt on `worker`
-- (see begin_attempt) under lease `token` until `expires`; its record after the claim
-- (claim_reply).
local function claim(job, r, now, worker, token, expires)
  unindex(job)
  redis.call('ZADD', P .. 'leases', expires, job.id)
  local attempts = job.attempts + 1
  local history = begin_attempt(r.history, attempts, now, worker)
  move(job, 'running', {'attempts', attempts, 'lease_token', token, 'lease_expires_at', expires,
    'history', history})
  redis.call('HDEL', job_key(job.id), 'last_lease_token', 'last_lease_end')
  r.status, r.attempts, r.lease_token, r.lease_expires_at, r.history =
    'running', tostring(attempts), token, tostring(expires), history
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

-- The index writes of adds (add_job), made together by write_adds once the records are
-- written: one ZADD per index and one HINCRBY per count for a whole batch, not one of each per
-- job. A script is atomic, so nothing sees a record before its indexes.
local function new_adds()
  return {zsets = {}, zset_order = {}, counts = {}}
end

-- The entries to add to the sorted set `key`: {n = how many values, score, member, ...}.
local function zset_of(adds, key)
  local entries = adds.zsets[key]
  if not entries then
    entries = {n = 0}
    adds.zsets[key] = entries
    adds.zset_order[#adds.zset_order + 1] = key
  end
  return entries
end

-- The count to add to `field` of the hash `key`: {key, field, by}.
local function count_of(adds, key, field)
  local counted = {key, field, 0}
  adds.counts[#adds.counts + 1] = counted
  return counted
end

local function later_zadd(entries, score, m)
  local n = entries.n
  entries[n + 1] = score
  entries[n + 2] = m
  entries.n = n + 2
end

local function write_adds(adds)
  for _, key in ipairs(adds.zset_order) do
    local entries = adds.zsets[key]
    for i = 1, entries.n, 1000 do  -- pairs: 1000 arguments, unpack's limit is far
      redis.call('ZADD', key, unpack(entries, i, math.min(i + 999, entries.n)))
    end
  end
  for _, counted in ipairs(adds.counts) do
    if counted[3] > 0 then
      bump(counted[1], counted[2], counted[3])
    end
  end
end

-- What the jobs added with the same name, queue, enqueued_at and tenant ('' for none) share,
-- found once: the start of their listing member and the index entries and counts they add to
-- (what move(job, 'queued') writes of a job without a status, see listings and count, and the
-- claimable indexes).
local function head_of(adds, name, queue, enqueued_at, tenant)
  local lists = {}
  for _, key in ipairs(listings({name = name, tenant = tenant})) do
    lists[#lists + 1] = zset_of(adds, key)
  end
  lists[#lists + 1] = zset_of(adds, P .. 'list:status:queued')
  return {
    name = name, queue = queue, enqueued_at = enqueued_at, tenant = tenant,
    member = member_at(enqueued_at, ''), lists = lists,
    queued = zset_of(adds, P .. 'queue:' .. queue),
    dispatched = zset_of(adds, P .. 'dispatched'), pending = zset_of(adds, P .. 'pending'),
    by_queue = count_of(adds, P .. 'stats', queue .. '|queued'),
    by_name = count_of(adds, P .. 'stats:name', name .. '|queued'),
  }
end

-- Add a queued job unless the job `key_name` names (its idempotency key's, nil for none) or its
-- own hash is kept already; the id kept. `a` holds the job's own fields: id, payload (JSON),
-- run_at, max_attempts, enqueued_by (JSON), key (the idempotency key, '' for none) and
-- dispatched ('1': the caller publishes its wake-up now, P dispatched at enqueued_at; '0': the
-- relay must, P pending by run_at); `head` (head_of) what it shares with others. The record and
-- the idempotency key are written now (a later job of the batch finds them); its index entries
-- and counts go to the head's, for write_adds. job_add.lua adds one, job_add_many.lua a batch.
local function add_job(a, key_name, head)
  local id = a.id
  if key_name then
    local earlier = redis.call('GET', key_name)
    if earlier and redis.call('EXISTS', job_key(earlier)) == 1 then
      return earlier
    end
  end
  local record = job_key(id)
  if redis.call('EXISTS', record) == 1 then
    return id
  end
  if key_name then
    redis.call('HSET', record, 'status', 'queued', 'id', id, 'name', head.name, 'queue',
      head.queue, 'payload', a.payload, 'enqueued_at', head.enqueued_at, 'run_at', a.run_at,
      'attempts', 0, 'max_attempts', a.max_attempts, 'enqueued_by', a.enqueued_by, 'tenant',
      head.tenant, 'idempotency_key', a.key)
    redis.call('SET', key_name, id)
  else
    redis.call('HSET', record, 'status', 'queued', 'id', id, 'name', head.name, 'queue',
      head.queue, 'payload', a.payload, 'enqueued_at', head.enqueued_at, 'run_at', a.run_at,
      'attempts', 0, 'max_attempts', a.max_attempts, 'enqueued_by', a.enqueued_by, 'tenant',
      head.tenant)
  end
  local m = head.member .. id
  for _, entries in ipairs(head.lists) do
    later_zadd(entries, 0, m)
  end
  later_zadd(head.queued, a.run_at, id)
  if a.dispatched == '1' then
    later_zadd(head.dispatched, head.enqueued_at, id)
  else
    later_zadd(head.pending, a.run_at, id)
  end
  head.by_queue[3] = head.by_queue[3] + 1
  head.by_name[3] = head.by_name[3] + 1
  return id
end

-- (the script proper follows)

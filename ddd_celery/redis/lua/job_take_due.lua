-- The relay's query: up to `limit` claimable jobs to publish now, marked dispatched at now.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P pending, claimable jobs not dispatched, by run_at.
--   KEYS[2]  P dispatched, claimable jobs published and not claimed since, scored by when
--            they are due for a re-send minus redispatch_after_ms.
--   KEYS[3]  P taken:<token>, this call's reply (a JSON array), answered again when it is sent
--            twice.
--   Also P job:<id> of each job taken (name, queue, attempts read; redispatches counted).
-- Arguments
--   ARGV[2]  now, epoch ms: jobs whose run_at is not after it are due.
--   ARGV[3]  now minus redispatch_after_ms, epoch ms: a job in P dispatched scored before it
--            was not claimed in time, and is published again (its message was lost).
--   ARGV[4]  how many jobs at most.
--   ARGV[5]  redispatch_after_ms.
--   ARGV[6]  how long P taken:<token> is kept, ms.
-- Returns
--   a list of two: one JSON array, flat, of the id, name, queue and attempts of each job
--   taken, earliest run_at first (one string to read, not four replies a job); and
--   how many index entries named a job whose hash is gone (dropped, not an error). Each job
--   taken moves from P pending to P dispatched, scored now + (f - 1) * redispatch_after_ms,
--   f = min(2^r, 8) for its r re-sends so far (rules.redispatch_wait_ms): re-sent after 1, 2,
--   4, then 8 times redispatch_after_ms. Sent twice (same token), the first reply again.
local earlier = redis.call('GET', KEYS[3])
if earlier then
  return {earlier, 0}
end
local now, after = tonumber(ARGV[2]), tonumber(ARGV[5])
local dropped = 0
-- a batch of the stale at most: a backlog no worker claims is moved a batch a call, never whole
local stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[3], 'LIMIT', 0, ARGV[4])
for _, id in ipairs(stale) do
  redis.call('ZREM', KEYS[2], id)
  local run_at = redis.call('HGET', job_key(id), 'run_at')
  if run_at then
    redis.call('HINCRBY', job_key(id), 'redispatches', 1)
    redis.call('ZADD', KEYS[1], run_at, id)
  else
    dropped = dropped + 1
  end
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2], 'LIMIT', 0, ARGV[4])
local taken = {}
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  local job = read_job(id)
  if job and claimable(job) then
    local factor = math.min(2 ^ math.min(job.redispatches, 3), 8)
    redis.call('ZADD', KEYS[2], now + (factor - 1) * after, id)
    taken[#taken + 1] = id
    taken[#taken + 1] = job.name
    taken[#taken + 1] = job.queue
    taken[#taken + 1] = job.attempts or 0
  elseif not job then
    dropped = dropped + 1
  end
end
if #taken == 0 then
  return {'[]', dropped}  -- cjson writes an empty table as {}
end
local reply = cjson.encode(taken)
redis.call('SET', KEYS[3], reply, 'PX', ARGV[6])
return {reply, dropped}

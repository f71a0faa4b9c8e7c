-- The relay's query: up to `limit` claimable jobs to publish now, marked dispatched at now.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P pending, claimable jobs not dispatched, by run_at.
--   KEYS[2]  P dispatched, claimable jobs published and not claimed since, by dispatch instant.
--   Also P job:<id> of each job taken (name, queue read).
-- Arguments
--   ARGV[2]  now, epoch ms: jobs whose run_at is not after it are due.
--   ARGV[3]  now minus redispatch_after_ms, epoch ms: a job dispatched before it and still not
--            claimed is published again (its message was lost).
--   ARGV[4]  how many jobs at most.
-- Returns
--   a flat list id, name, queue of each job taken, earliest run_at first. Each moves from
--   P pending to P dispatched at now.
local stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[3])
for _, id in ipairs(stale) do
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZADD', KEYS[1], redis.call('HGET', job_key(id), 'run_at'), id)
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2], 'LIMIT', 0, ARGV[4])
local taken = {}
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  local job = read_job(id)
  if job and claimable(job) then
    redis.call('ZADD', KEYS[2], ARGV[2], id)
    taken[#taken + 1] = id
    taken[#taken + 1] = job.name
    taken[#taken + 1] = job.queue
  end
end
return taken

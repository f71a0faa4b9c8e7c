-- Delete up to `limit` jobs finished before an instant, with their indexes and idempotency key.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P finished, the succeeded, dead and cancelled jobs by finished_at.
--   Also P job:<id> (deleted), P key:<n>:<tenant>:<key> (deleted while it names the job),
--   P enqueued, P status:<status> and P stats.
-- Arguments
--   ARGV[2]  the instant, epoch ms: jobs finished strictly before it are deleted.
--   ARGV[3]  how many jobs at most (the caller calls again while the limit is reached, so
--            Redis is never held for long).
-- Returns
--   how many jobs were deleted.
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[2], 'LIMIT', 0, ARGV[3])
for _, id in ipairs(ids) do
  local job = read_job(id)
  if job then
    count(job.queue, job.status, -1)
    redis.call('ZREM', P .. 'status:' .. job.status, id)
    if job.idempotency_key then
      -- the key as rules.scoped_idempotency_key makes it, and as it was made before (a job
      -- added by an earlier version): each deleted only while it names this job
      local scoped = #job.tenant .. ':' .. job.tenant .. ':' .. job.idempotency_key
      local earlier = job.tenant .. ':' .. job.idempotency_key
      for _, key in ipairs({P .. 'key:' .. scoped, P .. 'key:' .. earlier}) do
        if redis.call('GET', key) == id then
          redis.call('DEL', key)
        end
      end
    end
    redis.call('DEL', job_key(id))
  end
  redis.call('ZREM', P .. 'enqueued', id)
  redis.call('ZREM', KEYS[1], id)
end
return #ids

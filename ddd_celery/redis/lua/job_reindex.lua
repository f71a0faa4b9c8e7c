-- Adopt up to `limit` jobs of the earlier layout (see job_lib.lua): a step of
-- RedisJobStore.reindex, which calls it again until none is left.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P enqueued, the earlier layout's index of every job (each entry adopted leaves it).
--   Also P job:<id> of each job read, what adopt writes (P list:*, P finished:<status>,
--   P stats:name) and leaves (P status:<status>, P finished), and once P enqueued is empty,
--   P status:<status> and P finished, deleted.
-- Arguments
--   ARGV[2]  how many entries at most.
-- Returns
--   a list of two: how many jobs were adopted, and how many entries P enqueued has left. Sent
--   twice it adopts no job twice: a job in P list:all is adopted already.
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[2]) - 1)
local adopted = 0
for _, id in ipairs(ids) do
  local job = read_job(id)
  if job and not listed(job) then
    adopt(job)
    adopted = adopted + 1
  end
  redis.call('ZREM', KEYS[1], id)
end
local left = redis.call('ZCARD', KEYS[1])
if left == 0 then
  -- what is left names jobs whose hash is gone, or adopted already
  for _, status in ipairs(STATUSES) do
    redis.call('DEL', P .. 'status:' .. status)
  end
  redis.call('DEL', P .. 'finished')
end
return {adopted, left}

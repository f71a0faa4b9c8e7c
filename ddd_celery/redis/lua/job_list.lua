-- The jobs of an index, most recently enqueued first, of the caller's tenant (operators).
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P enqueued (every job) or P status:<status>: a zset of ids by enqueued_at.
--   Also P job:<id> of each job read.
-- Arguments
--   ARGV[2]  how many jobs at most.
--   ARGV[3]  '=<tenant>' for a tenant's jobs ('=' for none), '*' for every job.
-- Returns
--   the hashes (HGETALL) of the jobs, latest enqueued_at first.
local limit = tonumber(ARGV[2])
local found = {}
local start = 0
local chunk = math.max(limit, 100)
while #found < limit do
  local ids = redis.call('ZREVRANGE', KEYS[1], start, start + chunk - 1)
  if #ids == 0 then
    break
  end
  for _, id in ipairs(ids) do
    if #found >= limit then
      break
    end
    local job = read_job(id)
    if job and reaches(job, ARGV[3]) then
      found[#found + 1] = redis.call('HGETALL', job_key(id))
    end
  end
  start = start + chunk
end
return found

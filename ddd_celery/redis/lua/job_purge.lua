-- Delete up to `limit` jobs of some finished statuses, finished before an instant, oldest
-- first, with their index entries, their counts and their idempotency key (one batch).
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]     P purged:<token>, this batch's reply, answered again when it is sent twice.
--   KEYS[2..n]  P finished:<status> of each status purged, the jobs by finished_at.
--   Also P job:<id> (deleted), P key:<n>:<tenant>:<key> (deleted while it names the job),
--   P list:all, P list:status:<status>, P list:name:<name>, P list:tenant:<tenant>, P stats
--   and P stats:name.
-- Arguments
--   ARGV[2]  the instant, epoch ms: jobs finished strictly before it are deleted.
--   ARGV[3]  how many entries at most (the caller calls again while a batch is full, so Redis
--            is never held for long).
--   ARGV[4]  how long P purged:<token> is kept, ms.
-- Returns
--   a list of two: how many jobs were deleted, and how many entries of the indexes were read
--   (the jobs deleted, and entries naming a job whose hash is gone, dropped).
local earlier = redis.call('GET', KEYS[1])
if earlier then
  return cjson.decode(earlier)
end
local limit = tonumber(ARGV[3])
local due = {}
for k = 2, #KEYS do
  local found = redis.call('ZRANGEBYSCORE', KEYS[k], '-inf', '(' .. ARGV[2], 'WITHSCORES',
    'LIMIT', 0, limit)
  for i = 1, #found, 2 do
    due[#due + 1] = {id = found[i], at = tonumber(found[i + 1]), index = KEYS[k]}
  end
end
table.sort(due, function(a, b)
  if a.at == b.at then
    return a.id < b.id
  end
  return a.at < b.at
end)
local deleted, read = 0, math.min(limit, #due)
for i = 1, read do
  local id = due[i].id
  local job = read_job(id)
  if job then
    local m = member(job)
    count(job, job.status, -1)
    for _, key in ipairs(listings(job)) do
      redis.call('ZREM', key, m)
    end
    redis.call('ZREM', P .. 'list:status:' .. job.status, m)
    if job.idempotency_key then
      -- the key as rules.scoped_idempotency_key makes it, and as it was made before (a job
      -- added by an earlier version): each deleted only while it names this job
      local scoped = #job.tenant .. ':' .. job.tenant .. ':' .. job.idempotency_key
      local earlier_key = job.tenant .. ':' .. job.idempotency_key
      for _, key in ipairs({P .. 'key:' .. scoped, P .. 'key:' .. earlier_key}) do
        if redis.call('GET', key) == id then
          redis.call('DEL', key)
        end
      end
    end
    redis.call('DEL', job_key(id))
    deleted = deleted + 1
  end
  redis.call('ZREM', due[i].index, id)
end
local reply = {deleted, read}
redis.call('SET', KEYS[1], cjson.encode(reply), 'PX', ARGV[4])
return reply

-- Read one value of many jobs' keys in one call, answered as one JSON array: what `jobs list`
-- and beat's set-up read of every job.
--
-- The names come as one JSON array and each key is built here, `<prefix><job>`, as the job
-- store's scripts build theirs: a thousand jobs are three arguments to send, not a thousand.
-- Every value these keys hold is a JSON text (an epoch in ms, a run's record as JSON), so the
-- answer is the values joined as they are: one reply to decode, not one per key.
--
-- Keys
--   KEYS[1]  the prefix, never read: it routes the call to the prefix's slot on a Redis
--            Cluster (where the prefix carries a hash tag, ddd_celery/redis/slots.py)
--   and, built here, `<ARGV[1]><job>` for each job of ARGV[3] (a checkpoint, a run state, a
--   last run).
-- Arguments
--   ARGV[1]  the prefix of the keys
--   ARGV[2]  the field of each hash to read (`running`, `run`), or '' for each key's string
--            value (GET)
--   ARGV[3]  the job names, a JSON array of strings
-- Returns
--   `[v1,...,vn]`, in the order of the names, `null` where the key or its field does not exist.
local prefix, field = ARGV[1], ARGV[2]
local jobs = cjson.decode(ARGV[3])
local values = {}
for i = 1, #jobs do
  local value
  if field == '' then
    value = redis.call('GET', prefix .. jobs[i])
  else
    value = redis.call('HGET', prefix .. jobs[i], field)
  end
  values[i] = value or 'null'
end
return '[' .. table.concat(values, ',') .. ']'

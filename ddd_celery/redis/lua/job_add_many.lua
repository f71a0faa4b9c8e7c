-- Add a batch of queued jobs, each as job_add.lua adds one (add_job in job_lib.lua), in order:
-- a job whose tenant already has its idempotency key, in the store or earlier in the batch,
-- adds nothing and answers that job's id.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P list:all (what every job is added to), naming the store's slot; the script
--            also writes, for each job, what job_add.lua writes for one.
-- Arguments
--   ARGV[2]  the jobs, one JSON array of arrays of strings, each
--            [id, name, queue, payload (JSON), enqueued_at, run_at, max_attempts,
--             enqueued_by (JSON), tenant ('' for none), idempotency key ('' for none),
--             P key:<scoped key> ('' for none), dispatched ('1' or '0')]
--            (strings all: instants are epoch ms, which Lua's numbers would round in text).
-- Returns
--   the ids kept, in the order of the jobs, as one JSON array.
local kept = {}
for i, j in ipairs(cjson.decode(ARGV[2])) do
  local a = {id = j[1], name = j[2], queue = j[3], payload = j[4], enqueued_at = j[5],
    run_at = j[6], max_attempts = j[7], enqueued_by = j[8], tenant = j[9], key = j[10],
    dispatched = j[12]}
  kept[i] = add_job(a, j[11] ~= '' and j[11] or nil)
end
return cjson.encode(kept)

-- Add a batch of queued jobs, each as job_add.lua adds one (add_job in job_lib.lua), in order:
-- a job whose tenant already has its idempotency key, in the store or earlier in the batch,
-- adds nothing and answers that job's id.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P list:all (what every job is added to), naming the store's slot; the script
--            also writes, for each job, what job_add.lua writes for one.
-- Arguments
--   ARGV[2]  the jobs, one flat JSON array of 8 values a job:
--            id, head (the index of its head in ARGV[3], from 1), payload (JSON), run_at,
--            enqueued_by (JSON), idempotency key ('' for none), P key:<scoped key> ('' for
--            none), dispatched ('1' or '0')
--   ARGV[3]  the heads, what jobs share, one JSON array of arrays of strings
--            [name, queue, enqueued_at, max_attempts, tenant ('' for none)]
--            (strings all: instants are epoch ms, which Lua's numbers would round in text).
-- Returns
--   the ids kept, in the order of the jobs, as one JSON array.
local jobs, adds = cjson.decode(ARGV[2]), new_adds()
local heads = {}
for i, h in ipairs(cjson.decode(ARGV[3])) do
  heads[i] = head_of(adds, h[1], h[2], h[3], h[5])
  heads[i].max_attempts = h[4]
end
local kept, a = {}, {}  -- `a` is each job in turn: add_job keeps none of it
for i = 1, #jobs, 8 do
  local head = heads[jobs[i + 1]]
  a.id, a.payload, a.run_at, a.enqueued_by, a.key, a.dispatched =
    jobs[i], jobs[i + 2], jobs[i + 3], jobs[i + 4], jobs[i + 5], jobs[i + 7]
  a.max_attempts = head.max_attempts
  local key_name = jobs[i + 6]
  kept[#kept + 1] = add_job(a, key_name ~= '' and key_name or nil, head)
end
write_adds(adds)
return cjson.encode(kept)

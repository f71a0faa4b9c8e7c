-- Add a queued job, unless its tenant already has a job with its idempotency key.
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P job:<id>, the new job's hash.
--   KEYS[2]  P key:<n>:<tenant>:<idempotency key> (rules.scoped_idempotency_key), when the
--            job has a key: the id of its job.
--   Also P list:all, P list:status:queued, P list:name:<name>, P list:tenant:<tenant> (when
--   it has one), P stats, P stats:name, P queue:<queue> and P pending or P dispatched.
-- Arguments
--   ARGV[2..11]  id, name, queue, payload (JSON), enqueued_at, run_at, max_attempts,
--                enqueued_by (JSON), tenant ('' for none), idempotency key ('' for none).
--   ARGV[12]     '1' when the caller publishes its wake-up now (P dispatched, at enqueued_at),
--                '0' when the relay must (P pending, by run_at).
-- Returns
--   the id of the job kept: the new one, or the one enqueued earlier with the same key (or
--   with the same id), in which case nothing changes.
local adds = new_adds()
local kept = add_job({id = ARGV[2], payload = ARGV[5], run_at = ARGV[7], max_attempts = ARGV[8],
  enqueued_by = ARGV[9], key = ARGV[11], dispatched = ARGV[12]}, KEYS[2],
  head_of(adds, ARGV[3], ARGV[4], ARGV[6], ARGV[10]))
write_adds(adds)
return kept

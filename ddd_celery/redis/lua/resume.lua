-- Resume a job: remove its pause and answer it (nil when it was not paused).
-- One script, not MULTI, since a Redis Cluster client of redis-py 5 refuses transactions.
--
-- Keys
--   KEYS[1]  the pauses hash, `<prefix>pauses`.
-- Arguments
--   ARGV[1]  the job's name.
-- Returns
--   the pause removed, as JSON, or nil.
local kept = redis.call('HGET', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[1], ARGV[1])
return kept

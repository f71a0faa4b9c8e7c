-- Pause a job unless it is paused: the first pause is kept and answered to every sender.
-- One script, not MULTI, since a Redis Cluster client of redis-py 5 refuses transactions.
--
-- Keys
--   KEYS[1]  the pauses hash, `<prefix>pauses`.
-- Arguments
--   ARGV[1]  the job's name; ARGV[2]  the pause, as JSON.
-- Returns
--   the pause kept, as JSON.
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
return redis.call('HGET', KEYS[1], ARGV[1])

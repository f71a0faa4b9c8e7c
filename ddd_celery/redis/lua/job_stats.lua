-- The counts of the jobs, kept by every script that moves a job (count in job_lib.lua).
--
-- Keys (the layout is in job_lib.lua, prepended to this script; P is ARGV[1])
--   KEYS[1]  P stats, also read below: it routes the call on a Redis Cluster.
--   P stats and P stats:name, read.
-- Returns
--   a list of two flat HGETALL replies: `<queue>|<status>` and `<name>|<status>`, each a count.
return {redis.call('HGETALL', P .. 'stats'), redis.call('HGETALL', P .. 'stats:name')}

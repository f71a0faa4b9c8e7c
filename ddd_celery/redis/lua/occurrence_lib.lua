-- The rules of the keys an occurrence touches, each defined once: the lock, the checkpoint, the
-- run state and the last run. Every script of RedisLock, RedisJobCheckpoints, RedisJobRunState,
-- RedisJobLastRuns and RedisOccurrenceStore starts with this file (registered with
-- `after="occurrence_lib.lua"`), so a script of one store and a script that joins several in one
-- round trip apply the same rule. Instants are epoch milliseconds (decimal integers); each
-- function takes its key whole, prefix included.
--
-- Key layout
--   lock        `<prefix><key>` (by default exactly `job:<name>:<instant>`): a string whose
--               value is the owner token, set by `SET key token NX PX ttl` and expiring on
--               Redis's own clock.
--   checkpoint  `<prefix><job>` (by default `ddd_celery:checkpoint:<job>`): a string holding the
--               last occurrence handled; no expiry, since a checkpoint must cross a restart.
--   run state   `<prefix><job>` (by default `ddd_celery:run:<job>`): a hash that exists while a
--               run is in progress, expiring (PEXPIRE) when that run's time to live has passed;
--                 running        the occurrence in progress
--                 queued         the occurrence waiting behind it (at most one); it expires
--                                with the run it waits behind
--                 running_by     the owner token of the begin that started `running`, when
--                                the claim came with one (occurrence_begin.lua)
--                 queued_by      likewise, of the begin that queued its occurrence (kept once
--                                that occurrence is promoted)
--                 promoted_from  the run whose end promoted the one in progress
--   last run    `<prefix><job>` (by default `ddd_celery:last-run:<job>`): a hash with
--                 at   the occurrence recorded
--                 run  its record, a JSON object (job, context, scheduled_at, outcome,
--                      started_at, duration_ms, error_code, error_type, correlation_id,
--                      tenant_id)
--               No expiry: a job that runs once a month still shows its last outcome.
--   run history `<prefix><job>` (by default `ddd_celery:last-run:history:<job>`): a list of
--               the job's records as JSON, newest first, trimmed to its bound; no expiry.
--
-- Sent again with the same arguments (redis-py re-sends a script on a new connection after a
-- socket timeout, its first reply lost), each rule answers as its first send did.

-- Whether the lock `key` holds `token`.
local function lock_holds(key, token)
  return redis.call('GET', key) == token
end

-- Take the lock `key` for `token` during `ttl` ms; true when it is `token`'s, taken now or by
-- this take's first send, false when another owner holds it.
local function lock_take(key, token, ttl)
  if redis.call('SET', key, token, 'NX', 'PX', ttl) then
    return true
  end
  return lock_holds(key, token)
end

-- Release the lock `key` by its owner token: 1 when it held `token` and was deleted; 0 when it
-- expired or another owner took it since, in which case nothing changes.
local function lock_release(key, token)
  if lock_holds(key, token) then
    return redis.call('DEL', key)
  end
  return 0
end

-- Record occurrence `at` as the checkpoint `key` unless a later one is recorded: a checkpoint
-- only moves forward. 1 when written; 0 when the recorded instant is the same or later.
local function checkpoint_write(key, at)
  local current = redis.call('GET', key)
  if current and tonumber(current) >= tonumber(at) then
    return 0
  end
  redis.call('SET', key, at)
  return 1
end

-- Keep `record`, the run of occurrence `at`, as the last run `key`: one of an earlier
-- occurrence never replaces it. 1 when kept, replacing a record of the same or an earlier
-- occurrence; 0 when a later occurrence is recorded (unchanged). With `history` and a positive
-- `limit`, the record is also pushed on the run history `history`, trimmed to `limit` records,
-- unless it is already the newest there (this write sent again).
local function last_run_write(key, at, record, history, limit)
  if history and tonumber(limit) > 0 and redis.call('LINDEX', history, 0) ~= record then
    redis.call('LPUSH', history, record)
    redis.call('LTRIM', history, 0, tonumber(limit) - 1)
  end
  local current = redis.call('HGET', key, 'at')
  if current and tonumber(current) > tonumber(at) then
    return 0
  end
  redis.call('HSET', key, 'at', at, 'run', record)
  return 1
end

-- Set `field` of the run state `key` (running or queued) to occurrence `at`, and `<field>_by`
-- to the claim's `token` when it has one.
local function run_set(key, field, at, token)
  if token then
    redis.call('HSET', key, field, at, field .. '_by', token)
  else
    redis.call('HSET', key, field, at)
  end
end

-- Claim occurrence `at` in the run state `key`: start it (the run in progress for `ttl` ms),
-- queue it behind the run in progress when `queue` and none waits, or refuse it. Answers
-- 'started', 'queued' or 'busy'.
--
-- A claim sent again answers as its first send did. With `token` (the owner token of the begin
-- claiming, which the hash keeps in running_by or queued_by) the claim is known by its token:
-- the instant another token claimed is not this claim's, and an occurrence this claim queued
-- answers 'queued' even once promoted. Without a token it is known by its instant: only the
-- holder of the occurrence's lock claims it, so a claim of the occurrence in progress or queued
-- is this claim sent again.
local function run_claim(key, at, queue, ttl, token)
  local run = redis.call('HMGET', key, 'running', 'queued', 'running_by', 'queued_by')
  if token and run[4] == token then
    return 'queued' -- this claim queued it (and it may have been promoted since)
  end
  if token and run[3] == token then
    return 'started'
  end
  if not run[1] then
    run_set(key, 'running', at, token)
    redis.call('PEXPIRE', key, ttl)
    return 'started'
  end
  if not token and run[1] == at then
    return 'started'
  end
  if not token and run[2] == at then
    return 'queued'
  end
  if queue and not run[2] then
    run_set(key, 'queued', at, token)
    return 'queued'
  end
  return 'busy'
end

-- End the run `at` in progress in the run state `key` and promote the occurrence queued behind
-- it, the run in progress for `ttl` ms. Answers the promoted occurrence (a number), or false
-- when nothing was queued (the hash is deleted) or when `at` is no longer the run in progress
-- because it expired (nothing changes). Sent again, it answers as the first did: the hash's
-- promoted_from names the run whose end promoted the one in progress, so that end gets the
-- promoted occurrence again, to send it.
local function run_finish(key, at, ttl)
  local slot = redis.call('HMGET', key, 'running', 'queued', 'promoted_from')
  if slot[1] ~= at then
    if slot[3] == at then
      return tonumber(slot[1]) -- sent again: this end already promoted the run in progress
    end
    return false
  end
  if not slot[2] then
    redis.call('DEL', key)
    return false
  end
  redis.call('HSET', key, 'running', slot[2], 'promoted_from', at)
  redis.call('HDEL', key, 'queued')
  redis.call('PEXPIRE', key, ttl)
  return tonumber(slot[2])
end

-- Remove the occurrence queued behind the run in progress in the run state `key`: the removed
-- occurrence (a number), or false when none waited. The run in progress and its time to live
-- are left as they were.
local function run_drop_queued(key)
  local queued = redis.call('HGET', key, 'queued')
  if not queued then
    return false
  end
  redis.call('HDEL', key, 'queued')
  return tonumber(queued)
end

-- (the script proper follows)

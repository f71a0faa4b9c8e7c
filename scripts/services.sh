#!/usr/bin/env bash
# Sourced by ./dev test: make sure the Redis the tests talk to answers, starting (and if need be
# installing) a local redis-server when it does not. The process tests also start private
# redis-server instances of their own, so the binary must exist.
set -euo pipefail

redis_url="${REDIS_URL:-redis://127.0.0.1:6379/0}"
export REDIS_URL="$redis_url"

redis_answers() {
  python - "$redis_url" <<'PY'
import sys, redis
try:
    redis.Redis.from_url(sys.argv[1], socket_connect_timeout=1).ping()
except Exception:
    sys.exit(1)
PY
}

if ! command -v redis-server >/dev/null 2>&1; then
  echo "==> installing redis-server (the process tests start private instances)"
  if command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  else
    echo "redis-server is missing and apt-get is not available: install Redis 6 or newer" >&2
    exit 1
  fi
fi

if ! redis_answers; then
  case "$redis_url" in
    redis://127.0.0.1:6379*|redis://localhost:6379*)
      echo "==> starting redis-server on 127.0.0.1:6379"
      mkdir -p /tmp/ddd_celery-redis
      redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
        --dir /tmp/ddd_celery-redis --logfile /tmp/ddd_celery-redis/redis.log
      for _ in $(seq 50); do redis_answers && break; sleep 0.1; done
      ;;
  esac
  redis_answers || { echo "Redis does not answer on $redis_url" >&2; exit 1; }
fi

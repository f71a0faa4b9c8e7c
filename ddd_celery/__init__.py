"""ddd_celery: scheduled jobs, background jobs and process managers of a DDD kit, on Celery."""

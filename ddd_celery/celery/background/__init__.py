"""Background jobs on Celery: one task per job, woken by the job id, the store the record.

``install_background_jobs`` wires an app; the relay (``ddd_celery.celery.relay``) is the system
job beat runs to publish what is due.
"""

"""The clinic of the seeds: reminders of appointments and a monthly close, as scheduled jobs.

Laid out by bounded context (``notification``, ``billing``), each in layers: ``domain`` holds
the rules, ``application`` the use cases and the jobs that trigger them, ``infrastructure`` the
adapters of its ports. ``platform`` and ``app.py`` wire them on Celery.
"""

"""The rules of reminders: no Celery, no storage, no clock."""

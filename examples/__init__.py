"""Example applications of ddd_celery."""

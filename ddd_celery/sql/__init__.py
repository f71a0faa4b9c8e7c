"""SQLAlchemy adapters of the ports: today the unit of work, on SQLAlchemy 2 sessions.

Install the ``sql`` extra; the core never imports this package, nor SQLAlchemy.
"""

from ddd_celery.sql.unit_of_work import SqlAlchemyUnitOfWork

__all__ = ["SqlAlchemyUnitOfWork"]

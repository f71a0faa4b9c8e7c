"""What the contexts share to run: the database file, the backend, the logs."""

"""What the contexts share to run: the database file and the backend."""

"""Commands of billing and their handlers."""

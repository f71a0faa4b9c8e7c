"""The rules of the monthly close."""

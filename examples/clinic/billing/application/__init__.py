"""The use cases of billing and the jobs that trigger them."""

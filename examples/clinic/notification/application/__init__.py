"""The use cases of notification and the jobs that trigger them."""

"""Benchmarks of the Vulkan stage."""

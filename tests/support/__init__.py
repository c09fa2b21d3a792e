"""Helpers that run the real mesh (Redis + three services) as processes on loopback for tests."""

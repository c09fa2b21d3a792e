"""Test helpers that inject faults: a TCP proxy that delays, cuts, blackholes or refuses, and a fake clock."""

"""Benchmarks of the TTS mesh: speed against piper-tts, and quality."""

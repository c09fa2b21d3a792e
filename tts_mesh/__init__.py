"""A Python client of the TTS mesh, and the `tts-mesh` command built on it."""

from tts_mesh.client import TextToSpeechClient, encoding_for_path

__all__ = ["TextToSpeechClient", "encoding_for_path"]

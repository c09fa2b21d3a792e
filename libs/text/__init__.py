"""Text frontend: normalisation, sentence splitting, reading (written forms, heteronyms, lexicons,
inline phonemes, an SSML subset), espeak-ng phonemes and phoneme ids."""

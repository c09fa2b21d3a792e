"""Text frontend: normalisation, sentence splitting, espeak-ng phonemes and phoneme ids."""

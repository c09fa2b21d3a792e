"""The Mandarin text front end: Chinese text to the espeak-ng `cmn` phonemes Piper's zh_CN voices take.

Chosen for a voice whose espeak-ng voice is Mandarin (libs.text.frontends). See
docs/text-front-end-zh.md for the reading rules and how they are measured.
"""

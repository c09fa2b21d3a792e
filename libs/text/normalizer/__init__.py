"""English written forms (numbers, money, dates, times, units, abbreviations, ...) to spoken words."""

from libs.text.normalizer.written_forms import MAX_EXPANSION, expand_written_forms, written_form_replacements

__all__ = ["MAX_EXPANSION", "expand_written_forms", "written_form_replacements"]

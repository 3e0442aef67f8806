"""Readers of the files providers give their customers: one module per provider's layout
(:mod:`.deepseek`, :mod:`.openai`, :mod:`.openai_api`) and Kopek's own (:mod:`.kopek`),
on shared parts: :mod:`.table` (bytes → header and rows), :mod:`.cells` (counts, USD,
currencies, buckets, repeats), :mod:`.archive` (ZIP uploads), :mod:`.lines` (what they
read into). :func:`budget.books.usage_export.parse_export` picks the reader by header.
"""

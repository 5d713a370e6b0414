"""The base every other part stands on: where the workbook's folders are, the chapters as chapter.toml
declares them, the workload contract, the external tools, and the one error type a person reads.

Imports nothing of the checker outside this folder; the candidate side imports only this and itself.
"""

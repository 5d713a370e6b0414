"""The GPU training-performance workbook: chapters, labs and the checker that grades them."""

__version__ = "0.1.0"

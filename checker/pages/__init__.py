"""What the docs site shows that code computes: results files of GPU runs rendered as the tables pages
include, and the facts (titles, navigation) read from each chapter.toml."""

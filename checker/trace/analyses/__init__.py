"""One module per analysis; each takes the event table (and steps) and returns a DataFrame."""
